package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/approvald/approval"
)

// Approval returns one approval with its approvers, decisions and execution, or ENOTFOUND,
// in one statement: one round trip, one snapshot.
func (s *Store) Approval(ctx context.Context, id string) (*approval.Approval, error) {
	conn, _, err := s.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	return readApproval(ctx, conn, id)
}

// Approvals lists approvals newest first.
func (s *Store) Approvals(ctx context.Context, f approval.ApprovalFilter) ([]*approval.Approval, string, error) {
	limit, err := pageSize(f.Limit)
	if err != nil {
		return nil, "", err
	}
	if f.Status != "" && !f.Status.Valid() {
		return nil, "", approval.Errorf(approval.EINVALID, "unknown status %q", f.Status)
	}

	var q filter
	if f.Status != "" {
		q.and("a.status = " + q.param(string(f.Status)))
	}
	if f.Approver != "" {
		q.and("EXISTS (SELECT 1 FROM approval_approvers p WHERE p.approval_id = a.id AND p.approver = " + q.param(f.Approver) + ")")
	}
	if f.VisibleTo != "" {
		v := q.param(f.VisibleTo)
		q.and("(a.requester = " + v + " OR EXISTS (SELECT 1 FROM approval_approvers p WHERE p.approval_id = a.id AND p.approver = " + v + "))")
	}
	if err := q.after(f.Cursor, "a.created_at", "a.id"); err != nil {
		return nil, "", err
	}
	// One row more than the page tells whether there is a next page. One statement: one
	// round trip, one snapshot, whatever the page size.
	sql := approvalDetailSQL + q.where() +
		` ORDER BY a.created_at DESC, a.id DESC LIMIT ` + q.param(limit+1)

	conn, _, err := s.acquire(ctx)
	if err != nil {
		return nil, "", err
	}
	defer conn.Release()
	return collectPage(ctx, conn, "list approvals", sql, q.args, limit, scanApprovalDetail,
		func(a *approval.Approval) (time.Time, string) { return a.CreatedAt, a.ID })
}

// ApprovalCounts returns how many approvals are in each status, with every known status
// present (zero when none) so that a metrics gauge falls back to zero.
func (s *Store) ApprovalCounts(ctx context.Context) (map[approval.Status]int, error) {
	tx, err := s.beginRead(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)

	rows, err := tx.Query(ctx, `SELECT status, count(*) FROM approvals GROUP BY status`)
	if err != nil {
		return nil, translate("count approvals", err)
	}
	counts := map[approval.Status]int{
		approval.StatusPending: 0, approval.StatusApproved: 0, approval.StatusRejected: 0,
		approval.StatusExpired: 0, approval.StatusCancelled: 0,
	}
	var status string
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&status, &n}, func() error {
		counts[approval.Status(status)] = n
		return nil
	}); err != nil {
		return nil, translate("count approvals", err)
	}
	return counts, tx.commit(ctx, "commit count approvals")
}

// Events returns an approval's audit trail, oldest first, or ENOTFOUND.
func (s *Store) Events(ctx context.Context, approvalID string) ([]approval.Event, error) {
	tx, err := s.beginRead(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)

	var exists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM approvals WHERE id = $1)`, approvalID).Scan(&exists); err != nil {
		return nil, translate("find approval", err)
	}
	if !exists {
		return nil, approval.Errorf(approval.ENOTFOUND, "approval %s not found", approvalID)
	}
	rows, err := tx.Query(ctx, `
		SELECT seq, type, at, actor, cause, detail FROM events
		WHERE approval_id = $1 ORDER BY seq`, approvalID)
	if err != nil {
		return nil, translate("list events", err)
	}
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (approval.Event, error) {
		e := approval.Event{ApprovalID: approvalID}
		var cause, detail []byte
		if err := row.Scan(&e.Seq, &e.Type, &e.At, &e.Actor, &cause, &detail); err != nil {
			return e, err
		}
		e.At = e.At.UTC()
		if err := json.Unmarshal(cause, &e.Cause); err != nil {
			return e, fmt.Errorf("decode cause of event %d: %w", e.Seq, err)
		}
		if detail != nil {
			if err := json.Unmarshal(detail, &e.Detail); err != nil {
				return e, fmt.Errorf("decode detail of event %d: %w", e.Seq, err)
			}
		}
		return e, nil
	})
	if err != nil {
		return nil, translate("list events", err)
	}
	return events, tx.commit(ctx, "commit list events")
}

// approvalColumns are the approvals columns scanApproval reads, in order, from alias a.
const approvalColumns = `a.id, a.operation_key, a.action, a.title, a.context, a.requester,
	a.required_approvals, a.status, a.decided_at, a.expires_at, a.created_at, a.version,
	a.fingerprint`

// scanApproval reads approvalColumns, then any extra destinations the query selects after
// them.
func scanApproval(row pgx.Row, extra ...any) (*approval.Approval, error) {
	var a approval.Approval
	var rawContext []byte
	var status string
	dest := append([]any{&a.ID, &a.OperationKey, &a.Action, &a.Title, &rawContext, &a.Requester,
		&a.RequiredApprovals, &status, &a.DecidedAt, &a.ExpiresAt, &a.CreatedAt, &a.Version,
		&a.Fingerprint}, extra...)
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	if rawContext != nil {
		a.Context = rawContext
	}
	a.Status = approval.Status(status)
	if a.DecidedAt != nil {
		t := a.DecidedAt.UTC()
		a.DecidedAt = &t
	}
	a.ExpiresAt = a.ExpiresAt.UTC()
	a.CreatedAt = a.CreatedAt.UTC()
	return &a, nil
}

// approvalDetailSQL reads approvals with everything their answer shows, in one statement:
// the approvers in listed order, the decisions oldest first (as JSON, decoded here) and the
// public fields of the execution. Callers add the WHERE clause.
const approvalDetailSQL = `SELECT ` + approvalColumns + `,
	ARRAY(SELECT p.approver FROM approval_approvers p WHERE p.approval_id = a.id ORDER BY p.position),
	(SELECT json_agg(json_build_object('approver', d.approver, 'verdict', d.verdict,
		'comment', d.comment, 'at', d.decided_at) ORDER BY d.event_seq)
	 FROM decisions d WHERE d.approval_id = a.id),
	x.id, x.status, x.attempts, x.last_error, x.result, x.updated_at
FROM approvals a LEFT JOIN executions x ON x.approval_id = a.id`

// readApproval reads one approval.
func readApproval(ctx context.Context, q querier, id string) (*approval.Approval, error) {
	a, err := scanApprovalDetail(q.QueryRow(ctx, approvalDetailSQL+` WHERE a.id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, approval.Errorf(approval.ENOTFOUND, "approval %s not found", id)
	} else if err != nil {
		return nil, translate("read approval", err)
	}
	return a, nil
}

// scanApprovalDetail reads a row of approvalDetailSQL.
func scanApprovalDetail(row pgx.Row) (*approval.Approval, error) {
	var (
		approvers []string
		decisions []byte
		xID       *string
		xStatus   *string
		xAttempts *int
		xError    *string
		xResult   []byte
		xUpdated  *time.Time
	)
	a, err := scanApproval(row,
		&approvers, &decisions, &xID, &xStatus, &xAttempts, &xError, &xResult, &xUpdated)
	if err != nil {
		return nil, err
	}
	a.Approvers = approvers
	if a.Approvers == nil {
		a.Approvers = []string{}
	}
	a.Decisions = []approval.Decision{}
	if decisions != nil {
		if err := json.Unmarshal(decisions, &a.Decisions); err != nil {
			return nil, fmt.Errorf("decode decisions of %s: %w", a.ID, err)
		}
		for i := range a.Decisions {
			a.Decisions[i].At = a.Decisions[i].At.UTC()
		}
	}
	if xID != nil {
		at := xUpdated.UTC()
		a.Execution = &approval.Execution{ID: *xID, Status: approval.ExecutionStatus(*xStatus),
			Attempts: *xAttempts, LastError: *xError, UpdatedAt: &at}
		if len(xResult) > 0 {
			a.Execution.Result = xResult
		}
	}
	return a, nil
}

// pageSize checks a listing's limit: 0 means the default page size.
func pageSize(limit int) (int, error) {
	switch {
	case limit == 0:
		return approval.DefaultPageSize, nil
	case limit < 0 || limit > approval.MaxPageSize:
		return 0, approval.Errorf(approval.EINVALID, "limit must be between 1 and %d", approval.MaxPageSize)
	}
	return limit, nil
}

// collectPage runs one page query of a cursor-paged listing in tx. The query asks for limit+1
// rows, ordered newest first by the (time, id) pair key returns, so that the extra row tells
// whether there is a next page: the page is trimmed to limit and the cursor points after its
// last row, or is empty on the last page. Errors are translated with op.
func collectPage[T any](ctx context.Context, tx rowsQuerier, op, sql string, args []any, limit int, scan func(pgx.Row) (T, error), key func(T) (time.Time, string)) ([]T, string, error) {
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, "", translate(op, err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (T, error) { return scan(row) })
	if err != nil {
		return nil, "", translate(op, err)
	}
	if len(list) <= limit {
		return list, "", nil
	}
	list = list[:limit]
	return list, approval.EncodeCursor(key(list[limit-1])), nil
}

// rowsQuerier runs a query: a transaction or a pooled connection.
type rowsQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// filter builds the WHERE clause of a listing from fixed SQL fragments; only values travel,
// as parameters.
type filter struct {
	conds []string
	args  []any
}

// param adds v as the next parameter and returns its placeholder.
func (f *filter) param(v any) string {
	f.args = append(f.args, v)
	return "$" + strconv.Itoa(len(f.args))
}

// and adds a condition.
func (f *filter) and(cond string) { f.conds = append(f.conds, cond) }

// after continues a newest-first listing after the row a cursor names: (at, id) are the
// columns the listing is ordered by. A cursor it cannot read is EINVALID.
func (f *filter) after(cursor, atColumn, idColumn string) error {
	if cursor == "" {
		return nil
	}
	at, id, err := approval.DecodeCursor(cursor)
	if err != nil {
		return err
	}
	f.and("(" + atColumn + ", " + idColumn + ") < (" + f.param(at) + ", " + f.param(id) + ")")
	return nil
}

// where returns " WHERE ..." for the conditions, or "" when there are none.
func (f *filter) where() string {
	if len(f.conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(f.conds, " AND ")
}
