-- 0024_slack: what approvald keeps of Slack (docs/slack.md). slack_messages holds the
-- conversation and ts of every message posted for an outbox notification, so that a
-- decision updates each of them and a resend after an uncertain post finds it recorded;
-- slack_users remembers the Slack user found by a person's e-mail address
-- (users.lookupByEmail), as person_addresses remembers the identity provider's addresses.

CREATE TABLE slack_messages (
	outbox_id   TEXT    PRIMARY KEY,
	approval_id TEXT    NOT NULL,
	recipient   TEXT    NOT NULL,
	channel     TEXT    NOT NULL,
	ts          TEXT    NOT NULL,
	posted_at   INTEGER NOT NULL
) STRICT;
-- Every message of an approval, for the update that follows its decision.
CREATE INDEX slack_messages_approval ON slack_messages (approval_id, outbox_id);

CREATE TABLE slack_users (
	person     TEXT    PRIMARY KEY,
	user_id    TEXT    NOT NULL,
	updated_at INTEGER NOT NULL
) STRICT;
-- The person of a Slack user, for an interaction.
CREATE INDEX slack_users_user ON slack_users (user_id, person);
