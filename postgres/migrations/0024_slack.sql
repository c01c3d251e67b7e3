-- 0024_slack: what approvald keeps of Slack (docs/slack.md). slack_messages holds the
-- conversation and ts of every message posted for an outbox notification, so that a
-- decision updates each of them and a resend after an uncertain post finds it recorded;
-- slack_users remembers the Slack user found by a person's e-mail address
-- (users.lookupByEmail), as person_addresses remembers the identity provider's addresses.

CREATE TABLE slack_messages (
	outbox_id   text        PRIMARY KEY,
	approval_id text        NOT NULL,
	recipient   text        NOT NULL,
	channel     text        NOT NULL,
	ts          text        NOT NULL,
	posted_at   timestamptz NOT NULL
);
-- Every message of an approval, for the update that follows its decision.
CREATE INDEX slack_messages_approval ON slack_messages (approval_id, outbox_id);

CREATE TABLE slack_users (
	person     text        PRIMARY KEY,
	user_id    text        NOT NULL,
	updated_at timestamptz NOT NULL
);
-- The person of a Slack user, for an interaction.
CREATE INDEX slack_users_user ON slack_users (user_id, person);
