package sqldb

import (
	"context"
	"fmt"
	"io/fs"
	"slices"
	"time"
)

// Execer runs the statements of a driver's transaction, adapted: queries as Querier does, and
// statements whose rows it does not need.
type Execer interface {
	Querier
	Exec(ctx context.Context, sql string, args ...any) error
}

// Migrations are a driver's embedded schema migrations, as Apply runs them.
type Migrations struct {
	// FS holds the scripts, migrations/*.sql, applied in name order.
	FS fs.FS
	// Table is the dialect's CREATE TABLE IF NOT EXISTS of schema_migrations (name,
	// applied_at), which lists the scripts applied.
	Table string
	// Name is the name a script at path is listed under: each driver's own, as its first
	// release wrote it into the databases that exist.
	Name func(path string) string
}

// Apply runs, through tx, every script not yet listed in schema_migrations and lists it, as
// applied at now. The driver begins tx, takes the lock that makes processes migrating at once
// take turns (so that the second finds nothing left to do), and commits it.
func (m Migrations) Apply(ctx context.Context, tx Execer, d Dialect, now time.Time) error {
	paths, err := fs.Glob(m.FS, "migrations/*.sql")
	if err != nil {
		return fmt.Errorf("list migrations: %w", err)
	}
	slices.Sort(paths)
	if err := tx.Exec(ctx, m.Table); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	for _, path := range paths {
		name := m.Name(path)
		rows, err := tx.Query(ctx, `SELECT count(*) FROM schema_migrations WHERE name = `+d.Param(1), name)
		applied, err := Collect(rows, err, func(r Row) (n int, err error) { return n, r.Scan(&n) })
		if err != nil {
			return fmt.Errorf("read schema_migrations: %w", err)
		} else if applied[0] > 0 {
			continue
		}
		script, err := fs.ReadFile(m.FS, path)
		if err != nil {
			return fmt.Errorf("read migration %s: %w", name, err)
		}
		// Without arguments, a file of statements runs whole: pgx sends it in the simple
		// protocol, SQLite's driver runs one statement after another.
		if err := tx.Exec(ctx, string(script)); err != nil {
			return fmt.Errorf("apply migration %s: %w", name, err)
		}
		if err := tx.Exec(ctx, `INSERT INTO schema_migrations (name, applied_at) VALUES (`+d.Param(1)+`, `+d.Param(2)+`)`,
			name, d.Time(now)); err != nil {
			return fmt.Errorf("record migration %s: %w", name, err)
		}
	}
	return nil
}
