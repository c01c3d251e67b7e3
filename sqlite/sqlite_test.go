package sqlite_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/wait"
	"github.com/approvald/approval/sqlite"
)

// The behaviour every store shares is tested by storetest (store_test.go); these tests are
// about SQLite itself: DSNs, migrations, and writers in one and in several processes.

func TestOpen_DSN(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		dsn  string
	}{
		{"bare path", filepath.Join(dir, "bare.db")},
		{"file URI", "file:" + filepath.Join(dir, "uri.db")},
		{"file URI with parameters", "file:" + filepath.Join(dir, "params.db") + "?_pragma=synchronous(NORMAL)&cache=private"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := MustOpen(t, tc.dsn)
			MustCreateApproval(t, s, "ci-bot", "deploy-1")
			list, _, err := s.Approvals(context.Background(), approval.ApprovalFilter{})
			if err != nil {
				t.Fatalf("approvals: %v", err)
			}
			if got, want := len(list), 1; got != want {
				t.Fatalf("got %d approvals, want %d", got, want)
			}
		})
	}

	// SQLite reads a file: URI, so '#' and '%' in a bare path must reach it escaped.
	t.Run("bare path names the file", func(t *testing.T) {
		path := filepath.Join(dir, "named #1 100%.db")
		MustOpen(t, path)
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("database file: %v", err)
		}
		if got, want := journalMode(t, path), "wal"; got != want {
			t.Fatalf("journal_mode: got %q, want %q", got, want)
		}
	})
}

func TestOpen_RefusedDSN(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, dsn := range []string{
		":memory:",
		"file::memory:",
		"file:" + filepath.Join(dir, "a.db") + "?mode=memory",
		"file:" + filepath.Join(dir, "b.db") + "?_txlock=deferred",
		"file:" + filepath.Join(dir, "c.db") + "?mode=ro",
		"file:" + filepath.Join(dir, "d.db") + "?_journal_mode=DELETE",
		"",
	} {
		s, err := sqlite.Open(context.Background(), dsn)
		if err == nil {
			s.Close()
			t.Errorf("open %q: got no error, want one", dsn)
		} else if got, want := approval.ErrorCode(err), approval.EINVALID; got != want {
			t.Errorf("open %q: got code %q (%v), want %q", dsn, got, err, want)
		}
	}
}

// A file SQLite cannot use is a database that is down (503), not an internal error.
func TestOpen_UnusableFileIsUnavailable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.db")
	if err := os.WriteFile(garbage, bytes.Repeat([]byte("not a database "), 512), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, dsn := range map[string]string{
		"directory":   dir,
		"not sqlite":  garbage,
		"missing dir": filepath.Join(dir, "missing", "approvald.db"),
	} {
		s, err := sqlite.Open(context.Background(), dsn)
		if err == nil {
			s.Close()
			t.Errorf("%s: open: got no error, want one", name)
		} else if got, want := approval.ErrorCode(err), approval.EUNAVAILABLE; got != want {
			t.Errorf("%s: open: got code %q (%v), want %q", name, got, err, want)
		}
	}
}

func TestMigrate_Idempotent(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "approvald.db")
	ctx := context.Background()

	s := MustOpen(t, path)
	a := MustCreateApproval(t, s, "ci-bot", "deploy-1")
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("second migrate: %v", err)
	}
	s.Close()

	// A restart migrates again; nothing is re-applied and the data survives.
	s = MustOpen(t, path)
	if _, err := s.Approval(ctx, a.ID); err != nil {
		t.Fatalf("approval after re-migrate: %v", err)
	}
	if got, want := appliedMigrations(t, path), migrationFiles(t); got != want {
		t.Fatalf("schema_migrations rows: got %d, want %d", got, want)
	}
}

func TestMigrate_ConcurrentProcesses(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "approvald.db")

	// Each Store stands for one process starting on a new database at the same moment.
	const n = 4
	start := make(chan struct{})
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			<-start
			s, err := sqlite.Open(context.Background(), path)
			if err != nil {
				errs <- fmt.Errorf("open: %w", err)
				return
			}
			defer s.Close()
			if err := s.Migrate(context.Background()); err != nil {
				errs <- fmt.Errorf("migrate: %w", err)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got, want := appliedMigrations(t, path), migrationFiles(t); got != want {
		t.Fatalf("schema_migrations rows: got %d, want %d", got, want)
	}
}

func TestConcurrentWrites_OneStore(t *testing.T) {
	t.Parallel()
	s := MustOpen(t, filepath.Join(t.TempDir(), "approvald.db"))
	ctx := context.Background()

	// 100 writers and as many readers at once through one Store: the single write
	// connection queues the writers, so none may see SQLITE_BUSY (it would surface as an
	// error here).
	const n = 100
	start := make(chan struct{})
	errs := make(chan error, 2*n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			if _, err := createApproval(ctx, s, "ci-bot", fmt.Sprintf("deploy-%d", i)); err != nil {
				errs <- err
			}
		})
		wg.Go(func() {
			<-start
			if _, _, err := s.Approvals(ctx, approval.ApprovalFilter{Limit: 10}); err != nil {
				errs <- fmt.Errorf("approvals: %w", err)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	counts, err := s.ApprovalCounts(ctx)
	if err != nil {
		t.Fatalf("approval counts: %v", err)
	}
	if got, want := counts[approval.StatusPending], n; got != want {
		t.Fatalf("pending approvals: got %d, want %d", got, want)
	}
}

func TestConcurrentWrites_SeveralProcesses(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "approvald.db")
	ctx := context.Background()

	// Several Stores on one file stand for several processes. Their write connections
	// contend for SQLite's lock, which busy_timeout turns into waiting instead of errors.
	const stores, perStore = 3, 20
	ss := make([]*sqlite.Store, stores)
	for i := range ss {
		ss[i] = MustOpen(t, path)
	}
	start := make(chan struct{})
	errs := make(chan error, stores*perStore)
	var wg sync.WaitGroup
	for i, s := range ss {
		for j := range perStore {
			wg.Go(func() {
				<-start
				if _, err := createApproval(ctx, s, "ci-bot", fmt.Sprintf("deploy-%d-%d", i, j)); err != nil {
					errs <- err
				}
			})
		}
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	counts, err := ss[0].ApprovalCounts(ctx)
	if err != nil {
		t.Fatalf("approval counts: %v", err)
	}
	if got, want := counts[approval.StatusPending], stores*perStore; got != want {
		t.Fatalf("pending approvals: got %d, want %d", got, want)
	}
}

func TestBootstrap_SeveralProcesses(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "approvald.db")
	ctx := context.Background()

	const n = 4
	ss := make([]*sqlite.Store, n)
	for i := range ss {
		ss[i] = MustOpen(t, path)
	}
	start := make(chan struct{})
	results := make(chan bool, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for _, s := range ss {
		wg.Go(func() {
			_, tok := approval.NewToken("admin", approval.RoleAdmin, approval.Now())
			<-start
			ok, err := (&approval.Service{Store: s}).Bootstrap(ctx, tok)
			if err != nil {
				errs <- err
				return
			}
			results <- ok
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	close(results)
	for err := range errs {
		t.Fatalf("bootstrap: %v", err)
	}
	won := 0
	for ok := range results {
		if ok {
			won++
		}
	}
	if got, want := won, 1; got != want {
		t.Fatalf("bootstraps that stored a token: got %d, want %d", got, want)
	}
}

// MustOpen opens and migrates the database at dsn, closing it when the test ends.
func MustOpen(tb testing.TB, dsn string) *sqlite.Store {
	tb.Helper()
	s, err := sqlite.Open(context.Background(), dsn)
	if err != nil {
		tb.Fatalf("open %s: %v", dsn, err)
	}
	tb.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		tb.Fatalf("migrate %s: %v", dsn, err)
	}
	return s
}

// MustCreateApproval creates a pending approval under (requester, key).
func MustCreateApproval(tb testing.TB, s *sqlite.Store, requester, key string) *approval.Approval {
	tb.Helper()
	a, err := createApproval(context.Background(), s, requester, key)
	if err != nil {
		tb.Fatal(err)
	}
	return a
}

// createApproval writes an approval and its idempotency record as the service does.
func createApproval(ctx context.Context, s *sqlite.Store, requester, key string) (*approval.Approval, error) {
	body := fmt.Appendf(nil, `{"action":"deploy","title":%q,"approvers":["alice","bob"]}`, key)
	fp, err := approval.Fingerprint(requester, "POST", "/v1/approvals", body)
	if err != nil {
		return nil, fmt.Errorf("fingerprint: %w", err)
	}
	now := approval.Now()
	a := &approval.Approval{
		ID:                approval.NewID("apr"),
		OperationKey:      key,
		Action:            "deploy",
		Title:             key,
		Context:           []byte(`{"commit": "9f2c1e"}`),
		Requester:         requester,
		Approvers:         []string{"alice", "bob"},
		RequiredApprovals: 1,
		ExpiresAt:         now.Add(24 * time.Hour),
		CreatedAt:         now,
		Fingerprint:       fp,
	}
	if h, err := s.InsertApproval(ctx, a, approval.HTTPCause("req-"+key), nil); err != nil {
		return nil, fmt.Errorf("create approval %s: %w", key, err)
	} else if h != nil {
		return nil, fmt.Errorf("create approval %s: the key is held", key)
	}
	return a, nil
}

// journalMode reads the journal mode recorded in the database file at path.
func journalMode(tb testing.TB, path string) string {
	tb.Helper()
	var mode string
	queryRaw(tb, path, `PRAGMA journal_mode`, &mode)
	return mode
}

// appliedMigrations counts the rows of schema_migrations in the database file at path.
func appliedMigrations(tb testing.TB, path string) int {
	tb.Helper()
	var n int
	queryRaw(tb, path, `SELECT count(*) FROM schema_migrations`, &n)
	return n
}

// queryRaw runs one single-row query on its own connection, outside the Store.
func queryRaw(tb testing.TB, path, query string, dest ...any) {
	tb.Helper()
	// A plain path, not a file: URI, so that the name reaches SQLite as it is.
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		tb.Fatalf("open %s: %v", path, err)
	}
	defer db.Close()
	if err := db.QueryRow(query).Scan(dest...); err != nil {
		tb.Fatalf("%s: %v", query, err)
	}
}

// migrationFiles counts the embedded migrations from the source tree.
func migrationFiles(tb testing.TB) int {
	tb.Helper()
	names, err := fs.Glob(os.DirFS("."), "migrations/*.sql")
	if err != nil || len(names) == 0 {
		tb.Fatalf("list migrations: %d files, %v", len(names), err)
	}
	return len(names)
}

// Creates that queue for the writer together are written in one transaction, each in a
// savepoint of its own: one create's refused content or refused token undoes only its own
// rows, two creates of one key in the batch settle on one approval, and the others commit.
func TestInsertApproval_Batch(t *testing.T) {
	t.Parallel()
	s := MustOpen(t, filepath.Join(t.TempDir(), "approvald.db"))
	ctx := context.Background()
	var wg sync.WaitGroup
	lead := newApproval(t, "ci-bot", "lead", "alice")
	release := holdBehindFirst(t, s, "create", &wg, func() error {
		_, err := s.InsertApproval(ctx, lead, approval.HTTPCause("req-lead"), nil)
		return err
	})

	type result struct {
		holder *approval.KeyHolder
		err    error
	}
	unknownToken := approval.WithTokenCheck(ctx, &approval.TokenCheck{ID: "tok_gone", Hash: []byte("gone"), Now: approval.Now()})
	creates := []struct {
		name string
		ctx  context.Context
		a    *approval.Approval
	}{
		{"good", ctx, newApproval(t, "ci-bot", "good", "alice")},
		{"same key", ctx, newApproval(t, "ci-bot", "same", "alice")},
		{"approver twice", ctx, newApproval(t, "ci-bot", "twice", "alice", "alice")},
		{"same key again", ctx, newApproval(t, "ci-bot", "same", "alice")},
		{"token gone", unknownToken, newApproval(t, "ci-bot", "gone", "alice")},
		{"also good", ctx, newApproval(t, "ci-bot", "also-good", "bob")},
	}
	results := make([]result, len(creates))
	for i, c := range creates {
		wg.Go(func() {
			h, err := s.InsertApproval(c.ctx, c.a, approval.HTTPCause("req-"+c.name), nil)
			results[i] = result{h, err}
		})
	}
	wait.Until(t, "the creates to queue", func() bool { return s.CreatesWaiting() == len(creates) })
	release()
	wg.Wait()

	if st := s.BatchCounts()["create"]; st.Batches != 2 || st.Calls != uint64(1+len(creates)) {
		t.Fatalf("ran %d creates in %d batches, want %d in 2", st.Calls, st.Batches, 1+len(creates))
	}
	exists := func(a *approval.Approval) bool {
		t.Helper()
		_, err := s.Approval(ctx, a.ID)
		if err != nil && approval.ErrorCode(err) != approval.ENOTFOUND {
			t.Fatalf("read %s: %v", a.ID, err)
		}
		return err == nil
	}
	// The two creates of one key queued in either order: the one that came first wrote.
	first, second := 1, 3
	if results[first].holder != nil {
		first, second = second, first
	}
	for i, c := range creates {
		r := results[i]
		switch {
		case c.name == "good" || c.name == "also good" || i == first:
			if r.err != nil || r.holder != nil || !exists(c.a) {
				t.Errorf("%s: holder %v, %v; want written", c.name, r.holder, r.err)
			}
		case i == second:
			if r.err != nil || r.holder == nil || r.holder.Approval.ID != creates[first].a.ID || exists(c.a) {
				t.Errorf("%s: holder %v, %v; want the other's approval %s", c.name, r.holder, r.err, creates[first].a.ID)
			}
		case c.name == "approver twice":
			if approval.ErrorCode(r.err) != approval.EINVALID || exists(c.a) {
				t.Errorf("%s: %v; want EINVALID and nothing written", c.name, r.err)
			}
		case c.name == "token gone":
			if approval.ErrorCode(r.err) != approval.EUNAUTHORIZED || exists(c.a) {
				t.Errorf("%s: %v; want EUNAUTHORIZED and nothing written", c.name, r.err)
			}
		}
	}
	if !exists(lead) {
		t.Error("the first create was not written")
	}
	// Nothing of the refused ones is left behind: their keys are free.
	for _, key := range []string{"twice", "gone"} {
		a := newApproval(t, "ci-bot", key, "alice")
		if h, err := s.InsertApproval(ctx, a, approval.HTTPCause("req-again-"+key), nil); err != nil || h != nil {
			t.Errorf("key %s again: holder %v, %v; want written", key, h, err)
		}
	}
}

// newApproval returns an approval ready to insert under (requester, key), pending the given
// approvers.
func newApproval(tb testing.TB, requester, key string, approvers ...string) *approval.Approval {
	tb.Helper()
	fp, err := approval.Fingerprint(requester, "POST", "/v1/approvals", fmt.Appendf(nil, `{"title":%q}`, key))
	if err != nil {
		tb.Fatal(err)
	}
	now := approval.Now()
	return &approval.Approval{
		ID: approval.NewID("apr"), OperationKey: key, Action: "deploy", Title: key,
		Requester: requester, Approvers: approvers, RequiredApprovals: 1,
		ExpiresAt: now.Add(24 * time.Hour), CreatedAt: now, Fingerprint: fp,
	}
}

// holdBehindFirst holds s's writer and starts first on wg: a write of the batch kind given
// ("create", "intake"), which takes that kind's one batch slot and waits for the writer, so
// that the writes of the kind started after it queue as the next batch. It returns the
// function that frees the writer; first must succeed.
func holdBehindFirst(t *testing.T, s *sqlite.Store, kind string, wg *sync.WaitGroup, first func() error) (release func()) {
	t.Helper()
	release, err := s.HoldWriter(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	before := s.BatchCounts()[kind].Calls
	wg.Go(func() {
		if err := first(); err != nil {
			t.Errorf("the first %s, ahead of the batch: %v", kind, err)
		}
	})
	wait.Until(t, "the first "+kind+"'s batch", func() bool { return s.BatchCounts()[kind].Calls == before+1 })
	return release
}

// Deliveries that queue for the writer together are stored in one transaction: a new event,
// its duplicate in the same batch, a redelivery under its id with another body, a delivery
// refused for its content and a second new event each get their own answer.
func TestRecordInbox_Batch(t *testing.T) {
	t.Parallel()
	s := MustOpen(t, filepath.Join(t.TempDir(), "approvald.db"))
	ctx := context.Background()
	event := func(eventID, body string) *approval.InboxEvent {
		return &approval.InboxEvent{ID: approval.NewID("inb"), Source: "chat", EventID: eventID,
			Type: approval.TypeApprovalDecision, Body: []byte(body)}
	}
	var wg sync.WaitGroup
	lead := event("evt-lead", `{}`)
	release := holdBehindFirst(t, s, "intake", &wg, func() error {
		_, err := s.RecordInbox(ctx, lead)
		return err
	})

	// The deliveries of one event id go in one after the other, so that their order, and
	// with it which one stored the event, is known.
	deliveries := []*approval.InboxEvent{event("evt-1", `{"n":1}`), event("evt-1", `{"n":1}`), event("evt-1", `{"n":2}`)}
	others := []*approval.InboxEvent{event("", `{}`), event("evt-2", `{}`)}
	dup := make([]bool, len(deliveries)+len(others))
	errs := make([]error, len(dup))
	for i, e := range append(deliveries, others...) {
		wg.Go(func() { dup[i], errs[i] = s.RecordInbox(ctx, e) })
		if i < len(deliveries) {
			wait.Until(t, "the delivery to queue", func() bool { return s.IntakesWaiting() == i+1 })
		}
	}
	wait.Until(t, "the deliveries to queue", func() bool { return s.IntakesWaiting() == len(dup) })
	firstID := deliveries[0].ID
	release()
	wg.Wait()

	if st := s.BatchCounts()["intake"]; st.Batches != 2 || st.Calls != uint64(1+len(dup)) {
		t.Fatalf("ran %d deliveries in %d batches, want %d in 2", st.Calls, st.Batches, 1+len(dup))
	}
	for i, want := range []bool{false, true, true} {
		if errs[i] != nil || dup[i] != want || deliveries[i].ID != firstID {
			t.Errorf("delivery %d of evt-1: duplicate %v, %v, answered as %s; want duplicate %v, answered as %s", i, dup[i], errs[i], deliveries[i].ID, want, firstID)
		}
	}
	if got := deliveries[2].Conflicts; got != 1 {
		t.Errorf("evt-1 after a redelivery with another body: %d conflicts, want 1", got)
	}
	if code := approval.ErrorCode(errs[3]); code != approval.EINVALID {
		t.Errorf("a delivery without an event id: %v, want EINVALID", errs[3])
	}
	if errs[4] != nil || dup[4] {
		t.Errorf("evt-2: duplicate %v, %v; want stored", dup[4], errs[4])
	}
	for _, e := range []*approval.InboxEvent{lead, deliveries[0], others[1]} {
		got, err := s.InboxEvent(ctx, e.ID)
		if err != nil || got.Status != approval.InboxPending {
			t.Errorf("%s: %+v, %v; want stored, pending", e.EventID, got, err)
		}
	}
}

// A batch whose transaction ends with nothing written answers every create with an error,
// the holder a create found inside the batch included: a failure that rolls the whole
// transaction back from inside one create (a trigger's RAISE(ROLLBACK), as SQLite does by
// itself on some I/O errors), and a commit that fails (a deferred foreign key).
func TestInsertApproval_BatchThatEndsWritesNothing(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "approvald.db")
	s := MustOpen(t, path)
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		`CREATE TRIGGER boom BEFORE INSERT ON approvals WHEN NEW.title = 'boom'
			BEGIN SELECT RAISE(ROLLBACK, 'boom'); END`,
		`CREATE TABLE test_parent (id INTEGER PRIMARY KEY)`,
		`CREATE TABLE test_child (parent INTEGER REFERENCES test_parent (id) DEFERRABLE INITIALLY DEFERRED)`,
		`CREATE TRIGGER late AFTER INSERT ON approvals WHEN NEW.title = 'late'
			BEGIN INSERT INTO test_child (parent) VALUES (42); END`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}

	for _, failing := range []string{"boom", "late"} {
		var wg sync.WaitGroup
		lead := newApproval(t, "ci-bot", failing+"-lead", "alice")
		release := holdBehindFirst(t, s, "create", &wg, func() error {
			_, err := s.InsertApproval(ctx, lead, approval.HTTPCause("req-lead"), nil)
			return err
		})
		creates := []*approval.Approval{
			newApproval(t, "ci-bot", failing+"-good", "alice"),
			newApproval(t, "ci-bot", failing+"-good", "alice"), // the same key: finds the first
			newApproval(t, "ci-bot", failing, "alice"),
			newApproval(t, "ci-bot", failing+"-also-good", "bob"),
		}
		creates[2].Title = failing
		holders := make([]*approval.KeyHolder, len(creates))
		errs := make([]error, len(creates))
		for i, a := range creates {
			wg.Go(func() { holders[i], errs[i] = s.InsertApproval(ctx, a, approval.HTTPCause("req"), nil) })
			wait.Until(t, "the create to queue", func() bool { return s.CreatesWaiting() == i+1 })
		}
		release()
		wg.Wait()
		for i, a := range creates {
			if errs[i] == nil || holders[i] != nil {
				t.Errorf("%s: create %d (%s): holder %v, %v; want an error and no holder", failing, i, a.OperationKey, holders[i], errs[i])
			}
			if _, err := s.Approval(ctx, a.ID); approval.ErrorCode(err) != approval.ENOTFOUND {
				t.Errorf("%s: create %d (%s) is there (%v): nothing of the batch may be written", failing, i, a.OperationKey, err)
			}
		}
		// Alone, the failing create fails and writes nothing either; the others' keys are free.
		alone := newApproval(t, "ci-bot", failing+"-alone", "alice")
		alone.Title = failing
		if h, err := s.InsertApproval(ctx, alone, approval.HTTPCause("req"), nil); err == nil || h != nil {
			t.Errorf("%s alone: holder %v, %v; want an error", failing, h, err)
		}
		for _, a := range []*approval.Approval{alone, creates[0], creates[3]} {
			again := newApproval(t, "ci-bot", a.OperationKey, "alice")
			if a == alone {
				if _, err := s.Approval(ctx, a.ID); approval.ErrorCode(err) != approval.ENOTFOUND {
					t.Errorf("%s alone is there (%v)", failing, err)
				}
				continue
			}
			if h, err := s.InsertApproval(ctx, again, approval.HTTPCause("req"), nil); err != nil || h != nil {
				t.Errorf("%s: key %s again: holder %v, %v; want written", failing, a.OperationKey, h, err)
			}
		}
	}
}
