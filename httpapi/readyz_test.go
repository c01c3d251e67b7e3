package httpapi_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/approvald/approval"
	"github.com/approvald/approval/httpapi"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/postgres"
)

// wantReady checks that /readyz answers 200.
func (f *fixture) wantReady(t *testing.T) {
	t.Helper()
	if resp := f.do("GET", "/readyz", "", ""); resp.status != http.StatusOK {
		t.Fatalf("/readyz: got %d %s, want 200", resp.status, resp.body)
	}
}

// wantNotWriting checks that /readyz answers 503 because the database takes no writes.
func (f *fixture) wantNotWriting(t *testing.T) {
	t.Helper()
	p := f.do("GET", "/readyz", "", "").problem(t, http.StatusServiceUnavailable)
	if !strings.Contains(p.Detail, "does not take writes") {
		t.Errorf("/readyz: got detail %q, want it to say the database does not take writes", p.Detail)
	}
}

// TestReadyz_PostgresReadOnly: a PostgreSQL that answers but takes no writes, as a server in
// recovery or a standby does (here: default_transaction_read_only for the store's role, a
// role of the test's own), is not ready; once it takes writes again /readyz answers 200
// within a second, with no restart.
func TestReadyz_PostgresReadOnly(t *testing.T) {
	base := testdb.PostgresURL(t)
	t.Parallel()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { admin.Close(ctx) })
	var b [6]byte
	rand.Read(b[:])
	role := "approvald_ro_" + hex.EncodeToString(b[:])
	u, err := url.Parse(testdb.DSN(t, testdb.Postgres))
	if err != nil {
		t.Fatalf("parse dsn: %v", err)
	}
	schema := u.Query().Get("search_path")
	for _, stmt := range []string{
		"CREATE ROLE " + role + " LOGIN",
		"GRANT USAGE, CREATE ON SCHEMA " + schema + " TO " + role,
	} {
		if _, err := admin.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	t.Cleanup(func() {
		for _, stmt := range []string{"DROP OWNED BY " + role, "DROP ROLE " + role} {
			if _, err := admin.Exec(ctx, stmt); err != nil {
				t.Errorf("%s: %v", stmt, err)
			}
		}
	})
	u.User = url.User(role)
	s, err := postgres.Open(ctx, u.String())
	if err != nil {
		t.Fatalf("open postgres as %s: %v", role, err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	f := setup(t, testdb.Postgres, func(cfg *httpapi.Config) { cfg.Store = s })
	f.wantReady(t)

	// A role's setting reaches new sessions only: end the store's, so that the pool's next
	// connections read it.
	setting := func(stmt string) {
		t.Helper()
		if _, err := admin.Exec(ctx, "ALTER ROLE "+role+" "+stmt); err != nil {
			t.Fatalf("alter role: %v", err)
		}
		if _, err := admin.Exec(ctx, `WITH victims AS MATERIALIZED (
			SELECT pid FROM pg_stat_activity WHERE usename = $1 AND pid <> pg_backend_pid())
			SELECT pg_terminate_backend(pid, 5000) FROM victims`, role); err != nil {
			t.Fatalf("end the role's sessions: %v", err)
		}
		// The pool finds a connection ended only by using it, and then drops it; it holds
		// no more than a few.
		for range 16 {
			if s.Ping(ctx) == nil {
				return
			}
		}
		t.Fatalf("the store still fails to ping after its connections were ended")
	}
	setting("SET default_transaction_read_only = on")
	f.clock.Advance(httpapi.WriteProbeEvery)
	f.wantNotWriting(t)
	f.wantNotWriting(t) // the check's answer is kept for a second

	setting("RESET default_transaction_read_only")
	f.wantNotWriting(t) // still within the second
	f.clock.Advance(httpapi.WriteProbeEvery)
	f.wantReady(t)
}

// TestReadyz_ClockOffset: a replica whose clock is off the database's by more than the
// bound is not ready, saying why, and is ready again once its clock agrees, with no restart.
func TestReadyz_ClockOffset(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		var watch *approval.ClockWatch
		f := setup(t, kind, func(c *httpapi.Config) {
			store := c.Store.(approval.Store)
			c.Service = rules(store)
			c.Service.Now = c.Now
			watch = &approval.ClockWatch{Store: store, Now: c.Now, Bound: 2 * time.Second}
			c.Service.Clock = watch
		})
		measure := func() {
			t.Helper()
			if err := watch.Measure(t.Context()); err != nil {
				t.Fatalf("measure: %v", err)
			}
		}
		// The fake clock stands still while the machine's runs: set it to now before each
		// reading meant to agree.
		f.clock.Set(time.Now())
		measure()
		f.wantReady(t)

		f.clock.Advance(time.Minute)
		measure()
		p := f.do("GET", "/readyz", "", "").problem(t, http.StatusServiceUnavailable)
		if !strings.Contains(p.Detail, "clock") {
			t.Errorf("/readyz: got detail %q, want it to say the clock is off", p.Detail)
		}

		f.clock.Set(time.Now())
		measure()
		f.wantReady(t)
	})
}
