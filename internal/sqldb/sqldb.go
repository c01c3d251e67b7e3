// Package sqldb is what the two SQL drivers, sqlite and postgres, share: the read methods of
// approval.Store (Reads) and the statements of approval.Tx (Tx) that are alike in both
// dialects but for what the Dialect gives (the placeholders, the stored form of a time, the
// lock clauses, the binding of a list), the scanning of approval, execution, inbox event and
// event rows, the building of paged listings with keyset cursors, the applying of embedded
// migrations and the shape of the translation of errors (Translate, Classify). It decides nothing: the rules are the root package's,
// and each driver keeps the statements whose SQL is its own (the claims, advisory locks,
// statements over arrays, NOTIFY), how its transaction runs statements (Runner) and what its
// own error codes mean. See docs/architecture.md, "Layers" and "What is left in the drivers".
package sqldb

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/approvald/approval"
)

// Dialect is what a driver tells the shared code about its SQL.
type Dialect struct {
	// Param returns the placeholder of the nth argument (from 1): "?" or "$n".
	Param func(n int) string
	// Time returns a time as the dialect stores it: Unix microseconds on SQLite, the
	// time itself on PostgreSQL.
	Time func(time.Time) any
	// ApprovalDetail is the dialect's SELECT of an approval with everything its answer shows,
	// from approvals a, read by ScanApprovalDetail; callers add WHERE, ORDER BY and LIMIT.
	ApprovalDetail string
	// ForUpdate ends a SELECT of one table that locks its rows until the transaction ends
	// (" FOR UPDATE"), or is empty where the transaction holds the database's write lock.
	ForUpdate string
	// SkipLocked is ForUpdate for a claim: rows another transaction holds are skipped, not
	// waited for (" FOR UPDATE SKIP LOCKED"), or empty.
	SkipLocked string
	// LowerASCII returns the SQL of the text expr with its ASCII letters, and only those,
	// lower-cased: what SQLite's lower() does; PostgreSQL's does so under the "C" collation.
	LowerASCII func(expr string) string
	// AnyOf returns the condition that the text expr is one of the list bound at placeholder
	// p (List): "= ANY(p)" over an array, or IN over json_each where there are no arrays.
	AnyOf func(expr, p string) string
	// List returns a list of strings as AnyOf reads it: the slice, or its JSON text.
	List func([]string) any
	// Values returns a table of one text column, value, holding the list bound at
	// placeholder p (List), for an INSERT ... SELECT of every element: unnest over an array,
	// or json_each where there are no arrays.
	Values func(p string) string
	// InboxBodyPurgeOrder is the ORDER BY of the purge of inbox bodies
	// (InboxClearBodyHandled): the order of the dialect's index of the events that still have
	// a body (migration 0005), so that a batch reads only the rows it clears. PostgreSQL's
	// index holds the handled events in (received_at, id) order; SQLite's leads with the
	// status, and ordered by received_at alone SQLite would sort every due row of the three
	// statuses to take a batch (docs/query-plans.md, "The sweeper and the purges").
	InboxBodyPurgeOrder string
}

// NullTime returns an optional time as the dialect stores it, nil for NULL.
func (d Dialect) NullTime(t *time.Time) any {
	if t == nil {
		return nil
	}
	return d.Time(*t)
}

// SQL returns a statement written with PostgreSQL's $n placeholders in the dialect: SQLite
// reads them as ?n, numbered, so that one argument may appear twice there too.
func (d Dialect) SQL(s string) string {
	if d.Param(1) == "?" {
		return strings.ReplaceAll(s, "$", "?")
	}
	return s
}

// Rows are a query's rows: *sql.Rows (adapted, its Close returns nothing) or pgx.Rows.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// EmptyRows is a result without rows: what a Querier that only explains a statement answers.
type EmptyRows struct{}

func (EmptyRows) Next() bool        { return false }
func (EmptyRows) Scan(...any) error { return nil }
func (EmptyRows) Err() error        { return nil }
func (EmptyRows) Close()            {}

// Row is one row to scan.
type Row interface {
	Scan(dest ...any) error
}

// Querier runs one query: a driver's pool, connection or transaction, adapted.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (Rows, error)
}

// Query builds a statement's WHERE clause from fixed SQL fragments; only values travel, as
// parameters.
type Query struct {
	Dialect Dialect
	Args    []any
	conds   []string
}

// Arg adds v as the next parameter and returns its placeholder.
func (q *Query) Arg(v any) string {
	q.Args = append(q.Args, v)
	return q.Dialect.Param(len(q.Args))
}

// And adds a condition.
func (q *Query) And(cond string) { q.conds = append(q.conds, cond) }

// After continues a newest-first listing after the row a cursor names; atColumn and idColumn
// are what the listing is ordered by. A cursor no page made is approval.InvalidCursor.
func (q *Query) After(cursor, atColumn, idColumn string) error {
	if cursor == "" {
		return nil
	}
	at, id, err := approval.DecodeCursor(cursor)
	if err != nil {
		return err
	}
	q.And("(" + atColumn + ", " + idColumn + ") < (" + q.Arg(q.Dialect.Time(at)) + ", " + q.Arg(id) + ")")
	return nil
}

// Where returns " WHERE ..." for the conditions, or "" when there are none.
func (q *Query) Where() string {
	if len(q.conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(q.conds, " AND ")
}

// Page ends a listing: " ORDER BY <at> DESC, <id> DESC LIMIT <limit+1>". The one row more
// than the page tells whether another page follows (see Paged).
func (q *Query) Page(atColumn, idColumn string, limit int) string {
	return " ORDER BY " + atColumn + " DESC, " + idColumn + " DESC LIMIT " + q.Arg(limit+1)
}

// Paged trims the limit+1 rows of a Page query to the page, and returns the cursor of the next
// page, made from the last row's position (key), or "" on the last page.
func Paged[T any](list []T, limit int, key func(T) (time.Time, string)) ([]T, string) {
	if len(list) <= limit {
		return list, ""
	}
	list = list[:limit]
	return list, approval.EncodeCursor(key(list[limit-1]))
}

// Collect scans every row of a query with scan, and closes the rows.
func Collect[T any](rows Rows, err error, scan func(Row) (T, error)) ([]T, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	list := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		list = append(list, v)
	}
	return list, rows.Err()
}

// Each calls f on every row of a query, for a query read for what f does with its rows, and
// closes the rows.
func Each(rows Rows, err error, f func(Row) error) error {
	_, err = Collect(rows, err, func(row Row) (struct{}, error) { return struct{}{}, f(row) })
	return err
}

// Topics are the topics of a transaction's changes (approval.Tx's Notify), each once, for the
// driver to signal if, and when, the transaction commits.
type Topics []string

// Add adds topic, unless it is there already.
func (ts *Topics) Add(topic string) {
	if !slices.Contains(*ts, topic) {
		*ts = append(*ts, topic)
	}
}

// Positional is Dialect.Param of PostgreSQL: $1, $2, ...
func Positional(n int) string { return "$" + strconv.Itoa(n) }

// Question is Dialect.Param of SQLite: ?.
func Question(int) string { return "?" }
