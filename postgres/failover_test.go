package postgres_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/postgres"
)

// TestReplayAfterFailover checks that a retry is never answered from the Service's memory
// with an approval the database the store now talks to does not hold. The store moves, by
// the test's Failover, to another schema standing for a promoted asynchronous standby: it
// has every row made before the standby fell behind (the token, the "kept" approval) and
// none made after (the "lost" approval), and another incarnation. A retry of the lost
// create, whose answer this process remembers, makes the approval afresh (201, not a
// replay); a retry of the kept create is a replay of the approval the standby holds.
func TestReplayAfterFailover(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	primary, standby := testdb.DSN(t, testdb.Postgres), testdb.DSN(t, testdb.Postgres)
	mustMigrated(t, standby)
	s, failover, err := postgres.OpenFailover(ctx, primary)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	svc := &approval.Service{Store: s}
	secret, _, err := svc.CreateToken(ctx, tokenIssuer, approval.TokenSpec{Subject: "ci-bot", Role: approval.RoleRequester})
	if err != nil {
		t.Fatalf("create token: %v", err)
	}
	// create is a create as httpapi makes it: the token known to the Service is checked in
	// the request's first round trip.
	create := func(key string) approval.CreateResult {
		t.Helper()
		ctx, _, err := svc.AuthenticateFirstTrip(ctx, secret)
		if err != nil {
			t.Fatalf("authenticate: %v", err)
		}
		res, err := svc.Create(ctx, ciBot, createCommand(t, key))
		if err != nil {
			t.Fatalf("create %s: %v", key, err)
		}
		if approval.PendingTokenCheck(ctx) != nil {
			t.Fatalf("create %s: the token check did not run", key)
		}
		return res
	}
	kept := create("deploy-kept")
	replicate(t, schemaOf(t, primary), schemaOf(t, standby))
	lost := create("deploy-lost")
	if again := create("deploy-lost"); !again.Replayed {
		t.Fatal("retry before the failover: got a new approval, want a replay")
	}
	before := s.Incarnation()

	failover.To(schemaOf(t, standby))
	res := create("deploy-lost")
	if res.Replayed || res.Response == nil || res.Response.StatusCode != 201 {
		t.Fatalf("retry of the lost create after the failover: got replayed %v, %+v; want 201, not a replay", res.Replayed, res.Response)
	}
	if res.Approval == nil || res.Approval.ID == lost.Approval.ID {
		t.Fatalf("retry of the lost create: got %+v, want an approval other than the lost %s", res.Approval, lost.Approval.ID)
	}
	if got := s.Incarnation(); got == before {
		t.Fatalf("incarnation after the failover: got %q, the same as before", got)
	}
	if _, err := s.Approval(ctx, res.Approval.ID); err != nil {
		t.Fatalf("read the approval made after the failover: %v", err)
	}
	if again := create("deploy-lost"); !again.Replayed || again.Response.Location != res.Response.Location {
		t.Fatalf("retry of the create made after the failover: got replayed %v at %s, want a replay of %s", again.Replayed, again.Response.Location, res.Response.Location)
	}
	if again := create("deploy-kept"); !again.Replayed || again.Response.Location != kept.Response.Location {
		t.Fatalf("retry of the kept create: got replayed %v at %s, want a replay of %s", again.Replayed, again.Response.Location, kept.Response.Location)
	}
}

// replicate copies every row of every table of schema from into to, whose tables are the
// same and empty: to is then a standby that has caught up with from.
func replicate(tb testing.TB, from, to string) {
	tb.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testdb.PostgresURL(tb))
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT table_name FROM information_schema.tables WHERE table_schema = $1 AND table_type = 'BASE TABLE' AND table_name <> 'schema_migrations'`, from)
	if err != nil {
		tb.Fatalf("list tables: %v", err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		tb.Fatalf("list tables: %v", err)
	}
	// One transaction, as a replica applies rows: no triggers, so no foreign key checks, and
	// the order of the tables does not matter.
	tx, err := conn.Begin(ctx)
	if err != nil {
		tb.Fatalf("begin: %v", err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SET LOCAL session_replication_role = replica`); err != nil {
		tb.Fatalf("replica role: %v", err)
	}
	for _, table := range tables {
		name := pgx.Identifier{table}.Sanitize()
		if _, err := tx.Exec(ctx, fmt.Sprintf(`DELETE FROM %s.%s`, to, name)); err != nil {
			tb.Fatalf("empty %s: %v", table, err)
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s.%s OVERRIDING SYSTEM VALUE SELECT * FROM %s.%s`, to, name, from, name)); err != nil {
			tb.Fatalf("copy %s: %v", table, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		tb.Fatalf("commit the copy: %v", err)
	}
}
