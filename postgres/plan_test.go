package postgres_test

import (
	"context"
	"encoding/json"
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
	s := mustMigrated(t, dsn)
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

// TestExecutionClaimReadsItsBatch claims from a backlog of queued executions and of running
// ones whose lease ran out, due in blocks of a thousand at one instant (as retries scheduled
// together are), on tables that filled after the claim was planned and were never analyzed,
// as under a burst of approvals or after a target's outage on a new database. Each branch of
// the claim must go through its index (executions_due_idx, executions_lease_idx) and read no
// more than twice the batch from it, counting the rows it dropped: under the generic plan
// made on the empty tables and kept, and once the tables are analyzed under a custom plan
// and a generic one. (A custom plan on tables never analyzed may still sort the backlog: see
// docs/query-plans.md.) A claim that read the whole backlog and sorted it would be linear in
// the backlog (docs/query-plans.md, "The execution claim").
func TestExecutionClaimReadsItsBatch(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dsn := testdb.DSN(t, testdb.Postgres)
	mustMigrated(t, dsn) // the schema; the claim runs on a connection of its own
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	exec := func(sql string) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// Nothing analyzes the tables but this test; the claim's generic plan is made now, on the
	// empty tables, and kept, as a pooled session keeps it.
	exec("ALTER TABLE executions SET (autovacuum_enabled = off); ALTER TABLE approvals SET (autovacuum_enabled = off)")
	exec("PREPARE claim AS " + postgres.ExecutionClaimSQL)
	exec("SET plan_cache_mode = force_generic_plan")
	exec("EXPLAIN EXECUTE claim(now(), 10, now())")

	const queued, expired, limit = 5000, 2000, 10
	exec(fmt.Sprintf(`
		INSERT INTO approvals (id, requester, operation_key, fingerprint, action, title,
			required_approvals, status, expires_at, created_at, version)
		SELECT 'apr_' || n, 'svc', 'key-' || n, 'f', 'deploy', 't', 1, 'approved',
			now() + interval '1 day', now(), 2
		FROM generate_series(1, %[1]d) AS n;
		INSERT INTO executions (id, approval_id, operation_key, action, status, attempts,
			next_attempt_at, lease_expires_at, created_at, updated_at)
		SELECT 'exe_' || n, 'apr_' || n, 'key-' || n, 'deploy',
			CASE WHEN n <= %[2]d THEN 'queued' ELSE 'running' END,
			CASE WHEN n <= %[2]d THEN 0 ELSE 1 END,
			CASE WHEN n <= %[2]d THEN now() - interval '1 hour' + (n / 1000) * interval '1 ms' END,
			CASE WHEN n > %[2]d THEN now() - interval '1 hour' + (n / 1000) * interval '1 ms' END,
			now(), now()
		FROM generate_series(1, %[1]d) AS n`, queued+expired, queued))

	claimIndexes := map[string]bool{"executions_due_idx": true, "executions_lease_idx": true}
	check := func(mode string) {
		t.Helper()
		exec("SET plan_cache_mode = " + mode)
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatalf("begin: %v", err)
		}
		var doc []byte
		err = tx.QueryRow(ctx, fmt.Sprintf("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE claim(now(), %d, now() + interval '1 minute')", limit),
			pgx.QueryExecModeSimpleProtocol).Scan(&doc)
		tx.Rollback(ctx) // the claim is only looked at
		if err != nil {
			t.Fatalf("%s: explain the claim: %v", mode, err)
		}
		var plans []struct{ Plan planNode }
		if err := json.Unmarshal(doc, &plans); err != nil || len(plans) != 1 {
			t.Fatalf("%s: read the plan (%v): %s", mode, err, doc)
		}
		// Each branch must go through its index, and read no more than its share of the
		// batch from it: the rows it returned and those it read and dropped, over all loops.
		seen := map[string]bool{}
		plans[0].Plan.walk(func(n planNode) {
			if n.Relation == "executions" && n.Type == "Seq Scan" {
				t.Errorf("%s: the claim scans executions whole:\n%s", mode, doc)
			}
			if !claimIndexes[n.Index] {
				return
			}
			seen[n.Index] = true
			if read := (n.Rows + n.Filtered + n.Rechecked) * n.Loops; read > 2*limit {
				t.Errorf("%s: %s on %s read %g rows to claim %d of a backlog of %d:\n%s",
					mode, n.Type, n.Index, read, limit, queued+expired, doc)
			}
		})
		for index := range claimIndexes {
			if !seen[index] {
				t.Errorf("%s: the claim does not read %s:\n%s", mode, index, doc)
			}
		}
	}
	check("force_generic_plan") // the plan made on the empty tables, as a session keeps it
	exec("ANALYZE executions, approvals")
	check("force_custom_plan")
	check("force_generic_plan")
}

// planNode is a node of EXPLAIN's JSON plan, with what TestExecutionClaimReadsItsBatch reads.
type planNode struct {
	Type      string     `json:"Node Type"`
	Relation  string     `json:"Relation Name"`
	Index     string     `json:"Index Name"`
	Rows      float64    `json:"Actual Rows"` // per loop, as the next two
	Filtered  float64    `json:"Rows Removed by Filter"`
	Rechecked float64    `json:"Rows Removed by Index Recheck"`
	Loops     float64    `json:"Actual Loops"`
	Plans     []planNode `json:"Plans"`
}

// walk calls fn on n and every node below it.
func (n planNode) walk(fn func(planNode)) {
	fn(n)
	for _, p := range n.Plans {
		p.walk(fn)
	}
}
