package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/approvald/approval/internal/batch"
)

// groupMax is the most writes one shared transaction takes before it commits with writes still
// waiting: a bound on how long the first write of a group waits for its commit.
const groupMax = 64

// writer hands the one write connection to one write transaction at a time (its turn), and
// lets the transactions that queue for it share one SQLite transaction, a group: each write
// runs in a savepoint of its own (released when it commits, rolled back to when it rolls
// back), and the group commits when its last write ends with no write waiting, or after
// groupMax writes. A write's Commit returns once the group's COMMIT has ended, with its
// error: on SQLite a commit is a sync of the WAL, which a group pays once
// (docs/architecture.md, "Inside the SQLite driver").
//
// A write sees the writes of its group before them, committed or not; if the group does not
// commit, none of its writes is answered as committed, so nothing acknowledged ever depends
// on a write that was lost. A failure that ends the whole transaction (SQLite rolls back all
// of it on some errors, such as a full disk) is found when the failed write's savepoint can
// no longer be released or rolled back to, and fails every write of the group.
type writer struct {
	db *sql.DB // the write pool: one connection

	mu      sync.Mutex
	busy    bool            // a write holds the turn
	waiting []chan struct{} // writes waiting for the turn, first first; closed to hand it over
	group   *group          // the open shared transaction, if any

	groups, writes atomic.Uint64 // groups ended, and writes begun in them
}

// group is one shared transaction on the write connection.
type group struct {
	conn   *sql.Conn
	writes int           // writes begun in it
	broken error         // set when the transaction ended under a write: nothing of it commits
	done   chan struct{} // closed once it has ended
	err    error         // why it did not commit, once done
}

// write is one write transaction's turn in a group.
type write struct {
	w     *writer
	g     *group
	ended bool
}

// begin waits for the turn (or for ctx to end), opens a group if none is open, and starts
// the write's savepoint in it.
func (w *writer) begin(ctx context.Context) (*write, error) {
	if err := w.take(ctx); err != nil {
		return nil, err
	}
	g := w.group
	if g == nil {
		var err error
		if g, err = w.open(ctx); err != nil {
			w.yield()
			return nil, err
		}
	}
	g.writes++
	w.writes.Add(1)
	if _, err := g.conn.ExecContext(context.WithoutCancel(ctx), `SAVEPOINT write`); err != nil {
		g.broken = fmt.Errorf("begin a write in the shared transaction: %w", err)
		w.yield()
		return nil, err
	}
	return &write{w: w, g: g}, nil
}

// take waits for the turn. A write whose context ends while it waits leaves the queue, or,
// when the turn reached it at that moment, hands it on.
func (w *writer) take(ctx context.Context) error {
	w.mu.Lock()
	if !w.busy {
		w.busy = true
		w.mu.Unlock()
		return nil
	}
	turn := make(chan struct{})
	w.waiting = append(w.waiting, turn)
	w.mu.Unlock()
	select {
	case <-turn:
		return nil
	case <-ctx.Done():
	}
	w.mu.Lock()
	if i := slices.Index(w.waiting, turn); i >= 0 {
		w.waiting = slices.Delete(w.waiting, i, i+1)
		w.mu.Unlock()
		return ctx.Err()
	}
	w.mu.Unlock()
	w.yield() // handed the turn as ctx ended: the group goes on without this write
	return ctx.Err()
}

// open starts a group on the write connection, with the turn held.
func (w *writer) open(ctx context.Context) (*group, error) {
	conn, err := w.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	// Not interrupted: the driver may report a context that ended as the error of a BEGIN
	// that took effect, and the connection would go back to the pool in a transaction.
	if _, err := conn.ExecContext(context.WithoutCancel(ctx), `BEGIN IMMEDIATE`); err != nil {
		discard(conn)
		return nil, err
	}
	g := &group{conn: conn, done: make(chan struct{})}
	w.group = g
	return g, nil
}

// yield ends the turn of the write that holds it: it hands the turn to the next write waiting
// inside the same group, unless the group is broken or full; else it ends the group
// (commits it, or rolls back what is left of a broken one) and then hands the turn on, or
// frees it.
func (w *writer) yield() {
	w.mu.Lock()
	g := w.group
	if g != nil && g.broken == nil && g.writes < groupMax && w.handOn() {
		return
	}
	w.group = nil
	w.mu.Unlock()
	if g != nil {
		w.endGroup(g)
	}
	w.mu.Lock()
	if !w.handOn() {
		w.busy = false
		w.mu.Unlock()
	}
}

// handOn hands the turn to the first write waiting, if any, and then unlocks w.mu, which the
// caller holds; it reports whether it did (w.mu is still held if not).
func (w *writer) handOn() bool {
	if len(w.waiting) == 0 {
		return false
	}
	next := w.waiting[0]
	w.waiting = w.waiting[1:]
	w.mu.Unlock()
	close(next)
	return true
}

// endGroup commits g, or rolls back what is left of it when it is broken, returns its connection
// to the pool and answers its writes. It runs with the turn held and on a context of its
// own: the group's writes wait for it, whoever asked first.
func (w *writer) endGroup(g *group) {
	ctx := context.Background()
	if g.broken == nil {
		if _, err := g.conn.ExecContext(ctx, `COMMIT`); err != nil {
			g.err = classify(err)
		}
	} else {
		g.err = fmt.Errorf("the shared write transaction ended, nothing of it was written: %w", unavailable(g.broken))
	}
	if g.broken != nil || g.err != nil {
		// Whatever is left open of the transaction goes with the connection, which is
		// closed rather than kept (closing rolls it back): the next group starts on a
		// connection in no transaction.
		discard(g.conn)
	} else {
		g.conn.Close()
	}
	w.groups.Add(1)
	close(g.done)
}

// commit releases the write's savepoint, ends its turn, and returns once its group has
// ended: nil if the group committed.
func (wr *write) commit() error {
	return wr.end(`RELEASE write`, "release a write")
}

// rollback undoes the write's own changes, if it has not ended, ends its turn, and returns
// once its group has ended: what the write read of the group's earlier writes, and answered
// from (a claim found lost, a token found revoked), has then committed, or the write's
// caller would have answered from a change that never was. If the savepoint cannot be
// rolled back to, the transaction has ended under the write, and the whole group fails.
func (wr *write) rollback() error {
	if err := wr.end(`ROLLBACK TO write; RELEASE write`, "roll back a write"); errors.Is(err, sql.ErrTxDone) {
		return err
	}
	return nil
}

// end ends the write with stmt, which closes its savepoint (what is an error of it, when
// the transaction has ended under the write), ends its turn, and returns its group's error
// once the group has ended; sql.ErrTxDone if the write had ended already.
func (wr *write) end(stmt, what string) error {
	if wr.ended {
		return sql.ErrTxDone
	}
	wr.ended = true
	g := wr.g
	if _, err := g.conn.ExecContext(context.Background(), stmt); err != nil {
		g.broken = fmt.Errorf("%s: %w", what, err)
	}
	wr.w.yield()
	<-g.done
	return g.err
}

// ExecContext runs a statement of the write. A statement is never interrupted once it runs:
// SQLite rolls back the whole transaction, the group's, when it interrupts a write inside
// one; a context that has ended stops the write before its next statement instead.
func (wr *write) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if err := wr.usable(ctx); err != nil {
		return nil, err
	}
	return wr.g.conn.ExecContext(context.WithoutCancel(ctx), query, args...)
}

// QueryContext runs a query of the write, as ExecContext runs a statement. Its rows must be
// closed before the write commits or rolls back: the group's connection goes back to the
// pool only once they are.
func (wr *write) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if err := wr.usable(ctx); err != nil {
		return nil, err
	}
	return wr.g.conn.QueryContext(context.WithoutCancel(ctx), query, args...)
}

func (wr *write) usable(ctx context.Context) error {
	if wr.ended {
		return sql.ErrTxDone
	}
	return ctx.Err()
}

// discard closes conn for good instead of returning it to the pool.
func discard(conn *sql.Conn) {
	conn.Raw(func(any) error { return driver.ErrBadConn })
	conn.Close()
}

// stats is what the writer has done so far, for BatchStats: the groups ended (one COMMIT
// each, or none for a broken one) and the write transactions begun in them.
func (w *writer) stats() batch.Stats {
	return batch.Stats{Batches: w.groups.Load(), Calls: w.writes.Load()}
}
