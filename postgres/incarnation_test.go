package postgres_test

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/approvald/approval/internal/testdb"
)

// TestIncarnationReadsTheServer checks that the store's incarnation is the server's system
// identifier and start as SQL reports them, and that a connection opened after the store's
// own was ended reads it again.
func TestIncarnationReadsTheServer(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dsn := testdb.DSN(t, testdb.Postgres) + "&pool_max_conns=1"
	s := mustMigrated(t, dsn)
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	conn, err := pgx.Connect(ctx, testdb.PostgresURL(t))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	var system, started int64
	if err := conn.QueryRow(ctx, `SELECT system_identifier, (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint FROM pg_control_system()`).Scan(&system, &started); err != nil {
		t.Fatalf("read the server's identity: %v", err)
	}
	want := fmt.Sprintf("%d@%d", system, started)
	if got := s.Incarnation(); got != want {
		t.Fatalf("incarnation: got %q, want %q", got, want)
	}

	// End the pool's one connection: the next one opened must read the incarnation again.
	pc, err := s.PoolConn(ctx)
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	pid := pc.Conn().PgConn().PID()
	pc.Release()
	var ended bool
	if err := conn.QueryRow(ctx, `SELECT pg_terminate_backend($1, 10000)`, pid).Scan(&ended); err != nil || !ended {
		t.Fatalf("terminate the store's connection %d: got %v, %v; want true", pid, ended, err)
	}
	s.SetIncarnation("stale")
	// The first use of the ended connection may fail; the one after opens a new connection.
	for i := 0; ; i++ {
		if _, err = s.DatabaseTime(ctx); err == nil || i == 2 {
			break
		}
	}
	if err != nil {
		t.Fatalf("database time on a new connection: %v", err)
	}
	if got := s.Incarnation(); got != want {
		t.Fatalf("incarnation after a new connection: got %q, want %q", got, want)
	}
}
