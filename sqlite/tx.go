package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/sqldb"
)

var _ approval.Tx = (*ruleTx)(nil)

// Begin opens the write transaction the Service composes a rule in. It holds SQLite's one
// write lock from its first statement (BEGIN IMMEDIATE), which is what every "ForUpdate"
// read of approval.Tx relies on here: no other writer runs until it ends.
func (s *Store) Begin(ctx context.Context) (approval.Tx, error) {
	t, err := s.beginWrite(ctx)
	if err != nil {
		return nil, fail("begin", err)
	}
	return &ruleTx{tx: t}, nil
}

// HasTarget reports whether an action has a downstream target (the Targeted field).
func (s *Store) HasTarget(action string) bool { return s.targeted(action) }

// ruleTx is approval.Tx on the write connection. Its statements run at once: they cost no
// network round trip.
type ruleTx struct {
	tx *tx
}

func (t *ruleTx) Now() time.Time { return t.tx.now }

func (t *ruleTx) Commit(ctx context.Context) error { return fail("commit", t.tx.commit()) }

func (t *ruleTx) Rollback(ctx context.Context) error {
	if err := t.tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return fail("rollback", err)
	}
	return nil
}

func (t *ruleTx) ApprovalGetForUpdate(ctx context.Context, id string) (*approval.Approval, error) {
	a, err := sqldb.ApprovalByID(ctx, querier{t.tx.Tx}, dialect, id)
	return a, fail("read approval", err)
}

func (t *ruleTx) ApprovalGetByIDMany(ctx context.Context, ids []string) ([]*approval.Approval, error) {
	idsJSON, err := json.Marshal(ids)
	if err != nil {
		return nil, fmt.Errorf("encode approval ids: %w", err)
	}
	rows, err := t.tx.query(ctx, approvalDetailSQL+` WHERE a.id IN (SELECT value FROM json_each(?))`, string(idsJSON))
	list, err := sqldb.Collect(rows, err, sqldb.ScanApprovalDetail)
	return list, fail("read approvals", err)
}

func (t *ruleTx) ApprovalIDsByOperationKey(ctx context.Context, key string, limit int) ([]string, error) {
	return t.ids(ctx, "find approvals by operation key",
		`SELECT id FROM approvals WHERE operation_key = ? ORDER BY created_at, id LIMIT ?`, key, limit)
}

// ids runs a query of one text column and collects it.
func (t *ruleTx) ids(ctx context.Context, op, query string, args ...any) ([]string, error) {
	rows, err := t.tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fail(op, err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fail(op, err)
		}
		ids = append(ids, id)
	}
	return ids, fail(op, rows.Err())
}

func (t *ruleTx) ApprovalSetStatusIfPending(ctx context.Context, id string, status approval.Status, decidedAt *time.Time) error {
	guard := `expires_at > ?`
	if status == approval.StatusExpired {
		guard = `expires_at <= ?`
	}
	res, err := t.tx.ExecContext(ctx, `
		UPDATE approvals SET status = ?, decided_at = ?, version = version + 1
		WHERE id = ? AND status = 'pending' AND `+guard,
		string(status), nullMicros(decidedAt), id, micros(t.tx.now))
	return fail("set approval status", changedOne(res, err, "approval", id))
}

// ApprovalIDsDueForUpdate needs no lock of its own: the write lock is held.
func (t *ruleTx) ApprovalIDsDueForUpdate(ctx context.Context, limit int) ([]string, error) {
	return t.ids(ctx, "find due approvals", `
		SELECT id FROM approvals WHERE status = 'pending' AND expires_at <= ?
		ORDER BY expires_at, id LIMIT ?`, micros(t.tx.now), limit)
}

func (t *ruleTx) DecisionInsert(ctx context.Context, approvalID string, d approval.Decision) error {
	_, err := t.tx.ExecContext(ctx, `
		INSERT INTO decisions (approval_id, approver, verdict, comment, decided_at)
		VALUES (?, ?, ?, ?, ?)`,
		approvalID, d.Approver, string(d.Verdict), d.Comment, micros(d.At))
	return fail("insert decision", err)
}

func (t *ruleTx) EventInsert(ctx context.Context, approvalID, typ, actor string, cause approval.Cause, detail map[string]any) error {
	return fail("append event", appendEvent(ctx, t.tx, approvalID, typ, actor, cause, detail))
}

// EventInsertMany appends the events one statement each: in process, a statement costs no
// round trip.
func (t *ruleTx) EventInsertMany(ctx context.Context, events []approval.Event) error {
	for _, e := range events {
		if err := appendEvent(ctx, t.tx, e.ApprovalID, e.Type, e.Actor, e.Cause, e.Detail); err != nil {
			return fail("append event", err)
		}
	}
	return nil
}

func (t *ruleTx) Notify(ctx context.Context, topic string) error {
	t.tx.signal(topic)
	return nil
}

// ExecutionGetByOperationKey needs no lock of its own: the write lock orders every approving
// transaction.
func (t *ruleTx) ExecutionGetByOperationKey(ctx context.Context, action, key, approvalID string) (string, string, error) {
	var otherID, otherRequester string
	err := t.tx.QueryRowContext(ctx, `
		SELECT e.approval_id, a.requester FROM executions e JOIN approvals a ON a.id = e.approval_id
		WHERE e.operation_key = ? AND e.action = ? AND e.approval_id <> ?
		ORDER BY e.created_at, e.id LIMIT 1`,
		key, action, approvalID).Scan(&otherID, &otherRequester)
	if errors.Is(err, sql.ErrNoRows) {
		return "", "", approval.Errorf(approval.ENOTFOUND, "no other execution under operation key %q", key)
	}
	return otherID, otherRequester, fail("find executions under the operation key", err)
}

func (t *ruleTx) ExecutionInsert(ctx context.Context, rec *approval.ExecutionRecord) error {
	_, err := t.tx.ExecContext(ctx, `
		INSERT INTO executions (id, approval_id, operation_key, action, targeted, status,
			last_error, next_attempt_at, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		rec.ID, rec.ApprovalID, rec.OperationKey, rec.Action, rec.Targeted, string(rec.Status),
		rec.LastError, nullMicros(rec.NextAttemptAt), micros(t.tx.now), micros(t.tx.now))
	return fail("insert execution", err)
}

// ExecutionClaimDue needs no lock of its own: the write lock orders every claim.
func (t *ruleTx) ExecutionClaimDue(ctx context.Context, limit int, leaseUntil time.Time) ([]*approval.ExecutionClaim, error) {
	// A queued execution is due at next_attempt_at, a running one at its lease's end (a
	// running one without a lease waits for an asynchronous report and is never due). The two
	// kinds are found apart, each in the order of its index (executions_due, executions_lease),
	// and only the first limit of the two merged: one query ordering both by a common due time
	// is served by no index, and would read and sort the whole backlog for every claim.
	rows, err := t.tx.QueryContext(ctx, `
		SELECT id, recovered FROM (
			SELECT * FROM (
				SELECT id, 0 AS recovered, next_attempt_at AS due_at, created_at FROM executions
				WHERE status = 'queued' AND next_attempt_at <= ?1
				ORDER BY next_attempt_at, created_at, id LIMIT ?2)
			UNION ALL
			SELECT * FROM (
				SELECT id, 1, lease_expires_at, created_at FROM executions
				WHERE status = 'running' AND lease_expires_at <= ?1
				ORDER BY lease_expires_at, created_at, id LIMIT ?2)
			ORDER BY due_at, created_at, id LIMIT ?2)`,
		micros(t.tx.now), limit)
	if err != nil {
		return nil, fail("find due executions", err)
	}
	var claims []*approval.ExecutionClaim
	for rows.Next() {
		var (
			id string
			c  approval.ExecutionClaim
		)
		if err := rows.Scan(&id, &c.Recovered); err != nil {
			rows.Close()
			return nil, fail("find due executions", err)
		}
		c.Record = &approval.ExecutionRecord{ID: id}
		claims = append(claims, &c)
	}
	if err := rows.Close(); err != nil {
		return nil, fail("find due executions", err)
	}
	for _, c := range claims {
		rec, err := getExecution(ctx, t.tx, `x.id = ?`, c.Record.ID)
		if err == nil {
			err = t.claim(ctx, rec, leaseUntil)
		}
		if err != nil {
			return nil, fail("claim execution "+c.Record.ID, err)
		}
		c.Record, c.Attempt = rec, rec.Attempts
	}
	return claims, nil
}

// claim sets rec running for its next attempt, leased until leaseUntil, and updates rec to
// match.
func (t *ruleTx) claim(ctx context.Context, rec *approval.ExecutionRecord, leaseUntil time.Time) error {
	rec.Status, rec.Attempts, rec.NextAttemptAt, rec.LeaseExpiresAt = approval.ExecutionRunning, rec.Attempts+1, nil, &leaseUntil
	rec.UpdatedAt = t.tx.now
	_, err := t.tx.ExecContext(ctx, `
		UPDATE executions
		SET status = 'running', attempts = ?, lease_expires_at = ?, next_attempt_at = NULL, updated_at = ?
		WHERE id = ?`,
		rec.Attempts, micros(leaseUntil), micros(t.tx.now), rec.ID)
	return err
}

func (t *ruleTx) ExecutionSetLeaseIfAttempt(ctx context.Context, id string, attempt int, leaseUntil time.Time) (bool, error) {
	res, err := t.tx.ExecContext(ctx, `
		UPDATE executions SET lease_expires_at = ?
		WHERE id = ? AND attempts = ? AND status = 'running' AND lease_expires_at IS NOT NULL`,
		micros(leaseUntil), id, attempt)
	if err != nil {
		return false, fail("renew execution lease", err)
	}
	n, err := res.RowsAffected()
	return n == 1, fail("renew execution lease", err)
}

// ExecutionGetForUpdate needs no lock of its own: the write lock is held.
func (t *ruleTx) ExecutionGetForUpdate(ctx context.Context, id string) (*approval.ExecutionRecord, error) {
	rec, err := getExecution(ctx, t.tx, `x.id = ?`, id)
	return rec, fail("read execution", err)
}

// ExecutionGetForUpdateMany needs no lock of its own: the transaction holds the write lock.
func (t *ruleTx) ExecutionGetForUpdateMany(ctx context.Context, ids []string) ([]*approval.ExecutionRecord, error) {
	idsJSON, err := json.Marshal(ids)
	if err != nil {
		return nil, fmt.Errorf("encode execution ids: %w", err)
	}
	rows, err := t.tx.query(ctx, `SELECT `+sqldb.ExecutionColumns+` FROM executions x WHERE x.id IN (SELECT value FROM json_each(?))`, string(idsJSON))
	list, err := sqldb.Collect(rows, err, func(row sqldb.Row) (*approval.ExecutionRecord, error) { return sqldb.ScanExecution(row) })
	return list, fail("read executions", err)
}

func (t *ruleTx) ExecutionGetByApprovalForUpdate(ctx context.Context, approvalID string) (*approval.ExecutionRecord, error) {
	rec, err := getExecution(ctx, t.tx, `x.approval_id = ?`, approvalID)
	if approval.ErrorCode(err) == approval.ENOTFOUND {
		return nil, approval.Errorf(approval.ENOTFOUND, "approval %s has no execution", approvalID)
	}
	return rec, fail("read execution of approval", err)
}

func (t *ruleTx) ExecutionIDsByOperationKey(ctx context.Context, key string, limit int) ([]string, error) {
	return t.ids(ctx, "find executions by operation key",
		`SELECT id FROM executions WHERE operation_key = ? ORDER BY created_at, id LIMIT ?`, key, limit)
}

func (t *ruleTx) ExecutionUpdateIfAttempt(ctx context.Context, rec *approval.ExecutionRecord, attempt int) error {
	return t.updateExecution(ctx, `attempts = ? AND status = 'running'`, rec, attempt)
}

// ExecutionUpdateIfAttemptMany writes the executions one statement each, under the write
// lock.
func (t *ruleTx) ExecutionUpdateIfAttemptMany(ctx context.Context, recs []*approval.ExecutionRecord, attempts []int) error {
	if len(recs) != len(attempts) {
		return fmt.Errorf("update executions: %d records for %d attempts", len(recs), len(attempts))
	}
	for i, rec := range recs {
		if err := t.ExecutionUpdateIfAttempt(ctx, rec, attempts[i]); err != nil {
			return err
		}
	}
	return nil
}

func (t *ruleTx) ExecutionUpdateIfStatus(ctx context.Context, rec *approval.ExecutionRecord, status approval.ExecutionStatus) error {
	return t.updateExecution(ctx, `status = ?`, rec, string(status))
}

// updateExecution writes rec's state, guarded by guard on guardArg.
func (t *ruleTx) updateExecution(ctx context.Context, guard string, rec *approval.ExecutionRecord, guardArg any) error {
	res, err := t.tx.ExecContext(ctx, `
		UPDATE executions
		SET status = ?, attempts = ?, last_error = ?, result = ?, next_attempt_at = ?,
			lease_expires_at = ?, applied_version = ?, uncertain = ?, attempt_base = ?, updated_at = ?
		WHERE id = ? AND `+guard,
		string(rec.Status), rec.Attempts, rec.LastError, nullBytes(rec.Result), nullMicros(rec.NextAttemptAt),
		nullMicros(rec.LeaseExpiresAt), rec.AppliedVersion, rec.Uncertain, rec.AttemptBase, micros(t.tx.now),
		rec.ID, guardArg)
	return fail("update execution", changedOne(res, err, "execution", rec.ID))
}

func (t *ruleTx) InboxGetForUpdate(ctx context.Context, id string) (*approval.InboxEvent, error) {
	rows, err := t.tx.query(ctx, `SELECT `+sqldb.InboxColumns+`, NULL FROM inbox_events i WHERE i.id = ?`, id)
	list, err := sqldb.Collect(rows, err, sqldb.ScanInbox)
	if err == nil && len(list) == 0 {
		return nil, approval.Errorf(approval.ENOTFOUND, "inbox event %s not found", id)
	} else if err != nil {
		return nil, fail("read inbox event", err)
	}
	return list[0], nil
}

func (t *ruleTx) InboxSetDone(ctx context.Context, id string, status approval.InboxStatus, outcome, approvalID string) (*approval.InboxEvent, error) {
	var ref sql.NullString
	if approvalID != "" {
		ref = sql.NullString{String: approvalID, Valid: true}
	}
	res, err := t.tx.ExecContext(ctx, `
		UPDATE inbox_events
		SET status = ?, outcome = ?, approval_id = ?, processed_at = ?, next_attempt_at = NULL,
			lease_token = '', lease_expires_at = NULL
		WHERE id = ? AND status = 'pending'`,
		string(status), outcome, ref, micros(t.tx.now), id)
	if err := changedOne(res, err, "inbox event", id); err != nil {
		return nil, fail("mark inbox event done", err)
	}
	e, err := sqldb.InboxEventByID(ctx, querier{t.tx.Tx}, dialect, id)
	return e, fail("read inbox event", err)
}

func (t *ruleTx) InboxSetAttemptFailed(ctx context.Context, id string, status approval.InboxStatus, lastError string, nextAttemptAt, processedAt *time.Time) error {
	res, err := t.tx.ExecContext(ctx, `
		UPDATE inbox_events
		SET status = ?, last_error = ?, next_attempt_at = ?, processed_at = ?,
			lease_token = '', lease_expires_at = NULL
		WHERE id = ? AND status = 'pending'`,
		string(status), lastError, nullMicros(nextAttemptAt), nullMicros(processedAt), id)
	return fail("record failed inbox attempt", changedOne(res, err, "inbox event", id))
}

func (t *ruleTx) InboxSetPendingIfFailed(ctx context.Context, id string) (*approval.InboxEvent, error) {
	res, err := t.tx.ExecContext(ctx, `
		UPDATE inbox_events
		SET status = 'pending', next_attempt_at = ?, processed_at = NULL,
			lease_token = '', lease_expires_at = NULL
		WHERE id = ? AND status = 'failed'`,
		micros(t.tx.now), id)
	if err := changedOne(res, err, "inbox event", id); err != nil {
		return nil, fail("retry inbox event", err)
	}
	e, err := sqldb.InboxEventByID(ctx, querier{t.tx.Tx}, dialect, id)
	return e, fail("read inbox event", err)
}

// changedOne checks that a write the caller guarded under the write lock changed its one row:
// anything else is a broken invariant, which fails the transaction.
func changedOne(res sql.Result, err error, what, id string) error {
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n != 1 {
		return fmt.Errorf("%s %s changed under the write lock", what, id)
	}
	return nil
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
