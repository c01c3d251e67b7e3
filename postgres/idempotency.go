package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/sqldb"
)

// insertApprovalAttempts bounds how often InsertApproval looks again for the holder of a
// key it lost to a concurrent insert: the second look runs after the winner committed, so it
// finds the holder.
const insertApprovalAttempts = 3

// insertApprovalSQL writes a create in ONE statement, atomic without an explicit
// transaction: the approval (which is the key's record: it keeps the fingerprint), its
// approvers, its approval.created event and the approvers' notifications in the outbox,
// unless an approval already holds the key. It signals no long-poll: nothing waits on an
// approval that did not exist yet. A concurrent insert of the same key makes the approval's
// INSERT wait on the unique index (operation_key, requester) for the other transaction and
// then fail (unique violation) if that one committed; the caller then reads again.
var insertApprovalSQL = `
WITH held AS (
	SELECT 1 FROM approvals a WHERE a.operation_key = $2::text AND a.requester = $1::text
), app AS (
	INSERT INTO approvals (id, requester, operation_key, fingerprint, action, title, context,
		required_approvals, status, decided_at, expires_at, created_at, version, callback_url)
	SELECT $4::text, $1::text, $2::text, $3::text, $5::text, $6::text, $7::bytea, $8::integer,
		'pending', NULL, $9::timestamptz, $10::timestamptz, 1, NULLIF($19::text, '')
	WHERE NOT EXISTS (SELECT 1 FROM held)
	RETURNING id
), approvers AS (
	INSERT INTO approval_approvers (approval_id, position, approver, created_at)
	SELECT app.id, x.position, x.approver, $10::timestamptz
	FROM app, unnest($11::text[]) WITH ORDINALITY AS x(approver, position)
), created AS (
	INSERT INTO events (approval_id, seq, type, at, actor, cause, detail)
	SELECT app.id, 1, '` + approval.EventCreated + `', $10::timestamptz, $1::text, $12::jsonb, NULL
	FROM app
), outbox AS (
	INSERT INTO outbox (id, natural_key, kind, approval_id, recipient, channel, event, payload,
		status, next_attempt_at, created_at, updated_at)
	SELECT m.id, m.natural_key, 'notification', app.id, m.recipient, m.channel, m.event, m.payload,
		'pending', $10::timestamptz, $10::timestamptz, $10::timestamptz
	FROM app, unnest($13::text[], $14::text[], $15::text[], $16::text[], $17::text[], $18::text[])
		AS m(id, natural_key, recipient, channel, event, payload)
	ON CONFLICT (natural_key) DO NOTHING
	RETURNING 1
)
SELECT (SELECT count(*) FROM app)`

// insertApprovalGuardedSQL is insertApprovalSQL with the request's token check ($20 to $22)
// as one more column of the one row the statement returns, so that it is evaluated whether
// the key is free or held: when the token is no longer good it divides by zero, the statement
// fails as a whole and nothing of it commits, nor is a held key's approval read.
var insertApprovalGuardedSQL = insertApprovalSQL + `,
	(SELECT 1 / (` + sqldb.TokenCheckSQL(dialect, 20) + `))`

// heldApprovalSQL reads the approval holding a key, in the same round trip as the insert
// and after it: nothing when the insert wrote the key's approval (its id is left out).
const heldApprovalSQL = approvalDetailSQL + `
WHERE a.operation_key = $1 AND a.requester = $2 AND a.id <> $3`

// InsertApproval writes a new approval in one statement, or returns the approval that holds
// its key (see approval.Store): the statement and the read of the holder go out as one batch,
// so a create and a replay are each one round trip.
func (s *Store) InsertApproval(ctx context.Context, a *approval.Approval, cause approval.Cause, outbox []*approval.OutboxMessage) (*approval.KeyHolder, error) {
	causeJSON, err := json.Marshal(cause)
	if err != nil {
		return nil, fmt.Errorf("encode event cause: %w", err)
	}
	// The approvers' notifications travel as parallel arrays, empty when nobody is notified,
	// so that the create stays one statement.
	var ids, keys, recipients, channels, events, payloads []string
	for _, m := range outbox {
		if m.Kind != approval.OutboxNotification {
			return nil, approval.Errorf(approval.EINTERNAL, "a create queues notifications only, not %s", m.Kind)
		}
		ids, keys, recipients = append(ids, m.ID), append(keys, m.NaturalKey), append(recipients, m.Recipient)
		channels, events, payloads = append(channels, m.Channel), append(events, m.Event), append(payloads, string(m.Payload))
	}
	conn, _, err := s.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()

	args := []any{a.Requester, a.OperationKey, a.Fingerprint, a.ID, a.Action, a.Title,
		[]byte(a.Context), a.RequiredApprovals, a.ExpiresAt, a.CreatedAt, a.Approvers, causeJSON,
		ids, keys, recipients, channels, events, payloads, a.CallbackURL}
	stmt := insertApprovalSQL
	check := approval.PendingTokenCheck(ctx)
	if check != nil {
		stmt, args = insertApprovalGuardedSQL, append(args, sqldb.TokenCheckArgs(dialect, check)...)
	}
	for range insertApprovalAttempts {
		holder, inserted, err := s.insertApproval(ctx, conn, stmt, args, check, a)
		switch {
		case isUniqueViolation(err):
			continue // lost to a concurrent insert that has committed since: look again
		case err != nil:
			return nil, err
		case inserted && len(ids) > 0:
			// The outbox worker's wake-up, after the commit and outside it (see signalSQL):
			// one more round trip, only for a create that notifies someone.
			if _, err := conn.Exec(ctx, signalSQL, []string{approval.TopicOutbox}); err != nil {
				s.logger().Warn("postgres: outbox signal failed", "approval", a.ID, "err", err)
			}
		}
		return holder, nil
	}
	return nil, &approval.Error{
		Code:       approval.ECONFLICT,
		Message:    "the operation is changing hands, try again",
		RetryAfter: time.Second,
	}
}

// insertApproval runs one attempt of InsertApproval: the insert and the read of the holder
// in one batch (one implicit transaction, committed at its end).
func (s *Store) insertApproval(ctx context.Context, conn *pgxpool.Conn, stmt string, args []any, check *approval.TokenCheck, a *approval.Approval) (*approval.KeyHolder, bool, error) {
	b := &pgx.Batch{}
	b.Queue(stmt, args...)
	b.Queue(heldApprovalSQL, a.OperationKey, a.Requester, a.ID)
	br := conn.SendBatch(ctx, b)
	defer br.Close()

	var inserted int
	dest := []any{&inserted}
	if check != nil {
		var one int
		dest = append(dest, &one)
	}
	err := br.QueryRow().Scan(dest...)
	switch {
	case check != nil && isDivisionByZero(err):
		return nil, false, check.Refuse()
	case err != nil && isUniqueViolation(err):
		return nil, false, err
	case err != nil:
		return nil, false, translate("insert approval", err)
	case check != nil:
		check.Pass()
	}
	rows, err := br.Query()
	list, err := sqldb.Collect(sqldb.Rows(rows), err, sqldb.ScanApprovalDetail)
	if err != nil {
		return nil, false, translate("read the approval holding the key", err)
	}
	if err := br.Close(); err != nil { // the commit
		return nil, false, translate("insert approval", err)
	}
	switch {
	case inserted == 1:
		return nil, true, nil
	case len(list) == 0:
		return nil, false, translate("insert approval", errors.New("the key is held, but its approval was not found"))
	}
	return &approval.KeyHolder{Fingerprint: list[0].Fingerprint, Approval: list[0]}, false, nil
}

// isUniqueViolation reports whether err is a concurrent create's win on the key: the unique
// index (operation_key, requester) of approvals, added by migration 0012.
func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "approvals_operation_key_requester"
}
