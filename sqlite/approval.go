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

// dialect is SQLite's SQL for the statements the drivers share (internal/sqldb).
var dialect = sqldb.Dialect{
	Param:          sqldb.Question,
	Time:           func(t time.Time) any { return micros(t) },
	ApprovalDetail: approvalDetailSQL,
	LowerASCII:     func(expr string) string { return "lower(" + expr + ")" },
}

// approvalDetailSQL reads approvals with everything their answer shows in one statement: the
// approvers in listed order, the decisions oldest first (votes cast at the same instant, as
// under a frozen test clock, in insertion order through rowid), each at its time in RFC 3339,
// and the public fields of the execution.
const approvalDetailSQL = `SELECT ` + sqldb.ApprovalColumns + `,
	(SELECT json_group_array(p.approver ORDER BY p.position) FROM approval_approvers p WHERE p.approval_id = a.id),
	(SELECT json_group_array(json_object('approver', d.approver, 'verdict', d.verdict, 'comment', d.comment,
		'at', strftime('%Y-%m-%dT%H:%M:%S', d.decided_at / 1000000, 'unixepoch') || printf('.%06dZ', d.decided_at % 1000000))
		ORDER BY d.decided_at, d.rowid)
	 FROM decisions d WHERE d.approval_id = a.id),
	` + sqldb.ApprovalDetailColumns + `
FROM approvals a LEFT JOIN executions x ON x.approval_id = a.id`

// InsertApproval writes a new approval with its idempotency record in one write transaction,
// or returns what holds its key; see approval.Store. SQLite's single writer orders concurrent
// inserts of one key: the second finds the first's record.
func (s *Store) InsertApproval(ctx context.Context, a *approval.Approval, resp approval.StoredResponse, retain time.Duration, cause approval.Cause, outbox []*approval.OutboxMessage) (*approval.KeyHolder, error) {
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return nil, fail("insert approval", err)
	}
	defer tx.Rollback()

	if err := tx.checkToken(ctx); err != nil {
		return nil, err
	}
	holder, err := keyHolder(ctx, tx, a.Requester, a.OperationKey)
	if err != nil {
		return nil, fail("insert approval", err)
	} else if holder != nil {
		return holder, nil
	}
	if err := insertApproval(ctx, tx, a, resp, retain, cause); err != nil {
		return nil, fail("insert approval", err)
	}
	rt := newRuleTx(tx)
	for _, m := range outbox {
		if err := rt.OutboxInsert(ctx, m); err != nil {
			return nil, err
		}
	}
	if len(outbox) > 0 {
		tx.signal(approval.TopicOutbox)
	}
	if err := tx.commit(); err != nil {
		return nil, fail("insert approval", err)
	}
	return nil, nil
}

// keyHolder finds what holds (requester, key): a completed idempotency record, or the
// approval made under the key once its record was purged; nil if neither.
func keyHolder(ctx context.Context, tx *tx, requester, key string) (*approval.KeyHolder, error) {
	var (
		fingerprint string
		statusCode  sql.NullInt64
		location    sql.NullString
		body        []byte
	)
	err := tx.QueryRowContext(ctx, `
		SELECT fingerprint, status_code, location, body
		FROM idempotency_records
		WHERE requester = ? AND idempotency_key = ? AND state = 'completed'`,
		requester, key,
	).Scan(&fingerprint, &statusCode, &location, &body)
	if err == nil {
		return &approval.KeyHolder{Fingerprint: fingerprint, Response: &approval.StoredResponse{
			StatusCode: int(statusCode.Int64),
			Location:   location.String,
			Body:       body,
		}}, nil
	} else if !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("find idempotency record: %w", err)
	}
	rows, err := tx.query(ctx, approvalDetailSQL+` WHERE a.requester = ? AND a.operation_key = ?`, requester, key)
	list, err := sqldb.Collect(rows, err, sqldb.ScanApprovalDetail)
	if err != nil || len(list) == 0 {
		return nil, err
	}
	return &approval.KeyHolder{Fingerprint: list[0].Fingerprint, Approval: list[0]}, nil
}

// insertApproval writes the record (taking over, once its lease has ended, an in-flight one
// that the two-transaction create of earlier versions left behind), the approval, its
// approvers and its created event.
func insertApproval(ctx context.Context, tx *tx, a *approval.Approval, resp approval.StoredResponse, retain time.Duration, cause approval.Cause) error {
	res, err := tx.ExecContext(ctx, `
		INSERT INTO idempotency_records
			(requester, idempotency_key, fingerprint, state, token, lease_expires_at, created_at,
			 status_code, location, body, retain_until)
		VALUES (?, ?, ?, 'completed', '', NULL, ?, ?, ?, ?, ?)
		ON CONFLICT (requester, idempotency_key) DO UPDATE SET
			fingerprint = excluded.fingerprint, state = excluded.state, token = excluded.token,
			lease_expires_at = NULL, created_at = excluded.created_at,
			status_code = excluded.status_code, location = excluded.location,
			body = excluded.body, retain_until = excluded.retain_until
		WHERE idempotency_records.state = 'in_flight' AND idempotency_records.lease_expires_at <= ?`,
		a.Requester, a.OperationKey, a.Fingerprint, micros(tx.now),
		resp.StatusCode, resp.Location, resp.Body, micros(tx.now.Add(retain)), micros(tx.now),
	)
	if err != nil {
		return fmt.Errorf("insert idempotency record: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("insert idempotency record: %w", err)
	} else if n != 1 {
		// An in-flight claim of an earlier version whose lease still runs.
		return &approval.Error{Code: approval.ECONFLICT, Message: "a request with this Idempotency-Key is still in flight", RetryAfter: time.Second}
	}

	if _, err := tx.ExecContext(ctx, `
		INSERT INTO approvals (id, requester, operation_key, fingerprint, action, title, context,
			required_approvals, status, decided_at, expires_at, created_at, version, callback_url)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', NULL, ?, ?, 1, NULLIF(?, ''))`,
		a.ID, a.Requester, a.OperationKey, a.Fingerprint, a.Action, a.Title, nullText(a.Context),
		a.RequiredApprovals, micros(a.ExpiresAt), micros(a.CreatedAt), a.CallbackURL,
	); err != nil {
		if isUnique(err) {
			return approval.Errorf(approval.ECONFLICT, "an approval with this id or operation key already exists")
		}
		return fmt.Errorf("insert approval: %w", err)
	}
	for i, name := range a.Approvers {
		if _, err := tx.ExecContext(ctx, `
			INSERT INTO approval_approvers (approval_id, position, approver, created_at) VALUES (?, ?, ?, ?)`,
			a.ID, i, name, micros(a.CreatedAt),
		); err != nil {
			if isUnique(err) {
				return approval.Errorf(approval.EINVALID, "approver %q is listed twice", name)
			}
			return fmt.Errorf("insert approver: %w", err)
		}
	}
	return newRuleTx(tx).EventInsert(ctx, a.ID, approval.EventCreated, a.Requester, cause, nil)
}

// IdempotencyRecordDeleteExpired: the records are found by their rowid.
func (t *ruleTx) IdempotencyRecordDeleteExpired(ctx context.Context, leaseEndedBefore time.Time, limit int) (int, error) {
	n, err := t.Run.Exec(ctx, `
		DELETE FROM idempotency_records WHERE rowid IN (
			SELECT rowid FROM idempotency_records
			WHERE state = 'completed' AND retain_until <= ?
			UNION ALL
			SELECT rowid FROM idempotency_records
			WHERE state = 'in_flight' AND lease_expires_at < ?
			LIMIT ?)`,
		micros(t.tx.now), micros(leaseEndedBefore), limit)
	return int(n), fail("purge idempotency records", err)
}

// nullText binds JSON as TEXT, or NULL when there is none.
func nullText(b []byte) sql.NullString {
	return sql.NullString{String: string(b), Valid: b != nil}
}
