-- 0001_init: approvals with their approvers, decisions and audit trail; idempotency records;
-- tokens; the bootstrap marker. Times are INTEGER unix microseconds (approval.Precision), ids
-- TEXT. Tables are STRICT so that a value of the wrong type is an error, not a silent
-- conversion. Later features (executions, inbox) add tables in their own files.

CREATE TABLE approvals (
	id                 TEXT    PRIMARY KEY,
	requester          TEXT    NOT NULL,
	-- The operation key and fingerprint are kept for ever: after the idempotency record is
	-- purged they still stop a retry from creating a second approval (docs/invariants.md,
	-- invariant 2).
	operation_key      TEXT    NOT NULL,
	fingerprint        TEXT    NOT NULL,
	action             TEXT    NOT NULL,
	title              TEXT    NOT NULL,
	context            TEXT,   -- JSON exactly as given; NULL when none was given
	required_approvals INTEGER NOT NULL CHECK (required_approvals >= 1),
	status             TEXT    NOT NULL
		CHECK (status IN ('pending', 'approved', 'rejected', 'expired', 'cancelled')),
	decided_at         INTEGER,
	expires_at         INTEGER NOT NULL,
	created_at         INTEGER NOT NULL,
	version            INTEGER NOT NULL,
	UNIQUE (requester, operation_key)
) STRICT;

-- Listing is newest first, (created_at, id) descending, optionally by status.
CREATE INDEX approvals_created ON approvals (created_at, id);
CREATE INDEX approvals_status_created ON approvals (status, created_at, id);
-- The sweeper looks for pending approvals past their expiry.
CREATE INDEX approvals_status_expires ON approvals (status, expires_at);

-- Approvers in the order they were listed.
CREATE TABLE approval_approvers (
	approval_id TEXT    NOT NULL REFERENCES approvals (id) ON DELETE CASCADE,
	position    INTEGER NOT NULL,
	approver    TEXT    NOT NULL,
	PRIMARY KEY (approval_id, position),
	UNIQUE (approval_id, approver)
) STRICT;

-- Serves approver= filters and "visible to" listings.
CREATE INDEX approval_approvers_approver ON approval_approvers (approver, approval_id);

-- One vote per approver per approval: the primary key is what makes a vote count once.
CREATE TABLE decisions (
	approval_id TEXT    NOT NULL REFERENCES approvals (id) ON DELETE CASCADE,
	approver    TEXT    NOT NULL,
	verdict     TEXT    NOT NULL CHECK (verdict IN ('approve', 'reject')),
	comment     TEXT    NOT NULL,
	decided_at  INTEGER NOT NULL,
	PRIMARY KEY (approval_id, approver)
) STRICT;

-- The audit trail: seq is 1, 2, 3 ... per approval, assigned in the transaction of the change.
CREATE TABLE events (
	approval_id TEXT    NOT NULL REFERENCES approvals (id) ON DELETE CASCADE,
	seq         INTEGER NOT NULL,
	type        TEXT    NOT NULL,
	at          INTEGER NOT NULL,
	actor       TEXT    NOT NULL,
	cause       TEXT    NOT NULL, -- JSON of approval.Cause
	detail      TEXT,             -- JSON object, or NULL
	PRIMARY KEY (approval_id, seq)
) STRICT;

-- The response cache of creates, keyed per requester. An in_flight record holds a fencing
-- token and a lease; a completed one holds the response to replay until retain_until.
CREATE TABLE idempotency_records (
	requester        TEXT    NOT NULL,
	idempotency_key  TEXT    NOT NULL,
	fingerprint      TEXT    NOT NULL,
	state            TEXT    NOT NULL CHECK (state IN ('in_flight', 'completed')),
	token            TEXT    NOT NULL,
	lease_expires_at INTEGER,
	status_code      INTEGER,
	location         TEXT,
	body             BLOB,
	retain_until     INTEGER,
	created_at       INTEGER NOT NULL,
	PRIMARY KEY (requester, idempotency_key),
	CHECK ((state = 'in_flight' AND lease_expires_at IS NOT NULL)
		OR (state = 'completed' AND status_code IS NOT NULL AND retain_until IS NOT NULL))
) STRICT;

-- The purge finds completed records past retention and abandoned in-flight ones.
CREATE INDEX idempotency_records_retain ON idempotency_records (retain_until)
	WHERE state = 'completed';
CREATE INDEX idempotency_records_lease ON idempotency_records (lease_expires_at)
	WHERE state = 'in_flight';

-- Bearer tokens; only the SHA-256 of the secret is stored.
CREATE TABLE tokens (
	id         TEXT    PRIMARY KEY,
	subject    TEXT    NOT NULL,
	role       TEXT    NOT NULL,
	hash       BLOB    NOT NULL UNIQUE,
	created_at INTEGER NOT NULL
) STRICT;

-- One-time facts about this database, such as which token was bootstrapped.
CREATE TABLE meta (
	key   TEXT PRIMARY KEY,
	value TEXT NOT NULL
) STRICT;
