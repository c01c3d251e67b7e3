package postgres_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/postgres"
)

// TestBatchPlansUseIndexes plans the batches' statements as their sessions do, once, on a new
// database's empty tables, and checks that the plans kept still reach the rows through
// indexes once the tables have grown without being analyzed, as in a new database's first
// minute under load (docs/operations.md, "Plans on a new database"). A plan that scanned a
// table whole made every create batch read all the approvals (5 ms a batch at 20,000). It
// also checks that the store's sessions compile no plan (jit off).
func TestBatchPlansUseIndexes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dsn := testdb.DSN(t, testdb.Postgres)
	s := mustOpen(t, dsn)
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	conn, err := s.BatchConn(ctx)
	if err != nil {
		t.Fatalf("acquire a batch connection: %v", err)
	}
	defer conn.Release()

	explain := func(name, sql string) string {
		t.Helper()
		params := 0
		for _, m := range regexp.MustCompile(`\$(\d+)`).FindAllStringSubmatch(sql, -1) {
			var n int
			fmt.Sscan(m[1], &n)
			params = max(params, n)
		}
		args := strings.TrimSuffix(strings.Repeat("NULL, ", params), ", ")
		rows, err := conn.Query(ctx, "EXPLAIN EXECUTE "+name+"("+args+")", pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			t.Fatalf("explain %s: %v", name, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("explain %s: %v", name, err)
		}
		return strings.Join(lines, "\n")
	}
	for name, sql := range postgres.BatchStatements {
		if _, err := conn.Exec(ctx, "PREPARE "+name+" AS "+sql, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("prepare %s: %v", name, err)
		}
		explain(name, sql) // the session's one plan, made on the empty tables
	}

	// The tables grow, and nothing analyzes them.
	other, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer other.Close(ctx)
	if _, err := other.Exec(ctx, `
		INSERT INTO approvals (id, requester, operation_key, fingerprint, action, title,
			required_approvals, status, expires_at, created_at, version)
		SELECT 'apr_' || n, 'svc', 'key-' || n, 'f', 'deploy', 't', 1, 'pending',
			now() + interval '1 day', now(), 1
		FROM generate_series(1, 20000) AS n;
		INSERT INTO inbox_events (id, source, event_id, type, headers, received_at, status)
		SELECT 'evt_' || n, 'src', 'e-' || n, 't', '{}', now(), 'processed'
		FROM generate_series(1, 20000) AS n`); err != nil {
		t.Fatalf("fill the tables: %v", err)
	}

	for name, sql := range postgres.BatchStatements {
		if plan := explain(name, sql); strings.Contains(plan, "Seq Scan") {
			t.Errorf("%s scans a table whole with 20,000 rows:\n%s", name, plan)
		}
	}

	// Nor does any session of the store compile a statement: an estimate made on a table not
	// yet analyzed can pass jit_above_cost, and the compiling then costs every execution of
	// a batch's read 250-300 ms.
	pooled, err := s.PoolConn(ctx)
	if err != nil {
		t.Fatalf("acquire a pool connection: %v", err)
	}
	defer pooled.Release()
	for name, c := range map[string]interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}{"batch": conn, "pool": pooled} {
		var jit string
		if err := c.QueryRow(ctx, "SHOW jit").Scan(&jit); err != nil || jit != "off" {
			t.Errorf("jit on the %s's connection: %q (%v), want off", name, jit, err)
		}
	}
}

// TestJITFromTheURLWins: an operator who asks for JIT in the URL, as a parameter or in its
// options, gets it.
func TestJITFromTheURLWins(t *testing.T) {
	t.Parallel()
	for _, param := range []string{"jit=on", "options=-c%20jit%3Don"} {
		s := mustOpen(t, testdb.DSN(t, testdb.Postgres)+"&"+param)
		conn, err := s.PoolConn(t.Context())
		if err != nil {
			t.Fatalf("%s: acquire: %v", param, err)
		}
		var jit string
		err = conn.QueryRow(t.Context(), "SHOW jit").Scan(&jit)
		conn.Release()
		if err != nil || jit != "on" {
			t.Errorf("%s: jit %q (%v), want on", param, jit, err)
		}
	}
}
