package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/sqldb"
)

// insertApprovalAttempts bounds how often InsertApproval looks again for the holder of a
// key it lost to a concurrent insert: the second look runs after the winner committed, so it
// finds the holder unless the record was purged in between.
const insertApprovalAttempts = 3

// insertApprovalSQL writes a create in ONE statement, so a create costs one round trip and is
// atomic without an explicit transaction: the idempotency record with its stored response,
// the approval, its approvers, its approval.created event and the approvers' notifications in
// the outbox, unless the key is held. It signals no long-poll: nothing waits on an approval
// that did not exist yet. "held" finds a
// completed record or (record purged) an approval under the key; a concurrent insert of the
// same key makes the record's INSERT wait on the primary key for the other transaction and
// then do nothing, and the caller reads again. An in-flight record left by the
// two-transaction create of earlier versions is taken over once its lease has ended; while it
// runs, the create is told to come back (409), as then.
var insertApprovalSQL = `
WITH held AS (
	SELECT r.fingerprint, r.response_status, r.response_location, r.response_body,
		NULL::text AS approval_id, 0 AS rank
	FROM idempotency_records r
	WHERE r.requester = $1::text AND r.key = $2::text AND r.state = 'completed'
	UNION ALL
	SELECT a.fingerprint, NULL::integer, NULL::text, NULL::bytea, a.id::text, 1
	FROM approvals a
	WHERE a.requester = $1::text AND a.operation_key = $2::text
), rec AS (
	INSERT INTO idempotency_records (requester, key, fingerprint, state, token, lease_expires_at,
		response_status, response_location, response_body, retain_until, created_at)
	SELECT $1::text, $2::text, $3::text, 'completed', '', $4::timestamptz, $5::integer, $6::text,
		$7::bytea, $8::timestamptz, $4::timestamptz
	WHERE NOT EXISTS (SELECT 1 FROM held)
	ON CONFLICT (requester, key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint,
		state = EXCLUDED.state, token = EXCLUDED.token, lease_expires_at = EXCLUDED.lease_expires_at,
		response_status = EXCLUDED.response_status, response_location = EXCLUDED.response_location,
		response_body = EXCLUDED.response_body, retain_until = EXCLUDED.retain_until,
		created_at = EXCLUDED.created_at
		WHERE idempotency_records.state = 'in_flight' AND idempotency_records.lease_expires_at <= $4
	RETURNING 1
), app AS (
	INSERT INTO approvals (id, requester, operation_key, fingerprint, action, title, context,
		required_approvals, status, decided_at, expires_at, created_at, version, callback_url)
	SELECT $9::text, $1::text, $2::text, $3::text, $10::text, $11::text, $12::bytea, $13::integer,
		'pending', NULL, $14::timestamptz, $15::timestamptz, 1, NULLIF($24::text, '')
	FROM rec
	RETURNING id
), approvers AS (
	INSERT INTO approval_approvers (approval_id, position, approver, created_at)
	SELECT app.id, x.position, x.approver, $15::timestamptz
	FROM app, unnest($16::text[]) WITH ORDINALITY AS x(approver, position)
), created AS (
	INSERT INTO events (approval_id, seq, type, at, actor, cause, detail)
	SELECT app.id, 1, '` + approval.EventCreated + `', $4::timestamptz, $1::text, $17::jsonb, NULL
	FROM app
), outbox AS (
	INSERT INTO outbox (id, natural_key, kind, approval_id, recipient, channel, event, payload,
		status, next_attempt_at, created_at, updated_at)
	SELECT m.id, m.natural_key, 'notification', app.id, m.recipient, m.channel, m.event, m.payload,
		'pending', $15::timestamptz, $15::timestamptz, $15::timestamptz
	FROM app, unnest($18::text[], $19::text[], $20::text[], $21::text[], $22::text[], $23::text[])
		AS m(id, natural_key, recipient, channel, event, payload)
	ON CONFLICT (natural_key) DO NOTHING
	RETURNING 1
)
SELECT (SELECT count(*) FROM app),
	h.fingerprint, h.response_status, h.response_location, h.response_body, h.approval_id`

// insertApprovalFrom ends insertApprovalSQL.
const insertApprovalFrom = `
FROM (SELECT 1) AS one
LEFT JOIN LATERAL (SELECT * FROM held ORDER BY rank LIMIT 1) AS h ON true`

// insertApprovalPlainSQL is the create of a request whose token has been checked already.
// insertApprovalGuardedSQL carries the request's token check ($25 to $27) as one more column
// of the one row the statement returns, so that it is evaluated whether the key is free or
// held: when the token is no longer good it divides by zero, the statement fails as a whole
// and nothing of it commits, nor is a held key's answer replayed.
var (
	insertApprovalPlainSQL   = insertApprovalSQL + insertApprovalFrom
	insertApprovalGuardedSQL = insertApprovalSQL + `,
	(SELECT 1 / (` + sqldb.TokenCheckSQL(dialect, 25) + `))` + insertApprovalFrom
)

// InsertApproval writes a new approval with its idempotency record in one statement, or
// returns what holds its key (see approval.Store).
func (s *Store) InsertApproval(ctx context.Context, a *approval.Approval, resp approval.StoredResponse, retain time.Duration, cause approval.Cause, outbox []*approval.OutboxMessage) (*approval.KeyHolder, error) {
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
	conn, now, err := s.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()

	for range insertApprovalAttempts {
		var inserted int
		var fingerprint, location, approvalID *string
		var status *int
		var body []byte
		args := []any{a.Requester, a.OperationKey, a.Fingerprint, now, resp.StatusCode, resp.Location,
			resp.Body, now.Add(retain), a.ID, a.Action, a.Title, []byte(a.Context),
			a.RequiredApprovals, a.ExpiresAt, a.CreatedAt, a.Approvers, causeJSON,
			ids, keys, recipients, channels, events, payloads, a.CallbackURL}
		stmt, dest := insertApprovalPlainSQL, []any{&inserted, &fingerprint, &status, &location, &body, &approvalID}
		check := approval.PendingTokenCheck(ctx)
		if check != nil {
			var one int
			stmt, args, dest = insertApprovalGuardedSQL, append(args, sqldb.TokenCheckArgs(dialect, check)...), append(dest, &one)
		}
		err := conn.QueryRow(ctx, stmt, args...).Scan(dest...)
		if check != nil && isDivisionByZero(err) {
			return nil, check.Refuse()
		} else if err != nil {
			return nil, translate("insert approval", err)
		} else if check != nil {
			check.Pass()
		}
		switch {
		case inserted == 1:
			if len(ids) > 0 {
				// The outbox worker's wake-up, after the commit and outside it (see signalSQL):
				// one more round trip, only for a create that notifies someone.
				if _, err := conn.Exec(ctx, signalSQL, []string{approval.TopicOutbox}); err != nil {
					s.logger().Warn("postgres: outbox signal failed", "approval", a.ID, "err", err)
				}
			}
			return nil, nil
		case fingerprint == nil:
			continue // lost to a concurrent insert that has committed since: look again
		case approvalID == nil:
			return &approval.KeyHolder{Fingerprint: *fingerprint, Response: &approval.StoredResponse{
				StatusCode: deref(status), Location: deref(location), Body: body,
			}}, nil
		}
		held, err := readApproval(ctx, querier{conn}, *approvalID)
		if err != nil {
			return nil, err
		}
		return &approval.KeyHolder{Fingerprint: *fingerprint, Approval: held}, nil
	}
	return nil, &approval.Error{
		Code:       approval.ECONFLICT,
		Message:    "the operation is changing hands, try again",
		RetryAfter: time.Second,
	}
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// IdempotencyRecordDeleteExpired: the records are found by their primary key, (requester, key).
func (t *ruleTx) IdempotencyRecordDeleteExpired(ctx context.Context, leaseEndedBefore time.Time, limit int) (int, error) {
	tag, err := t.Exec(ctx, `
		DELETE FROM idempotency_records r
		USING (
			SELECT requester, key FROM idempotency_records
			WHERE (state = 'completed' AND retain_until <= $1)
				OR (state = 'in_flight' AND lease_expires_at < $2)
			LIMIT $3
			FOR UPDATE SKIP LOCKED
		) due
		WHERE r.requester = due.requester AND r.key = due.key`,
		t.At, leaseEndedBefore, limit)
	return int(tag.RowsAffected()), translate("purge idempotency records", err)
}
