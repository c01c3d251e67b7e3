package sqldb

import (
	"context"

	"github.com/approvald/approval"
)

// What approvald keeps of Slack (slack_messages and slack_users, migration 0024): the messages
// it posted, and the Slack users it found by e-mail address (docs/slack.md).

// SlackMessageInsert records a posted message unless its notification's is recorded: ON
// CONFLICT DO NOTHING, so the first record of a notification stands.
func (t Tx) SlackMessageInsert(ctx context.Context, m approval.SlackMessage) error {
	return t.write(ctx, "record slack message", `
		INSERT INTO slack_messages (outbox_id, approval_id, recipient, channel, ts, posted_at)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (outbox_id) DO NOTHING`,
		m.OutboxID, m.ApprovalID, m.Recipient, m.Channel, m.TS, t.Dialect.Time(t.At))
}

// SlackMessageGet reads the message posted for a notification, or ENOTFOUND.
func (t Tx) SlackMessageGet(ctx context.Context, outboxID string) (approval.SlackMessage, error) {
	list, err := query(ctx, t, `SELECT `+slackMessageColumns+` FROM slack_messages WHERE outbox_id = $1`, scanSlackMessage, outboxID)
	m, err := first(list, err)("no slack message is recorded for %s", outboxID)
	return m, t.Translate("read slack message", err)
}

// SlackMessageGetMany reads every message of an approval, in the order of their
// notifications' ids.
func (t Tx) SlackMessageGetMany(ctx context.Context, approvalID string) ([]approval.SlackMessage, error) {
	list, err := query(ctx, t, `SELECT `+slackMessageColumns+` FROM slack_messages WHERE approval_id = $1 ORDER BY outbox_id`,
		scanSlackMessage, approvalID)
	return list, t.Translate("read slack messages", err)
}

// SlackUserUpsert stores userID as person's Slack user at the transaction's time, or changes
// the stored one; the same one is left as it is.
func (t Tx) SlackUserUpsert(ctx context.Context, person, userID string) error {
	return t.write(ctx, "store slack user", `
		INSERT INTO slack_users (person, user_id, updated_at) VALUES ($1, $2, $3)
		ON CONFLICT (person) DO UPDATE SET user_id = excluded.user_id, updated_at = excluded.updated_at
		WHERE slack_users.user_id <> excluded.user_id`,
		person, userID, t.Dialect.Time(t.At))
}

// SlackUserGet reads person's stored Slack user, "" when none.
func (t Tx) SlackUserGet(ctx context.Context, person string) (string, error) {
	ids, err := t.ids(ctx, "read slack user", `SELECT user_id FROM slack_users WHERE person = $1`, person)
	if err != nil || len(ids) == 0 {
		return "", err
	}
	return ids[0], nil
}

// SlackUserPersons reads the persons whose stored Slack user is userID, by name.
func (t Tx) SlackUserPersons(ctx context.Context, userID string) ([]string, error) {
	return t.ids(ctx, "read slack user's persons", `SELECT person FROM slack_users WHERE user_id = $1 ORDER BY person`, userID)
}

const slackMessageColumns = `outbox_id, approval_id, recipient, channel, ts, posted_at`

func scanSlackMessage(row Row) (m approval.SlackMessage, err error) {
	return m, row.Scan(&m.OutboxID, &m.ApprovalID, &m.Recipient, &m.Channel, &m.TS, Time(&m.PostedAt))
}
