package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/sqldb"
)

// Routes returns the routing the store was opened with.
func (s *Store) Routes() approval.Routing { return s.Routing }

// OutboxInsert is queued like every write. ON CONFLICT DO NOTHING on the natural key: a
// racing insert of the same key waits for the other transaction and then inserts nothing.
func (t *ruleTx) OutboxInsert(ctx context.Context, m *approval.OutboxMessage) error {
	var approvalID *string
	if m.ApprovalID != "" {
		approvalID = &m.ApprovalID
	}
	t.enqueue("insert outbox message", `
		INSERT INTO outbox (id, natural_key, kind, approval_id, recipient, channel, event, payload,
			status, next_attempt_at, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
		ON CONFLICT (natural_key) DO NOTHING`,
		m.ID, m.NaturalKey, string(m.Kind), approvalID, m.Recipient, m.Channel, m.Event,
		string(m.Payload), string(m.Status), m.NextAttemptAt, m.CreatedAt, m.UpdatedAt)
	return nil
}

// OutboxClaimDue is one statement: SKIP LOCKED lets replicas claim disjoint messages without
// waiting for each other; each branch is served by its partial index.
func (t *ruleTx) OutboxClaimDue(ctx context.Context, limit int, leaseUntil time.Time) ([]*approval.OutboxMessage, error) {
	rows, err := querier{t}.Query(ctx, `
		WITH pending AS (
			SELECT id, next_attempt_at AS due_at FROM outbox
			WHERE status = 'pending' AND next_attempt_at <= $1
			ORDER BY next_attempt_at, id LIMIT $2
			FOR UPDATE SKIP LOCKED
		), expired AS (
			SELECT id, lease_expires_at AS due_at FROM outbox
			WHERE status = 'sending' AND lease_expires_at <= $1
			ORDER BY lease_expires_at, id LIMIT $2
			FOR UPDATE SKIP LOCKED
		), due AS (
			SELECT * FROM pending UNION ALL SELECT * FROM expired
			ORDER BY due_at, id LIMIT $2
		), claimed AS (
			UPDATE outbox o
			SET status = 'sending', attempts = o.attempts + 1, next_attempt_at = NULL,
				lease_expires_at = $3, updated_at = $1
			FROM due WHERE o.id = due.id
			RETURNING `+sqldb.OutboxColumns+`
		), logged AS (
			INSERT INTO outbox_attempts (message_id, attempt, started_at)
			SELECT id, attempts, $1 FROM claimed
		)
		SELECT * FROM claimed ORDER BY next_attempt_at, id`,
		t.now, limit, leaseUntil)
	msgs, err := sqldb.Collect(rows, err, sqldb.ScanOutbox)
	return msgs, translate("claim outbox messages", err)
}

func (t *ruleTx) OutboxGetForUpdate(ctx context.Context, id string) (*approval.OutboxMessage, error) {
	m, err := sqldb.ScanOutbox(t.QueryRow(ctx, `SELECT `+sqldb.OutboxColumns+` FROM outbox o WHERE o.id = $1 FOR UPDATE`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, approval.Errorf(approval.ENOTFOUND, "outbox message %s not found", id)
	}
	return m, translate("lock outbox message", err)
}

// OutboxUpdateIfAttempt is queued like every write; a failed guard divides by zero, as in
// ApprovalSetStatusIfPending.
func (t *ruleTx) OutboxUpdateIfAttempt(ctx context.Context, m *approval.OutboxMessage, attempt int) error {
	t.updateOutbox("record outbox attempt", `attempts = $9 AND status = 'sending'`, m, attempt)
	return nil
}

func (t *ruleTx) OutboxUpdateIfStatus(ctx context.Context, m *approval.OutboxMessage, status approval.OutboxStatus) error {
	t.updateOutbox("update outbox message", `status = $9`, m, string(status))
	return nil
}

func (t *ruleTx) updateOutbox(op, guard string, m *approval.OutboxMessage, guardArg any) {
	t.enqueue(op, `
		WITH changed AS (
			UPDATE outbox
			SET status = $2, payload = $3, last_error = $4, next_attempt_at = $5,
				lease_expires_at = $6, sent_at = $7, updated_at = $8
			WHERE id = $1 AND `+guard+`
			RETURNING 1
		)
		SELECT 1 / count(*) FROM changed`,
		m.ID, string(m.Status), string(m.Payload), m.LastError, m.NextAttemptAt, m.LeaseExpiresAt,
		m.SentAt, t.now, guardArg)
}

func (t *ruleTx) OutboxAttemptFinish(ctx context.Context, id string, attempt int, outcome, errText string) error {
	t.enqueue("finish outbox attempt", `
		UPDATE outbox_attempts SET finished_at = $3, outcome = $4, error = $5
		WHERE message_id = $1 AND attempt = $2`,
		id, attempt, t.now, outcome, errText)
	return nil
}
