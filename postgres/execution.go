package postgres

import (
	"context"
	"time"

	"github.com/approvald/approval"
)

// Execution rows change under two locks, always taken in this order: the approval's row
// (whose lock makes appending to its audit trail safe) and then the execution's. Decide holds
// the first when it inserts the execution; the Service's ledger rules take both through
// ExecutionGetForUpdate; the runner's claim (ExecutionClaimDue) takes both with SKIP LOCKED
// and so never waits on either.

// RenewExecution extends a running claim's lease, only while attempt is still current.
func (s *Store) RenewExecution(ctx context.Context, id string, attempt int, lease time.Duration) error {
	if lease <= 0 {
		return approval.Errorf(approval.EINVALID, "lease must be positive")
	}
	tx, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)

	tag, err := tx.Exec(ctx, `
		UPDATE executions SET lease_expires_at = $3
		WHERE id = $1 AND attempts = $2 AND status = 'running' AND lease_expires_at IS NOT NULL`,
		id, attempt, tx.now.Add(lease))
	if err != nil {
		return translate("renew execution lease", err)
	}
	if tag.RowsAffected() == 0 {
		return lostClaim(id, attempt)
	}
	return tx.Commit(ctx)
}

// operationKeyLock is the first key of the pg_advisory_xact_lock that ExecutionGetByOperationKey takes
// on an (action, operation key) pair ("opky" in ASCII); the second is a hash of the pair. The
// two-key form never meets Migrate's one-key lock, and two pairs whose hashes collide only
// wait for each other.
const operationKeyLock int32 = 0x6f706b79

// lostClaim is the answer to a runner whose attempt no longer holds the execution.
func lostClaim(id string, attempt int) error {
	return approval.Errorf(approval.ECONFLICT, "attempt %d no longer holds execution %s", attempt, id)
}
