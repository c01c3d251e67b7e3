package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/approvald/approval"
)

// ClaimExecutions claims up to limit executions that are queued and due, or running past
// their lease; see approval.ExecutionStore. The write transaction is serialized on the one
// write connection, so no two claims can take the same row.
func (s *Store) ClaimExecutions(ctx context.Context, lease time.Duration, limit int) ([]*approval.ExecutionClaim, error) {
	if lease <= 0 || limit < 1 {
		return nil, approval.Errorf(approval.EINVALID, "a claim needs a positive lease and limit")
	}
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return nil, fail("claim executions", err)
	}
	defer tx.Rollback()

	claims, err := claimExecutions(ctx, tx, lease, limit)
	if err != nil {
		return nil, fail("claim executions", err)
	}
	if err := tx.commit(); err != nil {
		return nil, fail("claim executions", err)
	}
	return claims, nil
}

func claimExecutions(ctx context.Context, tx *tx, lease time.Duration, limit int) ([]*approval.ExecutionClaim, error) {
	// A queued execution is due at next_attempt_at, a running one at its lease's end (a
	// running one without a lease waits for an asynchronous report and is never due). The two
	// kinds are found apart, each in the order of its index (executions_due, executions_lease),
	// and only the first limit of the two merged: one query ordering both by a common due time
	// is served by no index, and would read and sort the whole backlog for every claim.
	rows, err := tx.QueryContext(ctx, `
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
		micros(tx.now), limit)
	if err != nil {
		return nil, fmt.Errorf("find due executions: %w", err)
	}
	type due struct {
		id        string
		recovered bool
	}
	var found []due
	for rows.Next() {
		var d due
		if err := rows.Scan(&d.id, &d.recovered); err != nil {
			rows.Close()
			return nil, fmt.Errorf("scan due execution: %w", err)
		}
		found = append(found, d)
	}
	if err := rows.Close(); err != nil {
		return nil, fmt.Errorf("find due executions: %w", err)
	}
	if len(found) == 0 {
		return []*approval.ExecutionClaim{}, nil
	}

	claims := make([]*approval.ExecutionClaim, 0, len(found))
	ids := make([]string, 0, len(found))
	for _, d := range found {
		var (
			attempt    int
			approvalID string
		)
		// The new attempts value is the claim's fencing token, and the attempt is on record
		// (with its event) before the runner makes any call. A recovered claim's predecessor
		// may have sent its call: the execution's outcome is uncertain from now on.
		if err := tx.QueryRowContext(ctx, `
			UPDATE executions
			SET status = 'running', attempts = attempts + 1, lease_expires_at = ?,
				next_attempt_at = NULL, uncertain = uncertain OR ?, updated_at = ?
			WHERE id = ?
			RETURNING attempts, approval_id`,
			micros(tx.now.Add(lease)), d.recovered, micros(tx.now), d.id,
		).Scan(&attempt, &approvalID); err != nil {
			return nil, fmt.Errorf("claim execution %s: %w", d.id, err)
		}
		detail := map[string]any{"execution_id": d.id, "recovered": d.recovered}
		cause := approval.Cause{Kind: approval.CauseWorker, Attempt: attempt}
		if err := appendEvent(ctx, tx, approvalID, approval.EventExecutionAttempt, approval.ActorSystem, cause, detail); err != nil {
			return nil, err
		}
		claims = append(claims, &approval.ExecutionClaim{Attempt: attempt, Recovered: d.recovered})
		ids = append(ids, d.id)
	}

	// The runner sends the approval as the request body; fetch records and approvals for
	// the whole batch with one query each.
	idsJSON, err := json.Marshal(ids)
	if err != nil {
		return nil, fmt.Errorf("encode execution ids: %w", err)
	}
	recs, err := findExecutions(ctx, tx, "e.id IN (SELECT value FROM json_each(?))", []any{string(idsJSON)}, "")
	if err != nil {
		return nil, err
	}
	list, err := findApprovals(ctx, tx, "a.id IN (SELECT approval_id FROM executions WHERE id IN (SELECT value FROM json_each(?)))", []any{string(idsJSON)}, "")
	if err != nil {
		return nil, err
	}
	recByID := make(map[string]*approval.ExecutionRecord, len(recs))
	for _, r := range recs {
		recByID[r.ID] = r
	}
	approvalByID := make(map[string]*approval.Approval, len(list))
	for _, a := range list {
		approvalByID[a.ID] = a
	}
	for i, c := range claims {
		c.Record = recByID[ids[i]]
		c.Approval = approvalByID[c.Record.ApprovalID]
	}
	return claims, nil
}

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

// FinishAttempt records an attempt's outcome if the attempt still holds the execution; see
// approval.ExecutionStore. Status running records an asynchronous call the target accepted:
// the lease is cleared and the execution waits, never claimed again, for ReportExecution.
func (s *Store) FinishAttempt(ctx context.Context, id string, attempt int, o approval.AttemptOutcome) (*approval.ExecutionRecord, error) {
	var (
		event   string
		retryAt *time.Time
	)
	switch o.Status {
	case approval.ExecutionSucceeded:
		event = approval.EventExecutionSucceeded
	case approval.ExecutionFailed:
		event = approval.EventExecutionFailed
	case approval.ExecutionNeedsReview:
		event = approval.EventExecutionNeedsReview
	case approval.ExecutionQueued:
		if o.RetryAt == nil {
			return nil, approval.Errorf(approval.EINVALID, "a retry needs a time to retry at")
		}
		event, retryAt = approval.EventExecutionRetry, o.RetryAt
	case approval.ExecutionRunning:
		event = approval.EventExecutionAccepted
	default:
		return nil, approval.Errorf(approval.EINVALID, "an attempt cannot end in status %q", o.Status)
	}
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return nil, fail("finish attempt", err)
	}
	defer tx.Rollback()

	rec, err := finishAttempt(ctx, tx, id, attempt, o, event, retryAt)
	if err != nil {
		return nil, fail("finish attempt", err)
	}
	if err := tx.commit(); err != nil {
		return nil, fail("finish attempt", err)
	}
	return rec, nil
}

func finishAttempt(ctx context.Context, tx *tx, id string, attempt int, o approval.AttemptOutcome, event string, retryAt *time.Time) (*approval.ExecutionRecord, error) {
	// The condition on attempts is the fence: a runner whose lease expired and whose
	// execution was claimed again (attempts+1), or settled by a report, writes nothing. A
	// nil result keeps the one already stored; uncertainty, once recorded, stays.
	res, err := tx.ExecContext(ctx, `
		UPDATE executions
		SET status = ?, last_error = ?, result = coalesce(?, result), next_attempt_at = ?,
			lease_expires_at = NULL, uncertain = uncertain OR ?, updated_at = ?
		WHERE id = ? AND attempts = ? AND status = 'running'`,
		string(o.Status), o.Error, nullBytes(o.Result), nullMicros(retryAt), o.Uncertain, micros(tx.now), id, attempt)
	if err != nil {
		return nil, fmt.Errorf("update execution: %w", err)
	}
	if err := fenced(ctx, tx, res, id, attempt); err != nil {
		return nil, err
	}
	rec, err := findExecution(ctx, tx, id)
	if err != nil {
		return nil, err
	}
	cause := approval.Cause{Kind: approval.CauseWorker, Attempt: attempt}
	detail := map[string]any{"reason": o.Reason, "error": o.Error}
	if retryAt != nil {
		detail["retry_at"] = retryAt.UTC().Truncate(approval.Precision)
	}
	if err := appendEvent(ctx, tx, rec.ApprovalID, event, approval.ActorSystem, cause, detail); err != nil {
		return nil, err
	}
	if o.Status == approval.ExecutionQueued {
		tx.signal(approval.TopicExecutions)
	}
	return rec, nil
}

// ReleaseExecution gives a claim whose call was never sent back: queued, due now, and the
// attempt uncounted (attempts-1). A later claim takes the same attempt number again, which
// is safe because this one wrote nothing else.
func (s *Store) ReleaseExecution(ctx context.Context, id string, attempt int) error {
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return fail("release execution", err)
	}
	defer tx.Rollback()

	res, err := tx.ExecContext(ctx, `
		UPDATE executions
		SET status = 'queued', attempts = attempts - 1, next_attempt_at = ?,
			lease_expires_at = NULL, updated_at = ?
		WHERE id = ? AND attempts = ? AND status = 'running' AND lease_expires_at IS NOT NULL`,
		micros(tx.now), micros(tx.now), id, attempt)
	if err != nil {
		return fail("release execution", err)
	}
	if err := fenced(ctx, tx, res, id, attempt); err != nil {
		return fail("release execution", err)
	}
	rec, err := findExecution(ctx, tx, id)
	if err != nil {
		return fail("release execution", err)
	}
	cause := approval.Cause{Kind: approval.CauseWorker, Attempt: attempt}
	if err := appendEvent(ctx, tx, rec.ApprovalID, approval.EventExecutionReleased, approval.ActorSystem, cause, map[string]any{"execution_id": id}); err != nil {
		return fail("release execution", err)
	}
	tx.signal(approval.TopicExecutions)
	if err := tx.commit(); err != nil {
		return fail("release execution", err)
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

// RetryExecution re-queues a failed, needs_review or cancelled execution, or an accepted async
// call awaiting its report, due now; see approval.ExecutionStore. Attempts are kept: the count only grows, so an attempt number is
// never reused as a fencing token.
func (s *Store) RetryExecution(ctx context.Context, id, actor string, cause approval.Cause) (*approval.ExecutionRecord, error) {
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return nil, fail("retry execution", err)
	}
	defer tx.Rollback()

	rec, err := findExecution(ctx, tx, id)
	if err != nil {
		return nil, fail("retry execution", err)
	}
	rec, err = moveExecution(ctx, tx, rec, approval.ExecutionQueued,
		[]approval.ExecutionStatus{approval.ExecutionFailed, approval.ExecutionNeedsReview, approval.ExecutionCancelled, approval.ExecutionRunning},
		approval.EventExecutionRetried, actor, cause, nil)
	if err != nil {
		return nil, fail("retry execution", err)
	}
	tx.signal(approval.TopicExecutions)
	if err := tx.commit(); err != nil {
		return nil, fail("retry execution", err)
	}
	return rec, nil
}

// ResolveExecution records the operator's verdict (succeeded or failed) on an execution in
// needs_review or failed, or an accepted async call awaiting its report, with the note in the
// event; see approval.ExecutionStore.
func (s *Store) ResolveExecution(ctx context.Context, id string, status approval.ExecutionStatus, note, actor string, cause approval.Cause) (*approval.ExecutionRecord, error) {
	if status != approval.ExecutionSucceeded && status != approval.ExecutionFailed {
		return nil, approval.Errorf(approval.EINVALID, "an execution is resolved as succeeded or failed, not %q", status)
	}
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return nil, fail("resolve execution", err)
	}
	defer tx.Rollback()

	rec, err := findExecution(ctx, tx, id)
	if err != nil {
		return nil, fail("resolve execution", err)
	}
	rec, err = moveExecution(ctx, tx, rec, status,
		[]approval.ExecutionStatus{approval.ExecutionNeedsReview, approval.ExecutionFailed, approval.ExecutionRunning},
		approval.EventExecutionResolved, actor, cause, map[string]any{"status": string(status), "note": note})
	if err != nil {
		return nil, fail("resolve execution", err)
	}
	if err := tx.commit(); err != nil {
		return nil, fail("resolve execution", err)
	}
	return rec, nil
}

// CancelExecution cancels a queued execution; ECONFLICT in any other status.
func (s *Store) CancelExecution(ctx context.Context, id, actor string, cause approval.Cause) (*approval.ExecutionRecord, error) {
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return nil, fail("cancel execution", err)
	}
	defer tx.Rollback()

	rec, err := findExecution(ctx, tx, id)
	if err != nil {
		return nil, fail("cancel execution", err)
	}
	rec, err = moveExecution(ctx, tx, rec, approval.ExecutionCancelled,
		[]approval.ExecutionStatus{approval.ExecutionQueued},
		approval.EventExecutionCancelled, actor, cause, nil)
	if err != nil {
		return nil, fail("cancel execution", err)
	}
	if err := tx.commit(); err != nil {
		return nil, fail("cancel execution", err)
	}
	return rec, nil
}

// moveExecution is an operator's transition of rec from one of the statuses in from to to,
// with its event (detail plus the execution id and the status it left): ECONFLICT from any
// other status. Running in from admits only an accepted async call awaiting its report: a
// running execution whose lease an attempt holds is the runner's until it ends. A move to queued makes the execution due now; every move clears any lease. A
// retry starts a new run (its attempts counted from here) and a resolution says what
// happened, so both leave nothing uncertain.
func moveExecution(ctx context.Context, tx *tx, rec *approval.ExecutionRecord, to approval.ExecutionStatus, from []approval.ExecutionStatus, event, actor string, cause approval.Cause, detail map[string]any) (*approval.ExecutionRecord, error) {
	allowed := false
	for _, st := range from {
		allowed = allowed || rec.Status == st
	}
	if rec.Status == approval.ExecutionRunning && !rec.AwaitingReport() {
		return nil, approval.Errorf(approval.ECONFLICT, "execution %s is running and attempt %d holds it", rec.ID, rec.Attempts)
	}
	if !allowed {
		return nil, approval.Errorf(approval.ECONFLICT, "execution %s is %s", rec.ID, rec.Status)
	}
	var next *time.Time
	if to == approval.ExecutionQueued {
		next = &tx.now
	}
	uncertain, base := rec.Uncertain, rec.AttemptBase
	switch event {
	case approval.EventExecutionRetried:
		uncertain, base = false, rec.Attempts
	case approval.EventExecutionResolved:
		uncertain = false
	}
	// The status condition repeats the check above in the write itself.
	res, err := tx.ExecContext(ctx, `
		UPDATE executions
		SET status = ?, next_attempt_at = ?, lease_expires_at = NULL, uncertain = ?,
			attempt_base = ?, updated_at = ?
		WHERE id = ? AND status = ?`,
		string(to), nullMicros(next), uncertain, base, micros(tx.now), rec.ID, string(rec.Status))
	if err != nil {
		return nil, fmt.Errorf("update execution: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return nil, fmt.Errorf("update execution: %w", err)
	} else if n != 1 {
		return nil, fmt.Errorf("execution %s changed inside the write transaction", rec.ID)
	}
	if detail == nil {
		detail = map[string]any{}
	}
	detail["execution_id"], detail["previous_status"] = rec.ID, string(rec.Status)
	if err := appendEvent(ctx, tx, rec.ApprovalID, event, actor, cause, detail); err != nil {
		return nil, err
	}
	return findExecution(ctx, tx, rec.ID)
}

// ReportExecution applies an asynchronous outcome if its version is newer than the applied
// one; see approval.ExecutionStore.
func (s *Store) ReportExecution(ctx context.Context, r approval.ExecutionReport) (bool, *approval.ExecutionRecord, error) {
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return false, nil, fail("report execution", err)
	}
	defer tx.Rollback()

	applied, rec, err := report(ctx, tx, r)
	if err != nil {
		return false, nil, fail("report execution", err)
	}
	if err := tx.commit(); err != nil {
		return false, nil, fail("report execution", err)
	}
	return applied, rec, nil
}

// report applies r: the one code path of an asynchronous outcome, whether it comes from the
// API (ReportExecution) or from an inbox event (ApplyInbox). It settles only an execution
// whose outcome comes from reports (approval.ExecutionRecord.Reportable), even one a runner
// holds: the target's own word wins, and the runner's later FinishAttempt finds it no longer
// running. Its refusals (invalid, not found, ambiguous, not reportable) are returned before
// anything is written.
func report(ctx context.Context, tx *tx, r approval.ExecutionReport) (bool, *approval.ExecutionRecord, error) {
	if r.Status != approval.ExecutionSucceeded && r.Status != approval.ExecutionFailed {
		return false, nil, approval.Errorf(approval.EINVALID, "a reported status is succeeded or failed, not %q", r.Status)
	}
	if r.Version <= 0 {
		return false, nil, approval.Errorf(approval.EINVALID, "a report needs a version above 0")
	}
	rec, err := findReported(ctx, tx, r)
	if err != nil {
		return false, nil, err
	}
	if !rec.Reportable() {
		return false, nil, approval.Errorf(approval.ECONFLICT, "execution %s is %s: approvald records this execution's outcome from its own call to the target", rec.ID, rec.Status)
	}
	if r.Version <= rec.AppliedVersion {
		// Invariant 4: an older outcome never overwrites a newer one; it is only recorded.
		detail := map[string]any{"execution_id": rec.ID, "status": string(r.Status), "version": r.Version, "applied_version": rec.AppliedVersion}
		if err := appendEvent(ctx, tx, rec.ApprovalID, approval.EventExecutionReportStale, r.Actor, r.Cause, detail); err != nil {
			return false, nil, err
		}
		return false, rec, nil
	}
	if _, err := tx.ExecContext(ctx, `
		UPDATE executions
		SET status = ?, result = ?, applied_version = ?,
			next_attempt_at = NULL, lease_expires_at = NULL, updated_at = ?
		WHERE id = ?`,
		string(r.Status), nullBytes(r.Result), r.Version, micros(tx.now), rec.ID,
	); err != nil {
		return false, nil, fmt.Errorf("apply report: %w", err)
	}
	detail := map[string]any{"execution_id": rec.ID, "status": string(r.Status), "version": r.Version, "previous_status": string(rec.Status)}
	if err := appendEvent(ctx, tx, rec.ApprovalID, approval.EventExecutionReported, r.Actor, r.Cause, detail); err != nil {
		return false, nil, err
	}
	rec, err = findExecution(ctx, tx, rec.ID)
	return true, rec, err
}

// findReported finds the execution a report names: by approval id, or else by operation key,
// which must name exactly one.
func findReported(ctx context.Context, tx *tx, r approval.ExecutionReport) (*approval.ExecutionRecord, error) {
	var list []*approval.ExecutionRecord
	var err error
	switch {
	case r.ApprovalID != "":
		list, err = findExecutions(ctx, tx, "e.approval_id = ?", []any{r.ApprovalID}, "")
		if err == nil && len(list) == 0 {
			return nil, approval.Errorf(approval.ENOTFOUND, "approval %s has no execution", r.ApprovalID)
		}
	case r.OperationKey != "":
		// Operation keys are unique per requester only.
		list, err = findExecutions(ctx, tx, "e.operation_key = ?", []any{r.OperationKey}, "LIMIT 2")
		if err == nil && len(list) == 0 {
			return nil, approval.Errorf(approval.ENOTFOUND, "no execution has operation key %q", r.OperationKey)
		} else if err == nil && len(list) > 1 {
			return nil, approval.Errorf(approval.ECONFLICT, "operation key %q is used by several requesters; name the approval id", r.OperationKey)
		}
	default:
		return nil, approval.Errorf(approval.EINVALID, "a report must name the approval by id or operation key")
	}
	if err != nil {
		return nil, err
	}
	return list[0], nil
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
