// Package sqlite implements approval.Store on an embedded SQLite database (modernc.org/sqlite,
// no cgo), the default store of a single approvald process.
//
// The database runs in WAL mode. Writes are serialized inside the process: the write pool has
// exactly one connection and every write transaction starts with BEGIN IMMEDIATE, so a
// transaction takes the write lock before it reads and never has to upgrade a read lock (the
// upgrade is what fails with SQLITE_BUSY without waiting for busy_timeout). Reads go to a
// separate pool of read-only connections, which WAL lets run beside the writer. busy_timeout
// covers the remaining case, another process (approvald migrate, a second serve) writing the
// same file.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/batch"
	"github.com/approvald/approval/internal/signal"
	"github.com/approvald/approval/internal/sqldb"
	"github.com/approvald/approval/internal/sqlitepool"
)

//go:embed migrations/*.sql
var migrations embed.FS

// busyTimeout is how long a connection waits for a lock held by another process before
// failing with SQLITE_BUSY. Inside one process writes never wait on SQLite's lock: they queue
// for the single write connection instead.
const busyTimeout = 10 * time.Second

// readConns is the size of the read pool. Reads do not block each other or the writer in WAL
// mode; a handful of connections covers concurrent HTTP requests without many open files.
const readConns = 4

var _ approval.Store = (*Store)(nil)

func init() { sqlitepool.Open = openPools }

// Store is the SQLite implementation of approval.Store.
type Store struct {
	// Now is the store's clock, time.Now by default. A method or transaction reads it once,
	// once it holds its connection, and uses that instant for every comparison with an expiry
	// or a lease and for every time it stores, never the database's clock, so tests can move
	// time. Set it before the store is used.
	Now func() time.Time

	shared sqldb.Reads // the reads both drivers run alike (reads.go)
	write  *sql.DB     // exactly one connection, BEGIN IMMEDIATE
	writer *writer     // hands write's connection to one write transaction at a time, in groups
	read   *sql.DB     // read-only connections
	hub    *signal.Hub // Subscribe's broadcaster, signalled after each commit

	// The writes that come at a rate, batched (writeBatch): InsertApproval's and
	// RecordInbox's.
	creates *batch.Batcher[insert, inserted]
	intakes *batch.Batcher[*approval.InboxEvent, *approval.InboxEvent]
}

// Open opens the SQLite database named by dsn, "file:PATH" with optional query parameters
// (passed on to the driver) or a bare path, creating the file if needed. It does not migrate;
// call Migrate.
func Open(ctx context.Context, dsn string) (*Store, error) {
	write, read, err := openPools(ctx, dsn)
	if err != nil {
		return nil, err
	}
	s := &Store{Now: time.Now, write: write, writer: &writer{db: write}, read: read, hub: signal.NewHub()}
	s.creates = newBatcher(s, "insert approval", insertOne)
	s.intakes = newBatcher(s, "record inbox", recordInbox)
	s.shared = sqldb.Reads{DB: querier{read}, Dialect: dialect, Clock: s.instant, Translate: fail}
	return s, nil
}

// openPools opens the two pools a Store works on: a write pool of exactly one connection
// whose transactions begin IMMEDIATE, and a read-only pool of readConns connections, both
// with the store's pragmas (WAL, busy_timeout, foreign_keys). The benchmark's baseline opens
// its connections with it too (internal/sqlitepool).
func openPools(ctx context.Context, dsn string) (write, read *sql.DB, err error) {
	writeDSN, readDSN, err := poolDSNs(dsn)
	if err != nil {
		return nil, nil, err
	}
	if err := restrictFiles(dbPath(dsn)); err != nil {
		// A directory that is missing or not writable: the database cannot be reached, as
		// when SQLite itself cannot open the file.
		return nil, nil, fmt.Errorf("open %s: %w", dsn, unavailable(err))
	}

	write, err = openPool(writeDSN)
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w", dsn, err)
	}
	// One connection: writers queue for it inside database/sql (honouring their contexts)
	// instead of meeting SQLite's lock.
	write.SetMaxOpenConns(1)
	// Connect the writer first: it creates the file and switches it to WAL before any
	// read-only connection (which could do neither) opens it.
	if err := ping(ctx, write); err != nil {
		write.Close()
		return nil, nil, fmt.Errorf("open %s: %w", dsn, classify(err))
	}

	read, err = openPool(readDSN)
	if err != nil {
		write.Close()
		return nil, nil, fmt.Errorf("open %s: %w", dsn, err)
	}
	read.SetMaxOpenConns(readConns)
	read.SetMaxIdleConns(readConns)
	if err := ping(ctx, read); err != nil {
		write.Close()
		read.Close()
		return nil, nil, fmt.Errorf("open %s: %w", dsn, classify(err))
	}
	return write, read, nil
}

// openPool returns a pool of connections to dsn that keep the statements they prepare
// (cachingConnector).
func openPool(dsn string) (*sql.DB, error) {
	c, err := sqlite.NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(cachingConnector{c}), nil
}

// ping connects db, again while SQLite answers SQLITE_BUSY, for up to busyTimeout. A
// connection's opening pragmas can meet another process switching a new file to WAL, and
// SQLite answers that at once, without waiting for busy_timeout: four processes opening a
// new database together failed so 4 times in 150 (sqlite TestMigrate_ConcurrentProcesses).
func ping(ctx context.Context, db *sql.DB) error {
	deadline := time.Now().Add(busyTimeout)
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		err := db.PingContext(ctx)
		var e *sqlite.Error
		if err == nil || !errors.As(err, &e) || e.Code()&0xff != sqlite3.SQLITE_BUSY || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

// dbPath returns the file a DSN names, as SQLite will open it (a file: URI's path is
// percent-decoded).
func dbPath(dsn string) string {
	file, _, _ := strings.Cut(dsn, "?")
	p, ok := strings.CutPrefix(file, "file:")
	if !ok {
		return file
	}
	if rest, ok := strings.CutPrefix(p, "//"); ok { // file://localhost/path, file:///path
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			p = rest[i:]
		}
	}
	if unescaped, err := url.PathUnescape(p); err == nil {
		return unescaped
	}
	return p
}

// restrictFiles makes the database readable by its owner only, whatever the umask: it creates
// the file 0600 when it does not exist yet, and takes group and other permissions off an
// existing database, WAL and shared-memory file. SQLite creates the WAL and shared-memory
// files with the database file's permissions, so they follow. The files hold approvals,
// their context and raw webhook bodies.
func restrictFiles(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	switch {
	case err == nil:
		return f.Close()
	case !errors.Is(err, fs.ErrExist):
		return err
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		info, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return err
		}
		if info.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(p, info.Mode().Perm()&0o700); err != nil {
				return fmt.Errorf("restrict the permissions of %s: %w", p, err)
			}
		}
	}
	return nil
}

// poolDSNs returns the driver DSNs of the write and the read pool for a user's DSN. The
// caller's query parameters are kept; the pragmas the store relies on are added, and
// _txlock is always immediate on the writer.
func poolDSNs(dsn string) (write, read string, err error) {
	file, query, _ := strings.Cut(dsn, "?")
	if p, ok := strings.CutPrefix(file, "file:"); ok {
		file = p
	} else {
		// A bare path becomes a URI path: escape what SQLite would otherwise decode or
		// treat as the end of the path.
		file = strings.NewReplacer("%", "%25", "#", "%23").Replace(file)
	}
	params, err := url.ParseQuery(query)
	if err != nil {
		return "", "", approval.Errorf(approval.EINVALID, "sqlite dsn %q: bad query: %v", dsn, err)
	}
	if file == "" || strings.HasPrefix(file, ":memory:") || params.Get("mode") == "memory" {
		// The two pools would each see their own empty database.
		return "", "", approval.Errorf(approval.EINVALID, "sqlite dsn %q: in-memory databases are not supported, name a file", dsn)
	}
	// These would undo what the store relies on: WAL, an immediate writer, a writable file.
	for _, key := range []string{"_txlock", "_query_only", "_journal_mode", "_journal"} {
		if params.Has(key) {
			return "", "", approval.Errorf(approval.EINVALID, "sqlite dsn %q: %s is set by the store", dsn, key)
		}
	}
	if params.Get("mode") == "ro" {
		return "", "", approval.Errorf(approval.EINVALID, "sqlite dsn %q: the store needs a writable database, not mode=ro", dsn)
	}
	params.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	params.Add("_pragma", "foreign_keys(1)")

	w := cloneValues(params)
	w.Add("_pragma", "journal_mode(WAL)")
	w.Set("_txlock", "immediate")

	r := cloneValues(params)
	r.Add("_pragma", "query_only(1)")

	return "file:" + file + "?" + w.Encode(), "file:" + file + "?" + r.Encode(), nil
}

// cloneValues copies v deeply: the two pools add to the same keys, and appending to a shared
// slice could let one pool's pragma overwrite the other's.
func cloneValues(v url.Values) url.Values {
	c := make(url.Values, len(v))
	for k, vs := range v {
		c[k] = slices.Clone(vs)
	}
	return c
}

// Migrate applies the embedded migrations that have not been applied yet, in name order,
// recording each in schema_migrations. It runs in one BEGIN IMMEDIATE transaction, so two
// processes migrating the same file at once take turns and the second finds nothing to do.
func (s *Store) Migrate(ctx context.Context) error {
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback()

	if err := schema.Apply(ctx, querier{tx}, dialect, tx.now); err != nil {
		return fmt.Errorf("migrate: %w", classify(err))
	}
	return fail("migrate", tx.commit())
}

// schema is the embedded migrations, each recorded under its file name without ".sql".
var schema = sqldb.Migrations{
	FS: migrations,
	Table: `
		CREATE TABLE IF NOT EXISTS schema_migrations (
			name       TEXT    PRIMARY KEY,
			applied_at INTEGER NOT NULL
		) STRICT`,
	Name: func(p string) string { return strings.TrimSuffix(path.Base(p), ".sql") },
}

// Ping checks that both pools reach the database.
func (s *Store) Ping(ctx context.Context) error {
	for _, db := range []*sql.DB{s.read, s.write} {
		var one int
		if err := db.QueryRowContext(ctx, `SELECT 1`).Scan(&one); err != nil {
			return fmt.Errorf("ping: %w", unavailable(err))
		}
	}
	return nil
}

// HeartbeatUpdate writes the store's time into the one row of the heartbeat table and
// commits: a database that cannot take a write (a full disk, a read-only file) fails it, as
// EUNAVAILABLE, while Ping, a read, still succeeds.
func (s *Store) HeartbeatUpdate(ctx context.Context) error {
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return fail("heartbeat", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE heartbeat SET at = ? WHERE id = 1`, micros(tx.now)); err != nil {
		return fail("heartbeat", err)
	}
	return fail("heartbeat", tx.commit())
}

// DatabaseTime is this machine's clock: SQLite has no clock of its own apart from the
// process that opens it, and one machine's processes share one clock. It is time.Now, not
// the store's Now, so that a process whose clock is moved (Now) is seen to be off.
func (s *Store) DatabaseTime(ctx context.Context) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, fail("read the clock", err)
	}
	return time.Now(), nil
}

// Incarnation is a constant: the store is one file that this process opens and no other
// server can take its place while it is open.
func (s *Store) Incarnation() string { return "sqlite" }

// Close ends every subscription and closes both pools.
func (s *Store) Close() error {
	s.hub.Close()
	return errors.Join(s.read.Close(), s.write.Close())
}

// tx is one transaction together with the instant it runs at (wtf's Tx.now): every
// comparison with expires_at or a lease and every stored time inside it uses now. It also
// collects the Notifier topics its changes concern, signalled only once it commits.
type tx struct {
	*write
	now time.Time

	hub    *signal.Hub
	topics sqldb.Topics
}

// beginWrite starts a write transaction: it waits for its turn on the single write
// connection, inside the transaction that the writes queued for it share (writer). The write
// lock is held from the shared transaction's BEGIN IMMEDIATE. The clock is read once the
// write has its turn: a write that queued behind others must not compare expires_at or
// leases with the instant it began to wait.
func (s *Store) beginWrite(ctx context.Context) (*tx, error) {
	wr, err := s.writer.begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", classify(err))
	}
	return &tx{write: wr, now: s.instant(), hub: s.hub}, nil
}

// checkToken runs the pending approval.TokenChecks of ctx, if any, as the first statements of a
// transaction composed over approval.Tx (Begin): under the write lock, so no revocation
// commits between it and the writes. A batch of creates checks each create's token in its
// own savepoint instead (insertOne).
func (t *tx) checkToken(ctx context.Context) error {
	for _, c := range approval.PendingTokenChecks(ctx) {
		if err := sqldb.CheckToken(ctx, querier{t}, dialect, c); err != nil {
			return fail("check token", err)
		}
	}
	return nil
}

// commit commits tx, classifying a failure, then signals the topics of its changes: a
// subscriber woken by the signal finds the change already visible.
func (t *tx) commit() error {
	if err := t.write.commit(); err != nil {
		return fmt.Errorf("commit: %w", classify(err))
	}
	if t.hub != nil {
		t.hub.Signal(t.topics...)
	}
	return nil
}

// Rollback undoes the transaction's changes, unless it has ended (sql.ErrTxDone).
func (t *tx) Rollback() error { return t.write.rollback() }

// query runs a query in the transaction, for the statements the drivers share.
func (t *tx) query(ctx context.Context, query string, args ...any) (sqldb.Rows, error) {
	return querier{t}.Query(ctx, query, args...)
}

// querier adapts a pool or a transaction to sqldb.Execer.
type querier struct {
	q interface {
		QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	}
}

func (q querier) Exec(ctx context.Context, query string, args ...any) error {
	_, err := q.q.ExecContext(ctx, query, args...)
	return err
}

func (q querier) Query(ctx context.Context, query string, args ...any) (sqldb.Rows, error) {
	r, err := q.q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return rows{r}, nil
}

// rows are *sql.Rows as sqldb.Rows: a failure to close is the rows' Err.
type rows struct{ *sql.Rows }

func (r rows) Close() { r.Rows.Close() }

// micros is the stored form of a time.
func micros(t time.Time) int64 { return t.UnixMicro() }

// classify is sqldb.Classify with SQLite's meanings of its errors (class).
func classify(err error) error { return sqldb.Classify(err, class) }

// class says what a SQLite error means to the application (see sqldb.Classify): constraint
// violations become conflicts or invalid input, a database that cannot be used becomes
// EUNAVAILABLE.
func class(err error) *approval.Error {
	var e *sqlite.Error
	if !errors.As(err, &e) {
		return nil
	}
	switch e.Code() {
	case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
		return approval.Errorf(approval.ECONFLICT, "already exists")
	case sqlite3.SQLITE_CONSTRAINT_CHECK, sqlite3.SQLITE_CONSTRAINT_NOTNULL,
		sqlite3.SQLITE_CONSTRAINT_DATATYPE, sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
		return approval.Errorf(approval.EINVALID, "invalid value")
	}
	switch e.Code() & 0xff { // the primary result code
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN,
		sqlite3.SQLITE_FULL, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT:
		return sqldb.Unavailable()
	}
	return nil
}

// unavailable marks err as the database being unusable (503), keeping it for logs.
func unavailable(err error) error {
	return sqldb.Classify(err, func(error) *approval.Error { return sqldb.Unavailable() })
}

// fail annotates err with the method that failed. An *approval.Error made by the store is
// returned as it is, so callers see its code and message directly.
func fail(op string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(*approval.Error); ok {
		return err
	}
	return fmt.Errorf("%s: %w", op, classify(err))
}

// isUnique reports whether err is a UNIQUE or PRIMARY KEY violation.
func isUnique(err error) bool {
	var e *sqlite.Error
	return errors.As(err, &e) &&
		(e.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || e.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY)
}

// nullMicros binds an optional time as micros(t), or NULL.
func nullMicros(t *time.Time) sql.NullInt64 {
	if t == nil {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: micros(*t), Valid: true}
}
