package postgres_test

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/postgres"
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

// TestIncarnationWithoutControlData checks that a role refused pg_control_system() (a managed
// service may revoke it) still connects, its incarnation the server's start time alone.
func TestIncarnationWithoutControlData(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	admin, err := pgx.Connect(ctx, testdb.PostgresURL(t))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer admin.Close(ctx)
	name := fmt.Sprintf("approvald_nocontrol_%d", time.Now().UnixNano())
	for _, q := range []string{`CREATE DATABASE ` + name, `CREATE ROLE ` + name + ` LOGIN`} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		ctx := context.Background()
		admin, err := pgx.Connect(ctx, testdb.PostgresURL(t))
		if err != nil {
			t.Errorf("connect: %v", err)
			return
		}
		defer admin.Close(ctx)
		for _, q := range []string{`DROP DATABASE IF EXISTS ` + name + ` WITH (FORCE)`, `DROP ROLE IF EXISTS ` + name} {
			if _, err := admin.Exec(ctx, q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
	})
	u, err := url.Parse(testdb.PostgresURL(t))
	if err != nil {
		t.Fatalf("parse the URL: %v", err)
	}
	u.Path = "/" + name
	db, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatalf("connect to %s: %v", name, err)
	}
	defer db.Close(ctx)
	if _, err := db.Exec(ctx, `REVOKE EXECUTE ON FUNCTION pg_control_system() FROM PUBLIC`); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	var started int64
	if err := db.QueryRow(ctx, `SELECT (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint`).Scan(&started); err != nil {
		t.Fatalf("read the start time: %v", err)
	}

	u.User = url.User(name)
	s, err := postgres.Open(ctx, u.String())
	if err != nil {
		t.Fatalf("open as %s: %v", name, err)
	}
	defer s.Close()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("ping as a role refused pg_control_system(): %v", err)
	}
	if got, want := s.Incarnation(), fmt.Sprintf("0@%d", started); got != want {
		t.Fatalf("incarnation: got %q, want %q", got, want)
	}
}
