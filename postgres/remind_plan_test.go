package postgres_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/approvald/approval/internal/sqldb"
	"github.com/approvald/approval/internal/testdb"
)

// TestRemindScanReadsItsIndex plans and runs the reminder scan (sqldb.RemindDueSQL, as
// ApprovalRemindDueForUpdate sends it) over many approvals, few of them pending under a policy
// with reminders and fewer due, and checks that it reads the partial index
// approvals_remind_idx and no table whole (docs/query-plans.md, "Reminders").
// APPROVALD_REMIND_PLAN_ROWS sets how many approvals (100,000; 1,000,000 for the documented
// plan).
func TestRemindScanReadsItsIndex(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rows, conn := planDatabase(t, "APPROVALD_REMIND_PLAN_ROWS")
	// Of every 100 approvals: 80 decided, 15 pending without reminders, 4 pending with a
	// reminder to come, 1 due (some of the decided ones kept a remind_at, which the partial
	// index leaves out).
	if _, err := conn.Exec(ctx, `
		INSERT INTO approvals (id, requester, operation_key, fingerprint, action, title,
			required_approvals, status, expires_at, created_at, version, remind_at)
		SELECT 'apr_' || n, 'svc', 'key-' || n, 'f', 'deploy', 't', 1,
			CASE WHEN n % 100 < 80 THEN 'approved' ELSE 'pending' END,
			now() + interval '1 day', now(), 1,
			CASE WHEN n % 100 < 40 OR n % 100 >= 95 THEN now() + interval '1 hour'
			     WHEN n % 100 = 80 THEN now() - interval '1 minute' END
		FROM generate_series(1, $1::integer) AS n`, rows); err != nil {
		t.Fatalf("fill approvals: %v", err)
	}
	if _, err := conn.Exec(ctx, `ANALYZE approvals`); err != nil {
		t.Fatalf("analyze: %v", err)
	}
	stmt := "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " +
		strings.NewReplacer("$1", "now()", "$2", "100").Replace(sqldb.RemindDueSQL) + " FOR UPDATE SKIP LOCKED"
	res, err := conn.Query(ctx, stmt)
	if err != nil {
		t.Fatalf("explain: %v", err)
	}
	lines, err := pgx.CollectRows(res, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("explain: %v", err)
	}
	plan := strings.Join(lines, "\n")
	t.Logf("reminder scan over %d approvals:\n%s", rows, plan)
	if !strings.Contains(plan, "approvals_remind_idx") || strings.Contains(plan, "Seq Scan") {
		t.Errorf("the reminder scan does not read approvals_remind_idx alone:\n%s", plan)
	}
}

// planDatabase returns how many approvals a plan test fills its tables with (100,000, or the
// number the environment variable env names, at least 1,000) and a connection to a migrated
// database of its own, closed when the test ends.
func planDatabase(t *testing.T, env string) (int, *pgx.Conn) {
	t.Helper()
	rows := 100_000
	if v := os.Getenv(env); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1000 {
			t.Fatalf("%s=%q: want a number of at least 1000", env, v)
		}
		rows = n
	}
	dsn := testdb.DSN(t, testdb.Postgres)
	mustMigrated(t, dsn)
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return rows, conn
}
