package postgres_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/postgres"
)

// The behaviour both stores share is tested by storetest (store_test.go). These tests are
// about what only PostgreSQL has: several processes on one database, and a network between
// the store and its server.

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	s := mustOpen(t, testdb.DSN(t, testdb.Postgres))
	for i := range 3 {
		if err := s.Migrate(t.Context()); err != nil {
			t.Fatalf("migrate #%d: %v", i+1, err)
		}
	}
	mustWork(t, s)
}

func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	dsn := testdb.DSN(t, testdb.Postgres)
	stores := make([]*postgres.Store, 8)
	for i := range stores {
		stores[i] = mustOpen(t, dsn)
	}

	errs := make([]error, len(stores))
	race(len(stores), func(i int) { errs[i] = stores[i].Migrate(t.Context()) })
	for i, err := range errs {
		if err != nil {
			t.Errorf("store %d: migrate: %v", i, err)
		}
	}
	if t.Failed() {
		return
	}
	for _, s := range stores {
		mustWork(t, s)
	}
}

func TestBootstrapConcurrently(t *testing.T) {
	t.Parallel()
	dsn := testdb.DSN(t, testdb.Postgres)
	stores := make([]*postgres.Store, 8)
	for i := range stores {
		stores[i] = mustOpen(t, dsn)
	}
	if err := stores[0].Migrate(t.Context()); err != nil {
		t.Fatalf("migrate: %v", err)
	}

	tokens := make([]approval.Token, len(stores))
	won := make([]bool, len(stores))
	errs := make([]error, len(stores))
	for i := range tokens {
		_, tokens[i] = approval.NewToken("admin", approval.RoleAdmin, approval.Now())
	}
	race(len(stores), func(i int) { won[i], errs[i] = (&approval.Service{Store: stores[i]}).Bootstrap(t.Context(), tokens[i]) })

	winner := -1
	for i := range stores {
		if errs[i] != nil {
			t.Fatalf("store %d: bootstrap: %v", i, errs[i])
		}
		if won[i] {
			if winner >= 0 {
				t.Fatalf("bootstrap: stores %d and %d both won, want exactly one winner", winner, i)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatal("bootstrap: no store won, want exactly one winner")
	}
	for i, tok := range tokens {
		_, err := stores[0].TokenByHash(t.Context(), tok.Hash)
		switch code := approval.ErrorCode(err); {
		case i == winner && code != "":
			t.Errorf("winner's token: got %v, want it stored", err)
		case i != winner && code != approval.ENOTFOUND:
			t.Errorf("loser %d's token: got error %q (%v), want %q", i, code, err, approval.ENOTFOUND)
		}
	}

	// A later start, even with a new token, never bootstraps again.
	_, late := approval.NewToken("admin", approval.RoleAdmin, approval.Now())
	if ok, err := (&approval.Service{Store: stores[1]}).Bootstrap(t.Context(), late); err != nil || ok {
		t.Fatalf("bootstrap after the winner: got (%v, %v), want (false, nil)", ok, err)
	}
}

func TestUnreachableServerIsUnavailable(t *testing.T) {
	t.Parallel()
	// Port 1 on loopback refuses connections at once: no server, and no waiting.
	s := mustOpen(t, "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=5")
	ctx := t.Context()

	for name, call := range map[string]func() error{
		"ping":    func() error { return s.Ping(ctx) },
		"migrate": func() error { return s.Migrate(ctx) },
		"approval": func() error {
			_, err := s.Approval(ctx, "apr_x")
			return err
		},
		"insert approval": func() error {
			_, err := s.InsertApproval(ctx, newApproval(t, "k"), approval.HTTPCause("r"), nil)
			return err
		},
		"expire due": func() error {
			_, err := (&approval.Service{Store: s}).ExpireDue(ctx, 10)
			return err
		},
	} {
		if err := call(); approval.ErrorCode(err) != approval.EUNAVAILABLE {
			t.Errorf("%s: got error code %q (%v), want %q", name, approval.ErrorCode(err), err, approval.EUNAVAILABLE)
		}
	}
}

func TestTextPostgresCannotHoldIsInvalid(t *testing.T) {
	t.Parallel()
	s := mustMigrated(t, testdb.DSN(t, testdb.Postgres))
	// SQLite stores a NUL byte; PostgreSQL text cannot. The input policy refuses it before
	// any store (approval.NewApproval), so this is the driver's own safety net: text that
	// reaches it anyway is the caller's error (400), not an internal one.
	a := newApproval(t, "k")
	a.OperationKey = "k\x00"
	_, err := s.InsertApproval(t.Context(), a, approval.HTTPCause("r"), nil)
	if code := approval.ErrorCode(err); code != approval.EINVALID {
		t.Fatalf("key with a NUL byte: got error code %q (%v), want %q", code, err, approval.EINVALID)
	}
}

func TestOpenRejectsBadURL(t *testing.T) {
	t.Parallel()
	if s, err := postgres.Open(context.Background(), "postgres://postgres@127.0.0.1:5432/test?sslmode=bogus"); err == nil {
		s.Close()
		t.Fatal("open with sslmode=bogus: got no error, want one")
	}
}

// mustOpen opens a store on dsn without migrating, closed when the test ends.
func mustOpen(tb testing.TB, dsn string) *postgres.Store {
	tb.Helper()
	s, err := postgres.Open(context.Background(), dsn)
	if err != nil {
		tb.Fatalf("open: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// mustMigrated opens the store on dsn, as mustOpen does, and migrates it.
func mustMigrated(tb testing.TB, dsn string) *postgres.Store {
	tb.Helper()
	s := mustOpen(tb, dsn)
	if err := s.Migrate(context.Background()); err != nil {
		tb.Fatalf("migrate: %v", err)
	}
	return s
}

// mustWork checks that a migrated store answers a query on each table family.
func mustWork(tb testing.TB, s *postgres.Store) {
	tb.Helper()
	ctx := context.Background()
	if _, _, err := s.Approvals(ctx, approval.ApprovalFilter{}); err != nil {
		tb.Fatalf("approvals: %v", err)
	}
	if _, err := s.TokenByHash(ctx, []byte("none")); approval.ErrorCode(err) != approval.ENOTFOUND {
		tb.Fatalf("token by hash: got %v, want %s", err, approval.ENOTFOUND)
	}
	if _, err := (&approval.Service{Store: s}).PurgeSigninTokens(ctx, time.Minute, 10); err != nil {
		tb.Fatalf("purge sign-in links: %v", err)
	}
}

// race runs fn(0) .. fn(n-1) in n goroutines released together by closing one channel.
func race(n int, fn func(i int)) {
	startGun := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-startGun
			fn(i)
		})
	}
	close(startGun)
	wg.Wait()
}

// newApproval returns a valid pending approval under key.
func newApproval(tb testing.TB, key string) *approval.Approval {
	tb.Helper()
	a, err := approval.NewApproval(approval.CreateRequest{
		Action: "deploy", Title: "Deploy", Approvers: []string{"alice"},
	}, "ci-bot", key, "fp-"+key, approval.Now())
	if err != nil {
		tb.Fatalf("new approval: %v", err)
	}
	return a
}
