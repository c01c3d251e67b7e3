package postgres

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/approvald/approval"
)

// Execution rows change under two locks, always taken in this order: the approval's row
// (whose lock makes appending to its audit trail safe) and then the execution's. Decide holds
// the first when it inserts the execution; the Service's ledger rules take both through
// ExecutionGetForUpdate; the runner's claim takes both with SKIP LOCKED and so never waits on
// either.

// ClaimExecutions claims up to limit due executions for the runner: queued ones whose next
// attempt is due, and running ones whose lease has expired (recovered, their last attempt's
// outcome unknown), oldest due first. The attempt is counted and recorded before any call is
// made, and the new attempt number fences everything the runner writes afterwards.
func (s *Store) ClaimExecutions(ctx context.Context, lease time.Duration, limit int) ([]*approval.ExecutionClaim, error) {
	if lease <= 0 || limit <= 0 {
		return nil, approval.Errorf(approval.EINVALID, "lease and limit must be positive")
	}
	tx, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)

	// SKIP LOCKED on the execution and its approval: replicas claim disjoint rows and never
	// wait on each other, nor on an operator or a report holding the approval. A running row
	// without a lease is an accepted async call: lease_expires_at <= $1 is never true for it.
	// A recovered claim's predecessor may have sent its call, so the outcome is uncertain.
	//
	// The two kinds of due row are found apart, each in the order of an index on its status
	// and due time, and only the first limit of the two merged:
	// one query ordering both by a common due time is served by no index, and would read,
	// join and sort the whole backlog for every claim. The rows one branch locks beyond the
	// merged limit are skipped by other replicas only until this transaction ends.
	rows, err := tx.Query(ctx, `
		WITH queued AS (
			SELECT x.id, false AS recovered, x.next_attempt_at AS due_at
			FROM executions x JOIN approvals a ON a.id = x.approval_id
			WHERE x.status = 'queued' AND x.next_attempt_at <= $1
			ORDER BY x.next_attempt_at, x.id
			LIMIT $2
			FOR UPDATE OF x, a SKIP LOCKED
		), expired AS (
			SELECT x.id, true AS recovered, x.lease_expires_at AS due_at
			FROM executions x JOIN approvals a ON a.id = x.approval_id
			WHERE x.status = 'running' AND x.lease_expires_at <= $1
			ORDER BY x.lease_expires_at, x.id
			LIMIT $2
			FOR UPDATE OF x, a SKIP LOCKED
		), due AS (
			SELECT * FROM queued UNION ALL SELECT * FROM expired
			ORDER BY due_at, id
			LIMIT $2
		)
		UPDATE executions x
		SET status = 'running', attempts = x.attempts + 1, next_attempt_at = NULL,
			lease_expires_at = $3, uncertain = x.uncertain OR due.recovered, updated_at = $1
		FROM due
		WHERE x.id = due.id
		RETURNING `+executionColumns+`, due.recovered, due.due_at`,
		tx.now, limit, tx.now.Add(lease))
	if err != nil {
		return nil, translate("claim executions", err)
	}
	type claimed struct {
		*approval.ExecutionClaim
		dueAt time.Time
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (claimed, error) {
		c := claimed{ExecutionClaim: &approval.ExecutionClaim{}}
		var err error
		c.Record, err = scanExecution(row, &c.Recovered, &c.dueAt)
		if err != nil {
			return c, err
		}
		c.Attempt = c.Record.Attempts
		return c, nil
	})
	if err != nil {
		return nil, translate("claim executions", err)
	}
	// RETURNING has no order of its own: give the claims back oldest due first.
	slices.SortFunc(list, func(a, b claimed) int {
		return cmp.Or(a.dueAt.Compare(b.dueAt), strings.Compare(a.Record.ID, b.Record.ID))
	})
	claims := make([]*approval.ExecutionClaim, len(list))
	for i, c := range list {
		claims[i] = c.ExecutionClaim
	}
	if len(claims) == 0 {
		return nil, tx.commit(ctx, "commit claim executions")
	}

	ids := make([]string, len(claims))
	for i, c := range claims {
		ids[i] = c.Record.ApprovalID
		cause := approval.Cause{Kind: approval.CauseWorker, Attempt: c.Attempt}
		detail := map[string]any{"execution_id": c.Record.ID, "recovered": c.Recovered}
		if _, err := tx.appendEvent(ctx, c.Record.ApprovalID, approval.EventExecutionAttempt, approval.ActorSystem, cause, detail); err != nil {
			return nil, err
		}
	}
	// The runner sends the approval to the target: load the page of them in one go.
	rows, err = tx.Query(ctx, `SELECT `+approvalColumns+` FROM approvals a WHERE a.id = ANY($1)`, ids)
	if err != nil {
		return nil, translate("read claimed approvals", err)
	}
	approvals, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*approval.Approval, error) {
		return scanApproval(row)
	})
	if err != nil {
		return nil, translate("read claimed approvals", err)
	}
	if err := tx.loadDetails(ctx, approvals); err != nil {
		return nil, err
	}
	byID := make(map[string]*approval.Approval, len(approvals))
	for _, a := range approvals {
		byID[a.ID] = a
	}
	for _, c := range claims {
		c.Approval = byID[c.Record.ApprovalID]
	}
	if err := tx.commit(ctx, "commit claim executions"); err != nil {
		return nil, err
	}
	return claims, nil
}

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
