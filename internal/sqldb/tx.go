package sqldb

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/approvald/approval"
)

// Runner is a driver's transaction as the shared statements of Tx run on it. Statements are
// written with PostgreSQL's $n placeholders; Tx rewrites them for the dialect (Dialect.SQL).
type Runner interface {
	// Query runs a statement now and returns its rows.
	Query(ctx context.Context, sql string, args ...any) (Rows, error)
	// Exec runs a statement now and returns how many rows it changed.
	Exec(ctx context.Context, sql string, args ...any) (int64, error)
	// Write runs a statement whose answer the caller does not need. PostgreSQL queues it for
	// the next round trip, so its failure may surface from a later statement or the commit.
	Write(ctx context.Context, op, sql string, args ...any) error
	// WriteOne is Write of an UPDATE whose guard the caller has checked under a lock: it must
	// change exactly one row, and anything else fails the transaction (PostgreSQL wraps it
	// so that the database aborts the transaction; SQLite counts the rows).
	WriteOne(ctx context.Context, op, sql string, args ...any) error
	// Lock runs a statement that only takes row locks, ahead of the statement that reads what
	// they guard. It is a statement of its own because a statement that waited for a row
	// lock sees the locked rows as they are now, but reads anything else (a subquery, another
	// table) as of its start, and would miss what the holder of the lock wrote. PostgreSQL
	// queues it for the next round trip; SQLite skips it, its transaction holding the
	// database's write lock from its first statement.
	Lock(ctx context.Context, op, sql string, args ...any) error
}

// Tx is the part of approval.Tx that both dialects run alike: one statement per method, the
// same SQL but for the placeholders, the stored form of a time and the lock clauses the
// Dialect gives. A driver's transaction embeds it and adds, or replaces, the methods whose
// SQL is its own (the claims, PostgreSQL's advisory locks, RETURNING where SQLite has no
// equivalent, statements over arrays). It decides nothing.
type Tx struct {
	// Run runs the statements: the driver's transaction, adapted.
	Run Runner
	// Dialect is the driver's SQL dialect.
	Dialect Dialect
	// At is the transaction's clock (approval.Tx's Now).
	At time.Time
	// Translate turns a driver error into the application's, naming op.
	Translate func(op string, err error) error
}

// Now is approval.Tx's: the transaction's clock, At.
func (t Tx) Now() time.Time { return t.At }

// query runs a statement now, in the dialect, and collects its rows with scan.
func query[T any](ctx context.Context, t Tx, sql string, scan func(Row) (T, error), args ...any) ([]T, error) {
	rows, err := t.Run.Query(ctx, t.Dialect.SQL(sql), args...)
	return Collect(rows, err, scan)
}

// ids runs a query of one text column and collects it.
func (t Tx) ids(ctx context.Context, op, sql string, args ...any) ([]string, error) {
	ids, err := query(ctx, t, sql, func(row Row) (id string, err error) { return id, row.Scan(&id) }, args...)
	return ids, t.Translate(op, err)
}

func (t Tx) write(ctx context.Context, op, sql string, args ...any) error {
	return t.Translate(op, t.Run.Write(ctx, op, t.Dialect.SQL(sql), args...))
}

func (t Tx) writeOne(ctx context.Context, op, sql string, args ...any) error {
	return t.Translate(op, t.Run.WriteOne(ctx, op, t.Dialect.SQL(sql), args...))
}

func (t Tx) lock(ctx context.Context, op, sql string, args ...any) error {
	return t.Translate(op, t.Run.Lock(ctx, op, t.Dialect.SQL(sql), args...))
}

// lockApproval locks one approval's row (see Runner.Lock), the first lock in the order every
// transaction takes them in: an approval, then its execution.
func (t Tx) lockApproval(ctx context.Context, id string) error {
	return t.lock(ctx, "lock approval", `SELECT 1 FROM approvals WHERE id = $1`+t.Dialect.ForUpdate, id)
}

func (t Tx) exec(ctx context.Context, op, sql string, args ...any) (int64, error) {
	n, err := t.Run.Exec(ctx, t.Dialect.SQL(sql), args...)
	return n, t.Translate(op, err)
}

// TokenGetForUpdate reads and locks one token, or ENOTFOUND.
func (t Tx) TokenGetForUpdate(ctx context.Context, id string) (*approval.Token, error) {
	list, err := query(ctx, t, `SELECT `+TokenColumns+` FROM tokens t WHERE t.id = $1`+t.Dialect.ForUpdate, ScanToken, id)
	tok, err := first(list, err)("token %s not found", id)
	return tok, t.Translate("read token", err)
}

// TokenSetRevokedIfActive revokes a token the caller holds unrevoked.
func (t Tx) TokenSetRevokedIfActive(ctx context.Context, id string) error {
	return t.writeOne(ctx, "revoke token", `UPDATE tokens SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL`,
		id, t.Dialect.Time(t.At))
}

// TokenInsert inserts a token; a duplicate id or hash is ECONFLICT (on PostgreSQL, from the
// next statement or the commit).
func (t Tx) TokenInsert(ctx context.Context, tok approval.Token) error {
	sql, args := TokenInsert(t.Dialect, tok)
	return t.Translate("insert token", t.Run.Write(ctx, "insert token", sql, args...))
}

// ApprovalGetForUpdate locks one approval's row, then reads it with its approvers, decisions
// and execution: two statements (one round trip on PostgreSQL). Not one: the read's subquery
// of the decisions would miss the vote that held the lock (see Runner.Lock).
func (t Tx) ApprovalGetForUpdate(ctx context.Context, id string) (*approval.Approval, error) {
	if err := t.lockApproval(ctx, id); err != nil {
		return nil, err
	}
	a, err := ApprovalByID(ctx, t.Run, t.Dialect, id)
	return a, t.Translate("read approval", err)
}

// ApprovalGetForUpdateMany locks the approvals' rows in the order of their ids, then reads
// them: two statements (one round trip on PostgreSQL), as ApprovalGetForUpdate.
func (t Tx) ApprovalGetForUpdateMany(ctx context.Context, ids []string) ([]*approval.Approval, error) {
	d, list := t.Dialect, t.Dialect.List(ids)
	if err := t.lock(ctx, "lock approvals", `SELECT 1 FROM approvals WHERE `+d.AnyOf("id", "$1")+`
		ORDER BY id`+d.ForUpdate, list); err != nil {
		return nil, err
	}
	return t.ApprovalGetByIDMany(ctx, ids)
}

// ApprovalGetByIDMany reads the approvals and their details in one statement.
func (t Tx) ApprovalGetByIDMany(ctx context.Context, ids []string) ([]*approval.Approval, error) {
	list, err := query(ctx, t, t.Dialect.ApprovalDetail+` WHERE `+t.Dialect.AnyOf("a.id", "$1"), ScanApprovalDetail, t.Dialect.List(ids))
	return list, t.Translate("read approvals", err)
}

func (t Tx) ApprovalIDsByOperationKey(ctx context.Context, key string, limit int) ([]string, error) {
	return t.ids(ctx, "find approvals by operation key",
		`SELECT id FROM approvals WHERE operation_key = $1 ORDER BY created_at, id LIMIT $2`, key, limit)
}

// ApprovalSetStatusIfPending is guarded by the status and, by the status set, the expiry.
func (t Tx) ApprovalSetStatusIfPending(ctx context.Context, id string, status approval.Status, decidedAt *time.Time) error {
	guard := `expires_at > $4`
	if status == approval.StatusExpired {
		guard = `expires_at <= $4`
	}
	if err := t.writeOne(ctx, "set approval status", `
		UPDATE approvals SET status = $2, decided_at = $3, version = version + 1
		WHERE id = $1 AND status = 'pending' AND `+guard,
		id, string(status), t.Dialect.NullTime(decidedAt), t.Dialect.Time(t.At)); err != nil {
		return err
	}
	if status == approval.StatusPending {
		return nil
	}
	return t.dropAsks(ctx, id)
}

// ApprovalIDsDueForUpdate returns up to limit pending approvals that are due to expire,
// locked, the earliest first. SKIP LOCKED lets several PostgreSQL replicas sweep at once without
// waiting on each other or on a vote in progress (which expires the approval itself if it is
// due). Under read committed a row that a vote changed and committed since the statement
// began is read again once locked, and left out if no longer pending.
func (t Tx) ApprovalIDsDueForUpdate(ctx context.Context, limit int) ([]string, error) {
	return t.ids(ctx, "find due approvals", `
		SELECT id FROM approvals WHERE status = 'pending' AND expires_at <= $1
		ORDER BY expires_at, id LIMIT $2`+t.Dialect.SkipLocked, t.Dialect.Time(t.At), limit)
}

// EventInsert appends the event under the approval's lock, which makes max(seq)+1 safe.
func (t Tx) EventInsert(ctx context.Context, approvalID, typ, actor string, cause approval.Cause, detail map[string]any) error {
	causeJSON, detailJSON, err := EventJSON(cause, detail)
	if err != nil {
		return err
	}
	var detailText any
	if detailJSON != nil {
		detailText = string(detailJSON)
	}
	return t.write(ctx, "append event", `
		INSERT INTO events (approval_id, seq, type, at, actor, cause, detail)
		VALUES ($1, (SELECT COALESCE(max(seq), 0) + 1 FROM events WHERE approval_id = $1), $2, $3, $4, $5, $6)`,
		approvalID, typ, t.Dialect.Time(t.At), actor, string(causeJSON), detailText)
}

// EventInsertEach appends the events one statement each: approval.Tx's EventInsertMany for a
// driver without statements over arrays (SQLite, where a statement costs no round trip).
func (t Tx) EventInsertEach(ctx context.Context, events []approval.Event) error {
	for _, e := range events {
		if err := t.EventInsert(ctx, e.ApprovalID, e.Type, e.Actor, e.Cause, e.Detail); err != nil {
			return err
		}
	}
	return nil
}

func (t Tx) ExecutionInsert(ctx context.Context, rec *approval.ExecutionRecord) error {
	return t.write(ctx, "insert execution", `
		INSERT INTO executions (id, approval_id, operation_key, action, targeted, status,
			last_error, next_attempt_at, created_at, updated_at, downstream_key)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9, $10)`,
		rec.ID, rec.ApprovalID, rec.OperationKey, rec.Action, rec.Targeted, string(rec.Status),
		rec.LastError, t.Dialect.NullTime(rec.NextAttemptAt), t.Dialect.Time(t.At), rec.DownstreamKey)
}

// ExecutionSetLeaseIfAttempt runs at once, not queued: the Service needs its answer.
func (t Tx) ExecutionSetLeaseIfAttempt(ctx context.Context, id string, attempt int, leaseUntil time.Time) (bool, error) {
	n, err := t.exec(ctx, "renew execution lease", `
		UPDATE executions SET lease_expires_at = $3
		WHERE id = $1 AND attempts = $2 AND status = 'running' AND lease_expires_at IS NOT NULL`,
		id, attempt, t.Dialect.Time(leaseUntil))
	return n == 1, err
}

// ExecutionGetForUpdate locks one execution's approval, first in the lock order, in a
// statement of its own (see Runner.Lock), then reads and locks the execution.
func (t Tx) ExecutionGetForUpdate(ctx context.Context, id string) (*approval.ExecutionRecord, error) {
	if err := t.lock(ctx, "lock approval of execution", `
		SELECT 1 FROM approvals WHERE id = (SELECT approval_id FROM executions WHERE id = $1)`+t.Dialect.ForUpdate, id); err != nil {
		return nil, err
	}
	rec, err := t.execution(ctx, `x.id = $1`, id)("execution %s not found", id)
	return rec, t.Translate("lock execution", err)
}

// ExecutionGetByApprovalForUpdate is ExecutionGetForUpdate by approval. The execution is read
// by a statement that starts once the approval's lock is held, so it sees the execution that
// the vote holding the lock before it created.
func (t Tx) ExecutionGetByApprovalForUpdate(ctx context.Context, approvalID string) (*approval.ExecutionRecord, error) {
	if err := t.lockApproval(ctx, approvalID); err != nil {
		return nil, err
	}
	rec, err := t.execution(ctx, `x.approval_id = $1`, approvalID)("approval %s has no execution", approvalID)
	return rec, t.Translate("lock execution of approval", err)
}

// execution reads and locks the execution matching where (with arg).
func (t Tx) execution(ctx context.Context, where string, arg any) func(string, ...any) (*approval.ExecutionRecord, error) {
	return first(query(ctx, t, `SELECT `+ExecutionColumns+` FROM executions x WHERE `+where+t.Dialect.ForUpdate, scanExecution, arg))
}

// ExecutionGetForUpdateMany locks as ExecutionGetForUpdate does, every execution at once: two
// statements (one round trip on PostgreSQL), each locking its rows in id order.
func (t Tx) ExecutionGetForUpdateMany(ctx context.Context, ids []string) ([]*approval.ExecutionRecord, error) {
	d, list := t.Dialect, t.Dialect.List(ids)
	if err := t.lock(ctx, "lock approvals of executions", `
		SELECT 1 FROM approvals WHERE id IN (SELECT approval_id FROM executions WHERE `+d.AnyOf("id", "$1")+`)
		ORDER BY id`+d.ForUpdate, list); err != nil {
		return nil, err
	}
	recs, err := query(ctx, t, `SELECT `+ExecutionColumns+` FROM executions x WHERE `+d.AnyOf("x.id", "$1")+`
		ORDER BY x.id`+d.ForUpdate, scanExecution, list)
	return recs, t.Translate("lock executions", err)
}

// scanExecution is ScanExecution with no extra column, for Collect.
func scanExecution(row Row) (*approval.ExecutionRecord, error) { return ScanExecution(row) }

func (t Tx) ExecutionIDsByOperationKey(ctx context.Context, key string, limit int) ([]string, error) {
	return t.ids(ctx, "find executions by operation key",
		`SELECT id FROM executions WHERE operation_key = $1 ORDER BY created_at, id LIMIT $2`, key, limit)
}

// ExecutionSetSendingIfAttemptEach marks the calls one guarded statement each, at once:
// approval.Tx's ExecutionSetSendingIfAttemptMany for a driver without statements over
// arrays.
func (t Tx) ExecutionSetSendingIfAttemptEach(ctx context.Context, ids []string, attempts []int, leaseUntil time.Time) ([]string, error) {
	if len(ids) != len(attempts) {
		return nil, fmt.Errorf("mark execution calls: %d executions for %d attempts", len(ids), len(attempts))
	}
	var marked []string
	for i, id := range ids {
		n, err := t.exec(ctx, "mark execution call", `
			UPDATE executions SET unsent_attempt = 0, lease_expires_at = $3
			WHERE id = $1 AND attempts = $2 AND status = 'running' AND lease_expires_at IS NOT NULL`,
			id, attempts[i], t.Dialect.Time(leaseUntil))
		if err != nil {
			return nil, err
		}
		if n == 1 {
			marked = append(marked, id)
		}
	}
	return marked, nil
}

func (t Tx) ExecutionUpdateIfAttempt(ctx context.Context, rec *approval.ExecutionRecord, attempt int) error {
	return t.updateExecution(ctx, "record execution attempt", `attempts = $12 AND status = 'running'`, rec, attempt)
}

// ExecutionUpdateIfAttemptEach writes the executions one guarded statement each:
// approval.Tx's ExecutionUpdateIfAttemptMany for a driver without statements over arrays.
func (t Tx) ExecutionUpdateIfAttemptEach(ctx context.Context, recs []*approval.ExecutionRecord, attempts []int) error {
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

func (t Tx) ExecutionUpdateIfStatus(ctx context.Context, rec *approval.ExecutionRecord, status approval.ExecutionStatus) error {
	return t.updateExecution(ctx, "update execution", `status = $12`, rec, string(status))
}

// updateExecution writes rec's state, guarded by guard on $12 (guardArg).
func (t Tx) updateExecution(ctx context.Context, op, guard string, rec *approval.ExecutionRecord, guardArg any) error {
	d := t.Dialect
	return t.writeOne(ctx, op, `
		UPDATE executions
		SET status = $2, attempts = $3, last_error = $4, result = $5, next_attempt_at = $6,
			lease_expires_at = $7, applied_version = $8, uncertain = $9, attempt_base = $10,
			updated_at = $11
		WHERE id = $1 AND `+guard,
		rec.ID, string(rec.Status), rec.Attempts, rec.LastError, nullBytes(rec.Result), d.NullTime(rec.NextAttemptAt),
		d.NullTime(rec.LeaseExpiresAt), rec.AppliedVersion, rec.Uncertain, rec.AttemptBase, d.Time(t.At), guardArg)
}

// InboxGetForUpdate reads and locks one event, without its body.
func (t Tx) InboxGetForUpdate(ctx context.Context, id string) (*approval.InboxEvent, error) {
	list, err := query(ctx, t, `SELECT `+InboxColumns+`, CAST(NULL AS bytea) FROM inbox_events i WHERE i.id = $1`+t.Dialect.ForUpdate, ScanInbox, id)
	e, err := first(list, err)("inbox event %s not found", id)
	return e, t.Translate("lock inbox event", err)
}

// InboxSetDone writes and then reads the event: on PostgreSQL the write travels with the read,
// in one round trip.
func (t Tx) InboxSetDone(ctx context.Context, id string, status approval.InboxStatus, outcome, approvalID string) (*approval.InboxEvent, error) {
	if err := t.markInboxDone(ctx, approval.InboxMark{ID: id, Status: status, Outcome: outcome, ApprovalID: approvalID}); err != nil {
		return nil, err
	}
	e, err := InboxEventByID(ctx, t.Run, t.Dialect, id)
	return e, t.Translate("read inbox event", err)
}

// markInboxDone marks one pending event done; one no longer pending fails the transaction.
func (t Tx) markInboxDone(ctx context.Context, m approval.InboxMark) error {
	var ref any
	if m.ApprovalID != "" {
		ref = m.ApprovalID
	}
	attempted := 0
	if m.Attempted {
		attempted = 1
	}
	return t.writeOne(ctx, "mark inbox event done", `
		UPDATE inbox_events
		SET status = $2, outcome = $3, approval_id = $4, processed_at = $5,
			next_attempt_at = NULL, lease_token = '', lease_expires_at = NULL, attempts = attempts + $6
		WHERE id = $1 AND status = 'pending'`,
		m.ID, string(m.Status), m.Outcome, ref, t.Dialect.Time(t.At), attempted)
}

// InboxMarkDoneEach marks the events one guarded statement each: approval.Tx's
// InboxMarkDoneMany for a driver without statements over arrays.
func (t Tx) InboxMarkDoneEach(ctx context.Context, marks []approval.InboxMark) error {
	for _, m := range marks {
		if err := t.markInboxDone(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

func (t Tx) InboxSetAttemptFailed(ctx context.Context, id string, status approval.InboxStatus, lastError string, nextAttemptAt, processedAt *time.Time) error {
	return t.writeOne(ctx, "record failed inbox attempt", `
		UPDATE inbox_events
		SET status = $2, last_error = $3, next_attempt_at = $4, processed_at = $5,
			lease_token = '', lease_expires_at = NULL
		WHERE id = $1 AND status = 'pending'`,
		id, string(status), lastError, t.Dialect.NullTime(nextAttemptAt), t.Dialect.NullTime(processedAt))
}

func (t Tx) InboxSetPendingIfFailed(ctx context.Context, id string) (*approval.InboxEvent, error) {
	if err := t.writeOne(ctx, "retry inbox event", `
		UPDATE inbox_events
		SET status = 'pending', next_attempt_at = $2, processed_at = NULL,
			lease_token = '', lease_expires_at = NULL
		WHERE id = $1 AND status = 'failed'`,
		id, t.Dialect.Time(t.At)); err != nil {
		return nil, err
	}
	e, err := InboxEventByID(ctx, t.Run, t.Dialect, id)
	return e, t.Translate("read inbox event", err)
}

// OutboxInsert queues a message unless one with its natural key exists: ON CONFLICT DO
// NOTHING, so a racing insert of the same key waits for the other transaction (or, on
// SQLite, for the write lock) and inserts nothing.
func (t Tx) OutboxInsert(ctx context.Context, m *approval.OutboxMessage) error {
	var approvalID any
	if m.ApprovalID != "" {
		approvalID = m.ApprovalID
	}
	d := t.Dialect
	return t.write(ctx, "insert outbox message", `
		INSERT INTO outbox (id, natural_key, kind, approval_id, recipient, channel, event, payload,
			status, next_attempt_at, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
		ON CONFLICT (natural_key) DO NOTHING`,
		m.ID, m.NaturalKey, string(m.Kind), approvalID, m.Recipient, m.Channel, m.Event,
		string(m.Payload), string(m.Status), d.NullTime(m.NextAttemptAt), d.Time(m.CreatedAt), d.Time(m.UpdatedAt))
}

// OutboxClaimDue is one statement and a queued insert per claimed message. The pending and
// the expired messages are found apart, each in the order of its partial index, and only the
// first limit of the two merged: one query ordering both by a common due time is served by
// no index. On PostgreSQL SKIP LOCKED lets replicas claim disjoint messages without waiting
// for each other; the rows one branch locks beyond the merged limit are skipped by other
// replicas only until this transaction ends.
func (t Tx) OutboxClaimDue(ctx context.Context, limit int, leaseUntil time.Time) ([]*approval.OutboxMessage, error) {
	d := t.Dialect
	msgs, err := query(ctx, t, `
		WITH pending AS (
			SELECT id, next_attempt_at AS due_at FROM outbox
			WHERE status = 'pending' AND next_attempt_at <= $1
			ORDER BY next_attempt_at, id LIMIT $2`+d.SkipLocked+`
		), expired AS (
			SELECT id, lease_expires_at AS due_at FROM outbox
			WHERE status = 'sending' AND lease_expires_at <= $1
			ORDER BY lease_expires_at, id LIMIT $2`+d.SkipLocked+`
		), due AS (
			SELECT * FROM pending UNION ALL SELECT * FROM expired
			ORDER BY due_at, id LIMIT $2
		)
		UPDATE outbox
		SET status = 'sending', attempts = attempts + 1, next_attempt_at = NULL,
			lease_expires_at = $3, updated_at = $1
		WHERE id IN (SELECT id FROM due)
		RETURNING `+unqualified(OutboxColumns, "o"),
		ScanOutbox, d.Time(t.At), limit, d.Time(leaseUntil))
	if err != nil {
		return nil, t.Translate("claim outbox messages", err)
	}
	// RETURNING has no order of its own.
	slices.SortFunc(msgs, func(a, b *approval.OutboxMessage) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	for _, m := range msgs {
		if err := t.write(ctx, "log outbox attempt", `
			INSERT INTO outbox_attempts (message_id, attempt, started_at) VALUES ($1, $2, $3)`,
			m.ID, m.Attempts, d.Time(t.At)); err != nil {
			return nil, err
		}
	}
	return msgs, nil
}

// OutboxGetForUpdate reads and locks one message.
func (t Tx) OutboxGetForUpdate(ctx context.Context, id string) (*approval.OutboxMessage, error) {
	list, err := query(ctx, t, `SELECT `+OutboxColumns+` FROM outbox o WHERE o.id = $1`+t.Dialect.ForUpdate, ScanOutbox, id)
	m, err := first(list, err)("outbox message %s not found", id)
	return m, t.Translate("lock outbox message", err)
}

func (t Tx) OutboxUpdateIfAttempt(ctx context.Context, m *approval.OutboxMessage, attempt int) error {
	return t.updateOutbox(ctx, "record outbox attempt", `attempts = $9 AND status = 'sending'`, m, attempt)
}

func (t Tx) OutboxUpdateIfStatus(ctx context.Context, m *approval.OutboxMessage, status approval.OutboxStatus) error {
	return t.updateOutbox(ctx, "update outbox message", `status = $9`, m, string(status))
}

// updateOutbox writes m's state, guarded by guard on $9 (guardArg).
func (t Tx) updateOutbox(ctx context.Context, op, guard string, m *approval.OutboxMessage, guardArg any) error {
	d := t.Dialect
	return t.writeOne(ctx, op, `
		UPDATE outbox
		SET status = $2, payload = $3, last_error = $4, next_attempt_at = $5,
			lease_expires_at = $6, sent_at = $7, updated_at = $8
		WHERE id = $1 AND `+guard,
		m.ID, string(m.Status), string(m.Payload), m.LastError, d.NullTime(m.NextAttemptAt),
		d.NullTime(m.LeaseExpiresAt), d.NullTime(m.SentAt), d.Time(t.At), guardArg)
}

func (t Tx) OutboxAttemptFinish(ctx context.Context, id string, attempt int, outcome, errText string) error {
	return t.write(ctx, "finish outbox attempt", `
		UPDATE outbox_attempts SET finished_at = $3, outcome = $4, error = $5
		WHERE message_id = $1 AND attempt = $2`,
		id, attempt, t.Dialect.Time(t.At), outcome, errText)
}

// SigninAskCounts counts in one statement, taking no lock: approval.Tx's
// SigninAskCountsForUpdate is this after the driver's lock (PostgreSQL's advisory lock, or
// SQLite's write lock, which its transaction holds from its first statement).
func (t Tx) SigninAskCounts(ctx context.Context, p approval.SigninCountParams) (approval.SigninCounts, error) {
	d := t.Dialect
	list, err := query(ctx, t, `
		SELECT
			(SELECT count(*) FROM signin_asks WHERE subject = $1 AND client = $2 AND created_at >= $3),
			(SELECT count(*) FROM signin_tokens WHERE subject = $1 AND created_at >= $3),
			(SELECT count(*) FROM signin_tokens WHERE subject = $1 AND created_at > $4 AND used_at IS NULL)`,
		func(row Row) (c approval.SigninCounts, err error) {
			return c, row.Scan(&c.ClientAsks, &c.Links, &c.RecentUnused)
		}, p.Subject, p.Client, d.Time(p.Since), d.Time(p.RecentSince))
	c, err := first(list, err)("no counts")
	return c, t.Translate("count sign-in requests", err)
}

func (t Tx) SigninAskInsert(ctx context.Context, subject, client string) error {
	return t.write(ctx, "insert sign-in request", `
		INSERT INTO signin_asks (subject, client, created_at) VALUES ($1, $2, $3)`,
		subject, client, t.Dialect.Time(t.At))
}

func (t Tx) SigninAskDeleteBefore(ctx context.Context, createdBefore time.Time, limit int) (int, error) {
	n, err := t.exec(ctx, "purge sign-in requests", `
		DELETE FROM signin_asks WHERE id IN (
			SELECT id FROM signin_asks WHERE created_at < $1 LIMIT $2)`,
		t.Dialect.Time(createdBefore), limit)
	return int(n), err
}

func (t Tx) SigninTokenInsert(ctx context.Context, hash []byte, subject string, expiresAt time.Time) error {
	return t.write(ctx, "insert sign-in link", `
		INSERT INTO signin_tokens (hash, subject, created_at, expires_at) VALUES ($1, $2, $3, $4)`,
		hash, subject, t.Dialect.Time(t.At), t.Dialect.Time(expiresAt))
}

// SigninTokenUseIfValid runs at once: its answer decides the sign-in. Racing uses wait on the
// row's lock (or SQLite's writer), and the losers find used_at set and update nothing.
func (t Tx) SigninTokenUseIfValid(ctx context.Context, hash []byte) (string, error) {
	list, err := query(ctx, t, `
		UPDATE signin_tokens SET used_at = $1
		WHERE hash = $2 AND used_at IS NULL AND expires_at > $1
		RETURNING subject`,
		func(row Row) (s string, err error) { return s, row.Scan(&s) }, t.Dialect.Time(t.At), hash)
	subject, err := first(list, err)("no unused, unexpired sign-in link has this token")
	return subject, t.Translate("use sign-in link", err)
}

func (t Tx) SigninTokenDeleteExpired(ctx context.Context, createdBefore time.Time, limit int) (int, error) {
	n, err := t.exec(ctx, "purge sign-in links", `
		WITH old AS (
			SELECT hash FROM signin_tokens
			WHERE created_at < $1 AND expires_at <= $2
			LIMIT $3`+t.Dialect.SkipLocked+`
		)
		DELETE FROM signin_tokens WHERE hash IN (SELECT hash FROM old)`,
		t.Dialect.Time(createdBefore), t.Dialect.Time(t.At), limit)
	return int(n), err
}

// nullBytes binds b as NULL when it is nil, and as a (possibly empty) blob otherwise.
func nullBytes(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}

// ApprovalRemindDueForUpdate returns up to limit pending approvals whose next reminder is due,
// locked, the soonest first, through the partial index approvals_remind_idx (migration 0023),
// which holds only pending approvals with a reminder to come; SKIP LOCKED lets several
// replicas scan at once, as ApprovalIDsDueForUpdate does. Under read committed a row that a
// vote or another scan changed and committed since the statement began is read again once
// locked, and left out if its reminder is no longer due.
func (t Tx) ApprovalRemindDueForUpdate(ctx context.Context, limit int) ([]approval.ReminderDue, error) {
	due, err := query(ctx, t, RemindDueSQL+t.Dialect.SkipLocked,
		func(row Row) (d approval.ReminderDue, err error) {
			return d, row.Scan(&d.ID, Time(&d.StageStartedAt))
		}, t.Dialect.Time(t.At), limit)
	return due, t.Translate("find approvals due for a reminder", err)
}

// RemindDueSQL finds the approvals due for a reminder at $1, up to $2 of them, without the
// dialect's lock clause.
const RemindDueSQL = `
		SELECT id, COALESCE(stage_started_at, created_at) FROM approvals
		WHERE status = 'pending' AND remind_at IS NOT NULL AND remind_at <= $1
		ORDER BY remind_at, id LIMIT $2`

// ApprovalSetReminder sets when the approval's stage began and its next reminder is due.
func (t Tx) ApprovalSetReminder(ctx context.Context, id string, stageStartedAt time.Time, remindAt *time.Time) error {
	return t.writeOne(ctx, "set approval reminder",
		`UPDATE approvals SET stage_started_at = $2, remind_at = $3 WHERE id = $1`,
		id, t.Dialect.Time(stageStartedAt), t.Dialect.NullTime(remindAt))
}
