package sqlite

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"modernc.org/sqlite"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/wait"
)

// openWriterStore opens a store on a new file with a table w(id, v) whose trigger ends the
// whole transaction (RAISE(ROLLBACK)) when a row's v is 'boom', as SQLite does itself on
// some errors (a full disk).
func openWriterStore(t *testing.T) *Store {
	t.Helper()
	ctx := context.Background()
	s, err := Open(ctx, "file:"+filepath.Join(t.TempDir(), "writer.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	tx, err := s.beginWrite(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE w (id INTEGER PRIMARY KEY, v TEXT NOT NULL)`,
		`CREATE TRIGGER w_boom BEFORE INSERT ON w WHEN NEW.v = 'boom' BEGIN SELECT RAISE(ROLLBACK, 'boom'); END`,
	} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.commit(); err != nil {
		t.Fatal(err)
	}
	return s
}

// queued is how many writes wait for the turn.
func (w *writer) queued() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.waiting)
}

// committedRows returns the ids in w, read on the read pool: what has committed.
func committedRows(t *testing.T, s *Store) []int {
	t.Helper()
	r, err := s.read.QueryContext(context.Background(), `SELECT id FROM w ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var ids []int
	for r.Next() {
		var id int
		if err := r.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// insertRow begins a write, inserts (id, v), then commits it, or rolls it back when rollback
// is set; it returns the first error.
func insertRow(ctx context.Context, s *Store, id int, v string, rollback bool) error {
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO w (id, v) VALUES (?, ?)`, id, v); err != nil {
		return err
	}
	if rollback {
		return tx.Rollback()
	}
	return tx.commit()
}

// holdTurn begins a write that inserts row 0 and keeps the turn, so that writes started
// after it queue; it starts each of writes once the one before has queued, in order, then
// commits the first write, and returns every write's error (the first's at 0) and the rows
// committed at the moment the first write's commit returned.
func holdTurn(t *testing.T, s *Store, writes ...func() error) (errs []error, atFirstCommit []int) {
	t.Helper()
	first := beginFirst(t, s)
	errs = make([]error, len(writes)+1)
	var wg sync.WaitGroup
	for i, write := range writes {
		wg.Go(func() { errs[i+1] = write() })
		wait.Until(t, fmt.Sprintf("write %d queued", i+1), func() bool { return s.writer.queued() == i+1 })
	}
	errs[0] = first.commit()
	atFirstCommit = committedRows(t, s)
	wg.Wait()
	return errs, atFirstCommit
}

// beginFirst begins a write that inserts row 0 and keeps the turn until it ends.
func beginFirst(t *testing.T, s *Store) *tx {
	t.Helper()
	ctx := context.Background()
	first, err := s.beginWrite(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.ExecContext(ctx, `INSERT INTO w (id, v) VALUES (0, 'first')`); err != nil {
		t.Fatal(err)
	}
	return first
}

// Write transactions that queue for the writer share one transaction and one commit; each
// commit returns once that commit has happened.
func TestWriter_QueuedWritesShareOneCommit(t *testing.T) {
	t.Parallel()
	s := openWriterStore(t)
	before := s.writer.stats()
	var writes []func() error
	for i := 1; i <= 10; i++ {
		writes = append(writes, func() error { return insertRow(context.Background(), s, i, "x", false) })
	}
	errs, atFirstCommit := holdTurn(t, s, writes...)
	for i, err := range errs {
		if err != nil {
			t.Errorf("write %d: %v", i, err)
		}
	}
	after := s.writer.stats()
	if groups, n := after.Batches-before.Batches, after.Calls-before.Calls; groups != 1 || n != 11 {
		t.Errorf("%d groups of %d writes, want one of 11", groups, n)
	}
	// The first write's commit returned once the group's had happened, with every write.
	if want := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}; !slices.Equal(atFirstCommit, want) {
		t.Errorf("rows when the first write's commit returned %v, want %v", atFirstCommit, want)
	}
}

// A write that rolls back undoes its own rows only; the group's other writes commit.
// The write that rolls back returns once its group has ended, so that what it read of the
// writes before it (and answered from) has committed.
func TestWriter_RollbackUndoesOnlyItsWrite(t *testing.T) {
	t.Parallel()
	s := openWriterStore(t)
	before := s.writer.stats()
	var (
		writes               []func() error
		groupsWhenRolledBack uint64
	)
	for i := 1; i <= 4; i++ {
		writes = append(writes, func() error {
			err := insertRow(context.Background(), s, i, "x", i == 2)
			if i == 2 {
				groupsWhenRolledBack = s.writer.stats().Batches
			}
			return err
		})
	}
	errs, _ := holdTurn(t, s, writes...)
	for i, err := range errs {
		if err != nil {
			t.Errorf("write %d: %v", i, err)
		}
	}
	if got, want := committedRows(t, s), []int{0, 1, 3, 4}; !slices.Equal(got, want) {
		t.Errorf("rows %v, want %v", got, want)
	}
	if groupsWhenRolledBack != before.Batches+1 {
		t.Errorf("the rollback returned with %d groups ended, want %d: before its group ended", groupsWhenRolledBack-before.Batches, 1)
	}
}

// A failure that ends the whole transaction under one write fails every write of its group,
// those committed before it too, and writes nothing of them; the writes queued after it run
// in a new group.
func TestWriter_FailureThatEndsTheTransactionFailsItsGroup(t *testing.T) {
	t.Parallel()
	s := openWriterStore(t)
	ctx := context.Background()
	errs, _ := holdTurn(t, s,
		func() error { return insertRow(ctx, s, 1, "x", false) },
		func() error { return insertRow(ctx, s, 2, "boom", false) },
		func() error { return insertRow(ctx, s, 3, "x", false) },
	)
	for _, i := range []int{0, 1} {
		if approval.ErrorCode(errs[i]) != approval.EUNAVAILABLE {
			t.Errorf("write %d, committed before the failure in its group: %v, want EUNAVAILABLE", i, errs[i])
		}
	}
	if errs[2] == nil {
		t.Error("the write that failed: no error")
	}
	if errs[3] != nil {
		t.Errorf("write 3, queued after the failure: %v", errs[3])
	}
	if got, want := committedRows(t, s), []int{3}; !slices.Equal(got, want) {
		t.Errorf("rows %v, want %v", got, want)
	}
	if err := insertRow(ctx, s, 4, "x", false); err != nil {
		t.Errorf("a write after: %v", err)
	}
}

// A group takes at most groupMax writes; the writes past it wait for the next group.
func TestWriter_GroupIsBounded(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ writes, groups int }{{groupMax, 1}, {groupMax + 1, 2}} {
		s := openWriterStore(t)
		before := s.writer.stats()
		var writes []func() error
		for i := 1; i < tt.writes; i++ { // and the first
			writes = append(writes, func() error { return insertRow(context.Background(), s, i, "x", false) })
		}
		errs, _ := holdTurn(t, s, writes...)
		for i, err := range errs {
			if err != nil {
				t.Errorf("write %d: %v", i, err)
			}
		}
		if groups := s.writer.stats().Batches - before.Batches; groups != uint64(tt.groups) {
			t.Errorf("%d groups for %d writes queued together, want %d", groups, tt.writes, tt.groups)
		}
		if got := len(committedRows(t, s)); got != tt.writes {
			t.Errorf("%d rows, want %d", got, tt.writes)
		}
	}
}

// A write whose context ends while it waits for its turn leaves the queue with the
// context's error; the writes before and after it go on.
func TestWriter_ContextEndsWhileWaiting(t *testing.T) {
	t.Parallel()
	s := openWriterStore(t)
	ctx := context.Background()
	first := beginFirst(t, s)
	cancelled, cancel := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() { waited <- insertRow(cancelled, s, 1, "x", false) }()
	wait.Until(t, "the write queued", func() bool { return s.writer.queued() == 1 })
	cancel()
	if err := <-waited; !errors.Is(err, context.Canceled) {
		t.Errorf("the write cancelled while waiting: %v, want context.Canceled", err)
	}
	if n := s.writer.queued(); n != 0 {
		t.Errorf("%d writes queued after the cancelled one left", n)
	}
	after := make(chan error, 1)
	go func() { after <- insertRow(ctx, s, 2, "x", false) }()
	wait.Until(t, "the next write queued", func() bool { return s.writer.queued() == 1 })
	if err := first.commit(); err != nil {
		t.Errorf("the first write: %v", err)
	}
	if err := <-after; err != nil {
		t.Errorf("the write after: %v", err)
	}
	if got, want := committedRows(t, s), []int{0, 2}; !slices.Equal(got, want) {
		t.Errorf("rows %v, want %v", got, want)
	}
}

// A context that ends may meet the turn being handed to its write, and the write may see
// either first. Whichever it sees, the turn is never lost (the write after the rounds runs)
// and nothing of the others' is (every first write's row committed). A hundred rounds with
// the cancel racing the hand-over, so that both orders can occur; the outcome is checked,
// not which order occurred.
func TestWriter_ContextEndsAsTheTurnComes(t *testing.T) {
	t.Parallel()
	s := openWriterStore(t)
	ctx := context.Background()
	for round := range 100 {
		first, err := s.beginWrite(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cancelled, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- insertRow(cancelled, s, 2*round+1, "x", false) }()
		wait.Until(t, "the write queued", func() bool { return s.writer.queued() == 1 })
		go cancel()
		if _, err := first.ExecContext(ctx, `INSERT INTO w (id, v) VALUES (?, 'first')`, 2*round); err != nil {
			t.Fatal(err)
		}
		if err := first.commit(); err != nil {
			t.Fatalf("round %d: the first write: %v", round, err)
		}
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("round %d: the cancelled write: %v", round, err)
		}
	}
	// The turn is free, and every first write committed.
	if err := insertRow(ctx, s, -1, "x", false); err != nil {
		t.Fatal(err)
	}
	ids := committedRows(t, s)
	for round := range 100 {
		if !slices.Contains(ids, 2*round) {
			t.Fatalf("round %d: the first write's row is missing", round)
		}
	}
}

// A statement of a write whose context has ended is not run, although statements run
// uncancelled (TestWriter_StatementRunsToItsEnd): the write checks its context before each,
// and rolls back alone.
func TestWriter_StatementAfterContextEnds(t *testing.T) {
	t.Parallel()
	s := openWriterStore(t)
	ctx := context.Background()
	errs, _ := holdTurn(t, s,
		func() error { return insertRow(ctx, s, 1, "x", false) },
		func() error {
			cancelled, cancel := context.WithCancel(ctx)
			defer cancel()
			tx, err := s.beginWrite(cancelled)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if _, err := tx.ExecContext(cancelled, `INSERT INTO w (id, v) VALUES (2, 'x')`); err != nil {
				return err
			}
			cancel()
			_, err = tx.ExecContext(cancelled, `INSERT INTO w (id, v) VALUES (3, 'x')`)
			return err
		},
	)
	if !errors.Is(errs[2], context.Canceled) {
		t.Errorf("a statement after the context ended: %v, want context.Canceled", errs[2])
	}
	if errs[0] != nil || errs[1] != nil {
		t.Errorf("the other writes: %v, %v", errs[0], errs[1])
	}
	if got, want := committedRows(t, s), []int{0, 1}; !slices.Equal(got, want) {
		t.Errorf("rows %v, want %v", got, want)
	}
}

// waitGate is what approvald_test_wait() does while a test has set one: its first call
// reports on started and blocks until release is closed; later calls return at once. It lets
// a test end a write's context while one of its statements runs.
type waitGate struct {
	once             sync.Once
	started, release chan struct{}
}

var testWait atomic.Pointer[waitGate]

func init() {
	sqlite.MustRegisterScalarFunction("approvald_test_wait", 0, func(*sqlite.FunctionContext, []driver.Value) (driver.Value, error) {
		if g := testWait.Load(); g != nil {
			g.once.Do(func() {
				close(g.started)
				<-g.release
			})
		}
		return "x", nil
	})
}

// A statement that runs while its write's context ends runs to its end: SQLite, had the
// driver interrupted it, would have rolled back the whole transaction, and with it the
// writes of the group that committed before it. The statement inserts 20,000 rows, calling
// approvald_test_wait() for each, so that it still runs well after the context ended.
func TestWriter_StatementRunsToItsEnd(t *testing.T) {
	s := openWriterStore(t) // not parallel: the gate is the process's
	gate := &waitGate{started: make(chan struct{}), release: make(chan struct{})}
	testWait.Store(gate)
	defer testWait.Store(nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-gate.started
		cancel()
		close(gate.release)
	}()
	errs, _ := holdTurn(t, s,
		func() error { return insertRow(context.Background(), s, 1, "x", false) },
		func() error {
			tx, err := s.beginWrite(ctx)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if _, err := tx.ExecContext(ctx, `
				INSERT INTO w (id, v)
				WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000)
				SELECT 1000 + i, approvald_test_wait() FROM n`); err != nil {
				return err
			}
			return tx.commit()
		},
	)
	for i, err := range errs {
		if err != nil {
			t.Errorf("write %d: %v", i, err)
		}
	}
	if got := len(committedRows(t, s)); got != 20002 {
		t.Errorf("%d rows, want 20,002", got)
	}
}
