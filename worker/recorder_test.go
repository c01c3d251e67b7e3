package worker_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/postgres"
)

// heldLedger is the Service's ledger over a real store whose records of outcomes wait at a
// gate: entered gets the number of outcomes of each batch that reaches it, and the batch goes
// on once open is closed. With died set, the batch is not recorded and the record fails, as
// when the process dies before the batch's transaction commits. A batch without outcomes
// (the starts of calls) goes straight through.
type heldLedger struct {
	*approval.Service
	entered chan int
	open    chan struct{}
	died    bool
}

func newHeldLedger(s approval.Store) *heldLedger {
	return &heldLedger{Service: &approval.Service{Store: s}, entered: make(chan int, 64), open: make(chan struct{})}
}

func (l *heldLedger) RecordAttempts(ctx context.Context, b approval.AttemptBatch) (approval.AttemptsRecorded, error) {
	if len(b.Finishes) == 0 {
		return l.Service.RecordAttempts(ctx, b)
	}
	l.entered <- len(b.Finishes)
	<-l.open
	if l.died {
		return approval.AttemptsRecorded{}, errors.New("the process died before the batch committed")
	}
	return l.Service.RecordAttempts(ctx, b)
}

// A runner stopped while a batch of outcomes is being recorded returns only once it has
// committed: every outcome handed over is recorded, each with its own event, and only then
// acknowledged (the failpoint after the record is reached once per attempt).
func TestRunner_StopWaitsForTheBatch(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		env := newRunnerEnv(t, kind, plainTarget)
		const executions = 4
		var approvals []*approval.Approval
		for i := range executions {
			approvals = append(approvals, env.approved(t, fmt.Sprintf("deploy-%d", i)))
		}
		g := newGate()
		l := newHeldLedger(env.s)
		r := env.runner()
		r.Client, r.Ledger, r.Concurrency, r.Poll = &http.Client{Transport: g}, l, executions, lease
		r.Failpoints = mustFailpoints(t, "execution.after-record=off")
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()

		for range executions {
			<-g.entered // every call is on its way
		}
		close(g.open)
		<-l.entered // the first batch is being recorded
		cancel()
		if got := r.Failpoints.Hits("execution.after-record"); got != 0 {
			t.Fatalf("before any batch committed: got %d outcomes acknowledged, want 0", got)
		}
		close(l.open)
		waitRun(t, done)

		for _, a := range approvals {
			env.want(t, a, approval.ExecutionSucceeded, 1)
			if n := countEvents(t, env.s, a.ID, approval.EventExecutionSucceeded); n != 1 {
				t.Errorf("execution of %s: got %d succeeded events, want 1", a.OperationKey, n)
			}
		}
		if got := r.Failpoints.Hits("execution.after-record"); got != executions {
			t.Errorf("got %d outcomes acknowledged, want %d", got, executions)
		}
		recorded := 1 // the first batch's entry was taken above
		for len(l.entered) > 0 {
			<-l.entered
			recorded++
		}
		if recorded > executions {
			t.Errorf("got %d batches for %d outcomes, want at most one each", recorded, executions)
		}
		env.wantEffects(t, "deploy-0", 1, executions)
	})
}

// A batch of outcomes that never commits (the process dies before it does, or the database
// stays out of reach for as long as the claims' lease) has acknowledged none of them: each
// execution is still claimed by its attempt, and once the lease runs out the next claim
// takes it over, exactly as if the attempt had died before recording alone. The target
// honours the key, so no start of its calls was recorded: the next attempt is an ordinary
// one, sent again under the same key, with no second effect. The
// dying runner's lease is short, since it tries its records again for as long as that lasts.
func TestRunner_DiesBeforeTheBatchCommits(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		env := newRunnerEnv(t, kind, idempotentTarget)
		const executions = 3
		var approvals []*approval.Approval
		for i := range executions {
			approvals = append(approvals, env.approved(t, fmt.Sprintf("deploy-%d", i)))
		}
		l := newHeldLedger(env.s)
		l.died = true
		close(l.open)
		r := env.runner()
		r.Ledger, r.Concurrency, r.Lease = l, executions, time.Second
		r.Failpoints = mustFailpoints(t, "execution.after-record=off")
		mustRun(t, r, executions)

		for _, a := range approvals {
			rec := env.want(t, a, approval.ExecutionRunning, 1)
			if rec.LeaseExpiresAt == nil {
				t.Errorf("execution of %s: got no lease, want the attempt's claim still held", a.OperationKey)
			}
			if n := countEvents(t, env.s, a.ID, approval.EventExecutionSucceeded); n != 0 {
				t.Errorf("execution of %s: got %d succeeded events, want none", a.OperationKey, n)
			}
		}
		if got := r.Failpoints.Hits("execution.after-record"); got != 0 {
			t.Errorf("got %d outcomes acknowledged, want 0", got)
		}

		env.clk.Advance(lease)
		mustRun(t, env.runner(), executions)
		for i, a := range approvals {
			rec := env.want(t, a, approval.ExecutionSucceeded, 2)
			if rec.Uncertain {
				t.Errorf("execution of %s: got uncertain, want certain: the target honours the key", a.OperationKey)
			}
			if got := env.ds.Effects(approval.DownstreamKey(requester, fmt.Sprintf("deploy-%d", i))); got != 1 {
				t.Errorf("downstream: got %d effects under deploy-%d, want 1", got, i)
			}
		}
		if got := env.ds.Requests(); got != 2*executions {
			t.Errorf("downstream: got %d requests, want %d", got, 2*executions)
		}
	})
}

// blipLedger is the Service's ledger over a real store whose first fails records of outcomes
// fail as a database that cannot be reached does, EUNAVAILABLE, without
// writing anything.
type blipLedger struct {
	*approval.Service
	mu     sync.Mutex
	fails  int // records still to fail
	failed int // records failed so far
}

func (l *blipLedger) blip() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fails == 0 {
		return nil
	}
	l.fails--
	l.failed++
	return approval.Errorf(approval.EUNAVAILABLE, "the database is unavailable")
}

func (l *blipLedger) RecordAttempts(ctx context.Context, b approval.AttemptBatch) (approval.AttemptsRecorded, error) {
	if len(b.Finishes) > 0 {
		if err := l.blip(); err != nil {
			return approval.AttemptsRecorded{}, err
		}
	}
	return l.Service.RecordAttempts(ctx, b)
}

// An outcome whose record fails while the database blips is recorded once it answers again,
// within the lease: the target answered 200, so the execution succeeds after one call, and
// is never taken over as interrupted (which, for a target that neither honours keys nor can
// be asked, would hold it for an operator).
func TestRunner_RecordSurvivesADatabaseBlip(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		env := newRunnerEnv(t, kind, plainTarget)
		a := env.approved(t, "deploy-1")
		const fails = 3
		l := &blipLedger{Service: deployRules(env.s), fails: fails}
		r := env.runner()
		r.Ledger = l
		r.Failpoints = mustFailpoints(t, "execution.after-record=off")
		mustRun(t, r, 1)

		if l.failed != fails {
			t.Errorf("got %d records failed, want %d", l.failed, fails)
		}
		env.want(t, a, approval.ExecutionSucceeded, 1)
		if got := r.Failpoints.Hits("execution.after-record"); got != 1 {
			t.Errorf("got %d outcomes acknowledged, want 1", got)
		}
		env.clk.Advance(lease)
		mustRun(t, env.runner(), 0) // nothing left to take over
		env.want(t, a, approval.ExecutionSucceeded, 1)
		if n := countEvents(t, env.s, a.ID, approval.EventExecutionNeedsReview); n != 0 {
			t.Errorf("got %d needs_review events, want 0", n)
		}
		if n := countEvents(t, env.s, a.ID, approval.EventExecutionSucceeded); n != 1 {
			t.Errorf("got %d succeeded events, want 1", n)
		}
		env.wantEffects(t, "deploy-1", 1, 1)
	})
}

// cutStore is a store whose first transaction to record attempt outcomes has every
// connection of the store's pool terminated by the server in its middle (cut), as a restart
// of PostgreSQL or an operator's pg_terminate_backend does.
type cutStore struct {
	approval.Store
	once sync.Once
	cut  func()
}

func (s *cutStore) Begin(ctx context.Context) (approval.Tx, error) {
	tx, err := s.Store.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &cutTx{Tx: tx, s: s}, nil
}

type cutTx struct {
	approval.Tx
	s *cutStore
}

func (tx *cutTx) ExecutionUpdateIfAttemptMany(ctx context.Context, recs []*approval.ExecutionRecord, attempts []int) error {
	tx.s.once.Do(tx.s.cut)
	return tx.Tx.ExecutionUpdateIfAttemptMany(ctx, recs, attempts)
}

// An outcome whose record is cut short by PostgreSQL terminating the store's connections
// (57P01, "terminating connection due to administrator command") is recorded on a new
// connection: the execution succeeds after one call. Only this test's connections are
// terminated: its store's pool connects under an application_name of its own.
func TestRunner_RecordSurvivesTerminatedConnections(t *testing.T) {
	base := testdb.PostgresURL(t)
	t.Parallel()
	ctx := context.Background()
	var b [6]byte
	rand.Read(b[:])
	app := "approvald-test-" + hex.EncodeToString(b[:])
	u, err := url.Parse(testdb.DSN(t, testdb.Postgres))
	if err != nil {
		t.Fatalf("parse dsn: %v", err)
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()

	env := newRunnerEnv(t, testdb.Postgres, plainTarget)
	s, err := postgres.Open(ctx, u.String())
	if err != nil {
		t.Fatalf("open postgres: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	s.Now = env.clk.Now
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	env.s = s
	a := env.approved(t, "deploy-1")

	terminated := 0
	cut := &cutStore{Store: s, cut: func() {
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("connect to terminate: %v", err)
			return
		}
		defer conn.Close(ctx)
		// pg_terminate_backend with a timeout waits for each backend to end, so the
		// record's next statement meets a connection that is gone.
		err = conn.QueryRow(ctx, `WITH victims AS MATERIALIZED (
				SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid())
			SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000)) FROM victims`, app).Scan(&terminated)
		if err != nil {
			t.Errorf("terminate the store's connections: %v", err)
		}
	}}
	r := env.runner()
	r.Ledger = deployRules(cut)
	r.Failpoints = mustFailpoints(t, "execution.after-record=off")
	mustRun(t, r, 1)

	if terminated == 0 {
		t.Fatalf("got no connection terminated mid-record, want the record's at least")
	}
	env.want(t, a, approval.ExecutionSucceeded, 1)
	if got := r.Failpoints.Hits("execution.after-record"); got != 1 {
		t.Errorf("got %d outcomes acknowledged, want 1", got)
	}
	if n := countEvents(t, env.s, a.ID, approval.EventExecutionSucceeded); n != 1 {
		t.Errorf("got %d succeeded events, want 1", n)
	}
	env.wantEffects(t, "deploy-1", 1, 1)
}

// Run, stopped while a call is in flight, returns only once the call's outcome is recorded,
// even when the first records fail as the database blips.
func TestRunner_RunRecordsThroughABlipAtShutdown(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		env := newRunnerEnv(t, kind, plainTarget)
		a := env.approved(t, "deploy-1")
		const fails = 3
		l := &blipLedger{Service: deployRules(env.s), fails: fails}
		g := newGate()
		r := env.runner()
		r.Ledger, r.Client, r.Poll = l, &http.Client{Transport: g}, time.Hour
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()

		<-g.entered
		cancel()
		close(g.open)
		waitRun(t, done)
		if l.failed != fails {
			t.Errorf("got %d records failed, want %d", l.failed, fails)
		}
		env.want(t, a, approval.ExecutionSucceeded, 1)
		env.wantEffects(t, "deploy-1", 1, 1)
	})
}
