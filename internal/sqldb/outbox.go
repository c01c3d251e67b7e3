package sqldb

import (
	"context"
	"fmt"
	"time"

	"github.com/approvald/approval"
)

// OutboxColumns are the columns ScanOutbox reads, from outbox o.
const OutboxColumns = `o.id, o.natural_key, o.kind, COALESCE(o.approval_id, ''), o.recipient, o.channel,
	o.event, o.payload, o.status, o.attempts, o.next_attempt_at, o.lease_expires_at, o.last_error,
	o.created_at, o.updated_at, o.sent_at`

// ScanOutbox reads OutboxColumns.
func ScanOutbox(row Row) (*approval.OutboxMessage, error) {
	var m approval.OutboxMessage
	var kind, status string
	if err := row.Scan(&m.ID, &m.NaturalKey, &kind, &m.ApprovalID, &m.Recipient, &m.Channel,
		&m.Event, Bytes((*[]byte)(&m.Payload)), &status, &m.Attempts, NullTime(&m.NextAttemptAt),
		NullTime(&m.LeaseExpiresAt), &m.LastError, Time(&m.CreatedAt), Time(&m.UpdatedAt),
		NullTime(&m.SentAt)); err != nil {
		return nil, fmt.Errorf("scan outbox message: %w", err)
	}
	m.Kind, m.Status = approval.OutboxKind(kind), approval.OutboxStatus(status)
	return &m, nil
}

// OutboxMessage returns one message with its attempts, oldest first, or ENOTFOUND.
func (r Reads) OutboxMessage(ctx context.Context, id string) (*approval.OutboxMessage, []approval.OutboxAttempt, error) {
	rows, err := r.DB.Query(ctx, `SELECT `+OutboxColumns+` FROM outbox o WHERE o.id = `+r.Dialect.Param(1), id)
	m, err := first(Collect(rows, err, ScanOutbox))("outbox message %s not found", id)
	if err != nil {
		return nil, nil, r.Translate("read outbox message", err)
	}
	rows, err = r.DB.Query(ctx, `
		SELECT attempt, started_at, finished_at, outcome, error FROM outbox_attempts
		WHERE message_id = `+r.Dialect.Param(1)+` ORDER BY attempt`, id)
	attempts, err := Collect(rows, err, func(row Row) (approval.OutboxAttempt, error) {
		var a approval.OutboxAttempt
		err := row.Scan(&a.Attempt, Time(&a.StartedAt), NullTime(&a.FinishedAt), &a.Outcome, &a.Error)
		return a, err
	})
	if err != nil {
		return nil, nil, r.Translate("read outbox attempts", err)
	}
	return m, attempts, nil
}

// OutboxMessages lists messages newest first; see approval.OutboxStore.
func (r Reads) OutboxMessages(ctx context.Context, f approval.OutboxFilter) ([]*approval.OutboxMessage, string, error) {
	limit, err := f.Check()
	if err != nil {
		return nil, "", err
	}
	q := Query{Dialect: r.Dialect}
	if f.Status != "" {
		q.And("o.status = " + q.Arg(string(f.Status)))
	}
	if f.Kind != "" {
		q.And("o.kind = " + q.Arg(string(f.Kind)))
	}
	if err := q.After(f.Cursor, "o.created_at", "o.id"); err != nil {
		return nil, "", err
	}
	return page(ctx, r, "list outbox messages", `SELECT `+OutboxColumns+` FROM outbox o`, &q, "o.created_at", "o.id", limit, ScanOutbox,
		func(m *approval.OutboxMessage) (time.Time, string) { return m.CreatedAt, m.ID })
}
