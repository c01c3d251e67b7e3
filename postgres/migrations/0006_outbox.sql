-- 0005: what approvald tells people and callers (docs/notifications.md). A message is
-- inserted in the transaction of the change that causes it, once per natural key.
CREATE TABLE outbox (
	id               text        PRIMARY KEY,
	natural_key      text        NOT NULL UNIQUE,
	kind             text        NOT NULL CHECK (kind IN ('notification', 'signin', 'callback')),
	approval_id      text        REFERENCES approvals (id) ON DELETE CASCADE,
	recipient        text        NOT NULL,
	channel          text        NOT NULL,
	event            text        NOT NULL,
	payload          text        NOT NULL,
	status           text        NOT NULL CHECK (status IN ('pending', 'sending', 'sent', 'failed')),
	attempts         integer     NOT NULL DEFAULT 0,
	next_attempt_at  timestamptz,          -- set while pending
	lease_expires_at timestamptz,          -- set while sending
	last_error       text        NOT NULL DEFAULT '',
	created_at       timestamptz NOT NULL,
	updated_at       timestamptz NOT NULL,
	sent_at          timestamptz
);

-- Claiming looks for pending messages that are due and sending ones past their lease.
CREATE INDEX outbox_due ON outbox (next_attempt_at, id) WHERE status = 'pending';
CREATE INDEX outbox_lease ON outbox (lease_expires_at, id) WHERE status = 'sending';
-- Listing is newest first, optionally by status.
CREATE INDEX outbox_created ON outbox (created_at DESC, id DESC);
CREATE INDEX outbox_approval ON outbox (approval_id);

-- Every attempt to send a message, for operators: a claim starts one, its outcome ends it.
CREATE TABLE outbox_attempts (
	message_id  text        NOT NULL REFERENCES outbox (id) ON DELETE CASCADE,
	attempt     integer     NOT NULL,
	started_at  timestamptz NOT NULL,
	finished_at timestamptz,
	outcome     text        NOT NULL DEFAULT '',
	error       text        NOT NULL DEFAULT '',
	PRIMARY KEY (message_id, attempt)
);
