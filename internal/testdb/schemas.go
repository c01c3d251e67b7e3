package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
)

// The PostgreSQL stores of Open live in schemas that a test binary keeps for its next tests:
// creating a schema, migrating it and dropping it cost the server a quarter of a second of
// catalog and file work (dozens of tables and indexes made and unlinked), hundreds of times a
// suite; emptying one costs a few milliseconds. A schema is kept only when it is exactly as
// the migrations left it apart from its rows: the same relations, columns, constraints,
// indexes, triggers, settings and privileges, never analyzed (its fingerprint). Anything
// else (a test that altered a table, a failed emptying) drops it, as DSN's schemas are.
//
// The kept schemas of a binary are named after its process ("tk_<pid>_..."); the first
// binary to open one drops those of processes that have ended, since nothing runs when a
// test binary exits.
var kept struct {
	mu    sync.Mutex
	swept bool
	free  []string // emptied schemas, ready for a test
	print string   // the fingerprint of a schema as the migrations leave it ("" until known)
}

// keptSchema returns the URL of an empty schema for tb: a kept one, migrated, or a new one
// for Open to migrate. migrated reports which.
func keptSchema(tb testing.TB) (dsn, schema string, migrated bool) {
	tb.Helper()
	base := PostgresURL(tb)
	kept.mu.Lock()
	if !kept.swept {
		kept.swept = true
		sweepKept(tb, base)
	}
	if n := len(kept.free); n > 0 {
		schema, kept.free = kept.free[n-1], kept.free[:n-1]
		migrated = true
	}
	kept.mu.Unlock()
	if schema == "" {
		var b [6]byte
		rand.Read(b[:])
		schema = fmt.Sprintf("tk_%d_%s", os.Getpid(), hex.EncodeToString(b[:]))
		if err := adminExec(base, "CREATE SCHEMA "+schema); err != nil {
			tb.Fatalf("create schema: %v", err)
		}
	}
	return withSearchPath(tb, base, schema), schema, migrated
}

// noteMigrated takes the fingerprint of a schema the migrations have just made, once per
// test binary: what every schema must still be to be kept.
func noteMigrated(tb testing.TB, schema string) {
	tb.Helper()
	kept.mu.Lock()
	defer kept.mu.Unlock()
	if kept.print != "" {
		return
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, PostgresURL(tb))
	if err != nil {
		tb.Fatalf("connect to postgres: %v", err)
	}
	defer conn.Close(ctx)
	if kept.print, err = fingerprint(ctx, conn, schema); err != nil {
		tb.Fatalf("fingerprint schema %s: %v", schema, err)
	}
}

// keepSchema is called once the store on schema is closed: it empties the schema and keeps
// it, or drops it when it is no longer as the migrations left it.
func keepSchema(tb testing.TB, schema string) {
	base := PostgresURL(tb)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		tb.Errorf("connect to empty schema %s: %v", schema, err)
		return
	}
	defer conn.Close(ctx)
	drop := func(why string) {
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			tb.Errorf("drop schema %s (%s): %v", schema, why, err)
		}
	}
	print, err := fingerprint(ctx, conn, schema)
	if err != nil {
		drop("no fingerprint")
		return
	}
	kept.mu.Lock()
	want := kept.print
	kept.mu.Unlock()
	if print != want {
		drop("changed")
		return
	}
	if err := empty(ctx, conn, schema); err != nil {
		drop("not emptied")
		return
	}
	kept.mu.Lock()
	kept.free = append(kept.free, schema)
	kept.mu.Unlock()
}

// empty deletes every row of schema but the migrations' own (schema_migrations and
// heartbeat's one row), restarts its sequences and checks that no other table holds a row.
func empty(ctx context.Context, conn *pgx.Conn, schema string) error {
	rows, err := conn.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = $1`, schema)
	if err != nil {
		return err
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	var b strings.Builder
	// No foreign key is checked while the tables are emptied in any order.
	b.WriteString("BEGIN; SET LOCAL session_replication_role = replica;")
	for _, t := range tables {
		switch t {
		case "schema_migrations":
		case "heartbeat":
			fmt.Fprintf(&b, "UPDATE %s.heartbeat SET at = 'epoch';", schema)
		default:
			fmt.Fprintf(&b, "DELETE FROM %s.%s;", schema, pgx.Identifier{t}.Sanitize())
		}
	}
	b.WriteString("COMMIT;")
	if _, err := conn.Exec(ctx, b.String(), pgx.QueryExecModeSimpleProtocol); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, `SELECT setval(format('%I.%I', n.nspname, c.relname), 1, false)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind = 'S'`, schema); err != nil {
		return err
	}
	var heartbeats int
	if err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s.heartbeat`, schema)).Scan(&heartbeats); err != nil {
		return err
	}
	if heartbeats != 1 {
		return fmt.Errorf("heartbeat holds %d rows, want the migrations' one", heartbeats)
	}
	return nil
}

// fingerprint sums up what a schema is made of apart from its rows: relations and their kind,
// settings, privileges and whether they were ever analyzed or vacuumed (reltuples), columns
// with their types, defaults and nullability, constraints, indexes, triggers, functions and
// policies, with the schema's own name left out (an index's definition names it).
func fingerprint(ctx context.Context, conn *pgx.Conn, schema string) (string, error) {
	var print string
	err := conn.QueryRow(ctx, `
		WITH ns AS (SELECT oid FROM pg_namespace WHERE nspname = $1),
		parts AS (
			SELECT 'r ' || c.relname || ' ' || c.relkind::text || ' ' || coalesce(array_to_string(c.reloptions, ','), '') || ' ' ||
				coalesce(c.relacl::text, '') || ' ' || (c.reltuples < 0)::text AS p
			FROM pg_class c WHERE c.relnamespace = (SELECT oid FROM ns)
			UNION ALL
			SELECT 'a ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || ' ' ||
				a.attnotnull::text || ' ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
			FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
			LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
			WHERE c.relnamespace = (SELECT oid FROM ns) AND a.attnum > 0 AND NOT a.attisdropped
			UNION ALL
			SELECT 'c ' || conname || ' ' || pg_get_constraintdef(oid) FROM pg_constraint WHERE connamespace = (SELECT oid FROM ns)
			UNION ALL
			SELECT 'i ' || indexname || ' ' || indexdef FROM pg_indexes WHERE schemaname = $1
			UNION ALL
			SELECT 't ' || t.tgname || ' ' || t.tgenabled::text FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid WHERE c.relnamespace = (SELECT oid FROM ns) AND NOT t.tgisinternal
			UNION ALL
			SELECT 'f ' || p.proname || ' ' || md5(p.prosrc) FROM pg_proc p WHERE p.pronamespace = (SELECT oid FROM ns)
			UNION ALL
			SELECT 'p ' || polname FROM pg_policy pol JOIN pg_class c ON c.oid = pol.polrelid WHERE c.relnamespace = (SELECT oid FROM ns)
		)
		SELECT md5(replace(coalesce(string_agg(p, E'\n' ORDER BY p), ''), $1 || '.', '')) || ':' || count(*) FROM parts`, schema).Scan(&print)
	return print, err
}

// sweepKept drops the kept schemas of test binaries that have ended.
func sweepKept(tb testing.TB, base string) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		tb.Fatalf("connect to postgres %s: %v", redact(base), err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT nspname FROM pg_namespace WHERE nspname LIKE 'tk\_%'`)
	if err != nil {
		tb.Fatalf("list kept schemas: %v", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		tb.Fatalf("list kept schemas: %v", err)
	}
	for _, name := range names {
		parts := strings.SplitN(name, "_", 3)
		pid, err := strconv.Atoi(parts[1])
		if err != nil || processRuns(pid) {
			continue
		}
		// Another binary may be sweeping the same schema: IF EXISTS, and an error is no
		// failure of this test.
		conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+name+" CASCADE")
	}
}

// processRuns reports whether a process of that id runs on this machine.
func processRuns(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return err == nil
}

// adminExec runs one statement on a connection of its own.
func adminExec(base, sql string) error {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return fmt.Errorf("connect to postgres %s: %w", redact(base), err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

// withSearchPath returns base with search_path set to schema.
func withSearchPath(tb testing.TB, base, schema string) string {
	tb.Helper()
	u, err := url.Parse(base)
	if err != nil {
		tb.Fatalf("parse postgres url: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
