package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/approvald/approval"
)

// RenewExecution extends a running claim's lease to now+lease; ECONFLICT if the attempt no
// longer holds the execution.
func (s *Store) RenewExecution(ctx context.Context, id string, attempt int, lease time.Duration) error {
	if lease <= 0 {
		return approval.Errorf(approval.EINVALID, "a lease must be positive")
	}
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return fail("renew execution", err)
	}
	defer tx.Rollback()

	// A running execution without a lease is an accepted asynchronous call: no attempt
	// holds it any more, so there is nothing to renew.
	res, err := tx.ExecContext(ctx, `
		UPDATE executions SET lease_expires_at = ?
		WHERE id = ? AND attempts = ? AND status = 'running' AND lease_expires_at IS NOT NULL`,
		micros(tx.now.Add(lease)), id, attempt)
	if err != nil {
		return fail("renew execution", err)
	}
	if err := fenced(ctx, tx, res, id, attempt); err != nil {
		return fail("renew execution", err)
	}
	if err := tx.commit(); err != nil {
		return fail("renew execution", err)
	}
	return nil
}

// fenced turns a fenced update that changed no row into ENOTFOUND (no such execution) or
// ECONFLICT (the attempt no longer holds it).
func fenced(ctx context.Context, tx *tx, res sql.Result, id string, attempt int) error {
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("update execution: %w", err)
	}
	if n == 1 {
		return nil
	}
	if _, err := findExecution(ctx, tx, id); err != nil {
		return err
	}
	return approval.Errorf(approval.ECONFLICT, "attempt %d no longer holds execution %s", attempt, id)
}

// Execution returns one execution, or ENOTFOUND.
func (s *Store) Execution(ctx context.Context, id string) (*approval.ExecutionRecord, error) {
	tx, err := s.beginRead(ctx)
	if err != nil {
		return nil, fail("execution", err)
	}
	defer tx.Rollback()

	rec, err := findExecution(ctx, tx, id)
	if err != nil {
		return nil, fail("execution", err)
	}
	return rec, nil
}

// Executions lists executions newest first ((created_at, id) descending), with the cursor of
// the next page ("" on the last page).
func (s *Store) Executions(ctx context.Context, f approval.ExecutionFilter) ([]*approval.ExecutionRecord, string, error) {
	limit, err := pageLimit(f.Limit)
	if err != nil {
		return nil, "", err
	}
	where, args := []string{"1 = 1"}, []any{}
	if f.Status != "" {
		if !validExecutionStatus(f.Status) {
			return nil, "", approval.Errorf(approval.EINVALID, "unknown execution status %q", f.Status)
		}
		where, args = append(where, "e.status = ?"), append(args, string(f.Status))
	}
	return listPage(ctx, s, "executions", limit, f.Cursor, "(e.created_at, e.id) < (?, ?)", where, args,
		func(tx *tx, where string, args []any) ([]*approval.ExecutionRecord, error) {
			return findExecutions(ctx, tx, where, args, "ORDER BY e.created_at DESC, e.id DESC LIMIT ?")
		},
		func(rec *approval.ExecutionRecord) (time.Time, string) { return rec.CreatedAt, rec.ID })
}

// ExecutionCounts returns the number of executions in every status, zero included, and how
// many are running past their lease (a runner that died and whose work nobody reclaimed yet).
func (s *Store) ExecutionCounts(ctx context.Context) (map[approval.ExecutionStatus]int, int, error) {
	tx, err := s.beginRead(ctx)
	if err != nil {
		return nil, 0, fail("execution counts", err)
	}
	defer tx.Rollback()

	counts := make(map[approval.ExecutionStatus]int, len(executionStatuses))
	for _, st := range executionStatuses {
		counts[st] = 0
	}
	rows, err := tx.QueryContext(ctx, `SELECT status, count(*) FROM executions GROUP BY status`)
	if err != nil {
		return nil, 0, fail("execution counts", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			status string
			n      int
		)
		if err := rows.Scan(&status, &n); err != nil {
			return nil, 0, fail("execution counts", err)
		}
		counts[approval.ExecutionStatus(status)] = n
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fail("execution counts", err)
	}
	var stuck int
	if err := tx.QueryRowContext(ctx, `
		SELECT count(*) FROM executions WHERE status = 'running' AND lease_expires_at <= ?`,
		micros(tx.now),
	).Scan(&stuck); err != nil {
		return nil, 0, fail("execution counts", err)
	}
	return counts, stuck, nil
}

// executionStatuses are all the execution statuses, in lifecycle order.
var executionStatuses = []approval.ExecutionStatus{
	approval.ExecutionQueued, approval.ExecutionRunning, approval.ExecutionSucceeded,
	approval.ExecutionFailed, approval.ExecutionNeedsReview, approval.ExecutionCancelled,
	approval.ExecutionNotConfigured,
}

func validExecutionStatus(st approval.ExecutionStatus) bool {
	for _, s := range executionStatuses {
		if s == st {
			return true
		}
	}
	return false
}

// findExecution returns the execution with id, or ENOTFOUND.
func findExecution(ctx context.Context, tx *tx, id string) (*approval.ExecutionRecord, error) {
	list, err := findExecutions(ctx, tx, "e.id = ?", []any{id}, "")
	if err != nil {
		return nil, err
	}
	if len(list) == 0 {
		return nil, approval.Errorf(approval.ENOTFOUND, "execution %s not found", id)
	}
	return list[0], nil
}

// executionColumns are the columns scanExecution reads, in order.
const executionColumns = `e.id, e.approval_id, e.operation_key, e.action, e.targeted, e.status, e.attempts,
	e.last_error, e.result, e.next_attempt_at, e.lease_expires_at, e.applied_version,
	e.uncertain, e.attempt_base, e.created_at, e.updated_at`

// findExecutions returns the executions matching where (with args), followed by tail.
func findExecutions(ctx context.Context, tx *tx, where string, args []any, tail string) ([]*approval.ExecutionRecord, error) {
	rows, err := tx.QueryContext(ctx, `SELECT `+executionColumns+` FROM executions e WHERE `+where+` `+tail, args...)
	if err != nil {
		return nil, fmt.Errorf("query executions: %w", err)
	}
	defer rows.Close()
	list := []*approval.ExecutionRecord{}
	for rows.Next() {
		rec, err := scanExecution(rows)
		if err != nil {
			return nil, err
		}
		list = append(list, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("query executions: %w", err)
	}
	return list, nil
}

func scanExecution(rows *sql.Rows) (*approval.ExecutionRecord, error) {
	var (
		rec                  approval.ExecutionRecord
		status               string
		result               []byte
		next, lease          sql.NullInt64
		createdAt, updatedAt int64
	)
	if err := rows.Scan(&rec.ID, &rec.ApprovalID, &rec.OperationKey, &rec.Action, &rec.Targeted, &status,
		&rec.Attempts, &rec.LastError, &result, &next, &lease, &rec.AppliedVersion,
		&rec.Uncertain, &rec.AttemptBase, &createdAt, &updatedAt); err != nil {
		return nil, fmt.Errorf("scan execution: %w", err)
	}
	rec.Status = approval.ExecutionStatus(status)
	if result != nil {
		rec.Result = json.RawMessage(result)
	}
	rec.NextAttemptAt = fromNullMicros(next)
	rec.LeaseExpiresAt = fromNullMicros(lease)
	rec.CreatedAt = fromMicros(createdAt)
	rec.UpdatedAt = fromMicros(updatedAt)
	return &rec, nil
}

// nullBytes binds b as NULL when it is nil, and as a (possibly empty) BLOB otherwise.
func nullBytes(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}
