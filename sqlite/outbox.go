package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/sqldb"
)

// Routes returns the routing the store was opened with.
func (s *Store) Routes() approval.Routing { return s.Routing }

// insertOutbox inserts m unless a message has its natural key.
func insertOutbox(ctx context.Context, tx *tx, m *approval.OutboxMessage) error {
	var approvalID sql.NullString
	if m.ApprovalID != "" {
		approvalID = sql.NullString{String: m.ApprovalID, Valid: true}
	}
	_, err := tx.ExecContext(ctx, `
		INSERT INTO outbox (id, natural_key, kind, approval_id, recipient, channel, event, payload,
			status, next_attempt_at, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (natural_key) DO NOTHING`,
		m.ID, m.NaturalKey, string(m.Kind), approvalID, m.Recipient, m.Channel, m.Event,
		string(m.Payload), string(m.Status), nullMicros(m.NextAttemptAt), micros(m.CreatedAt), micros(m.UpdatedAt))
	return err
}

func (t *ruleTx) OutboxInsert(ctx context.Context, m *approval.OutboxMessage) error {
	if err := insertOutbox(ctx, t.tx, m); err != nil {
		return fail("insert outbox message", err)
	}
	return nil
}

// OutboxClaimDue needs no lock of its own: the write lock orders every claim.
func (t *ruleTx) OutboxClaimDue(ctx context.Context, limit int, leaseUntil time.Time) ([]*approval.OutboxMessage, error) {
	ids, err := t.ids(ctx, "find due outbox messages", `
		SELECT id FROM (
			SELECT * FROM (
				SELECT id, next_attempt_at AS due_at FROM outbox
				WHERE status = 'pending' AND next_attempt_at <= ?1
				ORDER BY next_attempt_at, id LIMIT ?2)
			UNION ALL
			SELECT * FROM (
				SELECT id, lease_expires_at FROM outbox
				WHERE status = 'sending' AND lease_expires_at <= ?1
				ORDER BY lease_expires_at, id LIMIT ?2)
			ORDER BY due_at, id LIMIT ?2)`,
		micros(t.tx.now), limit)
	if err != nil {
		return nil, err
	}
	msgs := make([]*approval.OutboxMessage, 0, len(ids))
	for _, id := range ids {
		if _, err := t.tx.ExecContext(ctx, `
			UPDATE outbox SET status = 'sending', attempts = attempts + 1, next_attempt_at = NULL,
				lease_expires_at = ?, updated_at = ?
			WHERE id = ?`, micros(leaseUntil), micros(t.tx.now), id); err != nil {
			return nil, fail("claim outbox message", err)
		}
		if _, err := t.tx.ExecContext(ctx, `
			INSERT INTO outbox_attempts (message_id, attempt, started_at)
			SELECT id, attempts, ? FROM outbox WHERE id = ?`, micros(t.tx.now), id); err != nil {
			return nil, fail("log outbox attempt", err)
		}
		m, err := t.OutboxGetForUpdate(ctx, id)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, m)
	}
	return msgs, nil
}

// OutboxGetForUpdate needs no lock of its own: the write lock is held.
func (t *ruleTx) OutboxGetForUpdate(ctx context.Context, id string) (*approval.OutboxMessage, error) {
	rows, err := t.tx.query(ctx, `SELECT `+sqldb.OutboxColumns+` FROM outbox o WHERE o.id = ?`, id)
	list, err := sqldb.Collect(rows, err, sqldb.ScanOutbox)
	if err == nil && len(list) == 0 {
		return nil, approval.Errorf(approval.ENOTFOUND, "outbox message %s not found", id)
	} else if err != nil {
		return nil, fail("read outbox message", err)
	}
	return list[0], nil
}

func (t *ruleTx) OutboxUpdateIfAttempt(ctx context.Context, m *approval.OutboxMessage, attempt int) error {
	return t.updateOutbox(ctx, `attempts = ? AND status = 'sending'`, m, attempt)
}

func (t *ruleTx) OutboxUpdateIfStatus(ctx context.Context, m *approval.OutboxMessage, status approval.OutboxStatus) error {
	return t.updateOutbox(ctx, `status = ?`, m, string(status))
}

// updateOutbox writes m's state, guarded by guard on guardArg.
func (t *ruleTx) updateOutbox(ctx context.Context, guard string, m *approval.OutboxMessage, guardArg any) error {
	res, err := t.tx.ExecContext(ctx, `
		UPDATE outbox
		SET status = ?, payload = ?, last_error = ?, next_attempt_at = ?, lease_expires_at = ?,
			sent_at = ?, updated_at = ?
		WHERE id = ? AND `+guard,
		string(m.Status), string(m.Payload), m.LastError, nullMicros(m.NextAttemptAt),
		nullMicros(m.LeaseExpiresAt), nullMicros(m.SentAt), micros(t.tx.now), m.ID, guardArg)
	return fail("update outbox message", changedOne(res, err, "outbox message", m.ID))
}

func (t *ruleTx) OutboxAttemptFinish(ctx context.Context, id string, attempt int, outcome, errText string) error {
	_, err := t.tx.ExecContext(ctx, `
		UPDATE outbox_attempts SET finished_at = ?, outcome = ?, error = ?
		WHERE message_id = ? AND attempt = ?`,
		micros(t.tx.now), outcome, errText, id, attempt)
	return fail("finish outbox attempt", err)
}
