package sqlite

import (
	"context"
	"time"

	"github.com/approvald/approval"
)

// Routes returns the routing the store was opened with.
func (s *Store) Routes() approval.Routing { return s.Routing }

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
