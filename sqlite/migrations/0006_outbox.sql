-- 0005_outbox: what approvald tells people and callers (docs/notifications.md). A message is
-- inserted in the transaction of the change that causes it, once per natural key.
CREATE TABLE outbox (
	id               TEXT    PRIMARY KEY,
	natural_key      TEXT    NOT NULL UNIQUE,
	kind             TEXT    NOT NULL CHECK (kind IN ('notification', 'signin', 'callback')),
	approval_id      TEXT    REFERENCES approvals (id) ON DELETE CASCADE,
	recipient        TEXT    NOT NULL,
	channel          TEXT    NOT NULL,
	event            TEXT    NOT NULL,
	payload          TEXT    NOT NULL,
	status           TEXT    NOT NULL CHECK (status IN ('pending', 'sending', 'sent', 'failed')),
	attempts         INTEGER NOT NULL DEFAULT 0,
	next_attempt_at  INTEGER,          -- set while pending
	lease_expires_at INTEGER,          -- set while sending
	last_error       TEXT    NOT NULL DEFAULT '',
	created_at       INTEGER NOT NULL,
	updated_at       INTEGER NOT NULL,
	sent_at          INTEGER
) STRICT;

-- Claiming looks for pending messages that are due and sending ones past their lease.
CREATE INDEX outbox_due ON outbox (status, next_attempt_at);
CREATE INDEX outbox_lease ON outbox (status, lease_expires_at);
-- Listing is newest first, optionally by status.
CREATE INDEX outbox_created ON outbox (created_at DESC, id DESC);
CREATE INDEX outbox_approval ON outbox (approval_id);

-- Every attempt to send a message, for operators: a claim starts one, its outcome ends it.
CREATE TABLE outbox_attempts (
	message_id  TEXT    NOT NULL REFERENCES outbox (id) ON DELETE CASCADE,
	attempt     INTEGER NOT NULL,
	started_at  INTEGER NOT NULL,
	finished_at INTEGER,
	outcome     TEXT    NOT NULL DEFAULT '',
	error       TEXT    NOT NULL DEFAULT '',
	PRIMARY KEY (message_id, attempt)
) STRICT;
