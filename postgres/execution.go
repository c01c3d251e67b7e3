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
// the first when it inserts the execution; the runner's claim takes both with SKIP LOCKED and
// so never waits on either.

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

// FinishAttempt records an attempt's outcome, only while attempt is still the execution's
// current attempt and it is running.
func (s *Store) FinishAttempt(ctx context.Context, id string, attempt int, o approval.AttemptOutcome) (*approval.ExecutionRecord, error) {
	var event string
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
		event = approval.EventExecutionRetry
	case approval.ExecutionRunning:
		event = approval.EventExecutionAccepted
	default:
		return nil, approval.Errorf(approval.EINVALID, "an attempt cannot end in status %q", o.Status)
	}
	var retryAt *time.Time
	if o.Status == approval.ExecutionQueued {
		t := o.RetryAt.UTC().Truncate(approval.Precision)
		retryAt = &t
	}

	tx, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)

	// The approval's lock first (the lock order above), taken in one round trip rather than
	// lockExecution's three; the UPDATE then takes the execution's. Its state beforehand is not
	// needed: the UPDATE's conditions are the fence.
	tag, err := tx.Exec(ctx, `
		SELECT 1 FROM approvals WHERE id = (SELECT approval_id FROM executions WHERE id = $1)
		FOR UPDATE`, id)
	if err != nil {
		return nil, translate("lock approval of execution", err)
	}
	if tag.RowsAffected() == 0 {
		return nil, approval.Errorf(approval.ENOTFOUND, "execution %s not found", id)
	}
	// The lease is cleared in every case: a retry waits for next_attempt_at, and an accepted
	// async call stays running without one until its report comes. Uncertainty, once
	// recorded, stays.
	rec, err := scanExecution(tx.QueryRow(ctx, `
		UPDATE executions x
		SET status = $3, last_error = $4, result = COALESCE($5, x.result), next_attempt_at = $6,
			lease_expires_at = NULL, uncertain = x.uncertain OR $8, updated_at = $7
		WHERE x.id = $1 AND x.attempts = $2 AND x.status = 'running'
		RETURNING `+executionColumns,
		id, attempt, string(o.Status), o.Error, o.Result, retryAt, tx.now, o.Uncertain))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, lostClaim(id, attempt)
	} else if err != nil {
		return nil, translate("finish execution attempt", err)
	}
	detail := map[string]any{"reason": o.Reason, "error": o.Error}
	if retryAt != nil {
		detail["retry_at"] = *retryAt
	}
	cause := approval.Cause{Kind: approval.CauseWorker, Attempt: attempt}
	if _, err := tx.appendEvent(ctx, rec.ApprovalID, event, approval.ActorSystem, cause, detail); err != nil {
		return nil, err
	}
	if o.Status == approval.ExecutionQueued {
		if err := tx.notify(ctx, approval.TopicExecutions); err != nil {
			return nil, err
		}
	}
	if err := tx.commit(ctx, "commit execution attempt"); err != nil {
		return nil, err
	}
	return rec, nil
}

// ReleaseExecution gives back a claim whose call was never sent: queued and due now, with
// the attempt uncounted. A running execution without a lease is an accepted async call, sent
// already: it is not the attempt's to give back.
func (s *Store) ReleaseExecution(ctx context.Context, id string, attempt int) error {
	tx, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)

	if _, err := tx.lockExecution(ctx, id); err != nil {
		return err
	}
	var approvalID string
	err = tx.QueryRow(ctx, `
		UPDATE executions
		SET status = 'queued', attempts = attempts - 1, next_attempt_at = $3,
			lease_expires_at = NULL, updated_at = $3
		WHERE id = $1 AND attempts = $2 AND status = 'running' AND lease_expires_at IS NOT NULL
		RETURNING approval_id`,
		id, attempt, tx.now).Scan(&approvalID)
	if errors.Is(err, pgx.ErrNoRows) {
		return lostClaim(id, attempt)
	} else if err != nil {
		return translate("release execution", err)
	}
	cause := approval.Cause{Kind: approval.CauseWorker, Attempt: attempt}
	if _, err := tx.appendEvent(ctx, approvalID, approval.EventExecutionReleased, approval.ActorSystem, cause, map[string]any{"execution_id": id}); err != nil {
		return err
	}
	if err := tx.notify(ctx, approval.TopicExecutions); err != nil {
		return err
	}
	return tx.commit(ctx, "commit release execution")
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

// RetryExecution re-queues a failed, needs_review or cancelled execution, or an accepted async
// call awaiting its report, due now, under the same operation key. Attempts keep counting, so every attempt number stays a unique fence;
// the new run's attempts are counted from attempt_base, and nothing of it is uncertain yet.
func (s *Store) RetryExecution(ctx context.Context, id, actor string, cause approval.Cause) (*approval.ExecutionRecord, error) {
	tx, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)

	cur, err := tx.lockExecution(ctx, id)
	if err != nil {
		return nil, err
	}
	switch {
	case cur.Status == approval.ExecutionFailed, cur.Status == approval.ExecutionNeedsReview,
		cur.Status == approval.ExecutionCancelled, cur.AwaitingReport():
	default:
		return nil, approval.Errorf(approval.ECONFLICT, "execution %s is %s; only a failed, needs_review or cancelled execution, or an accepted one awaiting its report, can be retried", id, cur.Status)
	}
	rec, err := scanExecution(tx.QueryRow(ctx, `
		UPDATE executions x
		SET status = 'queued', next_attempt_at = $2, lease_expires_at = NULL, uncertain = false,
			attempt_base = x.attempts, updated_at = $2
		WHERE x.id = $1
		RETURNING `+executionColumns,
		id, tx.now))
	if err != nil {
		return nil, translate("retry execution", err)
	}
	detail := map[string]any{"execution_id": id, "previous_status": cur.Status}
	if _, err := tx.appendEvent(ctx, rec.ApprovalID, approval.EventExecutionRetried, actor, cause, detail); err != nil {
		return nil, err
	}
	if err := tx.notify(ctx, approval.TopicExecutions); err != nil {
		return nil, err
	}
	if err := tx.commit(ctx, "commit retry execution"); err != nil {
		return nil, err
	}
	return rec, nil
}

// ResolveExecution records an operator's finding of what really happened to an execution in
// needs_review or failed, or to an accepted async call whose report has not come; nothing
// about it is uncertain any more.
func (s *Store) ResolveExecution(ctx context.Context, id string, status approval.ExecutionStatus, note, actor string, cause approval.Cause) (*approval.ExecutionRecord, error) {
	if status != approval.ExecutionSucceeded && status != approval.ExecutionFailed {
		return nil, approval.Errorf(approval.EINVALID, "an execution is resolved as succeeded or failed, not %q", status)
	}
	tx, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)

	cur, err := tx.lockExecution(ctx, id)
	if err != nil {
		return nil, err
	}
	if cur.Status != approval.ExecutionNeedsReview && cur.Status != approval.ExecutionFailed && !cur.AwaitingReport() {
		return nil, approval.Errorf(approval.ECONFLICT, "execution %s is %s; only a needs_review or failed execution, or an accepted one awaiting its report, can be resolved", id, cur.Status)
	}
	rec, err := scanExecution(tx.QueryRow(ctx, `
		UPDATE executions x
		SET status = $2, next_attempt_at = NULL, lease_expires_at = NULL, uncertain = false,
			updated_at = $3
		WHERE x.id = $1
		RETURNING `+executionColumns,
		id, string(status), tx.now))
	if err != nil {
		return nil, translate("resolve execution", err)
	}
	detail := map[string]any{"execution_id": id, "status": status, "previous_status": cur.Status, "note": note}
	if _, err := tx.appendEvent(ctx, rec.ApprovalID, approval.EventExecutionResolved, actor, cause, detail); err != nil {
		return nil, err
	}
	if err := tx.commit(ctx, "commit resolve execution"); err != nil {
		return nil, err
	}
	return rec, nil
}

// CancelExecution cancels a queued execution before the runner claims it.
func (s *Store) CancelExecution(ctx context.Context, id, actor string, cause approval.Cause) (*approval.ExecutionRecord, error) {
	tx, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)

	cur, err := tx.lockExecution(ctx, id)
	if err != nil {
		return nil, err
	}
	if cur.Status != approval.ExecutionQueued {
		return nil, approval.Errorf(approval.ECONFLICT, "execution %s is %s; only a queued execution can be cancelled", id, cur.Status)
	}
	rec, err := scanExecution(tx.QueryRow(ctx, `
		UPDATE executions x
		SET status = 'cancelled', next_attempt_at = NULL, updated_at = $2
		WHERE x.id = $1
		RETURNING `+executionColumns,
		id, tx.now))
	if err != nil {
		return nil, translate("cancel execution", err)
	}
	if _, err := tx.appendEvent(ctx, rec.ApprovalID, approval.EventExecutionCancelled, actor, cause, map[string]any{"execution_id": id}); err != nil {
		return nil, err
	}
	if err := tx.commit(ctx, "commit cancel execution"); err != nil {
		return nil, err
	}
	return rec, nil
}

// ReportExecution applies an asynchronous outcome through report, the code ApplyInbox
// applies execution.result events with.
func (s *Store) ReportExecution(ctx context.Context, r approval.ExecutionReport) (bool, *approval.ExecutionRecord, error) {
	tx, err := s.begin(ctx)
	if err != nil {
		return false, nil, err
	}
	defer tx.Rollback(ctx)

	res, err := tx.report(ctx, r)
	if err != nil {
		return false, nil, err
	}
	if res.refusal != nil {
		return false, nil, res.refusal
	}
	if err := tx.commit(ctx, "commit execution report"); err != nil {
		return false, nil, err
	}
	return res.applied, res.rec, nil
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

// reported is what report did. A refusal (no such execution, an ambiguous operation key) is
// the answer to the reporter, not a failure of the transaction.
type reported struct {
	applied bool
	rec     *approval.ExecutionRecord
	refusal *approval.Error
}

// report applies an asynchronous outcome inside tx if it is newer than the one applied
// (invariant 4), and records a stale one in the audit trail only. It applies only to an
// execution whose outcome comes from reports (approval.ExecutionRecord.Reportable), and then
// even to a running one: an async target's outcome is the truth, and a running attempt that
// finishes later finds the execution no longer running. An error means tx must be rolled back.
func (tx *tx) report(ctx context.Context, r approval.ExecutionReport) (reported, error) {
	refuse := func(e *approval.Error) (reported, error) { return reported{refusal: e}, nil }
	if r.Status != approval.ExecutionSucceeded && r.Status != approval.ExecutionFailed {
		return refuse(approval.Errorf(approval.EINVALID, "a report's status is succeeded or failed, not %q", r.Status))
	}
	if r.Version <= 0 {
		return refuse(approval.Errorf(approval.EINVALID, "a report's version must be positive"))
	}

	var id string
	switch {
	case r.ApprovalID != "":
		err := tx.QueryRow(ctx, `SELECT id FROM executions WHERE approval_id = $1`, r.ApprovalID).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			return refuse(approval.Errorf(approval.ENOTFOUND, "approval %s has no execution (it does not exist or is not approved)", r.ApprovalID))
		} else if err != nil {
			return reported{}, translate("find execution by approval", err)
		}
	case r.OperationKey != "":
		rows, err := tx.Query(ctx, `SELECT id FROM executions WHERE operation_key = $1 LIMIT 2`, r.OperationKey)
		if err != nil {
			return reported{}, translate("find execution by operation key", err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return reported{}, translate("find execution by operation key", err)
		}
		switch len(ids) {
		case 0:
			return refuse(approval.Errorf(approval.ENOTFOUND, "no execution has operation key %q", r.OperationKey))
		case 2:
			return refuse(approval.Errorf(approval.ECONFLICT, "operation key %q is used by several requesters; name the approval id", r.OperationKey))
		}
		id = ids[0]
	default:
		return refuse(approval.Errorf(approval.EINVALID, "a report names an approval id or an operation key"))
	}

	cur, err := tx.lockExecution(ctx, id)
	if err != nil {
		return reported{}, err
	}
	if !cur.Reportable() {
		return refuse(approval.Errorf(approval.ECONFLICT, "execution %s is %s: approvald records this execution's outcome from its own call to the target", id, cur.Status))
	}
	if r.Version <= cur.AppliedVersion {
		detail := map[string]any{"execution_id": id, "status": r.Status, "version": r.Version, "applied_version": cur.AppliedVersion}
		if _, err := tx.appendEvent(ctx, cur.ApprovalID, approval.EventExecutionReportStale, r.Actor, r.Cause, detail); err != nil {
			return reported{}, err
		}
		return reported{rec: cur}, nil
	}
	rec, err := scanExecution(tx.QueryRow(ctx, `
		UPDATE executions x
		SET status = $2, result = $3, applied_version = $4, next_attempt_at = NULL,
			lease_expires_at = NULL, updated_at = $5
		WHERE x.id = $1
		RETURNING `+executionColumns,
		id, string(r.Status), []byte(r.Result), r.Version, tx.now))
	if err != nil {
		return reported{}, translate("apply execution report", err)
	}
	detail := map[string]any{"execution_id": id, "status": r.Status, "version": r.Version, "previous_status": cur.Status}
	if _, err := tx.appendEvent(ctx, rec.ApprovalID, approval.EventExecutionReported, r.Actor, r.Cause, detail); err != nil {
		return reported{}, err
	}
	return reported{applied: true, rec: rec}, nil
}

// lockExecution locks an execution's approval and then the execution (the lock order of every
// execution change) and returns the execution as it now is, or ENOTFOUND.
func (tx *tx) lockExecution(ctx context.Context, id string) (*approval.ExecutionRecord, error) {
	var approvalID string
	err := tx.QueryRow(ctx, `SELECT approval_id FROM executions WHERE id = $1`, id).Scan(&approvalID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, approval.Errorf(approval.ENOTFOUND, "execution %s not found", id)
	} else if err != nil {
		return nil, translate("find execution", err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM approvals WHERE id = $1 FOR UPDATE`, approvalID); err != nil {
		return nil, translate("lock approval of execution", err)
	}
	rec, err := scanExecution(tx.QueryRow(ctx, `SELECT `+executionColumns+` FROM executions x WHERE x.id = $1 FOR UPDATE`, id))
	if err != nil {
		return nil, translate("lock execution", err)
	}
	return rec, nil
}

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
