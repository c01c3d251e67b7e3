-- 0001: approvals, their approvers, decisions and audit trail; idempotency records; tokens.
-- Times are timestamptz (microseconds, the precision of approval.Precision). Ids are opaque
-- text. Later migrations add executions and the inbox; their workers claim rows with
-- FOR UPDATE SKIP LOCKED, so each gets an index on (status, next-due time) like the sweeper's.

CREATE TABLE approvals (
	-- Byte order ("C"), whatever the database's collation: listing pages by (created_at, id)
	-- and the cursor comparison must agree with each other and with the SQLite store.
	id                 text COLLATE "C" PRIMARY KEY,
	requester          text NOT NULL,
	-- The operation key and the fingerprint of the create request are kept for ever: a retry
	-- after the idempotency record was purged must still find the approval (invariant 2).
	operation_key      text NOT NULL,
	fingerprint        text NOT NULL,
	action             text NOT NULL,
	title              text NOT NULL,
	-- bytea, not jsonb: the context is returned byte for byte as the caller sent it.
	context            bytea,
	required_approvals integer NOT NULL CHECK (required_approvals >= 1),
	status             text NOT NULL
		CHECK (status IN ('pending', 'approved', 'rejected', 'expired', 'cancelled')),
	decided_at         timestamptz,
	expires_at         timestamptz NOT NULL,
	created_at         timestamptz NOT NULL,
	version            bigint NOT NULL,
	CONSTRAINT approvals_operation_key_unique UNIQUE (requester, operation_key)
);

-- Listing is newest first, optionally by status; the sweeper looks for due pending approvals.
CREATE INDEX approvals_created_idx ON approvals (created_at DESC, id DESC);
CREATE INDEX approvals_status_created_idx ON approvals (status, created_at DESC, id DESC);
CREATE INDEX approvals_status_expires_idx ON approvals (status, expires_at);

CREATE TABLE approval_approvers (
	approval_id text COLLATE "C" NOT NULL REFERENCES approvals (id) ON DELETE CASCADE,
	position    integer NOT NULL, -- keeps the order the approvers were listed in
	approver    text NOT NULL,
	PRIMARY KEY (approval_id, position),
	CONSTRAINT approval_approvers_unique UNIQUE (approval_id, approver)
);

-- "Approvals listing me" for the approver filter and for visibility.
CREATE INDEX approval_approvers_approver_idx ON approval_approvers (approver, approval_id);

CREATE TABLE decisions (
	approval_id text COLLATE "C" NOT NULL REFERENCES approvals (id) ON DELETE CASCADE,
	approver    text NOT NULL,
	verdict     text NOT NULL CHECK (verdict IN ('approve', 'reject')),
	comment     text NOT NULL,
	decided_at  timestamptz NOT NULL,
	-- seq of the approval.voted event that recorded the vote: orders decisions oldest first
	-- even when several share a timestamp.
	event_seq   bigint NOT NULL,
	-- One vote per approver per approval (invariant 1).
	PRIMARY KEY (approval_id, approver)
);

CREATE TABLE events (
	approval_id text COLLATE "C" NOT NULL REFERENCES approvals (id) ON DELETE CASCADE,
	-- 1, 2, 3 ... per approval, assigned as max(seq)+1 while holding the approval's row lock.
	seq         bigint NOT NULL,
	type        text NOT NULL,
	at          timestamptz NOT NULL,
	actor       text NOT NULL,
	cause       jsonb NOT NULL,
	detail      jsonb,
	PRIMARY KEY (approval_id, seq)
);

CREATE TABLE idempotency_records (
	requester         text NOT NULL,
	key               text NOT NULL,
	fingerprint       text NOT NULL,
	state             text NOT NULL CHECK (state IN ('in_flight', 'completed')),
	-- The fencing token of the current claim: a takeover replaces it, and completing or
	-- releasing the record is conditional on it.
	token             text NOT NULL,
	lease_expires_at  timestamptz NOT NULL,
	response_status   integer,
	response_location text,
	response_body     bytea,
	retain_until      timestamptz, -- set when completed
	created_at        timestamptz NOT NULL,
	PRIMARY KEY (requester, key),
	CHECK (state = 'in_flight' OR (response_status IS NOT NULL AND retain_until IS NOT NULL))
);

-- The purge looks for completed records past retention and in-flight ones past their lease.
CREATE INDEX idempotency_records_retain_idx ON idempotency_records (retain_until)
	WHERE state = 'completed';
CREATE INDEX idempotency_records_lease_idx ON idempotency_records (lease_expires_at)
	WHERE state = 'in_flight';

CREATE TABLE tokens (
	id         text PRIMARY KEY,
	subject    text NOT NULL,
	role       text NOT NULL CHECK (role IN ('requester', 'approver', 'operator', 'admin')),
	hash       bytea NOT NULL,
	created_at timestamptz NOT NULL,
	CONSTRAINT tokens_hash_unique UNIQUE (hash)
);

-- At most one row, ever: the INSERT ... ON CONFLICT DO NOTHING that adds it decides which of
-- several processes starting on a new database prints the bootstrap admin token. It is not
-- a foreign key to tokens, so the fact survives the token itself.
CREATE TABLE bootstrap (
	singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
	token_id   text NOT NULL,
	created_at timestamptz NOT NULL
);
