-- 0002: the webhook inbox (invariants 3 and 4) and the execution ledger (invariant 5).
-- Workers claim rows of both with FOR UPDATE SKIP LOCKED, through the (status, next-due time)
-- indexes; operators list both newest first.

CREATE TABLE inbox_events (
	id               text COLLATE "C" PRIMARY KEY,
	source           text NOT NULL,
	event_id         text NOT NULL,
	type             text NOT NULL,
	headers          jsonb NOT NULL,
	-- The raw body, byte for byte (signatures are over it); NULL once purged after retention.
	body             bytea,
	received_at      timestamptz NOT NULL,
	status           text NOT NULL
		CHECK (status IN ('pending', 'processed', 'ignored', 'stale', 'failed')),
	attempts         integer NOT NULL DEFAULT 0,
	last_error       text NOT NULL DEFAULT '',
	next_attempt_at  timestamptz,
	-- The fencing token of the current claim ('' outside a claim): applying or failing the
	-- event is conditional on it, so a worker whose lease was taken over cannot apply it twice.
	lease_token      text NOT NULL DEFAULT '',
	lease_expires_at timestamptz,
	processed_at     timestamptz,
	outcome          text NOT NULL DEFAULT '',
	-- Not a foreign key: a decision naming an unknown approval is stored and refused, and the
	-- inbox is purged on its own schedule.
	approval_id      text COLLATE "C",
	conflicts        integer NOT NULL DEFAULT 0,
	last_conflict_at timestamptz,
	-- One intake per event (invariant 3): a redelivery finds this and stores nothing new.
	CONSTRAINT inbox_events_source_event_unique UNIQUE (source, event_id)
);

CREATE INDEX inbox_events_due_idx ON inbox_events (status, next_attempt_at);
CREATE INDEX inbox_events_received_idx ON inbox_events (received_at DESC, id DESC);

CREATE TABLE executions (
	id               text COLLATE "C" PRIMARY KEY,
	-- One execution per approved approval (invariant 5), inserted by the approving transaction.
	approval_id      text COLLATE "C" NOT NULL UNIQUE REFERENCES approvals (id) ON DELETE CASCADE,
	operation_key    text NOT NULL,
	action           text NOT NULL,
	status           text NOT NULL
		CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'needs_review',
			'cancelled', 'not_configured')),
	-- The number of the current attempt, and the fencing token of its claim.
	attempts         integer NOT NULL DEFAULT 0,
	last_error       text NOT NULL DEFAULT '',
	-- bytea, not jsonb: the target's answer is kept byte for byte.
	result           bytea,
	next_attempt_at  timestamptz,
	-- NULL while running means an accepted asynchronous call waiting for its report.
	lease_expires_at timestamptz,
	-- The highest report version applied (invariant 4); 0 before any.
	applied_version  bigint NOT NULL DEFAULT 0,
	created_at       timestamptz NOT NULL,
	updated_at       timestamptz NOT NULL
);

CREATE INDEX executions_due_idx ON executions (status, next_attempt_at);
CREATE INDEX executions_lease_idx ON executions (lease_expires_at) WHERE status = 'running';
CREATE INDEX executions_created_idx ON executions (created_at DESC, id DESC);
-- Reports and inbox decisions may name the execution by its operation key.
CREATE INDEX executions_operation_key_idx ON executions (operation_key);

-- Inbox decisions may name the approval by operation key alone (approvals_operation_key_unique
-- leads with the requester, so it cannot serve that lookup).
CREATE INDEX approvals_operation_key_idx ON approvals (operation_key);
