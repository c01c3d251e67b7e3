package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/failpoint"
	"github.com/approvald/approval/internal/downstream"
	"github.com/approvald/approval/internal/fakeclock"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/internal/wait"
	"github.com/approvald/approval/webhook"
	"github.com/approvald/approval/worker"
)

// actionSecret signs the runner's calls; the reference target checks every signature.
const actionSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// The kinds of target the tests configure.
type targetKind int

const (
	idempotentTarget targetKind = iota // honours the Idempotency-Key
	lookupTarget                       // does not honour it, but has a lookup URL
	plainTarget                        // neither
)

func (k targetKind) String() string {
	return [...]string{"idempotent", "lookup", "plain"}[k]
}

// runnerEnv is one test's world: a store whose "deploy" action has a target, the reference
// downstream on loopback, and a controllable clock shared by both and by the runners.
type runnerEnv struct {
	clk    *fakeclock.Clock
	s      approval.Store
	ds     *downstream.Server
	target worker.Target
}

// newRunnerEnv sets up a target of the given kind. The downstream honours keys only for an
// idempotent target, so that anywhere else a second call shows as a second effect.
func newRunnerEnv(t *testing.T, kind string, tk targetKind) *runnerEnv {
	t.Helper()
	clk := newClock()
	s := testdb.OpenWith(t, kind, testdb.Options{Now: clk.Now})
	ds := downstream.New(downstream.Options{HonourKeys: tk == idempotentTarget, Secrets: []string{actionSecret}, Now: clk.Now})
	t.Cleanup(ds.Close)
	target := worker.Target{
		Action:     "deploy",
		URL:        ds.URL(),
		Secret:     actionSecret,
		Idempotent: tk == idempotentTarget,
		Timeout:    10 * time.Second,
		Policy: worker.Policy{MaxAttempts: 5,
			Backoff: worker.Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 2, Jitter: 0.2}},
	}
	if tk == lookupTarget {
		target.LookupURL = ds.LookupURL()
	}
	return &runnerEnv{clk: clk, s: s, ds: ds, target: target}
}

// runner returns a new runner (with a client of its own) for the env's target. Its jitter
// source sits in the middle of the range, so every delay is exactly the policy's base.
func (env *runnerEnv) runner() *worker.Runner {
	return &worker.Runner{Store: env.s, Ledger: deployRules(env.s), Logger: discard, Targets: map[string]worker.Target{"deploy": env.target},
		Lease: lease, Batch: 10, Concurrency: 4, Now: env.clk.Now, Rand: func() float64 { return 0.5 }}
}

// approved creates and approves an approval, and returns it with its queued execution.
func (env *runnerEnv) approved(t *testing.T, key string) *approval.Approval {
	t.Helper()
	a := mustApproveBy(t, deployRules(env.s), mustCreateApproval(t, env.s, env.clk, key, time.Hour))
	if a.Execution == nil || a.Execution.Status != approval.ExecutionQueued {
		t.Fatalf("approve %s: got execution %+v, want a queued one", key, a.Execution)
	}
	return a
}

func (env *runnerEnv) execution(t *testing.T, a *approval.Approval) *approval.ExecutionRecord {
	t.Helper()
	rec, err := env.s.Execution(context.Background(), a.Execution.ID)
	if err != nil {
		t.Fatalf("execution of %s: %v", a.OperationKey, err)
	}
	return rec
}

// want checks an execution's status and attempts.
func (env *runnerEnv) want(t *testing.T, a *approval.Approval, status approval.ExecutionStatus, attempts int) *approval.ExecutionRecord {
	t.Helper()
	rec := env.execution(t, a)
	if rec.Status != status || rec.Attempts != attempts {
		t.Fatalf("execution of %s: got status %s after %d attempts (last error %q), want %s after %d",
			a.OperationKey, rec.Status, rec.Attempts, rec.LastError, status, attempts)
	}
	return rec
}

// wantEffects checks what the downstream saw: effects under the requester's operation key,
// and requests in all.
func (env *runnerEnv) wantEffects(t *testing.T, key string, effects, requests int) {
	t.Helper()
	if got := env.ds.Effects(approval.DownstreamKey(requester, key)); got != effects {
		t.Errorf("downstream: got %d effects under %s, want %d", got, key, effects)
	}
	if got := env.ds.Requests(); got != requests {
		t.Errorf("downstream: got %d requests, want %d", got, requests)
	}
}

// wantRetryIn checks that an execution is queued again, due exactly d from now.
func (env *runnerEnv) wantRetryIn(t *testing.T, a *approval.Approval, attempts int, d time.Duration) {
	t.Helper()
	rec := env.want(t, a, approval.ExecutionQueued, attempts)
	if want := env.clk.Now().Add(d); rec.NextAttemptAt == nil || !rec.NextAttemptAt.Equal(want) {
		t.Errorf("execution of %s: got next attempt at %v, want %v (in %s)", a.OperationKey, rec.NextAttemptAt, want, d)
	}
}

func mustRun(tb testing.TB, r *worker.Runner, want int) {
	tb.Helper()
	n, err := r.RunOnce(context.Background())
	if err != nil {
		tb.Fatalf("run: %v", err)
	}
	if n != want {
		tb.Fatalf("run: got %d executions claimed, want %d", n, want)
	}
}

func TestRunner_Succeeds(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		env := newRunnerEnv(t, kind, plainTarget)
		a := env.approved(t, "deploy-1")
		r := env.runner()

		mustRun(t, r, 1)
		mustRun(t, r, 0)

		rec := env.want(t, a, approval.ExecutionSucceeded, 1)
		env.wantEffects(t, "deploy-1", 1, 1)
		want, _ := json.Marshal(downstream.Result{Key: approval.DownstreamKey(requester, "deploy-1"), Effect: 1})
		if !jsonEqual(rec.Result, string(want)) {
			t.Errorf("result: got %s, want %s", rec.Result, want)
		}
		// The target received the approval, signed (it checks), under the downstream key.
		var sent struct{ Approval approval.Approval }
		if err := json.Unmarshal(env.ds.Body(approval.DownstreamKey(requester, "deploy-1")), &sent); err != nil {
			t.Fatalf("decode the body the target received: %v", err)
		}
		if sent.Approval.ID != a.ID || sent.Approval.Status != approval.StatusApproved {
			t.Errorf("body: got approval %s in status %s, want %s approved", sent.Approval.ID, sent.Approval.Status, a.ID)
		}
		if n := countEvents(t, env.s, a.ID, approval.EventExecutionAttempt); n != 1 {
			t.Errorf("got %d attempt events, want 1", n)
		}
		if n := countEvents(t, env.s, a.ID, approval.EventExecutionSucceeded); n != 1 {
			t.Errorf("got %d succeeded events, want 1", n)
		}
	})
}

func TestRunner_RetriesWithBackoff(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		env := newRunnerEnv(t, kind, plainTarget)
		env.ds.FailWith(http.StatusServiceUnavailable, http.StatusServiceUnavailable)
		a := env.approved(t, "deploy-1")
		r := env.runner()

		mustRun(t, r, 1)
		env.wantRetryIn(t, a, 1, time.Second)
		if rec := env.execution(t, a); !strings.Contains(rec.LastError, "503") {
			t.Errorf("last error: got %q, want it to name the 503", rec.LastError)
		}
		env.clk.Advance(time.Second - time.Millisecond)
		mustRun(t, r, 0) // not due yet
		env.clk.Advance(time.Millisecond)
		mustRun(t, r, 1)
		env.wantRetryIn(t, a, 2, 2*time.Second)
		env.clk.Advance(2 * time.Second)
		mustRun(t, r, 1)

		env.want(t, a, approval.ExecutionSucceeded, 3)
		env.wantEffects(t, "deploy-1", 1, 3)
		if n := countEvents(t, env.s, a.ID, approval.EventExecutionRetry); n != 2 {
			t.Errorf("got %d retry events, want 2", n)
		}
	})
}

func TestRunner_HonoursRetryAfter(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		env := newRunnerEnv(t, kind, plainTarget)
		env.ds.FailWithRetryAfter(7*time.Second, http.StatusTooManyRequests)
		a := env.approved(t, "deploy-1")
		r := env.runner()

		mustRun(t, r, 1)
		env.wantRetryIn(t, a, 1, 7*time.Second) // longer than the backoff's 1s
		env.clk.Advance(7 * time.Second)
		mustRun(t, r, 1)
		env.want(t, a, approval.ExecutionSucceeded, 2)
		env.wantEffects(t, "deploy-1", 1, 2)
	})
}

func TestRunner_RefusalFailsAtOnce(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		env := newRunnerEnv(t, kind, idempotentTarget)
		env.ds.FailWith(http.StatusBadRequest)
		a := env.approved(t, "deploy-1")
		r := env.runner()

		mustRun(t, r, 1)
		rec := env.want(t, a, approval.ExecutionFailed, 1)
		if !strings.Contains(rec.LastError, "400") {
			t.Errorf("last error: got %q, want it to name the 400", rec.LastError)
		}
		env.clk.Advance(time.Hour)
		mustRun(t, r, 0)
		env.wantEffects(t, "deploy-1", 0, 1)
	})
}

func TestRunner_MaxAttempts(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		env := newRunnerEnv(t, kind, idempotentTarget)
		env.target.Policy.MaxAttempts = 3
		env.ds.FailWith(http.StatusBadGateway, http.StatusBadGateway, http.StatusBadGateway, http.StatusBadGateway)
		a := env.approved(t, "deploy-1")
		r := env.runner()

		for range 3 {
			mustRun(t, r, 1)
			env.clk.Advance(time.Hour)
		}
		mustRun(t, r, 0)
		env.want(t, a, approval.ExecutionFailed, 3)
		env.wantEffects(t, "deploy-1", 0, 3)
		if reason := lastReason(t, env.s, a.ID); !strings.Contains(reason, "attempt 3 of 3") || !strings.Contains(reason, "no attempts are left") {
			t.Errorf("reason: got %q, want it to say attempt 3 of 3 and no attempts are left", reason)
		}
	})
}

// An operator's retry of a failed execution starts a new run with all its attempts: the
// policy counts from the attempts at the retry, not from the first.
func TestRunner_OperatorRetryStartsNewRun(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		env := newRunnerEnv(t, kind, idempotentTarget)
		env.target.Policy.MaxAttempts = 2
		env.ds.FailWith(http.StatusBadGateway, http.StatusBadGateway, http.StatusBadGateway)
		a := env.approved(t, "deploy-1")
		r := env.runner()

		mustRun(t, r, 1)
		env.clk.Advance(time.Hour)
		mustRun(t, r, 1)
		rec := env.want(t, a, approval.ExecutionFailed, 2)
		if _, err := deployRules(env.s).RetryExecution(context.Background(), approval.Principal{Subject: "root", Role: approval.RoleAdmin}, rec.ID, approval.Cause{Kind: approval.CauseOperator, Operator: "root"}); err != nil {
			t.Fatalf("retry: %v", err)
		}

		mustRun(t, r, 1) // attempt 3 is the new run's first, with one more to come
		env.wantRetryIn(t, a, 3, time.Second)
		if reason := lastReason(t, env.s, a.ID); !strings.Contains(reason, "attempt 1 of 2") {
			t.Errorf("reason: got %q, want it to say attempt 1 of 2", reason)
		}
		env.clk.Advance(time.Second)
		mustRun(t, r, 1)
		env.want(t, a, approval.ExecutionSucceeded, 4)
		env.wantEffects(t, "deploy-1", 1, 4)
	})
}

// A call that reached the target but lost its answer (the connection dropped after the
// effect) is settled the way the target allows, and never becomes a second effect.
func TestRunner_DropAfterEffect(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		t.Run("idempotent", func(t *testing.T) {
			t.Parallel()
			env := newRunnerEnv(t, kind, idempotentTarget)
			env.ds.DropAfterEffect(1)
			a := env.approved(t, "deploy-1")
			r := env.runner()

			mustRun(t, r, 1)
			env.wantRetryIn(t, a, 1, time.Second) // sent again: the key makes that safe
			env.clk.Advance(time.Second)
			mustRun(t, r, 1)
			env.want(t, a, approval.ExecutionSucceeded, 2)
			env.wantEffects(t, "deploy-1", 1, 2)
		})

		t.Run("plain", func(t *testing.T) {
			t.Parallel()
			env := newRunnerEnv(t, kind, plainTarget)
			r := env.runner()
			// A first call leaves a kept-alive connection in the runner's pool, so that the
			// dropped call runs on a reused one: the case in which net/http would resend a
			// replayable POST by itself.
			warm := env.approved(t, "deploy-0")
			mustRun(t, r, 1)
			env.want(t, warm, approval.ExecutionSucceeded, 1)

			env.ds.DropAfterEffect(1)
			a := env.approved(t, "deploy-1")
			mustRun(t, r, 1)
			rec := env.want(t, a, approval.ExecutionNeedsReview, 1)
			env.wantEffects(t, "deploy-1", 1, 2)
			if !strings.Contains(rec.LastError, "may have arrived") {
				t.Errorf("last error: got %q, want it to say the request may have arrived", rec.LastError)
			}
			env.clk.Advance(time.Hour)
			mustRun(t, r, 0) // needs_review waits for an operator
		})

		t.Run("lookup", func(t *testing.T) {
			t.Parallel()
			env := newRunnerEnv(t, kind, lookupTarget)
			env.ds.DropAfterEffect(1)
			a := env.approved(t, "deploy-1")
			r := env.runner()

			mustRun(t, r, 1)
			env.wantRetryIn(t, a, 1, time.Second) // to ask the lookup URL, not to resend
			env.clk.Advance(time.Second)
			mustRun(t, r, 1)
			rec := env.want(t, a, approval.ExecutionSucceeded, 2)
			env.wantEffects(t, "deploy-1", 1, 1)
			if got := env.ds.Lookups(); got != 1 {
				t.Errorf("got %d lookups, want 1", got)
			}
			want, _ := json.Marshal(downstream.Result{Key: approval.DownstreamKey(requester, "deploy-1"), Effect: 1})
			if !jsonEqual(rec.Result, string(want)) {
				t.Errorf("result: got %s, want the lookup's %s", rec.Result, want)
			}
		})
	})
}

// An attempt whose runner died mid-call (its call started, its lease expired) may have
// reached the target; the next claim settles it as the target allows.
func TestRunner_RecoversAbandonedClaim(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		for _, tt := range []struct {
			target       targetKind
			effectBefore bool // the dead runner's call reached the target
			wantStatus   approval.ExecutionStatus
			wantEffects  int
			wantRequests int
			wantLookups  int
		}{
			{idempotentTarget, false, approval.ExecutionSucceeded, 1, 1, 0},
			{idempotentTarget, true, approval.ExecutionSucceeded, 1, 2, 0},
			{lookupTarget, false, approval.ExecutionSucceeded, 1, 1, 1},
			{lookupTarget, true, approval.ExecutionSucceeded, 1, 1, 1},
			{plainTarget, false, approval.ExecutionNeedsReview, 0, 0, 0},
		} {
			t.Run(fmt.Sprintf("%s/effect=%t", tt.target, tt.effectBefore), func(t *testing.T) {
				t.Parallel()
				env := newRunnerEnv(t, kind, tt.target)
				a := env.approved(t, "deploy-1")
				c := claimMidCall(t, env)
				if tt.effectBefore {
					postDirect(t, env, c)
				}
				r := env.runner()
				mustRun(t, r, 0) // the dead runner's lease still holds
				env.clk.Advance(lease)
				mustRun(t, r, 1)

				rec := env.want(t, a, tt.wantStatus, 2)
				env.wantEffects(t, "deploy-1", tt.wantEffects, tt.wantRequests)
				if got := env.ds.Lookups(); got != tt.wantLookups {
					t.Errorf("got %d lookups, want %d", got, tt.wantLookups)
				}
				if tt.wantStatus == approval.ExecutionNeedsReview && !strings.Contains(lastReason(t, env.s, a.ID), "attempt 1 was interrupted") {
					t.Errorf("reason: got %q, want it to say attempt 1 was interrupted", lastReason(t, env.s, a.ID))
				}
				if tt.wantStatus == approval.ExecutionSucceeded && rec.Result == nil {
					t.Error("result: got none, want the target's")
				}
			})
		}
	})
}

// A runner that died between its claim and its call (a claim taken ahead, waiting for a
// slot, or one whose call had yet to start) never reached the target: once its lease runs
// out the next claim sends the call as an ordinary attempt, whatever the target, and nothing
// is uncertain or held for review.
func TestRunner_RetriesClaimNeverSent(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		for _, tk := range []targetKind{idempotentTarget, lookupTarget, plainTarget} {
			t.Run(tk.String(), func(t *testing.T) {
				t.Parallel()
				env := newRunnerEnv(t, kind, tk)
				a := env.approved(t, "deploy-1")
				// The dead runner's claim: attempt 1 is on record, its call never started.
				if claims, err := deployRules(env.s).ClaimExecutions(context.Background(), lease, 10); err != nil || len(claims) != 1 {
					t.Fatalf("claim: got %d claims, %v; want 1", len(claims), err)
				}
				r := env.runner()
				mustRun(t, r, 0) // the dead runner's lease still holds
				env.clk.Advance(lease)
				mustRun(t, r, 1)

				rec := env.want(t, a, approval.ExecutionSucceeded, 2)
				if rec.Uncertain {
					t.Error("uncertain: got true, want false: attempt 1 sent nothing")
				}
				env.wantEffects(t, "deploy-1", 1, 1)
				if got := env.ds.Lookups(); got != 0 {
					t.Errorf("got %d lookups, want 0: there is nothing to reconcile", got)
				}
			})
		}
	})
}

// A runner that stalls past its lease loses the execution to the next one; its own late
// outcome is refused by the attempt fence.
func TestRunner_StaleWorkerIsFenced(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		env := newRunnerEnv(t, kind, idempotentTarget)
		a := env.approved(t, "deploy-1")

		g := newGate()
		logs := newRecorder()
		stale := env.runner()
		stale.Client, stale.Logger = &http.Client{Transport: g}, slog.New(logs)
		done := make(chan error, 1)
		go func() {
			_, err := stale.RunOnce(context.Background())
			done <- err
		}()
		<-g.entered // attempt 1 is claimed and its call is held on the way out

		env.clk.Advance(lease)
		mustRun(t, env.runner(), 1) // attempt 2 takes over and succeeds
		env.want(t, a, approval.ExecutionSucceeded, 2)

		close(g.open) // attempt 1's call goes out late and its outcome comes back
		if err := <-done; err != nil {
			t.Fatalf("stale run: %v", err)
		}
		logs.wait(t, "attempt outcome not recorded: a newer attempt owns the execution")
		env.want(t, a, approval.ExecutionSucceeded, 2)
		if n := countEvents(t, env.s, a.ID, approval.EventExecutionSucceeded); n != 1 {
			t.Errorf("got %d succeeded events, want 1", n)
		}
		// Both calls arrived; the key kept them to one effect.
		env.wantEffects(t, "deploy-1", 1, 2)
	})
}

// A runner whose lease lapsed between its lookup and its call (its renewals too slow) must
// not send: meanwhile a newer attempt may have claimed the execution, found no effect and sent
// the call itself. The renewal made right before the call finds the claim lost.
func TestRunner_LeaseLapsedBeforeSend(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		env := newRunnerEnv(t, kind, lookupTarget)
		a := env.approved(t, "deploy-1")
		// A runner died mid-call, so each later claim is recovered and looks up first.
		claimMidCall(t, env)
		env.clk.Advance(lease)

		held := newAnswerGate(http.MethodGet)
		logs := newRecorder()
		slow := env.runner()
		slow.Client, slow.Logger = &http.Client{Transport: held}, slog.New(logs)
		done := make(chan error, 1)
		go func() {
			_, err := slow.RunOnce(context.Background())
			done <- err
		}()
		<-held.entered // attempt 2 has heard 404 from the lookup and stalls before its call

		env.clk.Advance(lease)      // its lease lapses unrenewed
		mustRun(t, env.runner(), 1) // attempt 3: looks up, hears 404, sends
		env.want(t, a, approval.ExecutionSucceeded, 3)
		env.wantEffects(t, "deploy-1", 1, 1)

		close(held.open) // attempt 2 goes on with its 404
		if err := <-done; err != nil {
			t.Fatalf("slow run: %v", err)
		}
		env.wantEffects(t, "deploy-1", 1, 1)
		env.want(t, a, approval.ExecutionSucceeded, 3)
		logs.wait(t, "execution claim lost; abandoning the attempt")
		if got := env.ds.Lookups(); got != 2 {
			t.Errorf("got %d lookups, want 2", got)
		}
	})
}

// Every call is marked started in a committed write before it is sent, and that write
// renews the lease: a call sent right after its claim needs no renewal of its own, and nor
// does one sent when little of the lease is left (TestRunner_LeaseLapsedBeforeSend shows why
// the lease must be confirmed then).
func TestRunner_MarksEveryCallStarted(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		env := newRunnerEnv(t, kind, lookupTarget)
		store := observe(env.s)
		// An hour's lease: the renewals of keepLease (every 20 minutes of real time) never
		// come, so the lease is renewed only by the marks.
		runner := func() *worker.Runner {
			r := env.runner()
			r.Store, r.Ledger, r.Lease = store, store, time.Hour
			return r
		}

		fresh := env.approved(t, "deploy-1")
		mustRun(t, runner(), 1)
		env.want(t, fresh, approval.ExecutionSucceeded, 1)
		if n, m := store.renewals(), store.starts(); n != 0 || m != 1 {
			t.Fatalf("call sent right after its claim: got %d renewals and %d starts, want 0 and 1", n, m)
		}

		// A runner died mid-call, so the next claim is recovered and looks up first; the
		// lookup's answer comes when all but a minute of the lease has gone.
		late := env.approved(t, "deploy-2")
		claimMidCall(t, env)
		env.clk.Advance(lease)
		held := newAnswerGate(http.MethodGet)
		r := runner()
		r.Client = &http.Client{Transport: held}
		done := make(chan error, 1)
		go func() {
			_, err := r.RunOnce(context.Background())
			done <- err
		}()
		<-held.entered
		env.clk.Advance(time.Hour - time.Minute)
		close(held.open)
		if err := <-done; err != nil {
			t.Fatalf("run: %v", err)
		}
		env.want(t, late, approval.ExecutionSucceeded, 2)
		if n, m := store.renewals(), store.starts(); n != 0 || m != 2 {
			t.Fatalf("call sent with a minute of its lease left: got %d renewals and %d starts, want 0 and 2", n, m)
		}
		env.wantEffects(t, "deploy-2", 1, 2)
	})
}

// A target that honours the Idempotency-Key needs no record that its call starts: sending
// the call again under the same key is safe, so its calls skip that commit and go right after
// their claim, and a claim that died before or after its call is simply sent again.
func TestRunner_IdempotentCallsNeedNoStartMark(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		env := newRunnerEnv(t, kind, idempotentTarget)
		store := observe(env.s)
		r := env.runner()
		r.Store, r.Ledger, r.Lease = store, store, time.Hour

		a := env.approved(t, "deploy-1")
		mustRun(t, r, 1)
		env.want(t, a, approval.ExecutionSucceeded, 1)
		if n, m := store.renewals(), store.starts(); n != 0 || m != 0 {
			t.Fatalf("call sent right after its claim: got %d renewals and %d starts, want 0 and 0", n, m)
		}

		// A runner died holding a claim it made no record of sending: the next is an
		// ordinary attempt under the same key.
		b := env.approved(t, "deploy-2")
		if claims, err := deployRules(env.s).ClaimExecutions(context.Background(), lease, 10); err != nil || len(claims) != 1 {
			t.Fatalf("claim: got %d claims, %v; want 1", len(claims), err)
		}
		env.clk.Advance(lease)
		mustRun(t, r, 1)
		if rec := env.want(t, b, approval.ExecutionSucceeded, 2); rec.Uncertain {
			t.Error("uncertain: got true, want false: the target honours the key")
		}
		env.wantEffects(t, "deploy-2", 1, 2)
		if n := store.starts(); n != 0 {
			t.Errorf("got %d starts recorded, want 0", n)
		}
	})
}

// Run works off a backlog larger than its slots with each execution called once, and never
// claims more than it has free slots.
func TestRunner_RunClaimsForFreeSlots(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		env := newRunnerEnv(t, kind, plainTarget)
		const executions = 30
		var approvals []*approval.Approval
		for i := range executions {
			approvals = append(approvals, env.approved(t, fmt.Sprintf("deploy-%d", i)))
		}
		r := env.runner() // 4 slots, claims of up to 10
		store := observe(env.s)
		store.slots, store.want, store.done = r.Concurrency, executions, make(chan struct{})
		r.Store, r.Ledger = store, store
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ran := make(chan error, 1)
		go func() { ran <- r.Run(ctx) }()
		<-store.done
		cancel()
		waitRun(t, ran)

		store.mu.Lock()
		defer store.mu.Unlock()
		if store.overdrawn != nil {
			t.Errorf("claims beyond the free slots: %v", store.overdrawn)
		}
		if store.claimed != executions {
			t.Errorf("got %d executions claimed, want %d", store.claimed, executions)
		}
		for _, a := range approvals {
			env.want(t, a, approval.ExecutionSucceeded, 1)
		}
		if got := env.ds.TotalEffects(); got != executions {
			t.Errorf("downstream: got %d effects, want %d", got, executions)
		}
		if got := env.ds.Requests(); got != executions {
			t.Errorf("downstream: got %d requests, want %d", got, executions)
		}
	})
}

// observedStore is a real store, and the Service's ledger over it, that watches a runner use
// them: the leases it renews, whether it ever holds more executions at once than slots
// calls, a batch claimed ahead (slots, at least 4) and as many outcomes as both waiting for
// their batch, and the size of each batch of
// outcomes. It sees a claim end when the record of its outcome returns, after the runner
// freed its slot.
type observedStore struct {
	approval.Store
	ledger *approval.Service
	slots  int           // the runner's Concurrency; 0 skips the check
	want   int           // done is closed once this many attempts are finished
	done   chan struct{} // nil when want is 0

	mu        sync.Mutex
	renewed   int
	started   int // calls marked as started
	holding   int // claimed and not yet finished
	claimed   int
	finished  int
	overdrawn []string
	batches   []int // the size of each batch of outcomes
}

// observe watches s and the Service's ledger over it.
func observe(s approval.Store) *observedStore {
	return &observedStore{Store: s, ledger: deployRules(s)}
}

func (s *observedStore) ClaimExecutions(ctx context.Context, lease time.Duration, limit int) ([]*approval.ExecutionClaim, error) {
	s.claiming(limit)
	claims, err := s.ledger.ClaimExecutions(ctx, lease, limit)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.claimedNow(claims)
	return claims, err
}

// claiming checks a claim of up to limit before it is made. A slot is free again once its
// attempt's outcome is handed to the recorder, before the outcome's batch commits, and Run
// claims one batch ahead (Concurrency, at least 4): at most Concurrency calls, the claims
// ahead, and as many outcomes as both on their way to a batch are held at once.
func (s *observedStore) claiming(limit int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if held := s.slots + max(s.slots, 4); s.slots > 0 && s.holding+limit > 2*held {
		s.overdrawn = append(s.overdrawn, fmt.Sprintf("%d claimed while %d held", limit, s.holding))
	}
}

// claimedNow counts claims made; s.mu is held.
func (s *observedStore) claimedNow(claims []*approval.ExecutionClaim) {
	s.holding += len(claims)
	s.claimed += len(claims)
}

func (s *observedStore) RenewExecution(ctx context.Context, id string, attempt int, lease time.Duration) error {
	s.mu.Lock()
	s.renewed++
	s.mu.Unlock()
	return s.ledger.RenewExecution(ctx, id, attempt, lease)
}

func (s *observedStore) RecordAttempts(ctx context.Context, b approval.AttemptBatch) (approval.AttemptsRecorded, error) {
	if b.Claim > 0 {
		s.claiming(b.Claim)
	}
	done, err := s.ledger.RecordAttempts(ctx, b)
	if err != nil {
		return done, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, err := range done.Sent {
		if err == nil {
			s.started++
		}
	}
	if len(b.Finishes) > 0 {
		s.finishedNow(done.Finished)
	}
	s.claimedNow(done.Claims)
	return done, nil
}

// finishedNow counts a batch of outcomes recorded; s.mu is held.
func (s *observedStore) finishedNow(done []approval.AttemptFinished) {
	s.batches = append(s.batches, len(done))
	for _, d := range done {
		if d.Err != nil {
			continue
		}
		s.holding--
		if s.finished++; s.finished == s.want {
			close(s.done)
		}
	}
}

func (s *observedStore) ReleaseExecution(ctx context.Context, id string, attempt int) error {
	return s.ledger.ReleaseExecution(ctx, id, attempt)
}

func (s *observedStore) starts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started
}

func (s *observedStore) renewals() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.renewed
}

// A renewal that finds the claim gone (here: an asynchronous report settled the execution)
// abandons the call before it is sent, and records nothing.
func TestRunner_LostClaimAbandonsCall(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		env := newRunnerEnv(t, kind, plainTarget)
		a := env.approved(t, "deploy-1")

		g := newGate()
		logs := newRecorder()
		r := env.runner()
		r.Client, r.Logger = &http.Client{Transport: g}, slog.New(logs)
		// Renewed every second of real time. Each renewal moves the call's deadline too (to
		// 300ms before the new end), so it cuts the call only if no renewal gets through for
		// 2.7s: far more than a loaded machine delays one (at 300ms, 3 runs in 22 failed so).
		r.Lease = 3 * time.Second
		done := make(chan error, 1)
		go func() {
			_, err := r.RunOnce(context.Background())
			done <- err
		}()
		<-g.entered

		applied, _, err := deployRules(env.s).ReportExecution(context.Background(), approval.Principal{Subject: "deployer", Role: approval.RoleOperator}, approval.ExecutionReport{ApprovalID: a.ID,
			Status: approval.ExecutionSucceeded, Version: 1, Actor: "deployer", Cause: approval.Cause{Kind: approval.CauseOperator}})
		if err != nil || !applied {
			t.Fatalf("report: got applied %t, %v; want applied", applied, err)
		}
		if err := <-done; err != nil { // returns only once the held call is abandoned
			t.Fatalf("run: %v", err)
		}
		logs.wait(t, "execution claim lost; abandoning the attempt")
		env.want(t, a, approval.ExecutionSucceeded, 1)
		env.wantEffects(t, "deploy-1", 0, 0)
		for _, typ := range []string{approval.EventExecutionSucceeded, approval.EventExecutionRetry, approval.EventExecutionNeedsReview, approval.EventExecutionFailed} {
			if n := countEvents(t, env.s, a.ID, typ); n != 0 {
				t.Errorf("got %d %s events, want none from the abandoned attempt", n, typ)
			}
		}
	})
}

// A call that lasts several leases keeps its claim: the runner renews the lease while the call
// is held, so a second runner looking each time more than half a lease has passed finds
// nothing to claim, and the call, once it ends, is the execution's only attempt and effect.
// Run claims the next execution while a call runs, not after it; the claim waiting for its
// slot keeps its lease, so no other runner takes it over, and it runs once the slot frees.
func TestRunner_ClaimsAheadWhileCallsRun(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		env := newRunnerEnv(t, kind, plainTarget)
		env.target.Timeout = time.Minute
		var approvals []*approval.Approval
		for i := range 2 {
			approvals = append(approvals, env.approved(t, fmt.Sprintf("deploy-%d", i)))
		}
		// As in TestRunner_LongCallKeepsItsLease: the keeper renews every 2s of real time,
		// and the store's lease runs on the fake clock, which only the test moves.
		const hold = 6 * time.Second
		const step = 2 * hold / 3
		g := newGate()
		r := env.runner()
		r.Client, r.Lease, r.Concurrency, r.Batch = &http.Client{Transport: g}, hold, 1, 1
		store := observe(env.s)
		store.slots = r.Concurrency
		r.Store, r.Ledger = store, store
		ctx, cancel := context.WithCancel(context.Background())
		ran, stopped := make(chan error, 1), make(chan struct{})
		go func() {
			defer close(stopped)
			ran <- r.Run(ctx)
		}()
		release := sync.OnceFunc(func() { close(g.open) })
		t.Cleanup(func() { // on failure too: the run ends before the store closes
			release()
			cancel()
			<-stopped
		})
		<-g.entered // the first call is on its way out, held

		// running lists the executions claimed now, each with its lease as the store holds it.
		running := func() map[string]time.Time {
			t.Helper()
			leases := map[string]time.Time{}
			for _, a := range approvals {
				if rec := env.execution(t, a); rec.Status == approval.ExecutionRunning && rec.LeaseExpiresAt != nil {
					leases[a.ID] = *rec.LeaseExpiresAt
				}
			}
			return leases
		}
		// waitFor waits until ok holds of the claims.
		waitFor := func(what string, ok func(map[string]time.Time) bool) {
			t.Helper()
			wait.For(t, what, func() error {
				if leases := running(); !ok(leases) {
					return fmt.Errorf("claims now %v", leases)
				}
				return nil
			})
		}
		waitFor("a second execution claimed while the first call is held", func(l map[string]time.Time) bool { return len(l) == 2 })
		for moved := time.Duration(0); moved < 2*hold; moved += step {
			waitFor("both leases renewed past the next step", func(l map[string]time.Time) bool {
				for _, until := range l {
					if until.Sub(env.clk.Now()) <= step {
						return false
					}
				}
				return len(l) == 2
			})
			env.clk.Advance(step)
			mustRun(t, env.runner(), 0) // both leases hold: nothing to take over
		}
		if n := len(g.entered); n != 0 {
			t.Fatalf("got %d more calls while the first was held, want none (one slot)", n)
		}

		release()
		waitFor("every execution recorded", func(map[string]time.Time) bool {
			for _, a := range approvals {
				if env.execution(t, a).Status != approval.ExecutionSucceeded {
					return false
				}
			}
			return true
		})
		cancel()
		waitRun(t, ran)
		for _, a := range approvals {
			env.want(t, a, approval.ExecutionSucceeded, 1)
			env.wantEffects(t, a.OperationKey, 1, len(approvals))
		}
		store.mu.Lock()
		defer store.mu.Unlock()
		if store.overdrawn != nil {
			t.Errorf("claims beyond the slots and one batch ahead: %v", store.overdrawn)
		}
	})
}

func TestRunner_LongCallKeepsItsLease(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		env := newRunnerEnv(t, kind, plainTarget)
		// The call must outlive the whole test in real time: only the lease may cut it short.
		env.target.Timeout = time.Minute
		a := env.approved(t, "deploy-1")

		// The keeper renews every 2s of real time, and the call's deadline, in real time too,
		// is 5.4s after the last renewal was asked for: it cuts the call only if no renewal
		// gets through for 3.4s, far beyond what one small UPDATE takes even on a loaded
		// 2-core machine under -race. The store's lease runs on the fake clock, which only the
		// test moves.
		const hold = 6 * time.Second
		// More than half a lease: after each step, what is left of the lease the store last
		// granted is less than the next step, so only a renewal made since can cover it.
		const step = 2 * hold / 3
		g := newGate()
		r := env.runner()
		r.Client, r.Lease = &http.Client{Transport: g}, hold
		var (
			claimed int
			runErr  error
		)
		finished := make(chan struct{})
		go func() {
			defer close(finished)
			claimed, runErr = r.RunOnce(context.Background())
		}()
		release := sync.OnceFunc(func() { close(g.open) })
		t.Cleanup(func() { // on failure too: the run ends before the store closes
			release()
			<-finished
		})
		<-g.entered // attempt 1's call is on its way out, held

		// renewedPast waits until the store holds the lease past the fake clock's now plus d.
		renewedPast := func(d time.Duration) {
			t.Helper()
			wait.For(t, "the lease to be renewed", func() error {
				rec := env.execution(t, a)
				if rec.Status != approval.ExecutionRunning || rec.Attempts != 1 || rec.LeaseExpiresAt == nil {
					t.Fatalf("execution: got status %s after %d attempts, lease until %v (last error %q); want running attempt 1 with a lease",
						rec.Status, rec.Attempts, rec.LeaseExpiresAt, rec.LastError)
				}
				if rec.LeaseExpiresAt.Sub(env.clk.Now()) <= d {
					return fmt.Errorf("lease until %v, want past %v", rec.LeaseExpiresAt, env.clk.Now().Add(d))
				}
				return nil
			})
		}
		for moved := time.Duration(0); moved < 4*hold; moved += step {
			renewedPast(step)
			env.clk.Advance(step)
			mustRun(t, env.runner(), 0) // the lease still holds: nothing to take over
			if n := len(g.entered); n != 0 {
				t.Fatalf("after %s: got %d more calls, want none", moved+step, n)
			}
		}

		release()
		<-finished
		if runErr != nil || claimed != 1 {
			t.Fatalf("run: got %d claimed, %v; want 1", claimed, runErr)
		}
		env.want(t, a, approval.ExecutionSucceeded, 1)
		env.wantEffects(t, "deploy-1", 1, 1)
		if n := countEvents(t, env.s, a.ID, approval.EventExecutionAttempt); n != 1 {
			t.Errorf("got %d attempt events, want 1", n)
		}
	})
}

func TestRunner_Failpoints(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		t.Run("before-send", func(t *testing.T) {
			t.Parallel()
			env := newRunnerEnv(t, kind, plainTarget)
			a := env.approved(t, "deploy-1")
			r := env.runner()
			r.Failpoints = mustFailpoints(t, "execution.before-send=error@1")

			mustRun(t, r, 1) // nothing sent: safe to retry even on a plain target
			env.wantRetryIn(t, a, 1, time.Second)
			if rec := env.execution(t, a); !strings.Contains(rec.LastError, failpoint.ErrInjected.Error()) {
				t.Errorf("last error: got %q, want the injected error", rec.LastError)
			}
			env.wantEffects(t, "deploy-1", 0, 0)
			env.clk.Advance(time.Second)
			mustRun(t, r, 1)
			env.want(t, a, approval.ExecutionSucceeded, 2)
			env.wantEffects(t, "deploy-1", 1, 1)
		})

		t.Run("after-send", func(t *testing.T) {
			t.Parallel()
			env := newRunnerEnv(t, kind, idempotentTarget)
			a := env.approved(t, "deploy-1")
			r := env.runner()
			r.Failpoints = mustFailpoints(t, "execution.after-send=error@1")

			mustRun(t, r, 1) // sent, answer lost: uncertain, and the key allows a resend
			env.wantRetryIn(t, a, 1, time.Second)
			env.clk.Advance(time.Second)
			mustRun(t, r, 1)
			env.want(t, a, approval.ExecutionSucceeded, 2)
			env.wantEffects(t, "deploy-1", 1, 2)
		})

		t.Run("after-record", func(t *testing.T) {
			t.Parallel()
			env := newRunnerEnv(t, kind, plainTarget)
			a := env.approved(t, "deploy-1")
			r := env.runner()
			r.Failpoints = mustFailpoints(t, "execution.after-record=error")

			mustRun(t, r, 1) // the outcome is already recorded; the error changes nothing
			env.want(t, a, approval.ExecutionSucceeded, 1)
			if got := r.Failpoints.Hits("execution.after-record"); got != 1 {
				t.Errorf("after-record: got %d hits, want 1", got)
			}
		})
	})
}

// An asynchronous target's 2xx is an acceptance: the execution waits, running and unclaimed,
// for the target's report.
func TestRunner_AsyncTarget(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		env := newRunnerEnv(t, kind, idempotentTarget)
		env.target.Async = true
		a := env.approved(t, "deploy-1")
		r := env.runner()

		mustRun(t, r, 1)
		env.want(t, a, approval.ExecutionRunning, 1)
		if reason := lastReason(t, env.s, a.ID); reason != "accepted by the target; waiting for its report" {
			t.Errorf("reason: got %q, want the acceptance", reason)
		}
		env.clk.Advance(time.Hour)
		mustRun(t, r, 0) // no lease to expire: never claimed again

		applied, _, err := deployRules(env.s).ReportExecution(context.Background(), approval.Principal{Subject: "deployer", Role: approval.RoleOperator}, approval.ExecutionReport{OperationKey: "deploy-1",
			Status: approval.ExecutionSucceeded, Version: 1, Result: json.RawMessage(`{"done": true}`), Actor: "deployer",
			Cause: approval.Cause{Kind: approval.CauseInbox, Source: "deployer", EventID: "msg_1"}})
		if err != nil || !applied {
			t.Fatalf("report: got applied %t, %v; want applied", applied, err)
		}
		env.want(t, a, approval.ExecutionSucceeded, 1)
		env.wantEffects(t, "deploy-1", 1, 1)
	})
}

// Runners on every replica race for the same executions: each action has exactly one effect.
// The target honours keys in its configuration but the downstream does not, so any second
// call would show.
func TestRunner_RacingRunners(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		env := newRunnerEnv(t, kind, plainTarget)
		env.target.Idempotent = true
		const executions, runners = 100, 4
		var approvals []*approval.Approval
		for i := range executions {
			approvals = append(approvals, env.approved(t, fmt.Sprintf("deploy-%d", i)))
		}

		start := make(chan struct{})
		var wg sync.WaitGroup
		for range runners {
			r := env.runner()
			r.Batch = 5
			wg.Go(func() {
				<-start
				for {
					n, err := r.RunOnce(context.Background())
					if err != nil {
						t.Errorf("run: %v", err)
						return
					}
					if n == 0 {
						return
					}
				}
			})
		}
		close(start)
		wg.Wait()

		for _, a := range approvals {
			env.want(t, a, approval.ExecutionSucceeded, 1)
			if got := env.ds.Effects(approval.DownstreamKey(a.Requester, a.OperationKey)); got != 1 {
				t.Errorf("downstream: got %d effects under %s, want 1", got, a.OperationKey)
			}
		}
		if got := env.ds.Requests(); got != executions {
			t.Errorf("downstream: got %d requests, want %d", got, executions)
		}
	})
}

// At shutdown, claims whose call has not been sent are given back at once, and a call in
// flight is finished and recorded.
func TestRunner_ShutdownReleasesUnsentClaims(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		env := newRunnerEnv(t, kind, plainTarget)
		var approvals []*approval.Approval
		for i := range 3 {
			approvals = append(approvals, env.approved(t, fmt.Sprintf("deploy-%d", i)))
		}

		g := newGate()
		r := env.runner()
		r.Client, r.Batch, r.Concurrency = &http.Client{Transport: g}, 3, 1
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		type result struct {
			n   int
			err error
		}
		done := make(chan result, 1)
		go func() {
			n, err := r.RunOnce(ctx)
			done <- result{n, err}
		}()
		<-g.entered // one call is on its way; the two other claims wait for the slot
		cancel()
		close(g.open)
		if res := <-done; res.err != nil || res.n != 3 {
			t.Fatalf("run: got %d claimed, %v; want 3", res.n, res.err)
		}

		var sent, released int
		for _, a := range approvals {
			switch rec := env.execution(t, a); rec.Status {
			case approval.ExecutionSucceeded:
				sent++
			case approval.ExecutionQueued:
				released++
				if rec.Attempts != 0 {
					t.Errorf("released execution of %s: got %d attempts, want 0", a.OperationKey, rec.Attempts)
				}
				if n := countEvents(t, env.s, a.ID, approval.EventExecutionReleased); n != 1 {
					t.Errorf("released execution of %s: got %d released events, want 1", a.OperationKey, n)
				}
			default:
				t.Errorf("execution of %s: got status %s, want succeeded or queued", a.OperationKey, rec.Status)
			}
		}
		if sent != 1 || released != 2 {
			t.Errorf("got %d sent and %d released, want 1 and 2", sent, released)
		}
		if got := env.ds.Requests(); got != 1 {
			t.Errorf("downstream: got %d requests, want 1", got)
		}
		// Released claims are due at once, for this replica's successor or another.
		mustRun(t, env.runner(), 2)
		if got := env.ds.TotalEffects(); got != 3 {
			t.Errorf("downstream: got %d effects, want 3", got)
		}
	})
}

// Run wakes on the store's signal, and at shutdown finishes and records the call in flight
// before it returns.
func TestRunner_Run(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		env := newRunnerEnv(t, kind, plainTarget)
		g := newGate()
		r := env.runner()
		r.Client, r.Poll = &http.Client{Transport: g}, time.Hour
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()

		// Approved after Run started: with an hour's poll, only the signal can wake it.
		a := env.approved(t, "deploy-1")
		<-g.entered
		cancel()
		close(g.open)
		waitRun(t, done)
		env.want(t, a, approval.ExecutionSucceeded, 1)
		env.wantEffects(t, "deploy-1", 1, 1)
	})
}

func TestRunner_RejectsBadConfig(t *testing.T) {
	t.Parallel()
	s := testdb.Open(t, testdb.SQLite, nil)
	l := deployRules(s)
	good := worker.Target{URL: "http://127.0.0.1:9/deploy"}
	for _, r := range []*worker.Runner{
		{},
		{Store: s},
		{Store: s, Ledger: l, Lease: -time.Second},
		{Store: s, Ledger: l, Concurrency: -1},
		{Store: s, Ledger: l, Lease: time.Millisecond},
		{Store: s, Ledger: l, Targets: map[string]worker.Target{"deploy": {URL: "/deploy"}}},
		{Store: s, Ledger: l, Targets: map[string]worker.Target{"deploy": {URL: good.URL, LookupURL: "ftp://127.0.0.1/x"}}},
		{Store: s, Ledger: l, Targets: map[string]worker.Target{"deploy": {URL: good.URL, Timeout: -time.Second}}},
		{Store: s, Ledger: l, Targets: map[string]worker.Target{"deploy": {URL: good.URL, Policy: worker.Policy{MaxAttempts: -1}}}},
	} {
		if err := r.Run(context.Background()); err == nil {
			t.Errorf("run %+v: got nil error, want one", r)
		}
		if _, err := r.RunOnce(context.Background()); err == nil {
			t.Errorf("run once %+v: got nil error, want one", r)
		}
	}
}

// gate is an http.RoundTripper that holds each request until the test opens it, then sends
// it on a real transport: a runner stalled mid-call, on demand.
type gate struct {
	next    http.RoundTripper
	entered chan struct{} // one value per request that reached the gate
	open    chan struct{} // closed to let requests through
}

func newGate() *gate {
	return &gate{next: &http.Transport{}, entered: make(chan struct{}, 16), open: make(chan struct{})}
}

func (g *gate) RoundTrip(req *http.Request) (*http.Response, error) {
	g.entered <- struct{}{}
	select {
	case <-g.open:
		return g.next.RoundTrip(req)
	case <-req.Context().Done():
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, req.Context().Err()
	}
}

// answerGate is an http.RoundTripper that makes requests of one method on a real transport
// and holds each answer until the test opens it: a runner stalled right after hearing back.
// Other requests pass straight through.
type answerGate struct {
	method  string
	next    http.RoundTripper
	entered chan struct{} // one value per held answer
	open    chan struct{} // closed to hand answers over
}

func newAnswerGate(method string) *answerGate {
	return &answerGate{method: method, next: &http.Transport{}, entered: make(chan struct{}, 16), open: make(chan struct{})}
}

func (g *answerGate) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := g.next.RoundTrip(req)
	if req.Method != g.method {
		return resp, err
	}
	g.entered <- struct{}{}
	<-g.open
	return resp, err
}

// postDirect makes the call the claim's runner would have made, as if it had reached the
// target just before the runner died.
func postDirect(t *testing.T, env *runnerEnv, c *approval.ExecutionClaim) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"approval": c.Approval})
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	h, err := webhook.SignStandard(actionSecret, fmt.Sprintf("%s-%d", c.Record.ID, c.Attempt), env.clk.Now(), body)
	if err != nil {
		t.Fatalf("sign: %v", err)
	}
	req, err := http.NewRequest(http.MethodPost, env.ds.URL(), bytes.NewReader(body))
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	req.Header = h
	req.Header.Set("Idempotency-Key", c.Record.IdempotencyKey())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("post: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("post: got HTTP %d, want 200", resp.StatusCode)
	}
}

// claimMidCall claims the one due execution of env and marks its call started, as a runner
// that died while its call was in flight left it, and returns the claim.
func claimMidCall(tb testing.TB, env *runnerEnv) *approval.ExecutionClaim {
	tb.Helper()
	ctx := context.Background()
	claims, err := deployRules(env.s).ClaimExecutions(ctx, lease, 10)
	if err != nil || len(claims) != 1 {
		tb.Fatalf("claim: got %d claims, %v; want 1", len(claims), err)
	}
	c := claims[0]
	done, err := deployRules(env.s).RecordAttempts(ctx, approval.AttemptBatch{
		Sends: []approval.AttemptSend{{ID: c.Record.ID, Attempt: c.Attempt}}, Lease: lease})
	if err == nil {
		err = done.Sent[0]
	}
	if err != nil {
		tb.Fatalf("start the call of attempt %d: %v", c.Attempt, err)
	}
	return c
}

func mustFailpoints(tb testing.TB, spec string) *failpoint.Set {
	tb.Helper()
	s, err := failpoint.Parse(spec)
	if err != nil {
		tb.Fatalf("failpoints %q: %v", spec, err)
	}
	return s
}

// lastReason returns the reason of the approval's last execution event.
func lastReason(tb testing.TB, s approval.Store, approvalID string) string {
	tb.Helper()
	events := mustEvents(tb, s, approvalID)
	for i := len(events) - 1; i >= 0; i-- {
		if reason, ok := events[i].Detail["reason"].(string); ok && strings.HasPrefix(events[i].Type, "execution.") {
			return reason
		}
	}
	tb.Fatalf("approval %s: no execution event with a reason", approvalID)
	return ""
}

// Two requesters may use one operation key: each gets its own approval, and the target must
// see two operations. The downstream key names the requester, escaped so that no other pair
// of requester and key gives the same header ("ops/ci%" and "ops%2Fci%25" differ). The
// first call of each is dropped after its effect, so the second attempt is a resend under the
// same key (idempotent) or a lookup of it (lookup): either must find its own operation, never
// the other requester's.
func TestRunner_RequestersShareAnOperationKey(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		for _, tk := range []targetKind{idempotentTarget, lookupTarget} {
			t.Run(tk.String(), func(t *testing.T) {
				t.Parallel()
				env := newRunnerEnv(t, kind, tk)
				const key = "payout-order-9281"
				want := map[string]string{"ci-bot": "ci-bot/" + key, "ops/ci%": "ops%2Fci%25/" + key}
				var approvals []*approval.Approval
				for _, requester := range []string{"ci-bot", "ops/ci%"} {
					a := newApproval(env.clk, key, time.Hour)
					a.Requester, a.Fingerprint = requester, "fp-"+requester
					if h, err := env.s.InsertApproval(context.Background(), a, approval.HTTPCause("req-"+requester), nil); err != nil || h != nil {
						t.Fatalf("create %s's approval: got holder %+v, error %v, want neither", requester, h, err)
					}
					a = mustApproveBy(t, deployRules(env.s), a)
					if a.Execution == nil || a.Execution.Status != approval.ExecutionQueued {
						t.Fatalf("approve %s's approval: got execution %+v, want a queued one", requester, a.Execution)
					}
					approvals = append(approvals, a)
				}
				env.ds.DropAfterEffect(2)
				r := env.runner()
				mustRun(t, r, 2)
				env.clk.Advance(time.Second)
				mustRun(t, r, 2)

				for _, a := range approvals {
					rec := env.want(t, a, approval.ExecutionSucceeded, 2)
					var res downstream.Result
					if err := json.Unmarshal(rec.Result, &res); err != nil || res.Key != want[a.Requester] {
						t.Errorf("%s's result: got %s (%v), want the effect under %q", a.Requester, rec.Result, err, want[a.Requester])
					}
					if got := env.ds.Effects(want[a.Requester]); got != 1 {
						t.Errorf("downstream: got %d effects under %q, want 1", got, want[a.Requester])
					}
					for _, other := range approvals {
						if other.ID != a.ID && strings.Contains(rec.LastError, other.ID) {
							t.Errorf("%s's execution: last error %q names %s's approval", a.Requester, rec.LastError, other.Requester)
						}
					}
				}
				if got, wantKeys := env.ds.Keys(), []string{want["ci-bot"], want["ops/ci%"]}; strings.Join(got, " ") != strings.Join(wantKeys, " ") || env.ds.TotalEffects() != 2 {
					t.Errorf("downstream: got effects under %q, %d in all; want one under each of %q", got, env.ds.TotalEffects(), wantKeys)
				}
			})
		}
	})
}

// deployRules returns the rules over s with deploy, and only deploy, an action with a
// downstream target.
func deployRules(s approval.Store) *approval.Service {
	return &approval.Service{Store: s, Targeted: func(action string) bool { return action == "deploy" }}
}
