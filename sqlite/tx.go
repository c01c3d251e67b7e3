package sqlite

import (
	"context"
	"database/sql"
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
//
// A pending approval.TokenCheck in ctx is the transaction's first statement: a token revoked
// or expired by then fails Begin, before anything is read or written.
func (s *Store) Begin(ctx context.Context) (approval.Tx, error) {
	t, err := s.beginWrite(ctx)
	if err != nil {
		return nil, fail("begin", err)
	}
	if err := t.checkToken(ctx); err != nil {
		t.Rollback()
		return nil, err
	}
	return newRuleTx(t), nil
}

// ruleTx is approval.Tx on the write connection. Its statements run at once: they cost no
// network round trip. The statements both dialects share are sqldb.Tx's.
type ruleTx struct {
	sqldb.Tx
	tx *tx
}

func newRuleTx(t *tx) *ruleTx {
	return &ruleTx{tx: t, Tx: sqldb.Tx{Run: runner{t}, Dialect: dialect, At: t.now, Translate: fail}}
}

func (t *ruleTx) Commit(ctx context.Context) error { return fail("commit", t.tx.commit()) }

func (t *ruleTx) Rollback(ctx context.Context) error {
	if err := t.tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return fail("rollback", err)
	}
	return nil
}

func (t *ruleTx) DecisionInsert(ctx context.Context, approvalID string, d approval.Decision) error {
	_, err := t.tx.ExecContext(ctx, `
		INSERT INTO decisions (approval_id, approver, verdict, comment, decided_at)
		VALUES (?, ?, ?, ?, ?)`,
		approvalID, d.Approver, string(d.Verdict), d.Comment, micros(d.At))
	return fail("insert decision", err)
}

// DecisionInsertIfPending runs the vote's statements one by one: a statement costs no round
// trip, and the transaction holds the write lock from its first.
func (t *ruleTx) DecisionInsertIfPending(ctx context.Context, v approval.VoteWrite) error {
	if len(v.Events) == 0 {
		return fmt.Errorf("insert decision: a vote without its %s event", approval.EventVoted)
	}
	voted := v.Events[0]
	if err := t.EventInsert(ctx, v.ApprovalID, voted.Type, voted.Actor, voted.Cause, voted.Detail); err != nil {
		return err
	}
	if err := t.DecisionInsert(ctx, v.ApprovalID, v.Vote); err != nil {
		return err
	}
	if err := t.ApprovalSetStatusIfPending(ctx, v.ApprovalID, v.Status, v.DecidedAt); err != nil {
		return err
	}
	for _, e := range v.Events[1:] {
		if err := t.EventInsert(ctx, v.ApprovalID, e.Type, e.Actor, e.Cause, e.Detail); err != nil {
			return err
		}
	}
	if v.Execution != nil {
		return t.ExecutionInsert(ctx, v.Execution)
	}
	return nil
}

// EventInsertMany appends the events one statement each: a statement costs no round trip.
func (t *ruleTx) EventInsertMany(ctx context.Context, events []approval.Event) error {
	return t.Tx.EventInsertEach(ctx, events)
}

// ExecutionUpdateIfAttemptMany writes the executions one guarded statement each.
func (t *ruleTx) ExecutionUpdateIfAttemptMany(ctx context.Context, recs []*approval.ExecutionRecord, attempts []int) error {
	return t.Tx.ExecutionUpdateIfAttemptEach(ctx, recs, attempts)
}

// ExecutionSetSendingIfAttemptMany marks the calls one guarded statement each.
func (t *ruleTx) ExecutionSetSendingIfAttemptMany(ctx context.Context, ids []string, attempts []int, leaseUntil time.Time) ([]string, error) {
	return t.Tx.ExecutionSetSendingIfAttemptEach(ctx, ids, attempts, leaseUntil)
}

// InboxMarkDoneMany marks the events one guarded statement each.
func (t *ruleTx) InboxMarkDoneMany(ctx context.Context, marks []approval.InboxMark) error {
	return t.Tx.InboxMarkDoneEach(ctx, marks)
}

// SigninAskCountsForUpdate needs no lock of its own: the transaction holds the write lock
// from its first statement, which orders every request.
func (t *ruleTx) SigninAskCountsForUpdate(ctx context.Context, p approval.SigninCountParams) (approval.SigninCounts, error) {
	return t.Tx.SigninAskCounts(ctx, p)
}

func (t *ruleTx) Notify(ctx context.Context, topic string) error {
	t.tx.topics.Add(topic)
	return nil
}

// ExecutionClaimDue needs no lock of its own: the write lock orders every claim.
func (t *ruleTx) ExecutionClaimDue(ctx context.Context, limit int, leaseUntil time.Time) ([]*approval.ExecutionClaim, error) {
	// A queued execution is due at next_attempt_at, a running one at its lease's end (a
	// running one without a lease waits for an asynchronous report and is never due). The two
	// kinds are found apart, each in the order of its index (executions_due, executions_lease),
	// and only the first limit of the two merged, the expired leases first: one query ordering
	// both by a common key is served by no index, and would read and sort the whole backlog
	// for every claim.
	rows, err := t.tx.QueryContext(ctx, `
		SELECT id, expired, recovered FROM (
			SELECT * FROM (
				SELECT id, 0 AS expired, 0 AS recovered, next_attempt_at AS due_at, created_at FROM executions
				WHERE status = 'queued' AND next_attempt_at <= ?1
				ORDER BY next_attempt_at, created_at, id LIMIT ?2)
			UNION ALL
			SELECT * FROM (
				SELECT id, 1, unsent_attempt <> attempts, lease_expires_at, created_at FROM executions
				WHERE status = 'running' AND lease_expires_at <= ?1
				ORDER BY lease_expires_at, created_at, id LIMIT ?2)
			ORDER BY expired DESC, due_at, created_at, id LIMIT ?2)`,
		micros(t.tx.now), limit)
	if err != nil {
		return nil, fail("find due executions", err)
	}
	var claims []*approval.ExecutionClaim
	for rows.Next() {
		var (
			id      string
			expired bool
			c       approval.ExecutionClaim
		)
		if err := rows.Scan(&id, &expired, &c.Recovered); err != nil {
			rows.Close()
			return nil, fail("find due executions", err)
		}
		c.Abandoned = expired && !c.Recovered
		c.Record = &approval.ExecutionRecord{ID: id}
		claims = append(claims, &c)
	}
	if err := rows.Close(); err != nil {
		return nil, fail("find due executions", err)
	}
	for _, c := range claims {
		rec, err := t.ExecutionGetForUpdate(ctx, c.Record.ID)
		if err == nil {
			err = t.claim(ctx, rec, leaseUntil)
		}
		if err != nil {
			return nil, fail("claim execution "+c.Record.ID, err)
		}
		c.Record, c.Attempt = rec, rec.Attempts
	}
	if len(claims) == 0 {
		return nil, nil
	}
	ids := make([]string, len(claims))
	for i, c := range claims {
		ids[i] = c.Record.ApprovalID
	}
	approvals, err := t.ApprovalGetByIDMany(ctx, ids)
	if err != nil {
		return nil, err
	}
	byID := make(map[string]*approval.Approval, len(approvals))
	for _, a := range approvals {
		byID[a.ID] = a
	}
	for _, c := range claims {
		if c.Approval = byID[c.Record.ApprovalID]; c.Approval == nil {
			return nil, approval.Errorf(approval.EINTERNAL, "execution %s has no approval %s", c.Record.ID, c.Record.ApprovalID)
		}
	}
	return claims, nil
}

// claim sets rec running for its next attempt, its call not started, leased until
// leaseUntil, and updates rec to match.
func (t *ruleTx) claim(ctx context.Context, rec *approval.ExecutionRecord, leaseUntil time.Time) error {
	rec.Status, rec.Attempts, rec.NextAttemptAt, rec.LeaseExpiresAt = approval.ExecutionRunning, rec.Attempts+1, nil, &leaseUntil
	rec.UpdatedAt = t.tx.now
	_, err := t.tx.ExecContext(ctx, `
		UPDATE executions
		SET status = 'running', attempts = ?1, unsent_attempt = ?1, lease_expires_at = ?2,
			next_attempt_at = NULL, updated_at = ?3
		WHERE id = ?4`,
		rec.Attempts, micros(leaseUntil), micros(t.tx.now), rec.ID)
	return err
}

// runner runs sqldb.Tx's statements on the write transaction, each at once.
type runner struct{ tx *tx }

func (r runner) Query(ctx context.Context, query string, args ...any) (sqldb.Rows, error) {
	return r.tx.query(ctx, query, args...)
}

func (r runner) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := r.tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (r runner) Write(ctx context.Context, op, query string, args ...any) error {
	_, err := r.tx.ExecContext(ctx, query, args...)
	return err
}

// WriteOne fails a guarded write that did not change its one row: the caller checked the
// guard under the write lock, so that is a broken invariant.
func (r runner) WriteOne(ctx context.Context, op, query string, args ...any) error {
	n, err := r.Exec(ctx, query, args...)
	if err == nil && n != 1 {
		err = fmt.Errorf("%d rows changed under the write lock, want 1", n)
	}
	return err
}

// Lock skips the statement: the transaction holds the write lock from its first statement.
func (r runner) Lock(ctx context.Context, op, query string, args ...any) error { return nil }
