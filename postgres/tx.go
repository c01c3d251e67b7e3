package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/sqldb"
)

var _ approval.Tx = (*ruleTx)(nil)

// Begin opens the transaction the Service composes a rule in, read committed, on a pooled
// connection, at the instant read once it is held. It costs no round trip of its own: BEGIN
// travels with the first read, and a pending approval.TokenCheck in ctx is queued first, so
// that it rides with them and a token no longer good aborts the transaction inside the
// database (docs/architecture.md, "The pipelining transaction"); so is each check of the
// votes sharing the transaction (approval.PendingTokenChecks).
func (s *Store) Begin(ctx context.Context) (approval.Tx, error) {
	conn, now, err := s.acquire(ctx, s.pool)
	if err != nil {
		return nil, err
	}
	t := &ruleTx{conn: conn, log: s.logger}
	t.Tx = sqldb.Tx{Run: t, Dialect: dialect, At: now, Translate: translate}
	for _, c := range approval.PendingTokenChecks(ctx) {
		t.queue = append(t.queue, queued{op: "check token", sql: tokenGuardSQL,
			args: sqldb.TokenCheckArgs(dialect, c), check: c})
	}
	return t, nil
}

// tokenGuardSQL is a pending approval.TokenCheck as a guard: it divides by zero, aborting the
// transaction inside the database, when the token is no longer good.
var tokenGuardSQL = `SELECT 1 / (` + sqldb.TokenCheckSQL(dialect, 1) + `)`

// isDivisionByZero reports whether err is a guard's 1/count(*) that found no row.
func isDivisionByZero(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "22012"
}

// ruleTx is approval.Tx on one pooled connection. Reads go out at once, preceded by BEGIN
// and the queued writes in the same batch (pipelined, one round trip); writes and locks wait
// in queue. The statements both dialects share are sqldb.Tx's, which runs them on ruleTx
// itself (its sqldb.Runner); its At is the transaction's clock (Now).
type ruleTx struct {
	sqldb.Tx
	conn  *pgxpool.Conn
	begun bool
	done  bool
	queue []queued
	// signals are the topics Notify was asked for, sent after COMMIT (signalSQL).
	signals sqldb.Topics
	log     func() *slog.Logger
}

// queued is a write waiting for the next batch.
type queued struct {
	op   string
	sql  string
	args []any
	// check, when set, is the token check this statement guards (see Begin).
	check *approval.TokenCheck
	// votes, when set, are the votes this statement writes, its SQL and arguments made when
	// it is sent (see DecisionInsertIfPending).
	votes *voteWrites
}

// statement returns q's SQL and arguments.
func (q queued) statement() (string, []any) {
	if q.votes != nil {
		return q.votes.statement()
	}
	return q.sql, q.args
}

// enqueue adds a write or a lock to the next batch.
func (t *ruleTx) enqueue(op, sql string, args ...any) {
	t.queue = append(t.queue, queued{op: op, sql: sql, args: args})
}

// Write queues a write whose answer the caller does not need (sqldb.Runner).
func (t *ruleTx) Write(ctx context.Context, op, sql string, args ...any) error {
	t.enqueue(op, sql, args...)
	return nil
}

// WriteOne queues a guarded write that divides by zero, aborting the transaction inside the
// database, when it changes no row: 1 divided by the count of the rows it changed.
func (t *ruleTx) WriteOne(ctx context.Context, op, sql string, args ...any) error {
	return t.Write(ctx, op, `WITH changed AS (`+sql+` RETURNING 1) SELECT 1 / count(*) FROM changed`, args...)
}

// Lock queues a statement that takes locks ahead of the next read (sqldb.Runner).
func (t *ruleTx) Lock(ctx context.Context, op, sql string, args ...any) error {
	return t.Write(ctx, op, sql, args...)
}

// send sends BEGIN (the first time), the queued writes and then the statement sql, if any,
// as one batch, and returns the results positioned at sql's. The caller closes them.
func (t *ruleTx) send(ctx context.Context, sql string, args []any, after ...queued) (pgx.BatchResults, error) {
	if t.done {
		return nil, errors.New("postgres: statement after the transaction ended")
	}
	b := &pgx.Batch{}
	if !t.begun {
		b.Queue("BEGIN ISOLATION LEVEL READ COMMITTED")
	}
	for _, q := range t.queue {
		qsql, qargs := q.statement()
		b.Queue(qsql, qargs...)
	}
	if sql != "" {
		b.Queue(sql, args...)
	}
	for _, q := range after {
		qsql, qargs := q.statement()
		b.Queue(qsql, qargs...)
	}
	br := t.conn.SendBatch(ctx, b)
	if !t.begun {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return nil, translate("begin transaction", err)
		}
		t.begun = true
	}
	queue := t.queue
	t.queue = nil
	for _, q := range queue {
		if _, err := br.Exec(); err != nil {
			br.Close()
			if q.check != nil && isDivisionByZero(err) {
				return nil, q.check.Refuse()
			}
			return nil, translate(q.op, err)
		}
		if q.check != nil {
			q.check.Pass()
		}
	}
	return br, nil
}

// Query runs one statement, after BEGIN and the queued writes, in one round trip.
func (t *ruleTx) Query(ctx context.Context, sql string, args ...any) (sqldb.Rows, error) {
	br, err := t.send(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

// Exec runs one statement now, after BEGIN and the queued writes, in one round trip, and
// returns how many rows it changed.
func (t *ruleTx) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	br, err := t.send(ctx, sql, args)
	if err != nil {
		return 0, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag.RowsAffected(), err
}

// Commit sends the queued writes, COMMIT and the signals Notify asked for (in a transaction
// of their own, see signalSQL) in one round trip.
func (t *ruleTx) Commit(ctx context.Context) error {
	if t.done {
		return errors.New("postgres: commit of a transaction that has ended")
	}
	if !t.begun && len(t.queue) == 0 && len(t.signals) == 0 {
		t.end()
		return nil
	}
	var signal []queued
	if len(t.signals) > 0 {
		signal = append(signal, queued{op: "signal", sql: signalSQL, args: []any{[]string(t.signals)}})
	}
	br, err := t.send(ctx, "COMMIT", nil, signal...)
	if err != nil {
		t.Rollback(ctx)
		return err
	}
	tag, err := br.Exec()
	if err == nil && len(t.signals) > 0 {
		if _, serr := br.Exec(); serr != nil {
			// Committed: the signal is only a hint, and every waiter also polls.
			t.log().Warn("postgres: signal after commit failed", "topics", t.signals, "err", serr)
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = committed(tag)
	}
	if err != nil {
		t.Rollback(ctx)
		return translate("commit", err)
	}
	t.end()
	return nil
}

// Rollback ends a transaction that did not commit; after Commit it does nothing.
func (t *ruleTx) Rollback(ctx context.Context) error {
	if t.done {
		return nil
	}
	var err error
	if t.begun {
		err = rollback(ctx, t.conn)
	}
	t.end()
	return translate("rollback", err)
}

// rollback ends conn's transaction, which may be aborted already (ROLLBACK ends it either
// way), even when ctx has ended, within rollbackTimeout: a connection that cannot take it in
// time is closed by the pool on release rather than reused.
func rollback(ctx context.Context, conn *pgxpool.Conn) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	_, err := conn.Exec(ctx, "ROLLBACK")
	return err
}

// rollbackTimeout bounds a ROLLBACK, which runs even when the caller's context has ended.
const rollbackTimeout = 5 * time.Second

// committed is the error of a COMMIT that answered tag: PostgreSQL answers COMMIT in an
// aborted transaction with ROLLBACK, not with an error.
func committed(tag pgconn.CommandTag) error {
	if tag.String() != "COMMIT" {
		return fmt.Errorf("the transaction was rolled back (%s)", tag)
	}
	return nil
}

func (t *ruleTx) end() {
	t.done = true
	t.queue = nil
	t.conn.Release()
}

// DecisionInsert orders the decision by the approval.voted event just appended.
func (t *ruleTx) DecisionInsert(ctx context.Context, approvalID string, d approval.Decision) error {
	return t.Write(ctx, "insert decision", `
		INSERT INTO decisions (approval_id, approver, verdict, comment, decided_at, event_seq)
		SELECT $1, $2, $3, $4, $5, max(seq) FROM events WHERE approval_id = $1`,
		approvalID, d.Approver, string(d.Verdict), d.Comment, d.At)
}

// DecisionInsertIfPending is one statement: the events, the decision (ordered by the first
// event's seq), the guarded status change, the execution and, when the approval leaves
// pending, the deletion of whom it asks, each a part of one WITH. One statement instead of
// six is what a vote writes on PostgreSQL; a failed guard divides by zero, as in WriteOne.
// The votes on distinct approvals that a transaction writes one after the other (the
// Service's votes in a batch, docs/architecture.md, "Votes in batches") are one statement
// too, over arrays (decisionInsertIfPendingManySQL): the write joins the one queued just
// before it when that is a vote's on another approval.
func (t *ruleTx) DecisionInsertIfPending(ctx context.Context, v approval.VoteWrite) error {
	if len(v.Events) == 0 {
		return fmt.Errorf("insert decision: a vote without its %s event", approval.EventVoted)
	}
	causes, details := make([]string, len(v.Events)), make([]*string, len(v.Events))
	for i, e := range v.Events {
		causeJSON, detailJSON, err := sqldb.EventJSON(e.Cause, e.Detail)
		if err != nil {
			return err
		}
		causes[i] = string(causeJSON)
		if detailJSON != nil {
			d := string(detailJSON)
			details[i] = &d
		}
	}
	if n := len(t.queue); n > 0 && t.queue[n-1].votes != nil && t.queue[n-1].votes.add(v, causes, details) {
		return nil
	}
	w := &voteWrites{at: t.At}
	w.add(v, causes, details)
	t.queue = append(t.queue, queued{op: "record vote", votes: w})
	return nil
}

// voteWrites are the votes on distinct approvals that one statement writes, at the instant
// at: the columns of decisionInsertIfPendingManySQL, one element per vote (per event for the
// events), ids the approvals.
type voteWrites struct {
	at  time.Time
	ids map[string]bool

	approvals, statuses, approvers, verdicts, comments []string
	decidedAt                                          []*time.Time
	xIDs, xKeys, xActions, xStatuses, xErrors, xDown   []string
	xTargeted                                          []bool
	xNext                                              []*time.Time
	eApprovals, eTypes, eActors, eCauses               []string
	eDetails                                           []*string
	ended                                              []string // the approvals leaving pending
}

// add adds v, its events' causes and details as JSON, to the statement unless it writes a
// vote on v's approval already (the events' seq would be counted from the same snapshot),
// and reports whether it did.
func (w *voteWrites) add(v approval.VoteWrite, causes []string, details []*string) bool {
	if w.ids[v.ApprovalID] {
		return false
	}
	if w.ids == nil {
		w.ids = make(map[string]bool)
	}
	w.ids[v.ApprovalID] = true
	x := v.Execution
	if x == nil {
		x = &approval.ExecutionRecord{}
	}
	for _, e := range v.Events {
		w.eApprovals, w.eTypes, w.eActors = append(w.eApprovals, v.ApprovalID), append(w.eTypes, e.Type), append(w.eActors, e.Actor)
	}
	w.eCauses, w.eDetails = append(w.eCauses, causes...), append(w.eDetails, details...)
	w.approvals, w.statuses, w.decidedAt = append(w.approvals, v.ApprovalID), append(w.statuses, string(v.Status)), append(w.decidedAt, v.DecidedAt)
	w.approvers, w.verdicts, w.comments = append(w.approvers, v.Vote.Approver), append(w.verdicts, string(v.Vote.Verdict)), append(w.comments, v.Vote.Comment)
	w.xIDs, w.xKeys, w.xActions, w.xTargeted = append(w.xIDs, x.ID), append(w.xKeys, x.OperationKey), append(w.xActions, x.Action), append(w.xTargeted, x.Targeted)
	w.xStatuses, w.xErrors, w.xNext, w.xDown = append(w.xStatuses, string(x.Status)), append(w.xErrors, x.LastError), append(w.xNext, x.NextAttemptAt), append(w.xDown, x.DownstreamKey)
	if v.Status != approval.StatusPending {
		w.ended = append(w.ended, v.ApprovalID)
	}
	return true
}

// statement returns the SQL and the arguments that write the votes: the statement of one
// vote for one, the statement over arrays for several.
func (w *voteWrites) statement() (string, []any) {
	if len(w.approvals) == 1 {
		n := len(w.eTypes)
		types, actors, causes, details := w.eTypes[:n:n], w.eActors[:n:n], w.eCauses[:n:n], w.eDetails[:n:n]
		return decisionInsertIfPendingSQL, []any{w.approvals[0], w.statuses[0], w.decidedAt[0], w.at,
			types, actors, causes, details, w.approvers[0], w.verdicts[0], w.comments[0],
			w.xIDs[0], w.xKeys[0], w.xActions[0], w.xTargeted[0], w.xStatuses[0], w.xErrors[0], w.xNext[0], w.xDown[0]}
	}
	return decisionInsertIfPendingManySQL, []any{w.approvals, w.statuses, w.decidedAt, w.approvers, w.verdicts, w.comments,
		w.xIDs, w.xKeys, w.xActions, w.xTargeted, w.xStatuses, w.xErrors, w.xNext, w.xDown, w.at,
		w.eApprovals, w.eTypes, w.eActors, w.eCauses, w.eDetails, len(w.approvals), w.ended}
}

// decisionInsertIfPendingSQL is DecisionInsertIfPending's statement: $1 the approval, $2 and
// $3 its status and decided_at, $4 now, $5 to $8 the events' types, actors, causes and
// details, $9 to $11 the vote, $12 to $19 the execution ($12 empty: none); a $2 other than
// pending deletes the approval's asks. Every part runs on the snapshot of the statement's
// start, under the approval's lock: the events' seq (max+1 onwards) and the decision's
// event_seq (the first event's) are exact.
const decisionInsertIfPendingSQL = `
		WITH changed AS (
			UPDATE approvals SET status = $2, decided_at = $3, version = version + 1
			WHERE id = $1 AND status = 'pending' AND expires_at > $4
			RETURNING 1
		), appended AS (
			INSERT INTO events (approval_id, seq, type, at, actor, cause, detail)
			SELECT $1, COALESCE((SELECT max(seq) FROM events WHERE approval_id = $1), 0) + v.ord,
				v.type, $4, v.actor, v.cause::jsonb, v.detail::jsonb
			FROM unnest($5::text[], $6::text[], $7::text[], $8::text[])
				WITH ORDINALITY AS v(type, actor, cause, detail, ord)
			RETURNING seq
		), voted AS (
			INSERT INTO decisions (approval_id, approver, verdict, comment, decided_at, event_seq)
			SELECT $1, $9, $10, $11, $4, min(seq) FROM appended
		), queued AS (
			INSERT INTO executions (id, approval_id, operation_key, action, targeted, status,
				last_error, next_attempt_at, created_at, updated_at, downstream_key)
			SELECT $12, $1, $13, $14, $15, $16, $17, $18, $4, $4, $19
			WHERE $12 <> ''
		), dropped AS (
			DELETE FROM approval_asks WHERE approval_id = $1 AND $2 <> 'pending'
		)
		SELECT 1 / count(*) FROM changed`

// decisionInsertIfPendingManySQL is decisionInsertIfPendingSQL for the votes of one
// transaction on distinct approvals, each approval locked by it: $1 to $14 one element per
// vote (the approval, its status and decided_at, the vote, the execution, its id empty for
// none), $15 now, $16 to $20 one element per event (its approval, type, actor, cause,
// detail, each approval's in order), $21 the number of votes. Each approval's events are
// numbered from its max(seq)+1 in their order; the approvals of $22, those the votes end,
// lose their asks (by = ANY, which reads the primary key: joined to the votes, the planner,
// whose statistics the table's growth outruns, read approval_asks whole); a guard that fails
// for any vote divides by zero, failing them all.
const decisionInsertIfPendingManySQL = `
		WITH v AS (
			SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::text[], $5::text[],
				$6::text[], $7::text[], $8::text[], $9::text[], $10::bool[], $11::text[], $12::text[],
				$13::timestamptz[], $14::text[])
				AS v(approval_id, status, decided_at, approver, verdict, comment, x_id,
					x_operation_key, x_action, x_targeted, x_status, x_last_error, x_next_attempt_at,
					x_downstream_key)
		), changed AS (
			UPDATE approvals a SET status = v.status, decided_at = v.decided_at, version = a.version + 1
			FROM v
			WHERE a.id = v.approval_id AND a.status = 'pending' AND a.expires_at > $15
			RETURNING 1
		), appended AS (
			INSERT INTO events (approval_id, seq, type, at, actor, cause, detail)
			SELECT e.approval_id,
				COALESCE((SELECT max(seq) FROM events x WHERE x.approval_id = e.approval_id), 0)
					+ row_number() OVER (PARTITION BY e.approval_id ORDER BY e.ord),
				e.type, $15::timestamptz, e.actor, e.cause::jsonb, e.detail::jsonb
			FROM unnest($16::text[], $17::text[], $18::text[], $19::text[], $20::text[])
				WITH ORDINALITY AS e(approval_id, type, actor, cause, detail, ord)
			RETURNING approval_id, seq
		), voted AS (
			INSERT INTO decisions (approval_id, approver, verdict, comment, decided_at, event_seq)
			SELECT v.approval_id, v.approver, v.verdict, v.comment, $15,
				(SELECT min(p.seq) FROM appended p WHERE p.approval_id = v.approval_id)
			FROM v
		), queued AS (
			INSERT INTO executions (id, approval_id, operation_key, action, targeted, status,
				last_error, next_attempt_at, created_at, updated_at, downstream_key)
			SELECT v.x_id, v.approval_id, v.x_operation_key, v.x_action, v.x_targeted, v.x_status,
				v.x_last_error, v.x_next_attempt_at, $15, $15, v.x_downstream_key
			FROM v WHERE v.x_id <> ''
		), dropped AS (
			DELETE FROM approval_asks WHERE approval_id = ANY($22::text[])
		)
		SELECT 1 / (count(*) = $21)::int FROM changed`

// EventInsertMany appends every event in one statement: each approval's next seq is its
// max+1, plus the event's place among that approval's events in the batch.
func (t *ruleTx) EventInsertMany(ctx context.Context, events []approval.Event) error {
	if len(events) == 0 {
		return nil
	}
	ids, types, actors := make([]string, len(events)), make([]string, len(events)), make([]string, len(events))
	causes, details := make([]string, len(events)), make([]*string, len(events))
	for i, e := range events {
		causeJSON, detailJSON, err := sqldb.EventJSON(e.Cause, e.Detail)
		if err != nil {
			return err
		}
		ids[i], types[i], actors[i], causes[i] = e.ApprovalID, e.Type, e.Actor, string(causeJSON)
		if detailJSON != nil {
			d := string(detailJSON)
			details[i] = &d
		}
	}
	return t.Write(ctx, "append events", `
		INSERT INTO events (approval_id, seq, type, at, actor, cause, detail)
		SELECT v.approval_id,
			COALESCE((SELECT max(seq) FROM events e WHERE e.approval_id = v.approval_id), 0)
				+ row_number() OVER (PARTITION BY v.approval_id ORDER BY v.ord),
			v.type, $6::timestamptz, v.actor, v.cause::jsonb, v.detail::jsonb
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[])
			WITH ORDINALITY AS v(approval_id, type, actor, cause, detail, ord)`,
		ids, types, actors, causes, details, t.At)
}

func (t *ruleTx) Notify(ctx context.Context, topic string) error {
	t.signals.Add(topic)
	return nil
}

// executionClaimSQL claims up to $2 executions due at $1, leased until $3 (ExecutionClaimDue).
// Each branch orders by its index alone (executions_due_idx on (status, next_attempt_at),
// executions_lease_idx on (lease_expires_at) of the running), so that it reads its first rows
// as the index gives them and stops after $2, however long the backlog; which of several
// executions due at the same instant a branch takes is arbitrary. Only the merge of the two
// branches, at most 2*$2 rows, is sorted, by due time and id (docs/query-plans.md, "The
// execution claim").
const executionClaimSQL = `
		WITH queued AS (
			SELECT x.id, false AS expired, false AS recovered, x.next_attempt_at AS due_at
			FROM executions x JOIN approvals a ON a.id = x.approval_id
			WHERE x.status = 'queued' AND x.next_attempt_at <= $1
			ORDER BY x.next_attempt_at
			LIMIT $2
			FOR UPDATE OF x, a SKIP LOCKED
		), expired AS (
			SELECT x.id, true AS expired, x.unsent_attempt <> x.attempts AS recovered,
				x.lease_expires_at AS due_at
			FROM executions x JOIN approvals a ON a.id = x.approval_id
			WHERE x.status = 'running' AND x.lease_expires_at <= $1
			ORDER BY x.lease_expires_at
			LIMIT $2
			FOR UPDATE OF x, a SKIP LOCKED
		), due AS (
			SELECT * FROM queued UNION ALL SELECT * FROM expired
			ORDER BY expired DESC, due_at, id
			LIMIT $2
		), claimed AS (
			UPDATE executions x
			SET status = 'running', attempts = x.attempts + 1, unsent_attempt = x.attempts + 1,
				next_attempt_at = NULL, lease_expires_at = $3, updated_at = $1
			FROM due
			WHERE x.id = due.id
			RETURNING x.*, due.expired, due.recovered, due.due_at
		)
		SELECT ` + sqldb.ExecutionColumns + `, x.expired, x.recovered, x.due_at, ` + approvalDetailColumns + `
		FROM claimed x JOIN approvals a ON a.id = x.approval_id
		ORDER BY x.expired DESC, x.due_at, x.id`

// ExecutionClaimDue is one statement: it claims the due executions, with SKIP LOCKED on each
// and on its approval, and reads what their calls need, each claimed execution's approval
// with its approvers and decisions (docs/architecture.md, "The execution claim"). A running
// execution without a lease is an accepted async call: lease_expires_at <= $1 is never true
// for it.
func (t *ruleTx) ExecutionClaimDue(ctx context.Context, limit int, leaseUntil time.Time) ([]*approval.ExecutionClaim, error) {
	rows, err := t.Query(ctx, executionClaimSQL, t.At, limit, leaseUntil)
	claims, err := sqldb.Collect(rows, err, func(row sqldb.Row) (*approval.ExecutionClaim, error) {
		var c approval.ExecutionClaim
		var expired bool
		var dueAt time.Time
		var detail sqldb.ApprovalDetail
		rec, err := sqldb.ScanExecution(row, append([]any{&expired, &c.Recovered, &dueAt}, detail.Dest()...)...)
		c.Abandoned = expired && !c.Recovered
		if err == nil {
			c.Approval, err = detail.Approval()
		}
		if err != nil {
			return nil, err
		}
		c.Record, c.Attempt = rec, rec.Attempts
		return &c, nil
	})
	if err != nil {
		return nil, translate("claim executions", err)
	}
	return claims, nil
}

// ExecutionSetSendingIfAttemptMany marks every call in one statement over arrays, at once:
// the Service needs to know which it marked.
func (t *ruleTx) ExecutionSetSendingIfAttemptMany(ctx context.Context, ids []string, attempts []int, leaseUntil time.Time) ([]string, error) {
	if len(ids) != len(attempts) {
		return nil, fmt.Errorf("mark execution calls: %d executions for %d attempts", len(ids), len(attempts))
	}
	fences := make([]int32, len(attempts))
	for i, a := range attempts {
		fences[i] = int32(a)
	}
	rows, err := t.Query(ctx, `
		UPDATE executions x SET unsent_attempt = 0, lease_expires_at = $3
		FROM unnest($1::text[], $2::int[]) AS v(id, fence)
		WHERE x.id = v.id AND x.attempts = v.fence AND x.status = 'running' AND x.lease_expires_at IS NOT NULL
		RETURNING x.id`, ids, fences, leaseUntil)
	marked, err := sqldb.Collect(rows, err, func(row sqldb.Row) (string, error) {
		var id string
		return id, row.Scan(&id)
	})
	if err != nil {
		return nil, translate("mark execution calls", err)
	}
	return marked, nil
}

// ExecutionUpdateIfAttemptMany writes every execution in one statement over arrays; a failed
// guard (fewer rows changed than given) divides by zero, as in ApprovalSetStatusIfPending.
func (t *ruleTx) ExecutionUpdateIfAttemptMany(ctx context.Context, recs []*approval.ExecutionRecord, attempts []int) error {
	if len(recs) != len(attempts) {
		return fmt.Errorf("update executions: %d records for %d attempts", len(recs), len(attempts))
	}
	if len(recs) == 0 {
		return nil
	}
	n := len(recs)
	ids, statuses, lastErrors := make([]string, n), make([]string, n), make([]string, n)
	counts, bases, fences := make([]int32, n), make([]int32, n), make([]int32, n)
	results := make([][]byte, n)
	nexts, leases := make([]*time.Time, n), make([]*time.Time, n)
	versions := make([]int64, n)
	uncertain := make([]bool, n)
	for i, rec := range recs {
		ids[i], statuses[i], lastErrors[i] = rec.ID, string(rec.Status), rec.LastError
		counts[i], bases[i], fences[i] = int32(rec.Attempts), int32(rec.AttemptBase), int32(attempts[i])
		results[i], nexts[i], leases[i] = rec.Result, rec.NextAttemptAt, rec.LeaseExpiresAt
		versions[i], uncertain[i] = rec.AppliedVersion, rec.Uncertain
	}
	return t.Write(ctx, "record execution attempts", `
		WITH changed AS (
			UPDATE executions x
			SET status = v.status, attempts = v.attempts, last_error = v.last_error,
				result = v.result, next_attempt_at = v.next_attempt_at,
				lease_expires_at = v.lease_expires_at, applied_version = v.applied_version,
				uncertain = v.uncertain, attempt_base = v.attempt_base, updated_at = $12
			FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::bytea[],
				$6::timestamptz[], $7::timestamptz[], $8::bigint[], $9::bool[], $10::int[], $11::int[])
				AS v(id, status, attempts, last_error, result, next_attempt_at, lease_expires_at,
					applied_version, uncertain, attempt_base, fence)
			WHERE x.id = v.id AND x.attempts = v.fence AND x.status = 'running'
			RETURNING 1
		)
		SELECT 1 / (count(*) = $13)::int FROM changed`,
		ids, statuses, counts, lastErrors, results, nexts, leases, versions, uncertain, bases, fences, t.At, n)
}

// InboxMarkDoneMany marks every event in one statement over arrays; an event no longer
// pending (fewer rows changed than given) divides by zero, as in ExecutionUpdateIfAttemptMany.
// One statement instead of one per event took the inbox worker's marks from 93 to 29 µs of
// PostgreSQL's time per event at 32 clients (docs/operations.md, "The inbox under load").
func (t *ruleTx) InboxMarkDoneMany(ctx context.Context, marks []approval.InboxMark) error {
	if len(marks) == 0 {
		return nil
	}
	n := len(marks)
	ids, statuses, outcomes, refs := make([]string, n), make([]string, n), make([]string, n), make([]*string, n)
	attempted := make([]int32, n)
	for i, m := range marks {
		ids[i], statuses[i], outcomes[i] = m.ID, string(m.Status), m.Outcome
		if m.ApprovalID != "" {
			refs[i] = &marks[i].ApprovalID
		}
		if m.Attempted {
			attempted[i] = 1
		}
	}
	return t.Write(ctx, "mark inbox events done", `
		WITH changed AS (
			UPDATE inbox_events i
			SET status = v.status, outcome = v.outcome, approval_id = v.approval_id, processed_at = $5,
				next_attempt_at = NULL, lease_token = '', lease_expires_at = NULL, attempts = i.attempts + v.attempted
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $7::int[]) AS v(id, status, outcome, approval_id, attempted)
			WHERE i.id = v.id AND i.status = 'pending'
			RETURNING 1
		)
		SELECT 1 / (count(*) = $6)::int FROM changed`,
		ids, statuses, outcomes, refs, t.At, n, attempted)
}

// batchRows are a batch's last rows: closing them closes the batch.
type batchRows struct {
	pgx.Rows
	br       pgx.BatchResults
	closeErr error
}

func (r *batchRows) Close() {
	r.Rows.Close()
	if err := r.br.Close(); err != nil && r.closeErr == nil {
		r.closeErr = err
	}
}

// Err is the rows' error, or else the batch's.
func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.closeErr
}
