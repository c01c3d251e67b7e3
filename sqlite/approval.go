package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/approvald/approval"
)

// InsertApproval writes a new approval with its idempotency record in one write transaction,
// or returns what holds its key; see approval.Store. SQLite's single writer orders concurrent
// inserts of one key: the second finds the first's record.
func (s *Store) InsertApproval(ctx context.Context, a *approval.Approval, resp approval.StoredResponse, retain time.Duration, cause approval.Cause) (*approval.KeyHolder, error) {
	if err := validateNew(a); err != nil {
		return nil, err
	}
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return nil, fail("insert approval", err)
	}
	defer tx.Rollback()

	holder, err := keyHolder(ctx, tx, a.Requester, a.OperationKey)
	if err != nil {
		return nil, fail("insert approval", err)
	} else if holder != nil {
		return holder, nil
	}
	if err := insertApproval(ctx, tx, a, resp, retain, cause); err != nil {
		return nil, fail("insert approval", err)
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
	list, err := findApprovals(ctx, tx, `a.requester = ? AND a.operation_key = ?`, []any{requester, key}, "")
	if err != nil || len(list) == 0 {
		return nil, err
	}
	return &approval.KeyHolder{Fingerprint: list[0].Fingerprint, Approval: list[0]}, nil
}

// validateNew refuses an approval the schema would store but the domain cannot use.
func validateNew(a *approval.Approval) error {
	switch {
	case a.ID == "" || a.Requester == "" || a.OperationKey == "":
		return approval.Errorf(approval.EINVALID, "an approval needs an id, a requester and an operation key")
	case len(a.Approvers) == 0:
		return approval.Errorf(approval.EINVALID, "an approval needs at least one approver")
	case a.RequiredApprovals < 1 || a.RequiredApprovals > len(a.Approvers):
		return approval.Errorf(approval.EINVALID, "required_approvals must be between 1 and the number of approvers")
	}
	return nil
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

	var contextJSON sql.NullString
	if a.Context != nil {
		contextJSON = sql.NullString{String: string(a.Context), Valid: true}
	}
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO approvals (id, requester, operation_key, fingerprint, action, title, context,
			required_approvals, status, decided_at, expires_at, created_at, version)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', NULL, ?, ?, 1)`,
		a.ID, a.Requester, a.OperationKey, a.Fingerprint, a.Action, a.Title, contextJSON,
		a.RequiredApprovals, micros(a.ExpiresAt), micros(a.CreatedAt),
	); err != nil {
		if isUnique(err) {
			return approval.Errorf(approval.ECONFLICT, "an approval with this id or operation key already exists")
		}
		return fmt.Errorf("insert approval: %w", err)
	}
	for i, name := range a.Approvers {
		if _, err := tx.ExecContext(ctx, `
			INSERT INTO approval_approvers (approval_id, position, approver) VALUES (?, ?, ?)`,
			a.ID, i, name,
		); err != nil {
			if isUnique(err) {
				return approval.Errorf(approval.EINVALID, "approver %q is listed twice", name)
			}
			return fmt.Errorf("insert approver: %w", err)
		}
	}
	tx.signal(approval.TopicApprovals)
	return appendEvent(ctx, tx, a.ID, approval.EventCreated, a.Requester, cause, nil)
}

// Approval returns one approval with its approvers and decisions, or ENOTFOUND.
func (s *Store) Approval(ctx context.Context, id string) (*approval.Approval, error) {
	tx, err := s.beginRead(ctx)
	if err != nil {
		return nil, fail("approval", err)
	}
	defer tx.Rollback()

	a, err := findApproval(ctx, tx, id)
	if err != nil {
		return nil, fail("approval", err)
	}
	return a, nil
}

// Approvals lists approvals newest first; see approval.Store.
func (s *Store) Approvals(ctx context.Context, f approval.ApprovalFilter) ([]*approval.Approval, string, error) {
	limit, err := pageLimit(f.Limit)
	if err != nil {
		return nil, "", err
	}
	if f.Status != "" && !f.Status.Valid() {
		return nil, "", approval.Errorf(approval.EINVALID, "unknown status %q", f.Status)
	}

	where, args := []string{"1 = 1"}, []any{}
	if f.Status != "" {
		where, args = append(where, "a.status = ?"), append(args, string(f.Status))
	}
	if f.Approver != "" {
		where = append(where, "a.id IN (SELECT approval_id FROM approval_approvers WHERE approver = ?)")
		args = append(args, f.Approver)
	}
	if f.VisibleTo != "" {
		where = append(where, "(a.requester = ? OR a.id IN (SELECT approval_id FROM approval_approvers WHERE approver = ?))")
		args = append(args, f.VisibleTo, f.VisibleTo)
	}
	return listPage(ctx, s, "approvals", limit, f.Cursor, "(a.created_at, a.id) < (?, ?)", where, args,
		func(tx *tx, where string, args []any) ([]*approval.Approval, error) {
			return findApprovals(ctx, tx, where, args, "ORDER BY a.created_at DESC, a.id DESC LIMIT ?")
		},
		func(a *approval.Approval) (time.Time, string) { return a.CreatedAt, a.ID })
}

// listPage reads one page of a newest-first listing, ordered by a time and then an id, in a
// read transaction; what names the listing in errors. where and args hold the listing's
// filters. A cursor adds its position through after, the listing's "(time, id) < (?, ?)"
// clause. query runs the listing's own SQL with the joined WHERE clause and args, whose last
// argument, for the query's final LIMIT ?, is limit+1: the one row more tells whether another
// page follows. key gives a row's position, from which the next page's cursor is made ("" on
// the last page).
func listPage[T any](ctx context.Context, s *Store, what string, limit int, cursor, after string, where []string, args []any,
	query func(tx *tx, where string, args []any) ([]T, error), key func(T) (time.Time, string)) ([]T, string, error) {
	if cursor != "" {
		at, id, err := approval.DecodeCursor(cursor)
		if err != nil {
			return nil, "", err
		}
		where, args = append(where, after), append(args, micros(at), id)
	}
	args = append(args, limit+1)

	tx, err := s.beginRead(ctx)
	if err != nil {
		return nil, "", fail(what, err)
	}
	defer tx.Rollback()

	list, err := query(tx, strings.Join(where, " AND "), args)
	if err != nil {
		return nil, "", fail(what, err)
	}
	next := ""
	if len(list) > limit {
		list = list[:limit]
		next = approval.EncodeCursor(key(list[limit-1]))
	}
	return list, next, nil
}

// pageLimit checks a listing's requested page size and applies the default.
func pageLimit(limit int) (int, error) {
	if limit == 0 {
		return approval.DefaultPageSize, nil
	}
	if limit < 1 || limit > approval.MaxPageSize {
		return 0, approval.Errorf(approval.EINVALID, "limit must be between 1 and %d", approval.MaxPageSize)
	}
	return limit, nil
}

// PurgeResponses deletes up to limit idempotency records past their retention or abandoned
// in flight for longer than grace; see approval.Store.
func (s *Store) PurgeResponses(ctx context.Context, grace time.Duration, limit int) (int, error) {
	if limit < 1 || grace < 0 {
		return 0, approval.Errorf(approval.EINVALID, "limit must be positive and grace not negative")
	}
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return 0, fail("purge responses", err)
	}
	defer tx.Rollback()

	res, err := tx.ExecContext(ctx, `
		DELETE FROM idempotency_records WHERE rowid IN (
			SELECT rowid FROM idempotency_records
			WHERE state = 'completed' AND retain_until <= ?
			UNION ALL
			SELECT rowid FROM idempotency_records
			WHERE state = 'in_flight' AND lease_expires_at < ?
			LIMIT ?)`,
		micros(tx.now), micros(tx.now.Add(-grace)), limit)
	if err != nil {
		return 0, fail("purge responses", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fail("purge responses", err)
	}
	if err := tx.commit(); err != nil {
		return 0, fail("purge responses", err)
	}
	return int(n), nil
}

// ApprovalCounts returns the number of approvals in every status, zero included.
func (s *Store) ApprovalCounts(ctx context.Context) (map[approval.Status]int, error) {
	tx, err := s.beginRead(ctx)
	if err != nil {
		return nil, fail("approval counts", err)
	}
	defer tx.Rollback()

	rows, err := tx.QueryContext(ctx, `SELECT status, count(*) FROM approvals GROUP BY status`)
	if err != nil {
		return nil, fail("approval counts", err)
	}
	defer rows.Close()
	counts := map[approval.Status]int{
		approval.StatusPending:   0,
		approval.StatusApproved:  0,
		approval.StatusRejected:  0,
		approval.StatusExpired:   0,
		approval.StatusCancelled: 0,
	}
	for rows.Next() {
		var (
			status string
			n      int
		)
		if err := rows.Scan(&status, &n); err != nil {
			return nil, fail("approval counts", err)
		}
		counts[approval.Status(status)] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fail("approval counts", err)
	}
	return counts, nil
}

// Events returns an approval's audit trail, oldest first, or ENOTFOUND.
func (s *Store) Events(ctx context.Context, approvalID string) ([]approval.Event, error) {
	tx, err := s.beginRead(ctx)
	if err != nil {
		return nil, fail("events", err)
	}
	defer tx.Rollback()

	events, err := findEvents(ctx, tx, approvalID)
	if err != nil {
		return nil, fail("events", err)
	}
	return events, nil
}

func findEvents(ctx context.Context, tx *tx, approvalID string) ([]approval.Event, error) {
	rows, err := tx.QueryContext(ctx, `
		SELECT seq, type, at, actor, cause, detail FROM events
		WHERE approval_id = ? ORDER BY seq`,
		approvalID)
	if err != nil {
		return nil, fmt.Errorf("query events: %w", err)
	}
	defer rows.Close()
	events := []approval.Event{}
	for rows.Next() {
		var (
			e      = approval.Event{ApprovalID: approvalID}
			at     int64
			cause  string
			detail sql.NullString
		)
		if err := rows.Scan(&e.Seq, &e.Type, &at, &e.Actor, &cause, &detail); err != nil {
			return nil, fmt.Errorf("scan event: %w", err)
		}
		e.At = fromMicros(at)
		if err := json.Unmarshal([]byte(cause), &e.Cause); err != nil {
			return nil, fmt.Errorf("event %s/%d: decode cause: %w", approvalID, e.Seq, err)
		}
		if detail.Valid {
			if err := json.Unmarshal([]byte(detail.String), &e.Detail); err != nil {
				return nil, fmt.Errorf("event %s/%d: decode detail: %w", approvalID, e.Seq, err)
			}
		}
		events = append(events, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("query events: %w", err)
	}
	if len(events) == 0 {
		// Every approval has its created event, so no events means no approval; the check
		// keeps that from resting on the assumption.
		if _, err := findApproval(ctx, tx, approvalID); err != nil {
			return nil, err
		}
	}
	return events, nil
}

// appendEvent adds the next event of an approval's audit trail at tx.now. Its seq is one more
// than the last, computed inside the write transaction so no two events share one.
func appendEvent(ctx context.Context, tx *tx, approvalID, typ, actor string, cause approval.Cause, detail map[string]any) error {
	causeJSON, err := json.Marshal(cause)
	if err != nil {
		return fmt.Errorf("encode %s cause: %w", typ, err)
	}
	var detailJSON sql.NullString
	if detail != nil {
		b, err := json.Marshal(detail)
		if err != nil {
			return fmt.Errorf("encode %s detail: %w", typ, err)
		}
		detailJSON = sql.NullString{String: string(b), Valid: true}
	}
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO events (approval_id, seq, type, at, actor, cause, detail)
		SELECT ?, coalesce(max(seq), 0) + 1, ?, ?, ?, ?, ?
		FROM events WHERE approval_id = ?`,
		approvalID, typ, micros(tx.now), actor, string(causeJSON), detailJSON, approvalID,
	); err != nil {
		return fmt.Errorf("append %s event: %w", typ, err)
	}
	return nil
}

// findApproval returns the approval with id, or ENOTFOUND.
func findApproval(ctx context.Context, tx *tx, id string) (*approval.Approval, error) {
	list, err := findApprovals(ctx, tx, "a.id = ?", []any{id}, "")
	if err != nil {
		return nil, err
	}
	if len(list) == 0 {
		return nil, approval.Errorf(approval.ENOTFOUND, "approval %s not found", id)
	}
	return list[0], nil
}

// approvalColumns are the columns scanApproval reads, in order.
const approvalColumns = `a.id, a.operation_key, a.action, a.title, a.context, a.requester,
	a.required_approvals, a.status, a.decided_at, a.expires_at, a.created_at, a.version,
	a.fingerprint`

// findApprovals returns the approvals matching where (with args), followed by tail (ORDER BY,
// LIMIT), each with its approvers and decisions.
func findApprovals(ctx context.Context, tx *tx, where string, args []any, tail string) ([]*approval.Approval, error) {
	rows, err := tx.QueryContext(ctx, `SELECT `+approvalColumns+` FROM approvals a WHERE `+where+` `+tail, args...)
	if err != nil {
		return nil, fmt.Errorf("query approvals: %w", err)
	}
	defer rows.Close()
	list := []*approval.Approval{}
	for rows.Next() {
		a, err := scanApproval(rows)
		if err != nil {
			return nil, err
		}
		list = append(list, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("query approvals: %w", err)
	}
	if err := rows.Close(); err != nil {
		return nil, fmt.Errorf("query approvals: %w", err)
	}
	if err := loadDetails(ctx, tx, list); err != nil {
		return nil, err
	}
	return list, nil
}

func scanApproval(rows *sql.Rows) (*approval.Approval, error) {
	var (
		a                    approval.Approval
		contextJSON          []byte
		status               string
		decidedAt            sql.NullInt64
		expiresAt, createdAt int64
	)
	if err := rows.Scan(&a.ID, &a.OperationKey, &a.Action, &a.Title, &contextJSON, &a.Requester,
		&a.RequiredApprovals, &status, &decidedAt, &expiresAt, &createdAt, &a.Version,
		&a.Fingerprint); err != nil {
		return nil, fmt.Errorf("scan approval: %w", err)
	}
	a.Context = json.RawMessage(contextJSON)
	a.Status = approval.Status(status)
	a.DecidedAt = fromNullMicros(decidedAt)
	a.ExpiresAt = fromMicros(expiresAt)
	a.CreatedAt = fromMicros(createdAt)
	return &a, nil
}

// loadDetails fills in the approvers (in listed order) and decisions (oldest first) of a page
// of approvals with one query each, whatever the page size.
func loadDetails(ctx context.Context, tx *tx, list []*approval.Approval) error {
	if len(list) == 0 {
		return nil
	}
	byID := make(map[string]*approval.Approval, len(list))
	ids := make([]string, 0, len(list))
	for _, a := range list {
		a.Approvers, a.Decisions = []string{}, []approval.Decision{}
		byID[a.ID] = a
		ids = append(ids, a.ID)
	}
	// The ids travel as one JSON array parameter, so the statement text does not depend
	// on the page size.
	idsJSON, err := json.Marshal(ids)
	if err != nil {
		return fmt.Errorf("encode approval ids: %w", err)
	}

	rows, err := tx.QueryContext(ctx, `
		SELECT approval_id, approver FROM approval_approvers
		WHERE approval_id IN (SELECT value FROM json_each(?))
		ORDER BY approval_id, position`,
		string(idsJSON))
	if err != nil {
		return fmt.Errorf("query approvers: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, name string
		if err := rows.Scan(&id, &name); err != nil {
			return fmt.Errorf("scan approver: %w", err)
		}
		byID[id].Approvers = append(byID[id].Approvers, name)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("query approvers: %w", err)
	}
	if err := rows.Close(); err != nil {
		return fmt.Errorf("query approvers: %w", err)
	}

	// Votes cast at the same instant (a frozen test clock) keep their insertion order
	// through rowid.
	rows, err = tx.QueryContext(ctx, `
		SELECT approval_id, approver, verdict, comment, decided_at FROM decisions
		WHERE approval_id IN (SELECT value FROM json_each(?))
		ORDER BY approval_id, decided_at, rowid`,
		string(idsJSON))
	if err != nil {
		return fmt.Errorf("query decisions: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id, verdict string
			d           approval.Decision
			at          int64
		)
		if err := rows.Scan(&id, &d.Approver, &verdict, &d.Comment, &at); err != nil {
			return fmt.Errorf("scan decision: %w", err)
		}
		d.Verdict, d.At = approval.Verdict(verdict), fromMicros(at)
		byID[id].Decisions = append(byID[id].Decisions, d)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("query decisions: %w", err)
	}
	if err := rows.Close(); err != nil {
		return fmt.Errorf("query decisions: %w", err)
	}

	// Only approved approvals have an execution; the others keep Execution nil.
	rows, err = tx.QueryContext(ctx, `
		SELECT `+executionColumns+` FROM executions e
		WHERE e.approval_id IN (SELECT value FROM json_each(?))`,
		string(idsJSON))
	if err != nil {
		return fmt.Errorf("query executions: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		rec, err := scanExecution(rows)
		if err != nil {
			return err
		}
		byID[rec.ApprovalID].Execution = rec.Public()
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("query executions: %w", err)
	}
	return nil
}
