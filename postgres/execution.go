package postgres

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

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
	return tx.commit(ctx, "commit renew execution lease")
}

// Execution returns one execution, or ENOTFOUND.
func (s *Store) Execution(ctx context.Context, id string) (*approval.ExecutionRecord, error) {
	tx, err := s.beginRead(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)

	rec, err := scanExecution(tx.QueryRow(ctx, `SELECT `+executionColumns+` FROM executions x WHERE x.id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, approval.Errorf(approval.ENOTFOUND, "execution %s not found", id)
	} else if err != nil {
		return nil, translate("read execution", err)
	}
	return rec, tx.commit(ctx, "commit read execution")
}

// Executions lists executions newest first (created_at, then id, descending).
func (s *Store) Executions(ctx context.Context, f approval.ExecutionFilter) ([]*approval.ExecutionRecord, string, error) {
	limit, err := pageSize(f.Limit)
	if err != nil {
		return nil, "", err
	}
	if f.Status != "" && !slices.Contains(executionStatuses, f.Status) {
		return nil, "", approval.Errorf(approval.EINVALID, "unknown execution status %q", f.Status)
	}

	var q filter
	if f.Status != "" {
		q.and("x.status = " + q.param(string(f.Status)))
	}
	if err := q.after(f.Cursor, "x.created_at", "x.id"); err != nil {
		return nil, "", err
	}
	sql := `SELECT ` + executionColumns + ` FROM executions x` + q.where() +
		` ORDER BY x.created_at DESC, x.id DESC LIMIT ` + q.param(limit+1)

	tx, err := s.beginRead(ctx)
	if err != nil {
		return nil, "", err
	}
	defer tx.Rollback(ctx)

	list, next, err := collectPage(ctx, tx, "list executions", sql, q.args, limit,
		func(row pgx.Row) (*approval.ExecutionRecord, error) { return scanExecution(row) },
		func(x *approval.ExecutionRecord) (time.Time, string) { return x.CreatedAt, x.ID })
	if err != nil {
		return nil, "", err
	}
	if err := tx.commit(ctx, "commit list executions"); err != nil {
		return nil, "", err
	}
	return list, next, nil
}

// ExecutionCounts returns how many executions are in each status (every status present) and
// how many are running past their lease.
func (s *Store) ExecutionCounts(ctx context.Context) (map[approval.ExecutionStatus]int, int, error) {
	tx, err := s.beginRead(ctx)
	if err != nil {
		return nil, 0, err
	}
	defer tx.Rollback(ctx)

	rows, err := tx.Query(ctx, `
		SELECT status, count(*), count(*) FILTER (WHERE lease_expires_at <= $1)
		FROM executions GROUP BY status`, tx.now)
	if err != nil {
		return nil, 0, translate("count executions", err)
	}
	counts := make(map[approval.ExecutionStatus]int, len(executionStatuses))
	for _, st := range executionStatuses {
		counts[st] = 0
	}
	stuck := 0
	var status string
	var n, expired int
	if _, err := pgx.ForEachRow(rows, []any{&status, &n, &expired}, func() error {
		counts[approval.ExecutionStatus(status)] = n
		if approval.ExecutionStatus(status) == approval.ExecutionRunning {
			stuck = expired
		}
		return nil
	}); err != nil {
		return nil, 0, translate("count executions", err)
	}
	return counts, stuck, tx.commit(ctx, "commit count executions")
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

// executionStatuses are every execution status, for zero-filled counts.
var executionStatuses = []approval.ExecutionStatus{
	approval.ExecutionQueued, approval.ExecutionRunning, approval.ExecutionSucceeded,
	approval.ExecutionFailed, approval.ExecutionNeedsReview, approval.ExecutionCancelled,
	approval.ExecutionNotConfigured,
}

// executionColumns are the executions columns scanExecution reads, in order, from alias x.
const executionColumns = `x.id, x.approval_id, x.operation_key, x.action, x.targeted, x.status, x.attempts,
	x.last_error, x.result, x.next_attempt_at, x.lease_expires_at, x.applied_version,
	x.uncertain, x.attempt_base, x.created_at, x.updated_at`

// scanExecution reads executionColumns, then any extra destinations the query selects after
// them.
func scanExecution(row pgx.Row, extra ...any) (*approval.ExecutionRecord, error) {
	var r approval.ExecutionRecord
	var status string
	var result []byte
	dest := append([]any{&r.ID, &r.ApprovalID, &r.OperationKey, &r.Action, &r.Targeted, &status, &r.Attempts,
		&r.LastError, &result, &r.NextAttemptAt, &r.LeaseExpiresAt, &r.AppliedVersion,
		&r.Uncertain, &r.AttemptBase, &r.CreatedAt, &r.UpdatedAt}, extra...)
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	r.Status = approval.ExecutionStatus(status)
	if len(result) > 0 {
		r.Result = result
	}
	r.NextAttemptAt = utcPtr(r.NextAttemptAt)
	r.LeaseExpiresAt = utcPtr(r.LeaseExpiresAt)
	r.CreatedAt = r.CreatedAt.UTC()
	r.UpdatedAt = r.UpdatedAt.UTC()
	return &r, nil
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
