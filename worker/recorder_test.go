package worker_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
)

// heldLedger is the Service's ledger over a real store whose FinishAttempts waits at a gate:
// entered gets the size of each batch that reaches it, and the batch goes on once open is
// closed. With died set, the batch is not recorded and FinishAttempts fails, as when the
// process dies before the batch's transaction commits.
type heldLedger struct {
	*approval.Service
	entered chan int
	open    chan struct{}
	died    bool
}

func newHeldLedger(s approval.Store) *heldLedger {
	return &heldLedger{Service: &approval.Service{Store: s}, entered: make(chan int, 64), open: make(chan struct{})}
}

func (l *heldLedger) FinishAttempts(ctx context.Context, fs []approval.AttemptFinish) ([]approval.AttemptFinished, error) {
	l.entered <- len(fs)
	<-l.open
	if l.died {
		return nil, errors.New("the process died before the batch committed")
	}
	return l.Service.FinishAttempts(ctx, fs)
}

func (l *heldLedger) FinishAndClaim(ctx context.Context, fs []approval.AttemptFinish, lease time.Duration, limit int) ([]approval.AttemptFinished, []*approval.ExecutionClaim, error) {
	l.entered <- len(fs)
	<-l.open
	if l.died {
		return nil, nil, errors.New("the process died before the batch committed")
	}
	return l.Service.FinishAndClaim(ctx, fs, lease, limit)
}

// A runner stopped while a batch of outcomes is being recorded returns only once it has
// committed: every outcome handed over is recorded, each with its own event, and only then
// acknowledged (the failpoint after the record is reached once per attempt).
func TestRunner_StopWaitsForTheBatch(t *testing.T) {
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

// A process that dies before its batch of outcomes commits has acknowledged none of them:
// each execution is still claimed by its attempt, and once the lease runs out the next claim
// recovers it as uncertain, exactly as if the attempt had died before recording alone. An
// idempotent target is sent the call again under the same key, with no second effect.
func TestRunner_DiesBeforeTheBatchCommits(t *testing.T) {
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
		r.Ledger, r.Concurrency = l, executions
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
			if !rec.Uncertain {
				t.Errorf("execution of %s: got certain, want uncertain (attempt 1 was interrupted)", a.OperationKey)
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
