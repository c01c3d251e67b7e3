package loadtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/approvald/approval/internal/pgpool"
	"github.com/approvald/approval/internal/sqlitepool"
	_ "github.com/approvald/approval/postgres" // sets pgpool.Open
	_ "github.com/approvald/approval/sqlite"   // sets sqlitepool.Open
)

// RowsTable is the table the baselines write and read. It is created by the bench, which
// refuses to run if it exists, and dropped at the end.
const RowsTable = "bench_rows"

// Rows is the baseline table of one database: the floor under the scenarios, a write and a
// read the store cannot do with less.
type Rows interface {
	// Insert commits one row in a transaction of its own.
	Insert(ctx context.Context, id string, body []byte) error
	// Select reads one row by primary key; a missing row is an error.
	Select(ctx context.Context, id string) error
	// Drop drops the table.
	Drop(ctx context.Context) error
	// Close closes the connections.
	Close() error
}

var (
	_ Rows = (*SQLiteRows)(nil)
	_ Rows = (*PostgresRows)(nil)
)

// SQLiteRows is the baseline table in a SQLite database, on the store's own kind of
// connections (sqlite's, see internal/sqlitepool): inserts queue for the one write connection and begin
// IMMEDIATE, selects use the read-only pool, with the same pragmas.
type SQLiteRows struct {
	write, read *sql.DB
}

// OpenSQLiteRows opens the database dsn names as the sqlite store does and creates the table.
func OpenSQLiteRows(ctx context.Context, dsn string) (*SQLiteRows, error) {
	write, read, err := sqlitepool.Open(ctx, dsn)
	if err != nil {
		return nil, err
	}
	r := &SQLiteRows{write: write, read: read}
	if _, err := write.ExecContext(ctx, `CREATE TABLE `+RowsTable+` (
		id         TEXT    PRIMARY KEY,
		body       BLOB    NOT NULL,
		created_at INTEGER NOT NULL
	) STRICT`); err != nil {
		r.Close()
		return nil, fmt.Errorf("create %s: %w", RowsTable, err)
	}
	return r, nil
}

// Insert commits one row in its own BEGIN IMMEDIATE transaction, as the store's writes are.
func (r *SQLiteRows) Insert(ctx context.Context, id string, body []byte) error {
	tx, err := r.write.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("insert: begin: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO `+RowsTable+` (id, body, created_at) VALUES (?, ?, ?)`,
		id, body, time.Now().UnixMicro()); err != nil {
		return fmt.Errorf("insert: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("insert: commit: %w", err)
	}
	return nil
}

// Select reads one row on the read pool.
func (r *SQLiteRows) Select(ctx context.Context, id string) error {
	var body []byte
	var at int64
	if err := r.read.QueryRowContext(ctx, `SELECT body, created_at FROM `+RowsTable+` WHERE id = ?`, id).Scan(&body, &at); err != nil {
		return fmt.Errorf("select %s: %w", id, err)
	}
	return nil
}

// Drop drops the table.
func (r *SQLiteRows) Drop(ctx context.Context) error {
	if _, err := r.write.ExecContext(ctx, `DROP TABLE `+RowsTable); err != nil {
		return fmt.Errorf("drop %s: %w", RowsTable, err)
	}
	return nil
}

// Close closes both pools.
func (r *SQLiteRows) Close() error {
	return errors.Join(r.write.Close(), r.read.Close())
}

// PostgresRows is the baseline table in a PostgreSQL database, on a pool configured as the
// store's (postgres', see internal/pgpool), so the same number of connections at most.
type PostgresRows struct {
	pool *pgxpool.Pool
	// checkpointsSQL reads the count of requested checkpoints on this server's version.
	checkpointsSQL string
}

// OpenPostgresRows opens a pool on the database url names, in its search_path, as the
// postgres store does, and creates the table.
func OpenPostgresRows(ctx context.Context, url string) (*PostgresRows, error) {
	pool, err := pgpool.Open(ctx, url)
	if err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE `+RowsTable+` (
		id         text        PRIMARY KEY,
		body       bytea       NOT NULL,
		created_at timestamptz NOT NULL
	)`); err != nil {
		pool.Close()
		return nil, fmt.Errorf("create %s: %w", RowsTable, err)
	}
	// The count of requested checkpoints moved from pg_stat_bgwriter to pg_stat_checkpointer
	// in PostgreSQL 17.
	var version int
	if err := pool.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		pool.Close()
		return nil, fmt.Errorf("read the server's version: %w", err)
	}
	checkpoints := `SELECT checkpoints_req FROM pg_stat_bgwriter`
	if version >= 170000 {
		checkpoints = `SELECT num_requested FROM pg_stat_checkpointer`
	}
	return &PostgresRows{pool: pool, checkpointsSQL: checkpoints}, nil
}

// CheckpointsRequested returns how many checkpoints the server has been asked for since its
// statistics were reset.
func (r *PostgresRows) CheckpointsRequested(ctx context.Context) (int64, error) {
	var n int64
	err := r.pool.QueryRow(ctx, r.checkpointsSQL).Scan(&n)
	return n, err
}

// MaxConns returns the size of the pool.
func (r *PostgresRows) MaxConns() int32 { return r.pool.Config().MaxConns }

// Insert commits one row in a transaction of its own (BEGIN, INSERT, COMMIT), as the store
// runs each of its writes.
func (r *PostgresRows) Insert(ctx context.Context, id string, body []byte) error {
	return pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO `+RowsTable+` (id, body, created_at) VALUES ($1, $2, $3)`,
			id, body, time.Now()); err != nil {
			return fmt.Errorf("insert: %w", err)
		}
		return nil
	})
}

// Select reads one row.
func (r *PostgresRows) Select(ctx context.Context, id string) error {
	var body []byte
	var at time.Time
	if err := r.pool.QueryRow(ctx, `SELECT body, created_at FROM `+RowsTable+` WHERE id = $1`, id).Scan(&body, &at); err != nil {
		return fmt.Errorf("select %s: %w", id, err)
	}
	return nil
}

// Drop drops the table.
func (r *PostgresRows) Drop(ctx context.Context) error {
	if _, err := r.pool.Exec(ctx, `DROP TABLE `+RowsTable); err != nil {
		return fmt.Errorf("drop %s: %w", RowsTable, err)
	}
	return nil
}

// Close closes the pool.
func (r *PostgresRows) Close() error {
	r.pool.Close()
	return nil
}
