// Package postgres implements approval.Store on PostgreSQL with pgx. It is the store for
// replicated deployments: every coordination between replicas (one terminal decision, one
// approval per operation key, one expiry event, one bootstrap token) is decided by a
// conditional write, a unique constraint or a row lock inside the database, never by process
// memory. Workers on every replica claim inbox events and executions with FOR UPDATE SKIP
// LOCKED under leases, and every write of a claim's outcome is fenced by its token. Changes
// are signalled with NOTIFY right behind the changing transaction's COMMIT and heard, by
// every replica, on one LISTEN connection per store. docs/architecture.md, "Inside the
// PostgreSQL driver", says how and why.
//
// All SQL uses unqualified table names, so a search_path parameter in the URL places the
// whole store in one schema (the tests give each test a fresh schema that way).
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/batch"
	"github.com/approvald/approval/internal/pgpool"
	"github.com/approvald/approval/internal/sqldb"
)

var _ approval.Store = (*Store)(nil)

func init() { pgpool.Open = openPool }

//go:embed migrations/*.sql
var migrations embed.FS

// migrationLock is the pg_advisory_xact_lock key that serializes Migrate ("apvd" in ASCII;
// docs/architecture.md, "Locks").
const migrationLock int64 = 0x61707664

// Store is the PostgreSQL approval.Store.
type Store struct {
	// Now is the store's clock, time.Now by default. A method or transaction reads it once,
	// once it holds its connection, and uses that instant for every comparison with an expiry
	// or a lease and for every time it stores, never the database's clock, so tests can move
	// time. Set it before the store is used.
	Now func() time.Time

	// Logger receives what the store cannot return to a caller: the LISTEN connection
	// dropping and reconnecting. slog.Default() when nil.
	Logger *slog.Logger

	shared    sqldb.Reads // the reads both drivers run alike (reads.go)
	pool      *pgxpool.Pool
	batchPool *pgxpool.Pool // the batches' connections (see openConfig)
	notifier  *notifier
	creates   *batch.Batcher[insert, inserted]               // InsertApproval's batches
	intakes   *batch.Batcher[*approval.InboxEvent, recorded] // RecordInbox's batches of new events
	reads     *batch.Batcher[read, *approval.Approval]       // Approval's batches
	tokens    *batch.Batcher[[]byte, *approval.Token]        // TokenByHash's batches
	// inboxSignals coalesces the intake batches' signals to the inbox processors.
	inboxSignals *signalGate
	// incarnation is the server incarnation the newest connection reached (Incarnation),
	// nil until the first.
	incarnation atomic.Pointer[string]
}

// Open returns a store on the database named by a postgres:// URL. It does not connect or
// migrate: the first method call connects (an unreachable server is an EUNAVAILABLE error),
// and Migrate creates the schema.
func Open(ctx context.Context, url string) (*Store, error) {
	cfg, err := parseConfig(url)
	if err != nil {
		return nil, err
	}
	return openConfig(ctx, cfg)
}

// openPool returns a connection pool configured as Open configures the store's (pgx's
// defaults, or pool_max_conns and the like from the URL), for the benchmark's baseline
// (internal/pgpool), which runs plain statements on a pool of the store's size.
func openPool(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := parseConfig(url)
	if err != nil {
		return nil, err
	}
	return newPool(ctx, cfg)
}

func parseConfig(url string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgconn redacts the password in its parse errors.
		return nil, fmt.Errorf("parse postgres url: %w", err)
	}
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = defaultMaxConns()
	}
	return cfg, nil
}

// defaultMaxConns is the pool size when the URL sets no pool_max_conns: 4 per CPU, at least
// 16, so that more commits share each WAL flush (docs/operations.md, "PostgreSQL's
// connections").
func defaultMaxConns() int32 {
	return int32(max(16, 4*runtime.NumCPU()))
}

func newPool(ctx context.Context, cfg *pgxpool.Config) (*pgxpool.Pool, error) {
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("create postgres pool: %w", err)
	}
	return pool, nil
}

// openConfig returns a store on a parsed pool configuration.
func openConfig(ctx context.Context, cfg *pgxpool.Config) (*Store, error) {
	// No JIT compilation: it pays off for long analytic queries, and a statement here is
	// short, but an estimate made on a table not yet analyzed can pass jit_above_cost and
	// have every execution compiled (docs/operations.md, "Plans on a new database"). A URL
	// that sets jit, as a parameter or in its options (-c jit=on), wins.
	if cfg.ConnConfig.RuntimeParams == nil {
		cfg.ConnConfig.RuntimeParams = map[string]string{}
	}
	params := cfg.ConnConfig.RuntimeParams
	if _, set := params["jit"]; !set && !strings.Contains(params["options"], "jit") {
		params["jit"] = "off"
	}
	s := &Store{Now: time.Now}
	// Every new connection of both pools reads the incarnation of the server it reached, in
	// its own round trip before any statement runs on it; a hook the configuration already
	// has (a test's) runs after.
	then := cfg.AfterConnect
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		if err := s.connected(ctx, conn); err != nil {
			return err
		}
		if then != nil {
			return then(ctx, conn)
		}
		return nil
	}
	pool, err := newPool(ctx, cfg)
	if err != nil {
		return nil, err
	}
	// The batches run on connections of their own, whose sessions plan their statements once,
	// by their keys' indexes (docs/architecture.md, "Creates, intakes and reads in batches",
	// "Planned once").
	bcfg := cfg.Copy()
	bcfg.MaxConns, bcfg.MinConns = batchKinds*writeBatches, 0 // a connection per batch in flight
	bcfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	bcfg.ConnConfig.RuntimeParams["enable_seqscan"] = "off"
	batchPool, err := newPool(ctx, bcfg)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.pool, s.batchPool = pool, batchPool
	s.shared = sqldb.Reads{DB: querier{pool}, Dialect: dialect, Clock: s.instant, Translate: translate}
	s.notifier = newNotifier(pool.Config().ConnConfig, s.logger)
	s.creates = batch.New(writeBatches, writeBatchMax, eachAlone(s.insertBatch))
	s.intakes = batch.New(writeBatches, writeBatchMax, eachAlone(s.recordInboxBatch))
	s.inboxSignals = newSignalGate(inboxSignalWindow, s.signalInbox)
	s.reads = batch.New(writeBatches, writeBatchMax, eachAlone(s.readBatch))
	s.tokens = batch.New(writeBatches, writeBatchMax, eachAlone(s.tokenBatch))
	return s, nil
}

// Close ends every subscription, stops the LISTEN connection, if Subscribe started it, and
// releases the store's connections.
func (s *Store) Close() error {
	s.inboxSignals.close()
	s.notifier.Close()
	s.pool.Close()
	s.batchPool.Close()
	return nil
}

func (s *Store) logger() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.Default()
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	return translate("ping postgres", s.pool.Ping(ctx))
}

// HeartbeatUpdate writes the store's time into the one row of the heartbeat table, one
// statement committed on its own: a server that cannot take a write (in recovery, a standby,
// a read-only database, a full disk) fails it, as EUNAVAILABLE, while Ping still succeeds.
func (s *Store) HeartbeatUpdate(ctx context.Context) error {
	conn, now, err := s.acquire(ctx, s.pool)
	if err != nil {
		return err
	}
	defer conn.Release()
	_, err = conn.Exec(ctx, `UPDATE heartbeat SET at = $1 WHERE id = 1`, now)
	return translate("heartbeat", err)
}

// DatabaseTime reads the server's clock (clock_timestamp(), not the transaction's start).
func (s *Store) DatabaseTime(ctx context.Context) (time.Time, error) {
	var at time.Time
	err := s.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&at)
	return at, translate("read the database's clock", err)
}

// Incarnation names the server incarnation the newest connection reached, "SYSTEM@START":
// PostgreSQL's system identifier (pg_control_system(), shared by a primary and the standbys
// made from its base backup) and the server's start in microseconds since 1970
// (pg_postmaster_start_time(), which tells those apart, and a server from itself restarted).
// Each new connection reads it as it opens, so reading it costs no round trip; it is "" until
// the first connection. A change means the store may now talk to another server, one that
// lacks commits the previous one acknowledged (a failover to an asynchronous standby, a
// restore from a backup).
func (s *Store) Incarnation() string {
	if inc := s.incarnation.Load(); inc != nil {
		return *inc
	}
	return ""
}

// incarnationSQL reads what Incarnation names, in one statement of the simple protocol: one
// round trip, and nothing prepared in the connection's statement cache.
const incarnationSQL = `SELECT system_identifier, (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint FROM pg_control_system()`

// startedSQL is the server's start time alone, for a role that may not read its system
// identifier.
const startedSQL = `SELECT (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint`

// connected reads the incarnation of the server conn reached and keeps it (Incarnation).
func (s *Store) connected(ctx context.Context, conn *pgx.Conn) error {
	var system, started int64
	if err := conn.QueryRow(ctx, incarnationSQL, pgx.QueryExecModeSimpleProtocol).Scan(&system, &started); err != nil {
		// A server that refuses pg_control_system() to this role (a managed service may
		// revoke it) is known by its start time alone: a promoted standby started at its own.
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
			return fmt.Errorf("read the server's incarnation: %w", err)
		}
		system = 0
		if err := conn.QueryRow(ctx, startedSQL, pgx.QueryExecModeSimpleProtocol).Scan(&started); err != nil {
			return fmt.Errorf("read the server's start time: %w", err)
		}
	}
	inc := fmt.Sprintf("%d@%d", system, started)
	s.incarnation.Store(&inc)
	return nil
}

// Migrate applies the embedded migrations not yet recorded in schema_migrations, in name
// order, in one transaction that holds an advisory lock: of several processes migrating at
// once, one applies them and the others wait and then find nothing left to do.
// It runs on a pgx transaction, not ruleTx: a script of several statements runs only in the
// simple protocol, which pgx uses for a statement without arguments outside a batch.
func (s *Store) Migrate(ctx context.Context) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return translate("begin migrations", err)
	}
	defer tx.Rollback(ctx)

	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLock); err != nil {
		return translate("take migration lock", err)
	}
	if err := schema.Apply(ctx, querier{tx}, dialect, s.instant()); err != nil {
		return translate("migrate", err)
	}
	return translate("commit migrations", tx.Commit(ctx))
}

// schema is the embedded migrations, each recorded under its file name.
var schema = sqldb.Migrations{
	FS: migrations,
	Table: `
		CREATE TABLE IF NOT EXISTS schema_migrations (
			name       text PRIMARY KEY,
			applied_at timestamptz NOT NULL
		)`,
	Name: func(path string) string { return strings.TrimPrefix(path, "migrations/") },
}

// acquire takes a connection of pool (s.pool, or s.batchPool for a batch) for a method that
// runs without BEGIN, and reads the clock once the connection is held (docs/architecture.md,
// "The pipelining transaction").
func (s *Store) acquire(ctx context.Context, pool *pgxpool.Pool) (*pgxpool.Conn, time.Time, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, time.Time{}, translate("acquire connection", err)
	}
	return conn, s.instant(), nil
}

// translate is sqldb.Translate with PostgreSQL's meanings of its errors (classify).
func translate(op string, err error) error { return sqldb.Translate(op, err, classify) }

// classify says what a PostgreSQL error means to the application (see sqldb.Classify): a
// lost race on a unique constraint, a serialization failure or a deadlock is ECONFLICT, text
// the database cannot hold is EINVALID, and a server that cannot be reached, or cannot serve
// now (shutting down, starting, out of connections, out of disk, or read-only: a standby, a
// server in recovery, default_transaction_read_only), is EUNAVAILABLE.
func classify(err error) *approval.Error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "23505":
			return approval.Errorf(approval.ECONFLICT, "a concurrent request created the same record")
		case "22021":
			// Text PostgreSQL cannot store (a NUL byte, invalid UTF-8) came from the caller.
			return approval.Errorf(approval.EINVALID, "text contains a NUL byte or invalid UTF-8")
		case "40001", "40P01":
			return &approval.Error{Code: approval.ECONFLICT, Message: "concurrent update, try again", RetryAfter: time.Second}
		case "57P01", "57P02", "57P03", "53300": // shutdown or start-up in progress, too many connections
			return sqldb.Unavailable()
		case "25006", "53100": // a read-only transaction (a standby, recovery), a full disk
			return sqldb.Unavailable()
		}
		if strings.HasPrefix(pgErr.Code, "08") { // a connection exception
			return sqldb.Unavailable()
		}
		return nil
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	if errors.As(err, &connectErr) || errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return sqldb.Unavailable()
	}
	return nil
}
