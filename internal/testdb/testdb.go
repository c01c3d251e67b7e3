// Package testdb opens real stores for tests: a SQLite file in a temporary directory, and a
// PostgreSQL schema of its own on the server named by APPROVALD_TEST_POSTGRES. Every test that
// is not about one store runs on both through Each.
//
// When APPROVALD_TEST_POSTGRES is unset the PostgreSQL cases are skipped, unless
// APPROVALD_REQUIRE_POSTGRES=1 (set by the project's test command), in which case they fail:
// the PostgreSQL suite must never be skipped silently in CI.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/approvald/approval"
	"github.com/approvald/approval/postgres"
	"github.com/approvald/approval/sqlite"
)

// Kinds of store.
const (
	SQLite   = "sqlite"
	Postgres = "postgres"
)

// Each runs fn as a subtest once per store kind ("sqlite", "postgres").
func Each(t *testing.T, fn func(t *testing.T, kind string)) {
	t.Helper()
	for _, kind := range []string{SQLite, Postgres} {
		t.Run(kind, func(t *testing.T) {
			if kind == Postgres {
				PostgresURL(t) // skip or fail early, before fn does any set-up
			}
			fn(t, kind)
		})
	}
}

// Open returns a new, migrated, empty store of the given kind whose clock is now (time.Now
// when nil), closed when the test ends (see OpenWith).
func Open(tb testing.TB, kind string, now func() time.Time) approval.Store {
	tb.Helper()
	return OpenWith(tb, kind, Options{Now: now})
}

// Options sets up a store opened by OpenWith. A nil field keeps the store's default.
type Options struct {
	Now func() time.Time // the store's clock (default time.Now)
}

// OpenWith is Open with every store setting a test may need: a new, migrated, empty store of
// the given kind, closed when the test ends. A PostgreSQL store's schema is then emptied and
// kept for a later test of the binary (schemas.go), or dropped when the test changed it.
func OpenWith(tb testing.TB, kind string, o Options) approval.Store {
	tb.Helper()
	ctx := context.Background()
	switch kind {
	case SQLite:
		dsn := DSN(tb, kind)
		writeMigrated(tb, dsn)
		s, err := sqlite.Open(ctx, dsn)
		if err != nil {
			tb.Fatalf("open sqlite: %v", err)
		}
		if o.Now != nil {
			s.Now = o.Now
		}
		if err := s.Migrate(ctx); err != nil { // finds every migration applied
			tb.Fatalf("migrate sqlite: %v", err)
		}
		tb.Cleanup(func() { s.Close() })
		return s
	case Postgres:
		dsn, schema, migrated := keptSchema(tb)
		// Registered first, so run last: the schema is emptied once the store is closed.
		tb.Cleanup(func() { keepSchema(tb, schema) })
		s, err := postgres.Open(ctx, dsn)
		if err != nil {
			tb.Fatalf("open postgres: %v", err)
		}
		if o.Now != nil {
			s.Now = o.Now
		}
		if err := s.Migrate(ctx); err != nil { // on a kept schema, finds every migration applied
			tb.Fatalf("migrate postgres: %v", err)
		}
		if !migrated {
			noteMigrated(tb, schema)
		}
		tb.Cleanup(func() { s.Close() })
		return s
	}
	tb.Fatalf("unknown store kind %q", kind)
	return nil
}

// migrated is a SQLite database with every migration applied, made once per test binary:
// its files' contents, by suffix ("" for the database, "-wal" for a write-ahead log left by
// the close). Migrating a new file costs a fifth of a second under the race detector, and the
// suites open hundreds of stores; writing these bytes costs a millisecond.
var migrated struct {
	once  sync.Once
	files map[string][]byte
	err   error
}

// writeMigrated writes the migrated database where dsn (a file: URL of DSN) names it.
func writeMigrated(tb testing.TB, dsn string) {
	tb.Helper()
	migrated.once.Do(func() { migrated.files, migrated.err = makeMigrated() })
	if migrated.err != nil {
		tb.Fatalf("make the migrated SQLite template: %v", migrated.err)
	}
	path := sqlitePath(dsn)
	for suffix, b := range migrated.files {
		if err := os.WriteFile(path+suffix, b, 0o600); err != nil {
			tb.Fatalf("write the migrated SQLite database: %v", err)
		}
	}
}

// makeMigrated migrates a new SQLite database in a directory of its own, closes it and
// returns its files' contents.
func makeMigrated() (map[string][]byte, error) {
	dir, err := os.MkdirTemp("", "approvald-testdb-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "approvald.db")
	ctx := context.Background()
	s, err := sqlite.Open(ctx, "file:"+path+sqliteParams)
	if err != nil {
		return nil, err
	}
	if err := s.Migrate(ctx); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.Close(); err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	for _, suffix := range []string{"", "-wal"} {
		b, err := os.ReadFile(path + suffix)
		if errors.Is(err, fs.ErrNotExist) && suffix != "" {
			continue
		}
		if err != nil {
			return nil, err
		}
		files[suffix] = b
	}
	return files, nil
}

// sqlitePath is the file a DSN's file: URL names.
func sqlitePath(dsn string) string {
	path, _, _ := strings.Cut(strings.TrimPrefix(dsn, "file:"), "?")
	return path
}

// sqliteParams are the parameters of DSN's SQLite URLs. synchronous=NORMAL: in WAL mode a
// commit still survives the process being killed (what the crash tests do), only not a power
// cut; it makes the suites several times faster than the production default of FULL.
const sqliteParams = "?_pragma=synchronous(NORMAL)"

// DSN returns a database URL for a new, empty database of the given kind: a file in a
// temporary directory for SQLite, a fresh schema (dropped when the test ends) for PostgreSQL.
// Use it for tests that open the database themselves, such as the real binary.
func DSN(tb testing.TB, kind string) string {
	tb.Helper()
	switch kind {
	case SQLite:
		return "file:" + filepath.Join(tb.TempDir(), "approvald.db") + sqliteParams
	case Postgres:
		return freshSchema(tb, PostgresURL(tb))
	}
	tb.Fatalf("unknown store kind %q", kind)
	return ""
}

// PostgresURL returns APPROVALD_TEST_POSTGRES, skipping the test when it is unset, or failing
// it when APPROVALD_REQUIRE_POSTGRES=1.
func PostgresURL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv("APPROVALD_TEST_POSTGRES")
	if u == "" {
		if os.Getenv("APPROVALD_REQUIRE_POSTGRES") == "1" {
			tb.Fatal("APPROVALD_TEST_POSTGRES is unset but APPROVALD_REQUIRE_POSTGRES=1: the PostgreSQL suite must run")
		}
		tb.Skip("APPROVALD_TEST_POSTGRES is unset; skipping PostgreSQL (make test sets it)")
	}
	return u
}

// freshSchema creates a schema with a random name and returns base with search_path set to it.
func freshSchema(tb testing.TB, base string) string {
	tb.Helper()
	ctx := context.Background()
	var b [6]byte
	rand.Read(b[:])
	schema := "t_" + hex.EncodeToString(b[:])
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		tb.Fatalf("connect to postgres %s: %v", redact(base), err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		tb.Fatalf("create schema: %v", err)
	}
	tb.Cleanup(func() {
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			tb.Errorf("connect to drop schema: %v", err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return withSearchPath(tb, base, schema)
}

func redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable url)"
	}
	return p.Redacted()
}
