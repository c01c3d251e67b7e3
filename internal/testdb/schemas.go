package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
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
// The kept schemas of a test binary are named after it ("tk_<owner>_..."), and the binary
// holds a session advisory lock keyed by that name for as long as it runs, on a connection
// of its own: nothing runs when a test binary exits, so the first binary to open a store
// drops the kept schemas whose owner's lock it can take (their binary has ended, on this
// machine or another using the same server).
var kept struct {
	mu    sync.Mutex
	owner string    // this binary's part of the names, "" until its lock is held
	lock  *pgx.Conn // the connection that holds the owner lock
	free  []string  // emptied schemas, ready for a test
	print string    // the fingerprint of a schema as the migrations leave it ("" until known)
}

// keptSchema returns the URL of an empty schema for tb: a kept one, migrated, or a new one
// for Open to migrate. migrated reports which.
func keptSchema(tb testing.TB) (dsn, schema string, migrated bool) {
	tb.Helper()
	base := PostgresURL(tb)
	kept.mu.Lock()
	err := own(base)
	owner := kept.owner
	if n := len(kept.free); err == nil && n > 0 {
		schema, kept.free = kept.free[n-1], kept.free[:n-1]
		migrated = true
	}
	kept.mu.Unlock()
	if err != nil {
		tb.Fatalf("kept schemas: %v", err)
	}
	if schema == "" {
		var b [6]byte
		rand.Read(b[:])
		schema = "tk_" + owner + "_" + hex.EncodeToString(b[:])
		if err := adminExec(base, "CREATE SCHEMA "+schema); err != nil {
			tb.Fatalf("create schema: %v", err)
		}
	}
	return withSearchPath(tb, base, schema), schema, migrated
}

// own takes this binary's owner lock, once, and then drops the kept schemas of owners that
// have ended. kept.mu is held.
func own(base string) error {
	if kept.owner != "" {
		return nil
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base) // held until the binary exits, with its lock
	if err != nil {
		return fmt.Errorf("connect to postgres %s: %w", redact(base), err)
	}
	var b [4]byte
	rand.Read(b[:])
	owner := hex.EncodeToString(b[:])
	var locked bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtext('approvald-testdb-' || $1))`, owner).Scan(&locked); err != nil || !locked {
		conn.Close(ctx)
		return fmt.Errorf("take the owner lock of %s: %v (taken: %v)", owner, err, locked)
	}
	kept.owner, kept.lock = owner, conn
	rows, err := conn.Query(ctx, `SELECT DISTINCT split_part(nspname, '_', 2) FROM pg_namespace WHERE nspname LIKE 'tk\_%'`)
	if err != nil {
		return err
	}
	owners, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, o := range owners {
		if o == owner {
			continue
		}
		// A lock taken here is an ended owner's; another binary sweeping at the same moment
		// waits for it, then finds nothing left.
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtext('approvald-testdb-' || $1))`, o).Scan(&locked); err != nil {
			return err
		}
		if !locked {
			continue
		}
		rows, err := conn.Query(ctx, `SELECT nspname FROM pg_namespace WHERE nspname LIKE 'tk\_' || $1 || '\_%'`, o)
		if err == nil {
			var names []string
			if names, err = pgx.CollectRows(rows, pgx.RowTo[string]); err == nil {
				for _, name := range names {
					if _, err = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+name+" CASCADE"); err != nil {
						break
					}
				}
			}
		}
		if _, uerr := conn.Exec(ctx, `SELECT pg_advisory_unlock(hashtext('approvald-testdb-' || $1))`, o); err == nil {
			err = uerr
		}
		if err != nil {
			return fmt.Errorf("drop the kept schemas of ended owner %s: %w", o, err)
		}
	}
	return nil
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

// empty deletes every row of schema but the migrations' own (schema_migrations, and
// heartbeat's one row, set back to the migration's value), restarts its sequences, and checks
// that heartbeat still holds its one row.
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

// fingerprint sums up what a schema is made of apart from its rows: its owner and
// privileges; relations with their kind, persistence, row security, settings, privileges,
// view definitions and whether they were ever analyzed or vacuumed (reltuples); columns in
// order with their types, defaults, identity, generation, collation, nullability and
// privileges; constraints, indexes, triggers, functions, rules, sequences and policies, with the schema's own name left out (an index's definition names it).
func fingerprint(ctx context.Context, conn *pgx.Conn, schema string) (string, error) {
	var print string
	err := conn.QueryRow(ctx, `
		WITH ns AS (SELECT oid FROM pg_namespace WHERE nspname = $1),
		parts AS (
			SELECT 'n ' || coalesce(nspacl::text, '') || ' ' || nspowner::regrole::text AS p FROM pg_namespace WHERE nspname = $1
			UNION ALL
			SELECT 'r ' || c.relname || ' ' || c.relkind::text || ' ' || c.relpersistence::text || ' ' || c.relrowsecurity::text || ' ' ||
				coalesce(array_to_string(c.reloptions, ','), '') || ' ' || coalesce(c.relacl::text, '') || ' ' || (c.reltuples < 0)::text || ' ' ||
				CASE WHEN c.relkind IN ('v', 'm') THEN pg_get_viewdef(c.oid) ELSE '' END
			FROM pg_class c WHERE c.relnamespace = (SELECT oid FROM ns)
			UNION ALL
			SELECT 'a ' || c.relname || '.' || a.attname || ' ' || a.attnum || ' ' || format_type(a.atttypid, a.atttypmod) || ' ' ||
				a.attnotnull::text || ' ' || a.attidentity::text || ' ' || a.attgenerated::text || ' ' || a.attcollation::text || ' ' ||
				coalesce(a.attacl::text, '') || ' ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
			FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
			LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
			WHERE c.relnamespace = (SELECT oid FROM ns) AND a.attnum > 0 AND NOT a.attisdropped
			UNION ALL
			SELECT 'c ' || conname || ' ' || pg_get_constraintdef(oid) FROM pg_constraint WHERE connamespace = (SELECT oid FROM ns)
			UNION ALL
			SELECT 'i ' || indexname || ' ' || indexdef FROM pg_indexes WHERE schemaname = $1
			UNION ALL
			SELECT 't ' || pg_get_triggerdef(t.oid) || ' ' || t.tgenabled::text FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid WHERE c.relnamespace = (SELECT oid FROM ns) AND NOT t.tgisinternal
			UNION ALL
			SELECT 'f ' || pg_get_functiondef(p.oid) FROM pg_proc p WHERE p.pronamespace = (SELECT oid FROM ns)
			UNION ALL
			SELECT 'q ' || rulename || ' ' || definition FROM pg_rules WHERE schemaname = $1
			UNION ALL
			SELECT 's ' || s.seqrelid::regclass::text || ' ' || s.seqstart || ' ' || s.seqincrement || ' ' || s.seqmax || ' ' || s.seqmin || ' ' || s.seqcycle::text
			FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid WHERE c.relnamespace = (SELECT oid FROM ns)
			UNION ALL
			SELECT 'p ' || polname FROM pg_policy pol JOIN pg_class c ON c.oid = pol.polrelid WHERE c.relnamespace = (SELECT oid FROM ns)
		)
		SELECT md5(replace(coalesce(string_agg(p, E'\n' ORDER BY p), ''), $1 || '.', '')) || ':' || count(*) FROM parts`, schema).Scan(&print)
	return print, err
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
