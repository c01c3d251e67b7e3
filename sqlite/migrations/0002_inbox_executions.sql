-- 0002_inbox_executions: the webhook inbox (docs/invariants.md, invariant 3) and the execution
-- ledger (invariants 4 and 5). Times are INTEGER unix microseconds, as in 0001.

-- Verified inbound webhook deliveries, stored before they are acknowledged. (source, event_id)
-- is what makes a redelivery a duplicate; the row is kept (body cleared first) for as long as
-- providers redeliver.
CREATE TABLE inbox_events (
	id               TEXT    PRIMARY KEY,
	source           TEXT    NOT NULL,
	event_id         TEXT    NOT NULL,
	type             TEXT    NOT NULL,
	headers          TEXT    NOT NULL, -- JSON object of the headers that matter
	body             BLOB,             -- the raw body byte for byte; NULL once purged
	received_at      INTEGER NOT NULL,
	status           TEXT    NOT NULL
		CHECK (status IN ('pending', 'processed', 'ignored', 'stale', 'failed')),
	attempts         INTEGER NOT NULL DEFAULT 0,
	last_error       TEXT    NOT NULL DEFAULT '',
	next_attempt_at  INTEGER,          -- set while pending
	-- A worker's claim: the token fences ApplyInbox and FailInbox; '' outside a claim.
	lease_token      TEXT    NOT NULL DEFAULT '',
	lease_expires_at INTEGER,
	processed_at     INTEGER,
	outcome          TEXT    NOT NULL DEFAULT '',
	approval_id      TEXT    REFERENCES approvals (id) ON DELETE SET NULL,
	-- Redeliveries of this id with a different body: counted, the first body kept.
	conflicts        INTEGER NOT NULL DEFAULT 0,
	last_conflict_at INTEGER,
	UNIQUE (source, event_id)
) STRICT;

-- Claiming looks for pending events that are due.
CREATE INDEX inbox_events_due ON inbox_events (status, next_attempt_at);
-- Listing is newest first, (received_at, id) descending, optionally by status; the purge
-- looks for old events by received_at.
CREATE INDEX inbox_events_received ON inbox_events (received_at DESC, id DESC);
CREATE INDEX inbox_events_status_received ON inbox_events (status, received_at DESC, id DESC);

-- One execution per approved approval, inserted by the approving transaction (the outbox).
-- attempts is the fencing token of the runner's claim: every write of an attempt's outcome
-- is conditional on it.
CREATE TABLE executions (
	id               TEXT    PRIMARY KEY,
	approval_id      TEXT    NOT NULL UNIQUE REFERENCES approvals (id) ON DELETE CASCADE,
	operation_key    TEXT    NOT NULL,
	action           TEXT    NOT NULL,
	status           TEXT    NOT NULL
		CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'needs_review',
			'cancelled', 'not_configured')),
	attempts         INTEGER NOT NULL DEFAULT 0,
	last_error       TEXT    NOT NULL DEFAULT '',
	result           BLOB,
	next_attempt_at  INTEGER,          -- set while queued
	-- Set while an attempt holds the execution; a running execution without a lease is an
	-- accepted asynchronous call waiting for its report.
	lease_expires_at INTEGER,
	-- The highest report version applied (invariant 4); 0 before any.
	applied_version  INTEGER NOT NULL DEFAULT 0,
	created_at       INTEGER NOT NULL,
	updated_at       INTEGER NOT NULL
) STRICT;

-- Claiming looks for queued executions that are due and running ones past their lease.
CREATE INDEX executions_due ON executions (status, next_attempt_at);
CREATE INDEX executions_lease ON executions (status, lease_expires_at);
-- Listing is newest first, optionally by status.
CREATE INDEX executions_created ON executions (created_at DESC, id DESC);
CREATE INDEX executions_status_created ON executions (status, created_at DESC, id DESC);
-- Reports may name the execution by operation key.
CREATE INDEX executions_operation_key ON executions (operation_key);
