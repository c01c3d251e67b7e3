package sqldb

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/approvald/approval"
)

// Reads are the read methods of approval.Store that both drivers run alike: each is one
// statement, so it sees one snapshot and needs no transaction (one round trip on
// PostgreSQL). A driver's Store holds Reads, set up with its read pool and dialect, and
// names each method it takes from it.
type Reads struct {
	// DB runs the statements: the driver's read pool.
	DB Querier
	// Dialect is the driver's SQL dialect.
	Dialect Dialect
	// Clock is the driver's clock, read once per method, at approval.Precision in UTC.
	Clock func() time.Time
	// Translate turns a driver error into the application's, naming op.
	Translate func(op string, err error) error
}

// Approval returns one approval with its approvers, decisions and execution, or ENOTFOUND.
//
// A pending approval.TokenCheck in ctx rides in the read's WHERE clause, evaluated once
// for the statement: a row read means the token is still good, so a GET by a token already
// seen is one statement, one round trip. When no row comes back, the approval is missing or
// the token no longer good; a second statement, the check alone, tells which.
func (r Reads) Approval(ctx context.Context, id string) (*approval.Approval, error) {
	c := approval.PendingTokenCheck(ctx)
	if c == nil {
		a, err := ApprovalByID(ctx, r.DB, r.Dialect, id)
		return a, r.Translate("read approval", err)
	}
	d := r.Dialect
	rows, err := r.DB.Query(ctx, d.ApprovalDetail+` WHERE a.id = `+d.Param(1)+` AND (`+TokenCheckSQL(d, 2)+`) = 1`,
		append([]any{id}, TokenCheckArgs(d, c)...)...)
	list, err := Collect(rows, err, ScanApprovalDetail)
	var a *approval.Approval
	if len(list) == 1 {
		a = list[0]
	}
	return r.Checked(ctx, id, c, a, err)
}

// Checked ends a read of approval id whose statement carried the pending token check c (see
// Approval): it settles c (SettleCheck), then returns a, the approval read (nil: no row), or
// ENOTFOUND, or the read's error.
func (r Reads) Checked(ctx context.Context, id string, c *approval.TokenCheck, a *approval.Approval, err error) (*approval.Approval, error) {
	if err == nil {
		err = SettleCheck(ctx, r.DB, r.Dialect, c, a != nil)
	}
	switch {
	case err != nil:
		return nil, r.Translate("read approval", err)
	case a != nil:
		return a, nil
	}
	return nil, approval.Errorf(approval.ENOTFOUND, "approval %s not found", id)
}

// ApprovalByID reads one approval with its details through q, or ENOTFOUND.
func ApprovalByID(ctx context.Context, q Querier, d Dialect, id string) (*approval.Approval, error) {
	rows, err := q.Query(ctx, d.ApprovalDetail+` WHERE a.id = `+d.Param(1), id)
	return first(Collect(rows, err, ScanApprovalDetail))("approval %s not found", id)
}

// Approvals lists approvals newest first; see approval.Store.
//
// A listing by approver, by requester or by visibility reads the page from an index ordered
// as the listing is, (subject, created_at, id), from the cursor on: the approvers' (whose rows
// carry their approval's created_at, migration 0009) or the requesters'. Visibility, requester
// or approver, is the union of the two, each read no further than a page. The page's ids are
// then read whole. So a page costs what it holds, however many approvals the subject has
// (docs/query-plans.md, "Listings"); the other filters are
// applied to each row as the index gives it.
func (r Reads) Approvals(ctx context.Context, f approval.ApprovalFilter) ([]*approval.Approval, string, error) {
	limit, err := f.Check()
	if err != nil {
		return nil, "", err
	}
	var c *cursorAt
	if f.Cursor != "" {
		at, id, err := approval.DecodeCursor(f.Cursor)
		if err != nil {
			return nil, "", err
		}
		c = &cursorAt{at: at, id: id}
	}
	q := Query{Dialect: r.Dialect}
	// Pending approvals are the backlog: their range of approvals_status_created is as long
	// as what waits, where a subject's range is as long as its history. So a listing of
	// pending ones ("waiting for me") reads that range, with the subject as a filter: a
	// subject's range read newest first for its few pending rows would go through its whole
	// history past the last one, and PostgreSQL's parallel plan of it would do so on the first
	// page too (docs/query-plans.md, "Listings").
	pending := f.Status == approval.StatusPending
	switch {
	case f.AskedOf != "":
		// "Waiting for me": one range of approval_asks per name, the person's and each of
		// their groups', each no longer than a page (docs/query-plans.md, "Waiting for me").
		ranges := "SELECT id FROM (" + asksRange(&q, "person", f.AskedOf, c, f, limit) + ") k0"
		for i, g := range f.AskedGroups {
			ranges += " UNION SELECT id FROM (" + asksRange(&q, "group", g, c, f, limit) + ") k" + strconv.Itoa(i+1)
		}
		q.And("a.id IN (" + ranges + ")")
	case f.Approver != "" && !pending:
		q.And("a.id IN (" + approverRange(&q, f.Approver, c, f, limit, "approver") + ")")
	case f.Requester != "" && !pending:
		q.And("a.id IN (" + approvalsRange(&q, "requester", f.Requester, c, f, limit) + ")")
	case f.VisibleTo != "" && !pending:
		// Each half in an aliased derived table: a compound SELECT's parts cannot carry their
		// own ORDER BY and LIMIT otherwise.
		q.And("a.id IN (SELECT id FROM (" + approvalsRange(&q, "visible", f.VisibleTo, c, f, limit) +
			") mine UNION SELECT id FROM (" + approverRange(&q, f.VisibleTo, c, f, limit, "visible") + ") listing_me)")
	case f.Status != "":
		// By status, the ids of the page from approvals_status_created alone (a covering
		// read), then their rows. As one statement PostgreSQL reads approvals_created newest
		// first and drops every row of another status: a listing of approved ones would go
		// through the whole pending backlog first (docs/query-plans.md, "Listings").
		q.And("a.id IN (" + approvalsRange(&q, "status", string(f.Status), c, f, limit) + ")")
	default:
		// By action, the range of approvals_action_created (migration 0013) from the cursor:
		// an action with few approvals or none is a short read, where approvals_created with
		// a filter would read the whole table to find no page (docs/query-plans.md,
		// "Listings").
		filter(&q, f, "")
		if c != nil {
			q.And(c.before(&q, "a.created_at", "a.id"))
		}
	}
	// A pending token check rides in the page's own statement, as in Approval: a page found
	// passes it; an empty page asks the token alone.
	check := approval.PendingTokenCheck(ctx)
	if check != nil {
		q.And("(" + tokenCheckCond(&q, check) + ") = 1")
	}
	list, next, err := page(ctx, r, "list approvals", r.Dialect.ApprovalDetail, &q, "a.created_at", "a.id", limit, ScanApprovalDetail,
		func(a *approval.Approval) (time.Time, string) { return a.CreatedAt, a.ID })
	if err != nil {
		return nil, "", err
	}
	if err := SettleCheck(ctx, r.DB, r.Dialect, check, len(list) > 0); err != nil {
		return nil, "", r.Translate("list approvals", err)
	}
	return list, next, nil
}

// cursorAt is a decoded cursor: the position of the last row of the previous page.
type cursorAt struct {
	at time.Time
	id string
}

// before is the condition that a row, at atColumn and idColumn, comes after c in a
// newest-first listing, with c's position added to q's arguments.
func (c *cursorAt) before(q *Query, atColumn, idColumn string) string {
	return "(" + atColumn + ", " + idColumn + ") < (" + q.Arg(q.Dialect.Time(c.at)) + ", " + q.Arg(c.id) + ")"
}

// approverRange returns a SELECT of the ids (as id) of the first limit+1 approvals listing
// approver after c that pass f's other filters, newest first, read from the approvers' index.
// driver is the filter the range stands for, which filter then leaves out.
func approverRange(q *Query, approver string, c *cursorAt, f approval.ApprovalFilter, limit int, driver string) string {
	s := "SELECT p.approval_id AS id FROM approval_approvers p"
	if hasFilter(f, driver) {
		s += " JOIN approvals a ON a.id = p.approval_id"
	}
	s += " WHERE p.approver = " + q.Arg(approver)
	if c != nil {
		s += " AND " + c.before(q, "p.created_at", "p.approval_id")
	}
	return s + filter(q, f, driver) + " ORDER BY p.created_at DESC, p.approval_id DESC LIMIT " + q.Arg(limit+1)
}

// asksRange returns a SELECT of the ids (as id) of the first limit+1 pending approvals that ask
// name, of kind person or group, after c and pass f's other filters, newest first, read from
// approval_asks_name (migration 0027). An approval under a policy does not ask its requester,
// f.AskedOf, even through a group.
func asksRange(q *Query, kind, name string, c *cursorAt, f approval.ApprovalFilter, limit int) string {
	s := "SELECT k.approval_id AS id FROM approval_asks k JOIN approvals a ON a.id = k.approval_id" +
		" WHERE k.kind = " + q.Arg(kind) + " AND k.name = " + q.Arg(name) +
		" AND (a.policy IS NULL OR a.requester <> " + q.Arg(f.AskedOf) + ")"
	if c != nil {
		s += " AND " + c.before(q, "k.created_at", "k.approval_id")
	}
	return s + filter(q, f, "asked") + " ORDER BY k.created_at DESC, k.approval_id DESC LIMIT " + q.Arg(limit+1)
}

// approvalsRange is approverRange over the approvals whose column driver ("requester", the
// requester of "visible", or "status") is value, from that column's index
// (approvals_requester_created, approvals_status_created): the ids alone, a covering read.
func approvalsRange(q *Query, driver, value string, c *cursorAt, f approval.ApprovalFilter, limit int) string {
	column := "a.requester"
	if driver == "status" {
		column = "a.status"
	}
	s := "SELECT a.id AS id FROM approvals a WHERE " + column + " = " + q.Arg(value)
	if c != nil {
		s += " AND " + c.before(q, "a.created_at", "a.id")
	}
	return s + filter(q, f, driver) + " ORDER BY a.created_at DESC, a.id DESC LIMIT " + q.Arg(limit+1)
}

// hasFilter tells whether f filters on more than driver, the filter a range already applies.
func hasFilter(f approval.ApprovalFilter, driver string) bool {
	return f.Status != "" || f.Decided || f.NotVotedBy != "" || f.Action != "" || f.Query != "" ||
		(f.Requester != "" && driver != "requester") ||
		(f.VisibleTo != "" && driver != "visible") ||
		(f.Approver != "" && driver != "approver")
}

// filter adds f's conditions on the approval a, but for driver's (see approverRange), to q:
// as " AND ..." conditions that it returns when driver is set, else to q's WHERE clause.
func filter(q *Query, f approval.ApprovalFilter, driver string) string {
	var conds []string
	if f.Approver != "" && driver != "approver" {
		conds = append(conds, "EXISTS (SELECT 1 FROM approval_approvers o WHERE o.approval_id = a.id AND o.approver = "+q.Arg(f.Approver)+")")
	}
	if f.Requester != "" && driver != "requester" {
		conds = append(conds, "a.requester = "+q.Arg(f.Requester))
	}
	if f.VisibleTo != "" && driver != "visible" {
		conds = append(conds, "(a.requester = "+q.Arg(f.VisibleTo)+" OR EXISTS (SELECT 1 FROM approval_approvers v WHERE v.approval_id = a.id AND v.approver = "+q.Arg(f.VisibleTo)+"))")
	}
	if f.Status != "" && driver != "status" {
		conds = append(conds, "a.status = "+q.Arg(string(f.Status)))
	}
	if f.Decided {
		conds = append(conds, "a.status <> "+q.Arg(string(approval.StatusPending)))
	}
	if f.Action != "" {
		action := "a.action"
		if f.Status == approval.StatusPending {
			// A listing of pending approvals reads the pending range (see Approvals). Put as
			// an expression, which no index serves, the action keeps SQLite, which has no
			// statistics to weigh the two ranges, off the action's range: its whole history,
			// read to the end for a page past the last pending one (943 ms at a million).
			action = "(a.action || '')"
		}
		conds = append(conds, action+" = "+q.Arg(f.Action))
	}
	if f.NotVotedBy != "" {
		conds = append(conds, "NOT EXISTS (SELECT 1 FROM decisions d WHERE d.approval_id = a.id AND d.approver = "+q.Arg(f.NotVotedBy)+")")
	}
	if f.Query != "" {
		// Both sides lower-cased in ASCII only, as SQLite's lower() does, so that the stores
		// agree on every title; the search text's own % and _ are escaped.
		conds = append(conds, q.Dialect.LowerASCII("a.title")+" LIKE "+q.Arg("%"+escapeLike(lowerASCII(f.Query))+"%")+` ESCAPE '\'`)
	}
	if driver == "" {
		for _, c := range conds {
			q.And(c)
		}
		return ""
	}
	s := ""
	for _, c := range conds {
		s += " AND " + c
	}
	return s
}

// escapeLike escapes LIKE's wildcards and its escape character, backslash, in s.
func escapeLike(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

// lowerASCII lower-cases the ASCII letters of s, and only those.
func lowerASCII(s string) string {
	return strings.Map(func(r rune) rune {
		if 'A' <= r && r <= 'Z' {
			return r + ('a' - 'A')
		}
		return r
	}, s)
}

// Events returns an approval's audit trail, oldest first, or ENOTFOUND. The approval is
// joined, so that an unknown one is told apart from an empty trail in the same statement.
func (r Reads) Events(ctx context.Context, approvalID string) ([]approval.Event, error) {
	rows, err := r.DB.Query(ctx, `
		SELECT e.seq, e.type, e.at, e.actor, e.cause, e.detail
		FROM approvals a LEFT JOIN events e ON e.approval_id = a.id
		WHERE a.id = `+r.Dialect.Param(1)+` ORDER BY e.seq`, approvalID)
	list, err := Collect(rows, err, func(row Row) (*approval.Event, error) {
		var (
			seq           *int64
			typ, actor    *string
			at            *time.Time
			cause, detail []byte
		)
		if err := row.Scan(&seq, &typ, NullTime(&at), &actor, Bytes(&cause), Bytes(&detail)); err != nil {
			return nil, fmt.Errorf("scan event: %w", err)
		}
		if seq == nil {
			return nil, nil // the approval without events
		}
		e := &approval.Event{ApprovalID: approvalID, Seq: *seq, Type: *typ, At: *at, Actor: *actor}
		if err := json.Unmarshal(cause, &e.Cause); err != nil {
			return nil, fmt.Errorf("decode cause of event %d: %w", e.Seq, err)
		}
		if err := decodeJSON(detail, &e.Detail); err != nil {
			return nil, fmt.Errorf("decode detail of event %d: %w", e.Seq, err)
		}
		return e, nil
	})
	if err != nil {
		return nil, r.Translate("list events", err)
	}
	if len(list) == 0 {
		return nil, approval.Errorf(approval.ENOTFOUND, "approval %s not found", approvalID)
	}
	events := []approval.Event{}
	for _, e := range list {
		if e != nil {
			events = append(events, *e)
		}
	}
	return events, nil
}

// Execution returns one execution, or ENOTFOUND.
func (r Reads) Execution(ctx context.Context, id string) (*approval.ExecutionRecord, error) {
	rows, err := r.DB.Query(ctx, `SELECT `+ExecutionColumns+` FROM executions x WHERE x.id = `+r.Dialect.Param(1), id)
	rec, err := first(Collect(rows, err, func(row Row) (*approval.ExecutionRecord, error) { return ScanExecution(row) }))("execution %s not found", id)
	return rec, r.Translate("read execution", err)
}

// Executions lists executions newest first (created_at, then id, descending).
func (r Reads) Executions(ctx context.Context, f approval.ExecutionFilter) ([]*approval.ExecutionRecord, string, error) {
	limit, err := f.Check()
	if err != nil {
		return nil, "", err
	}
	q := Query{Dialect: r.Dialect}
	if f.Status != "" {
		q.And("x.status = " + q.Arg(string(f.Status)))
	}
	if err := q.After(f.Cursor, "x.created_at", "x.id"); err != nil {
		return nil, "", err
	}
	return page(ctx, r, "list executions", `SELECT `+ExecutionColumns+` FROM executions x`, &q, "x.created_at", "x.id", limit,
		func(row Row) (*approval.ExecutionRecord, error) { return ScanExecution(row) },
		func(x *approval.ExecutionRecord) (time.Time, string) { return x.CreatedAt, x.ID })
}

// InboxEvent returns one event with its body, or ENOTFOUND.
func (r Reads) InboxEvent(ctx context.Context, id string) (*approval.InboxEvent, error) {
	e, err := InboxEventByID(ctx, r.DB, r.Dialect, id)
	return e, r.Translate("read inbox event", err)
}

// InboxEventByID reads one inbox event with its body through q, or ENOTFOUND.
func InboxEventByID(ctx context.Context, q Querier, d Dialect, id string) (*approval.InboxEvent, error) {
	rows, err := q.Query(ctx, `SELECT `+InboxColumns+`, i.body FROM inbox_events i WHERE i.id = `+d.Param(1), id)
	return first(Collect(rows, err, ScanInbox))("inbox event %s not found", id)
}

// InboxEvents lists events newest first (received_at, then id, descending), without bodies.
func (r Reads) InboxEvents(ctx context.Context, f approval.InboxFilter) ([]*approval.InboxEvent, string, error) {
	limit, err := f.Check()
	if err != nil {
		return nil, "", err
	}
	q := Query{Dialect: r.Dialect}
	if f.Status != "" {
		q.And("i.status = " + q.Arg(string(f.Status)))
	}
	if f.Source != "" {
		q.And("i.source = " + q.Arg(f.Source))
	}
	if err := q.After(f.Cursor, "i.received_at", "i.id"); err != nil {
		return nil, "", err
	}
	return page(ctx, r, "list inbox events", `SELECT `+InboxColumns+`, NULL FROM inbox_events i`, &q, "i.received_at", "i.id", limit, ScanInbox,
		func(e *approval.InboxEvent) (time.Time, string) { return e.ReceivedAt, e.ID })
}

// page runs one page of a newest-first listing: selectSQL with q's conditions, ordered by
// (atColumn, idColumn) descending, scanned with scan; key gives a row's position for the next
// page's cursor.
func page[T any](ctx context.Context, r Reads, op, selectSQL string, q *Query, atColumn, idColumn string, limit int,
	scan func(Row) (T, error), key func(T) (time.Time, string)) ([]T, string, error) {
	rows, err := r.DB.Query(ctx, selectSQL+q.Where()+q.Page(atColumn, idColumn, limit), q.Args...)
	list, err := Collect(rows, err, scan)
	if err != nil {
		return nil, "", r.Translate(op, err)
	}
	list, next := Paged(list, limit, key)
	return list, next, nil
}

// ApprovalCounts returns how many approvals are in each status, every status present.
func (r Reads) ApprovalCounts(ctx context.Context) (map[approval.Status]int, error) {
	counts, _, err := countByStatus(ctx, r, "approvals", approval.Statuses, "0")
	return counts, err
}

// InboxCounts returns how many inbox events are in each status, every status present.
func (r Reads) InboxCounts(ctx context.Context) (map[approval.InboxStatus]int, error) {
	counts, _, err := countByStatus(ctx, r, "inbox_events", approval.InboxStatuses, "0")
	return counts, err
}

// ExecutionCounts returns how many executions are in each status, every status present, and
// how many are running past their lease.
func (r Reads) ExecutionCounts(ctx context.Context) (map[approval.ExecutionStatus]int, int, error) {
	counts, expired, err := countByStatus(ctx, r, "executions", approval.ExecutionStatuses,
		`count(CASE WHEN lease_expires_at <= `+r.Dialect.Param(1)+` THEN 1 END)`, r.Dialect.Time(r.Clock()))
	return counts, expired[approval.ExecutionRunning], err
}

// Backlog counts the rows in the backlog statuses and the running executions past their
// lease, in one statement; see approval.Store. Each branch reads its statuses' range of an
// index led by status (approvals_status_expires, inbox_events_due_order, executions_due or, on
// SQLite, executions_lease, which covers the lease), never the rows of the other statuses.
func (r Reads) Backlog(ctx context.Context) (approval.Backlog, error) {
	b := approval.Backlog{
		Approvals:  zeros(approval.BacklogStatuses),
		Inbox:      zeros(approval.BacklogInboxStatuses),
		Executions: zeros(approval.BacklogExecutionStatuses),
	}
	q := Query{Dialect: r.Dialect}
	stmt := `SELECT 'approvals', status, count(*), 0 FROM approvals WHERE status IN (` + inList(&q, approval.BacklogStatuses) + `) GROUP BY status
UNION ALL SELECT 'inbox_events', status, count(*), 0 FROM inbox_events WHERE status IN (` + inList(&q, approval.BacklogInboxStatuses) + `) GROUP BY status
UNION ALL SELECT 'executions', status, count(*), count(CASE WHEN lease_expires_at <= ` + q.Arg(r.Dialect.Time(r.Clock())) + ` THEN 1 END)
FROM executions WHERE status IN (` + inList(&q, approval.BacklogExecutionStatuses) + `) GROUP BY status`
	rows, err := r.DB.Query(ctx, stmt, q.Args...)
	err = Each(rows, err, func(row Row) error {
		var table, status string
		var n, past int
		if err := row.Scan(&table, &status, &n, &past); err != nil {
			return err
		}
		switch table {
		case "approvals":
			b.Approvals[approval.Status(status)] = n
		case "inbox_events":
			b.Inbox[approval.InboxStatus(status)] = n
		default:
			b.Executions[approval.ExecutionStatus(status)] = n
			if approval.ExecutionStatus(status) == approval.ExecutionRunning {
				b.Stuck = past
			}
		}
		return nil
	})
	return b, r.Translate("count backlog", err)
}

// zeros returns a count of zero for each status.
func zeros[S ~string](statuses []S) map[S]int {
	m := make(map[S]int, len(statuses))
	for _, st := range statuses {
		m[st] = 0
	}
	return m
}

// inList adds each status to q's parameters and returns their placeholders, comma-separated.
func inList[S ~string](q *Query, statuses []S) string {
	ps := make([]string, len(statuses))
	for i, st := range statuses {
		ps[i] = q.Arg(string(st))
	}
	return strings.Join(ps, ", ")
}

// countByStatus counts the rows of table in each status, zero for a status with none, and
// the value of the expression expired (with args) for each status.
func countByStatus[S ~string](ctx context.Context, r Reads, table string, statuses []S, expired string, args ...any) (map[S]int, map[S]int, error) {
	counts, past := make(map[S]int, len(statuses)), make(map[S]int, len(statuses))
	for _, st := range statuses {
		counts[st] = 0
	}
	rows, err := r.DB.Query(ctx, `SELECT status, count(*), `+expired+` FROM `+table+` GROUP BY status`, args...)
	err = Each(rows, err, func(row Row) error {
		var status string
		var n, p int
		if err := row.Scan(&status, &n, &p); err != nil {
			return err
		}
		counts[S(status)], past[S(status)] = n, p
		return nil
	})
	return counts, past, r.Translate("count "+table, err)
}

// first returns the first of the rows a query collected, or, when there is none, ENOTFOUND
// with the message the returned function is given.
func first[T any](list []T, err error) func(format string, args ...any) (T, error) {
	return func(format string, args ...any) (T, error) {
		var zero T
		if err != nil {
			return zero, err
		}
		if len(list) == 0 {
			return zero, approval.Errorf(approval.ENOTFOUND, format, args...)
		}
		return list[0], nil
	}
}
