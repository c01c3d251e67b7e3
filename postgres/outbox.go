package postgres

import (
	"context"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/sqldb"
)

// Routes returns the routing the store was opened with.
func (s *Store) Routes() approval.Routing { return s.Routing }

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
		t.At, limit, leaseUntil)
	msgs, err := sqldb.Collect(rows, err, sqldb.ScanOutbox)
	return msgs, translate("claim outbox messages", err)
}
