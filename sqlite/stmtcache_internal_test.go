package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// openCachedConn opens a one-connection pool on a new database file through
// cachingConnector, with a table t(id INTEGER PRIMARY KEY, v TEXT) holding rows 1 to 3, and
// returns the pool, one connection of it, and a function reporting the connection's cached
// statements.
func openCachedConn(t *testing.T) (*sql.DB, *sql.Conn, func() []string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cache.db")
	db, err := openPool("file:" + path + "?_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	for _, q := range []string{
		`CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)`,
		`INSERT INTO t (id, v) VALUES (1, 'a'), (2, 'b'), (3, 'c')`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	cached := func() []string {
		var qs []string
		err := conn.Raw(func(dc any) error {
			c, ok := dc.(*cachingConn)
			if !ok {
				return fmt.Errorf("the connection is a %T, not a *cachingConn", dc)
			}
			if len(c.stmts) != c.lru.Len() {
				return fmt.Errorf("%d statements by text, %d in the list", len(c.stmts), c.lru.Len())
			}
			for e := c.lru.Front(); e != nil; e = e.Next() {
				qs = append(qs, e.Value.(*cachedStmt).query)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return qs
	}
	return db, conn, cached
}

func TestStmtCache_ReusesAndAnswersAsUnprepared(t *testing.T) {
	ctx := context.Background()
	_, conn, cached := openCachedConn(t)
	const q = `SELECT v FROM t WHERE id = ?`
	for i, want := range []string{"a", "b", "c", "a"} {
		var v string
		if err := conn.QueryRowContext(ctx, q, i%3+1).Scan(&v); err != nil {
			t.Fatal(err)
		}
		if v != want {
			t.Fatalf("call %d: %q, want %q: a reused statement must bind each call's arguments", i, v, want)
		}
	}
	if got := cached(); len(got) != 1 || got[0] != q {
		t.Fatalf("cached %q, want the one statement run four times", got)
	}
	// A row that is not there, then the next call on the same statement.
	var v string
	if err := conn.QueryRowContext(ctx, q, 9).Scan(&v); !errors.Is(err, sql.ErrNoRows) {
		t.Fatalf("missing row: %v, want sql.ErrNoRows", err)
	}
	if err := conn.QueryRowContext(ctx, q, 2).Scan(&v); err != nil || v != "b" {
		t.Fatalf("after an empty answer: %q, %v", v, err)
	}
}

// A statement whose rows are open is not run again underneath them: the second use of its
// text runs unprepared, and both read what they should.
func TestStmtCache_OpenRowsKeepTheirStatement(t *testing.T) {
	ctx := context.Background()
	_, conn, cached := openCachedConn(t)
	const q = `SELECT id, v FROM t WHERE id >= ? ORDER BY id`
	outer, err := conn.QueryContext(ctx, q, 1)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for outer.Next() {
		var id int
		var v string
		if err := outer.Scan(&id, &v); err != nil {
			t.Fatal(err)
		}
		// The same text again while outer's rows are open.
		seen = append(seen, fmt.Sprintf("%s:%d", v, countRows(t, conn, q, id)))
	}
	if err := outer.Close(); err != nil {
		t.Fatal(err)
	}
	if want := "[a:3 b:2 c:1]"; fmt.Sprint(seen) != want {
		t.Fatalf("read %v, want %s", seen, want)
	}
	if got := cached(); len(got) != 1 {
		t.Fatalf("cached %q, want the one statement", got)
	}
	// Closed, the statement is free again: the next call runs on it.
	if n := countRows(t, conn, q, 2); n != 2 {
		t.Fatalf("after the rows closed: %d rows, want 2", n)
	}
}

// The cache keeps stmtCacheSize statements, dropping the least recently used; one dropped
// while its rows are open is closed when they close, after they were read to the end.
func TestStmtCache_Bounded(t *testing.T) {
	ctx := context.Background()
	_, conn, cached := openCachedConn(t)
	const first = `SELECT id FROM t WHERE id >= ? ORDER BY id`
	open, err := conn.QueryContext(ctx, first, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !open.Next() {
		t.Fatal("no first row")
	}
	var held *cachedStmt // first's statement, its rows open
	if err := conn.Raw(func(dc any) error {
		held = dc.(*cachingConn).stmts[first].Value.(*cachedStmt)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for i := range stmtCacheSize + 10 {
		if n := countRows(t, conn, fmt.Sprintf(`SELECT id FROM t WHERE id >= ? AND %d = %d`, i, i), 1); n != 3 {
			t.Fatalf("query %d: %d rows", i, n)
		}
	}
	got := cached()
	if len(got) != stmtCacheSize {
		t.Fatalf("%d statements cached, want %d", len(got), stmtCacheSize)
	}
	for _, q := range got {
		if q == first {
			t.Fatal("the least recently used statement is still cached")
		}
	}
	if !held.busy || !held.dropped {
		t.Fatalf("first's statement, dropped under open rows: busy %t, dropped %t; want both, to close with its rows", held.busy, held.dropped)
	}
	n := 1
	for open.Next() {
		n++
	}
	if err := open.Close(); err != nil || n != 3 {
		t.Fatalf("the dropped statement's rows: %d read, close: %v", n, err)
	}
	if held.busy {
		t.Fatal("first's statement still busy after its rows closed")
	}
	if n := countRows(t, conn, first, 2); n != 2 {
		t.Fatalf("prepared again: %d rows, want 2", n)
	}
}

// A statement that failed is dropped and prepared afresh; the failure is the driver's, as
// without the cache.
func TestStmtCache_FailedStatementForgotten(t *testing.T) {
	ctx := context.Background()
	_, conn, cached := openCachedConn(t)
	const q = `INSERT INTO t (id, v) VALUES (?, ?)`
	_, err := conn.ExecContext(ctx, q, 1, "again")
	if !isUnique(err) {
		t.Fatalf("duplicate id: %v, want a UNIQUE violation", err)
	}
	if got := cached(); len(got) != 0 {
		t.Fatalf("cached %q after the failure, want nothing", got)
	}
	if _, err := conn.ExecContext(ctx, q, 4, "d"); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, conn, `SELECT id FROM t WHERE id >= ?`, 1); n != 4 {
		t.Fatalf("%d rows, want 4", n)
	}
	if _, err := conn.ExecContext(ctx, `SELECT nonsense FROM WHERE ?`, 1); err == nil {
		t.Fatal("a syntax error was accepted")
	}
}

// Closing the pool closes the connection for real: with its statements finalized, the last
// connection's close checkpoints the WAL and removes its file, which SQLite does not do for a
// connection left open by unfinalized statements.
func TestStmtCache_CloseFinalizes(t *testing.T) {
	ctx := context.Background()
	db, conn, cached := openCachedConn(t)
	if n := countRows(t, conn, `SELECT id FROM t WHERE id >= ?`, 1); n != 3 {
		t.Fatalf("%d rows", n)
	}
	if _, err := conn.ExecContext(ctx, `UPDATE t SET v = ? WHERE id = ?`, "x", 1); err != nil {
		t.Fatal(err)
	}
	if got := cached(); len(got) != 2 {
		t.Fatalf("cached %q, want two statements", got)
	}
	var path string
	if err := conn.QueryRowContext(ctx, `SELECT file FROM pragma_database_list WHERE name = 'main'`).Scan(&path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + "-wal"); err != nil {
		t.Fatalf("no WAL file while open: %v", err)
	}
	conn.Close()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + "-wal"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the WAL file is still there after the close (%v): a statement kept the connection open", err)
	}
}

func countRows(t *testing.T, conn *sql.Conn, q string, args ...any) int {
	t.Helper()
	rows, err := conn.QueryContext(context.Background(), q, args...)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		n++
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	return n
}

// A query whose context ends while its rows are open leaves a statement that the next call
// runs as if nothing had happened, whether or not the cache kept it.
func TestStmtCache_ContextEndsUnderOpenRows(t *testing.T) {
	_, conn, _ := openCachedConn(t)
	const q = `SELECT id FROM t WHERE id >= ? ORDER BY id`
	for range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		rows, err := conn.QueryContext(ctx, q, 1)
		if err != nil {
			t.Fatal(err)
		}
		if !rows.Next() {
			t.Fatalf("no first row: %v", rows.Err())
		}
		cancel()
		for rows.Next() {
		}
		rows.Close()
		if n := countRows(t, conn, q, 2); n != 2 {
			t.Fatalf("after a cancelled read: %d rows, want 2", n)
		}
		// An Exec whose context ended before it ran fails and changes nothing.
		if _, err := conn.ExecContext(ctx, `UPDATE t SET v = ? WHERE id = ?`, "x", 1); !errors.Is(err, context.Canceled) {
			t.Fatalf("exec on an ended context: %v, want context.Canceled", err)
		}
		var v string
		if err := conn.QueryRowContext(context.Background(), `SELECT v FROM t WHERE id = ?`, 1).Scan(&v); err != nil || v != "a" {
			t.Fatalf("row 1 after the refused exec: %q, %v", v, err)
		}
	}
}
