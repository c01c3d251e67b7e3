package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/sqldb"
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
	if _, err := getExecution(ctx, tx, `x.id = ?`, id); err != nil {
		return err
	}
	return approval.Errorf(approval.ECONFLICT, "attempt %d no longer holds execution %s", attempt, id)
}

// getExecution reads the execution matching where (with arg), or ENOTFOUND.
func getExecution(ctx context.Context, tx *tx, where string, arg any) (*approval.ExecutionRecord, error) {
	rows, err := tx.query(ctx, `SELECT `+sqldb.ExecutionColumns+` FROM executions x WHERE `+where, arg)
	list, err := sqldb.Collect(rows, err, func(row sqldb.Row) (*approval.ExecutionRecord, error) { return sqldb.ScanExecution(row) })
	if err != nil {
		return nil, err
	}
	if len(list) == 0 {
		return nil, approval.Errorf(approval.ENOTFOUND, "execution %v not found", arg)
	}
	return list[0], nil
}

// nullBytes binds b as NULL when it is nil, and as a (possibly empty) BLOB otherwise.
func nullBytes(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}
