package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/failpoint"
	"github.com/approvald/approval/webhook"
)

// Defaults used when the corresponding Runner or Target field is zero.
const (
	DefaultConcurrency = 4
	DefaultTimeout     = 30 * time.Second
)

// maxResult bounds the response body kept as an execution's result, and a lookup's.
const maxResult = 1 << 20

// Target is the downstream call that carries out one action (docs/http-api.md, "Execution
// targets").
type Target struct {
	Action string
	URL    string
	// Secret is the Standard Webhooks secret ("whsec_...") each call is signed with; empty
	// sends the call unsigned.
	Secret string
	// Idempotent says the target honours the Idempotency-Key (the execution's
	// approval.ExecutionRecord.IdempotencyKey): a repeated call has no second effect, so a
	// call whose outcome is uncertain may be sent again.
	Idempotent bool
	// LookupURL, when set, answers GET ?key=<Idempotency-Key> with 200 and the result when the
	// operation happened and 404 when it did not, so an uncertain call can be reconciled.
	LookupURL string
	// Timeout bounds one call or lookup (DefaultTimeout when zero). A call is also cut short
	// when the claim's lease is about to run out unrenewed; see Runner.Lease.
	Timeout time.Duration
	// Async says a 2xx only means "accepted": the outcome arrives later as a report
	// (approval.Service.ReportExecution), and until then the execution stays running without a
	// lease.
	Async bool
	// Policy gives the attempts and backoff (DefaultPolicy's when zero); its Idempotent and
	// HasLookup are taken from the fields above.
	Policy Policy
}

// Ledger claims executions, marks their calls as started and records how their attempts
// ended: *approval.Service, which holds the rules (the fence of the attempt number, what each
// outcome leads to) once for every store.
type Ledger interface {
	// ClaimExecutions claims up to limit due executions, each for one attempt.
	ClaimExecutions(ctx context.Context, lease time.Duration, limit int) ([]*approval.ExecutionClaim, error)
	// RecordAttempts writes in one transaction the outcomes of several claimed attempts and
	// the start of several calls, each fenced by its attempt (ECONFLICT in its answer when a
	// newer attempt owns the execution), and claims up to a limit of due executions as
	// ClaimExecutions does.
	RecordAttempts(ctx context.Context, b approval.AttemptBatch) (approval.AttemptsRecorded, error)
	// ReleaseExecution gives back a claim whose call was never sent.
	ReleaseExecution(ctx context.Context, id string, attempt int) error
	// RenewExecution extends a claim's lease; ECONFLICT when the attempt no longer holds it.
	RenewExecution(ctx context.Context, id string, attempt int, lease time.Duration) error
}

// Runner carries out approved actions (docs/invariants.md, invariant 5): it claims due
// executions from the store, calls each action's target, and records the outcome in the
// ledger. The store records every attempt when it is claimed, and, in a write of its own that
// commits right before the call is sent, that its call is starting: after a crash an attempt
// whose call never started is known to have sent nothing and is simply made again, and only
// one whose call started is uncertain. Every outcome is written only while the attempt still
// owns the execution. Every replica runs one.
type Runner struct {
	Store   approval.Store    // the executions signal it subscribes to; required
	Ledger  Ledger            // claims, outcomes, releases and lease renewals (an *approval.Service); required
	Logger  *slog.Logger      // slog.Default() when nil
	Targets map[string]Target // by action

	// Lease is the claim lease (DefaultLease when zero), renewed every Lease/3 while an
	// attempt runs, and once more right before its call is sent, by the write that marks the
	// call started (see startCall). A call still in flight Lease/10 before the lease, as last
	// renewed, would run out is cancelled: past that point another runner may claim the
	// execution, and it must not find this call still going.
	Lease       time.Duration
	Poll        time.Duration // how often to look without a signal (DefaultPoll when zero)
	Batch       int           // executions claimed at once, and claimed ahead (Concurrency when zero)
	Concurrency int           // calls in flight at once (DefaultConcurrency when zero)

	// Client makes the calls. nil means a client of its own with default transport settings,
	// except that it keeps an idle connection per host for each of Concurrency calls.
	// Redirects are never followed, whatever the client says: a redirected POST is not the
	// call that was approved.
	Client     *http.Client
	Failpoints *failpoint.Set   // nil: none
	Now        func() time.Time // time.Now when nil; for signatures and retry times
	Rand       func() float64   // jitter source, called from several goroutines; nil means math/rand/v2

	clientOnce sync.Once
	client     *http.Client
}

// errClaimLost cancels an attempt whose lease renewal found that a newer attempt owns the
// execution: the call is abandoned and nothing is recorded.
var errClaimLost = errors.New("execution claim lost")

// errLeaseEnding cancels a call whose claim's lease is about to run out without having been
// renewed (the store slow or unreachable): the outcome is recorded if the store allows.
var errLeaseEnding = errors.New("the claim's lease was about to run out")

// The failpoints of an attempt (see package failpoint).
const (
	fpBeforeSend  = "execution.before-send"
	fpAfterSend   = "execution.after-send"
	fpAfterRecord = "execution.after-record"
)

// mayHaveReached is how a reason tells an operator that an attempt may have reached the
// target without a known outcome. It is prose only: what later attempts go by is the
// execution's Uncertain, which the store keeps.
const mayHaveReached = "may have reached the target"

// Run executes due executions until ctx ends. It wakes on the store's executions signal and
// polls every Poll as well, since a signal is only a hint. It claims ahead: besides a call in
// each of its Concurrency slots it holds up to one more batch of claims (at most Concurrency,
// at least minAhead) waiting for a slot, so that a slot that frees starts its next call at once instead of
// waiting for a claim's commit, and the next claim overlaps the calls. It leaves the rest to
// other replicas. It claims for all it may hold in one transaction, and again at once while
// the store has work for every one of them. It claims through its recorder: a claim asked
// for while outcomes wait to be recorded shares their transaction (see recorder). A claim
// waiting for a slot keeps its lease like a running one (see execute), so it cannot run out
// unnoticed; one a crash abandons is taken over once its lease has run out and, its call
// never having started, sent as an ordinary attempt (approval.ExecutionClaim.Abandoned).
// Claims take expired leases before any queued execution, so a crashed replica's work is
// taken over within about a lease even behind a backlog.
//
// When ctx ends it stops claiming; claims whose call has not been sent are released; calls
// in flight are allowed to finish (up to their timeout) and are recorded; then Run returns
// nil. It returns an error only when the Runner is misconfigured.
func (r *Runner) Run(ctx context.Context) error {
	if err := r.validate(); err != nil {
		return err
	}
	signal, unsubscribe := r.Store.Subscribe(approval.TopicExecutions)
	defer unsubscribe()
	ticker := time.NewTicker(orDefault(r.Poll, DefaultPoll))
	defer ticker.Stop()

	conc := r.concurrency()
	slots := make(chan struct{}, conc)
	finished := make(chan struct{}, r.holds()) // one value per ended execution; never more than holds pending
	rec := r.startRecorder()
	defer rec.stop() // after every attempt has ended (deferred calls run last first)
	var wg sync.WaitGroup
	defer wg.Wait()
	running := 0
	for {
		// Every execution that ended since the last look frees its slot now, not one per turn
		// of the loop: executions ending while a claim was under way are claimed for together,
		// in one transaction, rather than each in a transaction of its own.
		running -= takeReady(finished)
		if free := min(max(r.batch(), r.ahead()), r.holds()-running); free > 0 {
			claims, claimedAt, err := rec.claim(ctx, free)
			if err != nil && ctx.Err() == nil && !approval.IsClockOffset(err) {
				r.logger().ErrorContext(ctx, "claim executions failed", "error", err)
			}
			for _, c := range claims {
				running++
				wg.Go(func() {
					r.execute(ctx, c, claimedAt, slots, rec, func() { finished <- struct{}{} })
				})
			}
			if err == nil && len(claims) == free {
				continue // slots left and the store had work: look again at once
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-finished:
			running--
		case _, ok := <-signal:
			if !ok {
				signal = nil // the store closed the subscription: poll only
			}
		case <-ticker.C:
		}
		if ctx.Err() != nil {
			return nil // stopped while a wake-up was also ready, which select may pick
		}
	}
}

// claim claims up to limit executions, and returns when it asked: the claims' leases run out
// no sooner than a lease after that.
func (r *Runner) claim(ctx context.Context, limit int) ([]*approval.ExecutionClaim, askedAt, error) {
	asked := r.askedAt()
	claims, err := r.Ledger.ClaimExecutions(ctx, r.lease(), limit)
	if err != nil {
		return nil, asked, fmt.Errorf("claim executions: %w", err)
	}
	return claims, asked, nil
}

// askedAt is when a lease was asked for, read before the store reads its clock, so that the
// lease cannot end sooner than a lease after it. It is read on two clocks: this process's
// (with its monotonic reading) for the timers that cut calls short, and the runner's Now,
// which is the store's in tests that move time, for judging how much of the lease is left.
type askedAt struct {
	wall, clock time.Time
}

func (r *Runner) askedAt() askedAt { return askedAt{wall: time.Now(), clock: r.now()} }

// execute runs one claimed attempt to its recorded end. ctx is the runner's: when it ends
// before the call is sent the claim is released, but a call already sent runs on, on a
// context of its own, so that its outcome is recorded rather than lost. claimedAt is when the
// claim was asked for; rec records the outcome. freed is called once, when the attempt no
// longer needs its slot: as soon as its outcome is handed to rec, so that the runner claims
// the next execution while the outcome's batch commits, or else when execute returns.
func (r *Runner) execute(ctx context.Context, c *approval.ExecutionClaim, claimedAt askedAt, slots chan struct{}, rec *recorder, freed func()) {
	a := &attempt{
		r: r, c: c, rec: rec,
		log: r.logger().With("execution", c.Record.ID, "approval", c.Record.ApprovalID,
			"action", c.Record.Action, "attempt", c.Attempt),
	}
	a.leaseFrom(claimedAt)
	work, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	a.work, a.cancel = work, cancel
	stopKeeper := a.keepLease()
	defer stopKeeper()

	held, done := false, false
	leave := func() {
		if held {
			<-slots
			held = false
		}
		if !done {
			done = true
			freed()
		}
	}
	defer leave()
	select {
	case slots <- struct{}{}:
		held = true
	case <-ctx.Done():
	case <-work.Done(): // the keeper found the claim lost while it waited
	}
	if a.lost() {
		return // a newer attempt owns the execution: nothing to send or record
	}
	// Checked again after a slot was won: the select picks at random when both are ready.
	if ctx.Err() != nil {
		stopKeeper()
		a.release()
		return
	}

	o, ok := a.run()
	stopKeeper()
	if !ok {
		return
	}
	a.record(o, leave)
}

// attempt is one claimed attempt of an execution, from the claim to the record.
type attempt struct {
	r      *Runner
	c      *approval.ExecutionClaim
	rec    *recorder
	work   context.Context // outlives the runner's ctx; cancelled when the claim is lost
	cancel context.CancelCauseFunc
	log    *slog.Logger
	// deadline cuts calls short before the lease runs out; renewals move it.
	deadline deadline

	mu sync.Mutex // guards held
	// held is when, by the runner's clock, the lease now in force was asked for: at the claim
	// or at the last renewal that went through.
	held time.Time
}

// run decides the attempt's outcome, calling the target (or its lookup URL) as needed. It
// reports false when there is nothing to record: the claim was lost.
func (a *attempt) run() (approval.AttemptOutcome, bool) {
	t, ok := a.r.Targets[a.c.Record.Action]
	if !ok {
		return a.noTarget(), true
	}
	policy := t.policy()

	// Was an earlier attempt of this run perhaps effective? The store keeps the answer: one
	// recorded as uncertain, or one interrupted (this claim recovered its expired lease).
	if a.c.Record.Uncertain && !t.Idempotent {
		if t.LookupURL == "" {
			return a.cannotAsk(), true
		}
		o, settled := a.reconcile(t, policy)
		if a.lost() {
			return approval.AttemptOutcome{}, false
		}
		if settled {
			return o, true
		}
	}
	return a.send(t, policy)
}

// cannotAsk is the outcome of a claim after an attempt that may have reached a target that
// neither honours keys nor can be asked: sending again could do it twice.
func (a *attempt) cannotAsk() approval.AttemptOutcome {
	if a.c.Recovered {
		return approval.AttemptOutcome{
			Status: approval.ExecutionNeedsReview,
			Error:  fmt.Sprintf("attempt %d was interrupted after its call started", a.c.Attempt-1),
			Reason: fmt.Sprintf("attempt %d was interrupted after its call started; the target cannot tell whether it ran, and sending it again could do it twice: an operator must check", a.c.Attempt-1),
		}
	}
	return approval.AttemptOutcome{
		Status: approval.ExecutionNeedsReview,
		Error:  "an earlier attempt " + mayHaveReached,
		Reason: fmt.Sprintf("an earlier attempt %s; the target cannot tell whether it ran, and sending it again could do it twice: an operator must check", mayHaveReached),
	}
}

// reconcile asks the lookup URL whether an earlier, uncertain attempt took effect. It reports
// settled=false when the lookup found nothing and attempts remain, so the call is to be made.
func (a *attempt) reconcile(t Target, policy Policy) (o approval.AttemptOutcome, settled bool) {
	ctx, release := a.deadline.bind(a.work)
	found, result, err := a.r.lookup(ctx, t, a.c.Record.IdempotencyKey())
	release()
	n := a.number()
	switch {
	case err != nil && n >= policy.MaxAttempts:
		return approval.AttemptOutcome{
			Status: approval.ExecutionNeedsReview,
			Error:  err.Error(),
			Reason: fmt.Sprintf("an earlier attempt %s, and asking the lookup URL whether it ran failed (%v) with no attempts left: an operator must check", mayHaveReached, err),
		}, true
	case err != nil:
		delay := policy.Delay(n, 0, a.r.Rand)
		at := a.r.now().Add(delay)
		return approval.AttemptOutcome{
			Status:  approval.ExecutionQueued,
			RetryAt: &at,
			Error:   err.Error(),
			Reason:  fmt.Sprintf("an earlier attempt %s, and asking the lookup URL whether it ran failed (%v); asking again in %s", mayHaveReached, err, round(delay)),
		}, true
	case found && t.Async:
		return approval.AttemptOutcome{
			Status: approval.ExecutionRunning,
			Result: result,
			Reason: "the lookup URL shows an earlier attempt was accepted by the target; waiting for its report",
		}, true
	case found:
		return approval.AttemptOutcome{
			Status: approval.ExecutionSucceeded,
			Result: result,
			Reason: "the lookup URL shows an earlier attempt took effect; its result is recorded without calling again",
		}, true
	case n > policy.MaxAttempts:
		return approval.AttemptOutcome{
			Status: approval.ExecutionFailed,
			Error:  "not found by the lookup URL",
			Reason: fmt.Sprintf("the lookup URL shows no earlier attempt took effect, and all %d attempts are used", policy.MaxAttempts),
		}, true
	}
	a.log.InfoContext(a.work, "lookup found no effect; calling the target")
	return approval.AttemptOutcome{}, false
}

// send makes the call and turns its result into the outcome to record.
func (a *attempt) send(t Target, policy Policy) (approval.AttemptOutcome, bool) {
	var res callResult
	if err := a.r.Failpoints.Inject(fpBeforeSend); err != nil {
		res = callResult{err: err} // nothing has left the process: safe to retry anywhere
	} else if err := a.beforeSend(t); err != nil {
		res = callResult{err: err} // not sent, as above; a lost claim returns below
	} else {
		ctx, release := a.deadline.bind(a.work)
		res = a.r.call(ctx, t, a.c)
		release()
		if err := a.r.Failpoints.Inject(fpAfterSend); err != nil {
			// Stands for the process failing between the call and the record: the call has
			// been made, its answer is gone.
			res = callResult{err: err, mayHaveArrived: true}
		}
	}
	if a.lost() {
		return approval.AttemptOutcome{}, false
	}
	if res.buildErr != nil {
		return approval.AttemptOutcome{
			Status: approval.ExecutionFailed,
			Error:  res.buildErr.Error(),
			Reason: fmt.Sprintf("the call could not be made (%v); this is a configuration or data problem that retrying cannot fix", res.buildErr),
		}, true
	}

	outcome, detail := Classify(res.status, res.err, res.mayHaveArrived)
	if outcome == Succeeded {
		if t.Async {
			return approval.AttemptOutcome{Status: approval.ExecutionRunning, Result: res.body,
				Reason: "accepted by the target; waiting for its report"}, true
		}
		return approval.AttemptOutcome{Status: approval.ExecutionSucceeded, Result: res.body,
			Reason: "the target answered " + detail}, true
	}
	if outcome == Failed {
		return approval.AttemptOutcome{Status: approval.ExecutionFailed, Error: detail,
			Reason: fmt.Sprintf("the target refused the call with %s; retrying cannot change that", detail)}, true
	}

	n, of := a.number(), policy.MaxAttempts
	var retryAfter time.Duration
	if outcome == Retryable && res.header != nil {
		retryAfter, _ = ParseRetryAfter(res.header.Get("Retry-After"), a.r.now())
	}
	delay := policy.Delay(n, retryAfter, a.r.Rand)
	at := a.r.now().Add(delay)
	o := approval.AttemptOutcome{Error: detail, Uncertain: outcome == Uncertain}
	switch next := policy.Decide(outcome, n, a.c.Record.Uncertain); {
	case next == NextRetry && outcome == Retryable:
		o.Status, o.RetryAt = approval.ExecutionQueued, &at
		o.Reason = fmt.Sprintf("attempt %d of %d: %s; retrying in %s", n, of, detail, round(delay))
	case next == NextRetry:
		o.Status, o.RetryAt = approval.ExecutionQueued, &at
		o.Reason = fmt.Sprintf("attempt %d of %d %s (%s); the target honours the Idempotency-Key, so the call is sent again in %s", n, of, mayHaveReached, detail, round(delay))
	case next == NextFail:
		o.Status = approval.ExecutionFailed
		o.Reason = fmt.Sprintf("attempt %d of %d: %s; no attempts are left", n, of, detail)
	case next == NextLookup && outcome == Uncertain:
		o.Status, o.RetryAt = approval.ExecutionQueued, &at
		o.Reason = fmt.Sprintf("attempt %d of %d %s (%s); the lookup URL will be asked in %s whether it ran", n, of, mayHaveReached, detail, round(delay))
	case next == NextLookup:
		o.Status, o.RetryAt = approval.ExecutionQueued, &at
		o.Reason = fmt.Sprintf("attempt %d of %d: %s; no attempts are left, but an earlier attempt %s, so the lookup URL will be asked in %s whether it ran", n, of, detail, mayHaveReached, round(delay))
	case outcome == Uncertain:
		o.Status = approval.ExecutionNeedsReview
		o.Reason = fmt.Sprintf("attempt %d of %d %s (%s); %s, so an operator must check whether it ran", n, of, mayHaveReached, detail, cannotSettle(t, n, of))
	default:
		o.Status = approval.ExecutionNeedsReview
		o.Reason = fmt.Sprintf("attempt %d of %d: %s; no attempts are left, and an earlier attempt %s: an operator must check whether it ran", n, of, detail, mayHaveReached)
	}
	return o, true
}

// cannotSettle says why an uncertain call of t cannot be settled automatically.
func cannotSettle(t Target, n, of int) string {
	if t.Idempotent && n >= of {
		return "no attempts are left to send it again and the target has no lookup URL"
	}
	return "the target neither honours the Idempotency-Key nor has a lookup URL"
}

// noTarget is the outcome of a claim for an action this runner has no target for: a replica
// configured differently from the one that approved it.
func (a *attempt) noTarget() approval.AttemptOutcome {
	action := a.c.Record.Action
	if a.c.Recovered {
		return approval.AttemptOutcome{
			Status: approval.ExecutionNeedsReview,
			Error:  fmt.Sprintf("no target configured for action %q", action),
			Reason: fmt.Sprintf("attempt %d was interrupted after its call started and no target is configured for action %q on this replica: an operator must check whether it ran", a.c.Attempt-1, action),
		}
	}
	return approval.AttemptOutcome{
		Status: approval.ExecutionFailed,
		Error:  fmt.Sprintf("no target configured for action %q", action),
		Reason: fmt.Sprintf("no target is configured for action %q on this replica; nothing was called", action),
	}
}

// record writes the outcome, fenced by the attempt number, in the recorder's next batch, and
// returns once that batch has committed (or failed): only then is the outcome logged as
// recorded, and the failpoint after the record reached.
//
// A record that fails for a reason that may pass (the database unreachable or restarting, a
// connection cut, a concurrent update) is tried again with backoff (recordBackoff) while the
// claim's lease lasts, and the lease is renewed along the way as keepLease would (see
// retryRecord): an outcome already known, a 200 above all, must not be left for the next
// claim to take over as interrupted, which for a target that can neither be asked nor sent
// the call again means an operator. The tries end when the lease, as last confirmed, has run
// out, and at the latest a lease after the first failure, so that a record that cannot
// succeed does not hold the execution for ever.
//
// handed is called once the outcome is in the recorder's hands.
func (a *attempt) record(o approval.AttemptOutcome, handed func()) {
	ctx := a.work
	f := approval.AttemptFinish{ID: a.c.Record.ID, Attempt: a.c.Attempt, Outcome: o}
	rec, err := a.rec.finish(f, handed)
	tries := 1
	if err != nil && transient(err) {
		rec, tries, err = a.retryRecord(f, err)
	}
	switch {
	case approval.ErrorCode(err) == approval.ECONFLICT && tries > 1:
		a.log.WarnContext(ctx, "attempt outcome not recorded again: an earlier try committed though its answer was lost, or a newer attempt owns the execution",
			"status", o.Status, "reason", o.Reason, "tries", tries, "error", err)
		return
	case approval.ErrorCode(err) == approval.ECONFLICT:
		a.log.WarnContext(ctx, "attempt outcome not recorded: a newer attempt owns the execution", "status", o.Status, "reason", o.Reason, "error", err)
		return
	case err != nil:
		// The lease will run out and the next claim will treat this attempt as interrupted,
		// which is the truth as far as the store knows.
		a.log.ErrorContext(ctx, "record attempt outcome failed", "status", o.Status, "reason", o.Reason, "tries", tries, "error", err)
		return
	}
	a.log.InfoContext(ctx, "execution attempt recorded", "status", rec.Status, "reason", o.Reason, "tries", tries)
	if err := a.r.Failpoints.Inject(fpAfterRecord); err != nil {
		a.log.ErrorContext(ctx, "after recording the attempt", "error", err)
	}
}

// recordBackoff spaces the tries of a record that failed: quick at first, since a database
// restart or a cut connection is usually over in well under a second, and never more than a
// second apart, so that an outcome is recorded soon after the database answers again.
var recordBackoff = Policy{Backoff: Backoff{Initial: 50 * time.Millisecond, Max: time.Second, Multiplier: 2, Jitter: 0.2}}

// retryRecord tries the record of f again after its first try failed with err, as record
// describes, and returns the last try's answer and how many tries were made in all. Before a
// try it renews the lease once a third of it has passed since it was last confirmed; a
// renewal that fails is no reason to stop (the record may still get through while the lease
// lasts), but one that finds the claim lost is, since the record would be refused as well.
func (a *attempt) retryRecord(f approval.AttemptFinish, err error) (*approval.ExecutionRecord, int, error) {
	ctx := a.work
	giveUp := time.Now().Add(a.r.lease())
	var rec *approval.ExecutionRecord
	tries := 1
	for transient(err) {
		left := min(time.Until(a.deadline.leaseEnd(a.r.margin())), time.Until(giveUp))
		if left <= 0 {
			break
		}
		delay := min(recordBackoff.Delay(tries, 0, a.r.Rand), left)
		a.log.WarnContext(ctx, "record attempt outcome failed; trying again", "status", f.Outcome.Status,
			"tries", tries, "retry_in", round(delay), "error", err)
		time.Sleep(delay)
		if time.Until(a.deadline.leaseEnd(a.r.margin())) < a.r.lease()*2/3 {
			rctx, cancel := context.WithTimeout(ctx, a.r.lease())
			rerr := a.renew(rctx)
			cancel()
			if a.lost() {
				return nil, tries, rerr
			}
		}
		tries++
		rec, err = a.rec.finish(f, func() {})
	}
	return rec, tries, err
}

// transient reports whether a record that failed with err may succeed if tried again: the
// database could not be used (EUNAVAILABLE), a concurrent update got in the way (a conflict
// that says when to try again, unlike the fence's), or a failure the drivers do not name
// (EINTERNAL: a connection that broke in a way no code describes).
func transient(err error) bool {
	switch approval.ErrorCode(err) {
	case approval.EUNAVAILABLE, approval.EINTERNAL:
		return true
	case approval.ECONFLICT:
		e := approval.AsError(err)
		return e != nil && e.RetryAfter > 0
	}
	return false
}

// recorder records the outcomes of a runner's attempts in batches: the outcomes of
// attempts that end while a batch is being recorded wait and go together in the next one,
// one transaction (approval.Service.RecordAttempts) in which each is still fenced by its own
// attempt and gets its own event. The starts of calls about to be sent are batched the same
// way in a lane of their own (startLane), whose transactions run beside the outcomes': a call
// waits for its start's commit, and only for that, not for a batch of outcomes or a claim
// under way, so a slot that frees starts its next call after one commit. A batch goes as
// soon as the recorder is free: one attempt ending alone is recorded at once, and under load
// a batch is as large as the attempts that ended during the last one's commit (at most what
// the runner holds). Each attempt waits for its batch's commit before anything treats its outcome as recorded; an outcome that has not
// been committed when the process dies leaves its execution claimed, to be recovered as
// uncertain once the lease runs out, as if the attempt had died before recording it.
//
// Run claims through the recorder too (claim): a claim asked for while outcomes wait, or
// while a batch is being recorded, goes with the next batch in its transaction, so that a
// busy runner commits once for the attempts that ended and the executions that take their
// slots, not once for each.
type recorder struct {
	r      *Runner
	in     chan recording // outcomes
	starts chan recording // starts of calls, at most one per slot
	lane   chan struct{}  // closed when startLane has recorded the last start and returned
	// room holds a value for each outcome handed to the recorder and not yet answered: at
	// most as many as the runner holds claims (Concurrency calls and a batch claimed ahead),
	// so that an attempt ending while the last batch commits frees its slot at once even
	// with one slot, and outcomes on their way to a batch stay bounded.
	room   chan struct{}
	claims chan claimRequest // Run's claims, one at a time
	done   chan struct{}     // closed when the loop has recorded the last batch and returned
}

// recording is one outcome, or the start of one call, on its way to a batch, and where its
// answer goes.
type recording struct {
	f      approval.AttemptFinish
	answer chan approval.AttemptFinished
	start  *approval.AttemptSend // a call's start instead of an outcome
	sent   chan error            // the start's answer
}

// claimRequest is Run asking for up to limit claims, and where the answer goes.
type claimRequest struct {
	ctx    context.Context
	limit  int
	answer chan claimAnswer
}

// claimAnswer is what a claimRequest got: the claims, when they were asked for (see
// Runner.claim), or why there are none.
type claimAnswer struct {
	claims []*approval.ExecutionClaim
	asked  askedAt
	err    error
}

// startRecorder starts a recorder's loop; stop ends it once every outcome sent to it has been
// recorded.
func (r *Runner) startRecorder() *recorder {
	n := r.holds()
	rec := &recorder{r: r, in: make(chan recording, n), room: make(chan struct{}, n),
		starts: make(chan recording, r.concurrency()), lane: make(chan struct{}),
		claims: make(chan claimRequest), done: make(chan struct{})}
	go rec.loop()
	go rec.startLane()
	return rec
}

// stop waits for the batches still under way and ends the loops. No attempt may call finish
// or send, and Run may not call claim, after it.
func (rec *recorder) stop() {
	close(rec.in)
	close(rec.starts)
	<-rec.done
	<-rec.lane
}

// finish hands f to the next batch, calls handed, and returns what was recorded for f once
// that batch has committed, or why nothing was.
func (rec *recorder) finish(f approval.AttemptFinish, handed func()) (*approval.ExecutionRecord, error) {
	rec.room <- struct{}{}
	defer func() { <-rec.room }()
	answer := make(chan approval.AttemptFinished, 1)
	rec.in <- recording{f: f, answer: answer}
	handed()
	res := <-answer
	return res.Record, res.Err
}

// send hands the start of x's call to the start lane's next batch and returns once that
// batch has committed: nil when the call may be sent, or why it must not.
func (rec *recorder) send(x approval.AttemptSend) error {
	sent := make(chan error, 1)
	rec.starts <- recording{start: &x, sent: sent}
	return <-sent
}

// startLane records the starts handed to send, in batches as loop does outcomes: a batch
// goes as soon as the last has committed, with every start handed over meanwhile.
func (rec *recorder) startLane() {
	defer close(rec.lane)
	for first := range rec.starts {
		batch := []recording{first}
	more:
		for len(batch) < cap(rec.starts) {
			select {
			case next, ok := <-rec.starts:
				if !ok {
					break more
				}
				batch = append(batch, next)
			default:
				break more
			}
		}
		rec.record(batch, nil)
	}
}

// claim claims up to limit executions in the recorder's next transaction, with the
// outcomes waiting then, if any, and returns them once it has committed, with when they
// were asked for. Once asked, it waits for the answer even if ctx ends meanwhile: claims
// committed must reach Run, which releases them.
func (rec *recorder) claim(ctx context.Context, limit int) ([]*approval.ExecutionClaim, askedAt, error) {
	if err := ctx.Err(); err != nil {
		return nil, rec.r.askedAt(), err
	}
	answer := make(chan claimAnswer, 1)
	rec.claims <- claimRequest{ctx: ctx, limit: limit, answer: answer}
	a := <-answer
	return a.claims, a.asked, a.err
}

func (rec *recorder) loop() {
	defer close(rec.done)
	limit := cap(rec.in)
	for {
		var batch []recording
		var claim *claimRequest
		select {
		case first, ok := <-rec.in:
			if !ok {
				return
			}
			batch = append(batch, first)
		case c := <-rec.claims:
			claim = &c
		}
	more:
		for len(batch) < limit {
			select {
			case next, ok := <-rec.in:
				if !ok {
					break more
				}
				batch = append(batch, next)
			default:
				break more
			}
		}
		if claim == nil {
			select {
			case c := <-rec.claims:
				claim = &c
			default:
			}
		}
		rec.record(batch, claim)
	}
}

// record records one batch, possibly empty, and claims for claim, if any, in one
// transaction, and answers each. Should the transaction fail with a claim in it, the batch
// is recorded again alone: a claim that cannot be made must not cost the outcomes. (If that
// transaction did commit and only its answer was lost, each outcome's second record is
// refused by its fence, ECONFLICT, and its claims run out and are taken over, as any claim
// whose commit went unanswered.)
//
// Each transaction runs on a context of its own, a lease long: the attempts' work outlives
// the runner's context, and so does the record of their outcome; a claim once asked for is
// committed and handed to Run even if Run's context ends meanwhile (Run releases it).
func (rec *recorder) record(batch []recording, claim *claimRequest) {
	if claim != nil && claim.ctx.Err() != nil {
		claim.answer <- claimAnswer{asked: rec.r.askedAt(), err: claim.ctx.Err()} // Run has stopped
		claim = nil
	}
	b := approval.AttemptBatch{Lease: rec.r.lease()}
	for _, x := range batch {
		if x.start != nil {
			b.Sends = append(b.Sends, *x.start)
		} else {
			b.Finishes = append(b.Finishes, x.f)
		}
	}
	var (
		done approval.AttemptsRecorded
		err  error
	)
	if claim != nil {
		asked := rec.r.askedAt()
		b.Claim = claim.limit
		err = rec.alone(func(ctx context.Context) (err error) {
			if len(batch) == 0 {
				done.Claims, err = rec.r.Ledger.ClaimExecutions(ctx, b.Lease, b.Claim)
			} else {
				done, err = rec.r.Ledger.RecordAttempts(ctx, b)
			}
			return err
		})
		if err != nil {
			err = fmt.Errorf("claim executions: %w", err)
		}
		claim.answer <- claimAnswer{claims: done.Claims, asked: asked, err: err}
		b.Claim = 0
	}
	if len(batch) == 0 {
		return
	}
	if claim == nil || err != nil {
		err = rec.alone(func(ctx context.Context) (err error) {
			done, err = rec.r.Ledger.RecordAttempts(ctx, b)
			return err
		})
	}
	sends, finishes := 0, 0
	for _, x := range batch {
		if x.start != nil {
			switch {
			case err != nil:
				x.sent <- err
			case sends < len(done.Sent):
				x.sent <- done.Sent[sends]
			default:
				x.sent <- fmt.Errorf("record attempts: %d answers for %d starts", len(done.Sent), len(b.Sends))
			}
			sends++
			continue
		}
		switch {
		case err != nil:
			x.answer <- approval.AttemptFinished{Err: err}
		case finishes < len(done.Finished):
			x.answer <- done.Finished[finishes]
		default:
			x.answer <- approval.AttemptFinished{Err: fmt.Errorf("record attempts: %d answers for %d outcomes", len(done.Finished), len(b.Finishes))}
		}
		finishes++
	}
}

// alone runs one ledger transaction on a context of its own that ends a lease from now.
func (rec *recorder) alone(tx func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), rec.r.lease())
	defer cancel()
	return tx(ctx)
}

// release gives back a claim whose call was never sent, at shutdown.
func (a *attempt) release() {
	ctx, cancel := context.WithTimeout(a.work, a.r.lease())
	defer cancel()
	if err := a.r.Ledger.ReleaseExecution(ctx, a.c.Record.ID, a.c.Attempt); err != nil {
		// Not released: the lease runs out and the next claim recovers it, uncertain. That
		// is slower and more cautious than needed, never wrong.
		a.log.ErrorContext(ctx, "release execution claim failed", "error", err)
		return
	}
	a.log.InfoContext(ctx, "execution claim released unsent at shutdown")
}

// keepLease renews the claim every Lease/3 until the returned stop function is called (see
// renew). stop waits for the renewing goroutine to end and may be called more than once.
func (a *attempt) keepLease() (stop func()) {
	ctx, end := context.WithCancel(a.work)
	var wg sync.WaitGroup
	wg.Go(func() {
		ticker := time.NewTicker(a.r.lease() / 3)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
			err := a.renew(ctx)
			switch {
			case err == nil:
			case ctx.Err() != nil, a.lost():
				return
			default:
				// The claim is not known to be lost; the next renewal may get through before
				// the lease ends, and if none does the deadline cuts the call short first.
				a.log.WarnContext(ctx, "renew execution lease failed", "error", err)
			}
		}
	})
	return func() {
		end()
		wg.Wait()
	}
}

// beforeSend readies the call of t. For a target that does not honour the Idempotency-Key it
// records that the call starts (startCall), so that a crash never leaves a call that was not
// sent looking uncertain. A target that honours the key needs no such record: a crash leaves
// its claim looking unsent, and sending the call again under the same key is safe whether or
// not the first one arrived. Its calls skip that commit, which keeps claiming ahead as quick
// as before for them; only the lease is renewed, and only when little of it is left
// (renewBeforeSend).
func (a *attempt) beforeSend(t Target) error {
	if !t.Idempotent {
		return a.startCall()
	}
	return a.renewBeforeSend(t)
}

// renewBeforeSend renews the lease right before the call of t is sent, unless enough of it is
// left: while more than the margin is left of the lease as last confirmed, no newer attempt
// can hold the execution, and the call, cut short at the deadline, cannot outlive the lease.
// The renewal is skipped when what is left, less the margin, covers the call's timeout, or
// the next renewal of keepLease (due within Lease/3) comes before the deadline does. An
// error means the call must not be sent.
func (a *attempt) renewBeforeSend(t Target) error {
	a.mu.Lock()
	left := a.held.Add(a.r.lease()).Sub(a.r.now())
	a.mu.Unlock()
	if left-a.r.margin() >= min(orDefault(t.Timeout, DefaultTimeout), a.r.lease()/3) {
		return nil
	}
	ctx, cancel := context.WithTimeout(a.work, a.r.lease())
	defer cancel()
	if err := a.renew(ctx); err != nil {
		return fmt.Errorf("renew the claim before sending: %w", err)
	}
	return nil
}

// startCall records, in a write that commits before the call is sent, that the attempt's
// call is starting (approval.Service.RecordAttempts, through the recorder's start lane,
// batched with the starts of other calls). Until it commits the
// record shows a claim whose call has not started, which a crash leaves to be sent again as
// an ordinary attempt; from then on one the target may have seen, which a crash leaves
// uncertain. The same write renews the lease: fencing guards the database writes of a stale
// attempt, but not a call it has yet to make; if renewals were slow and the lease lapsed
// while this attempt looked up or waited for a slot, a newer attempt may have claimed the
// execution and sent the call itself. Only a write that succeeds now proves that none has,
// and holds the execution for a lease from now. An error means the call must not be sent; a
// lost claim cancels the attempt's work with errClaimLost.
func (a *attempt) startCall() error {
	asked := a.r.askedAt()
	err := a.rec.send(approval.AttemptSend{ID: a.c.Record.ID, Attempt: a.c.Attempt})
	switch {
	case err == nil:
		a.leaseFrom(asked)
		return nil
	case approval.ErrorCode(err) == approval.ECONFLICT && !transient(err):
		a.log.WarnContext(a.work, "execution claim lost; abandoning the attempt", "error", err)
		a.cancel(errClaimLost)
	}
	return fmt.Errorf("record that the call starts: %w", err)
}

// renew extends the claim's lease and moves the call deadline to a margin before the new end.
// When the store says a newer attempt owns the execution it cancels the attempt's work with
// errClaimLost.
func (a *attempt) renew(ctx context.Context) error {
	asked := a.r.askedAt()
	err := a.r.Ledger.RenewExecution(ctx, a.c.Record.ID, a.c.Attempt, a.r.lease())
	switch {
	case err == nil:
		a.leaseFrom(asked)
	case approval.ErrorCode(err) == approval.ECONFLICT:
		a.log.WarnContext(ctx, "execution claim lost; abandoning the attempt", "error", err)
		a.cancel(errClaimLost)
	}
	return err
}

// leaseFrom records a lease granted as asked at asked: the deadline moves to a margin before
// its end.
func (a *attempt) leaseFrom(asked askedAt) {
	a.deadline.extend(asked.wall.Add(a.r.lease() - a.r.margin()))
	a.mu.Lock()
	defer a.mu.Unlock()
	if asked.clock.After(a.held) {
		a.held = asked.clock
	}
}

// lost reports whether the claim was found lost while the attempt ran.
func (a *attempt) lost() bool {
	return errors.Is(context.Cause(a.work), errClaimLost)
}

// deadline is when an attempt's calls must have ended: a margin before the claim's lease, as
// the store last confirmed it, runs out, in this process's clock. Past it another runner may
// claim the execution, and a call of this attempt still in flight could then reach the target
// beside that runner's. Each renewal moves it forward.
type deadline struct {
	mu    sync.Mutex
	at    time.Time
	timer *time.Timer // cancels the call in flight at at; nil between calls
}

// extend moves the deadline to at, if that is later.
func (d *deadline) extend(at time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !at.After(d.at) {
		return
	}
	d.at = at
	if d.timer != nil {
		d.timer.Reset(time.Until(at))
	}
}

// leaseEnd is when the claim's lease, as the store last confirmed it, runs out, in this
// process's clock.
func (d *deadline) leaseEnd(margin time.Duration) time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.at.Add(margin)
}

// bind returns the context of one call: ctx, cancelled with errLeaseEnding once the deadline
// passes. release ends it; an attempt makes one call at a time.
func (d *deadline) bind(ctx context.Context) (_ context.Context, release func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	d.mu.Lock()
	d.timer = time.AfterFunc(time.Until(d.at), func() { cancel(errLeaseEnding) })
	d.mu.Unlock()
	return ctx, func() {
		d.mu.Lock()
		d.timer.Stop()
		d.timer = nil
		d.mu.Unlock()
		cancel(nil)
	}
}

// number is the attempt's number within the execution's current run (from 1): the attempts
// since it was approved, or since an operator last re-queued it.
func (a *attempt) number() int {
	return a.c.Attempt - a.c.Record.AttemptBase
}

// callResult is what one call of a target returned.
type callResult struct {
	status         int // 0 when no response arrived
	header         http.Header
	body           json.RawMessage // the response body as JSON (see jsonResult)
	err            error
	mayHaveArrived bool
	buildErr       error // the request could not be built: nothing was sent
}

// call POSTs the approval to the target. The request is made so that nothing but Decide ever
// sends it twice: for a target that does not honour keys the body cannot be rewound, which
// stops net/http from replaying the POST on its own when a reused connection breaks.
func (r *Runner) call(ctx context.Context, t Target, c *approval.ExecutionClaim) callResult {
	body, err := json.Marshal(struct {
		Approval *approval.Approval `json:"approval"`
	}{c.Approval})
	if err != nil {
		return callResult{buildErr: fmt.Errorf("encode the approval: %w", err)}
	}
	var reader io.Reader = bytes.NewReader(body)
	if !t.Idempotent {
		reader = io.MultiReader(reader) // hides Seek and Len, so no GetBody is made
	}
	ctx, cancel := context.WithTimeout(ctx, orDefault(t.Timeout, DefaultTimeout))
	defer cancel()
	var trace Trace
	req, err := http.NewRequestWithContext(trace.WithContext(ctx), http.MethodPost, t.URL, reader)
	if err != nil {
		return callResult{buildErr: fmt.Errorf("build the request: %w", err)}
	}
	if !t.Idempotent {
		req.GetBody = nil
		req.ContentLength = int64(len(body))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", c.Record.IdempotencyKey())
	if t.Secret != "" {
		// The message id stays the same for one attempt and differs between attempts, which
		// are distinct messages even though they carry one operation key.
		sig, err := webhook.SignStandard(t.Secret, c.Record.ID+"-"+strconv.Itoa(c.Attempt), r.now(), body)
		if err != nil {
			return callResult{buildErr: err}
		}
		for name, values := range sig {
			req.Header[name] = values
		}
	}

	resp, err := r.httpClient().Do(req)
	if err != nil {
		arrived := trace.MayHaveArrived(err)
		if cause := context.Cause(ctx); errors.Is(cause, errLeaseEnding) {
			err = fmt.Errorf("%w: %w", cause, err)
		}
		return callResult{err: err, mayHaveArrived: arrived}
	}
	defer resp.Body.Close()
	// A read error after the status is ignored: the target has answered, and Classify lets
	// the status decide.
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxResult))
	return callResult{status: resp.StatusCode, header: resp.Header, body: jsonResult(raw), mayHaveArrived: true}
}

// lookup asks t's lookup URL whether the operation under key happened, and returns its
// result when it did.
func (r *Runner) lookup(ctx context.Context, t Target, key string) (found bool, result json.RawMessage, err error) {
	u, err := url.Parse(t.LookupURL)
	if err != nil {
		return false, nil, fmt.Errorf("lookup url: %w", err)
	}
	q := u.Query()
	q.Set("key", key)
	u.RawQuery = q.Encode()
	ctx, cancel := context.WithTimeout(ctx, orDefault(t.Timeout, DefaultTimeout))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return false, nil, fmt.Errorf("lookup: %w", err)
	}
	resp, err := r.httpClient().Do(req)
	if err != nil {
		if cause := context.Cause(ctx); errors.Is(cause, errLeaseEnding) {
			err = fmt.Errorf("%w: %w", cause, err)
		}
		return false, nil, fmt.Errorf("lookup: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResult))
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return false, nil, nil
	case resp.StatusCode != http.StatusOK:
		return false, nil, fmt.Errorf("lookup answered HTTP %d", resp.StatusCode)
	case err != nil:
		return false, nil, fmt.Errorf("lookup: read the answer: %w", err)
	}
	return true, jsonResult(raw), nil
}

// jsonResult makes a response body fit to keep as an execution's result, which is shown as
// JSON: a JSON body as it is, an empty one as none, and anything else (plain text, or JSON cut
// short at maxResult) as a JSON string of its text.
func jsonResult(body []byte) json.RawMessage {
	body = bytes.TrimSpace(body)
	switch {
	case len(body) == 0:
		return nil
	case json.Valid(body):
		return body
	}
	s, _ := json.Marshal(string(body)) // a string always encodes; invalid UTF-8 becomes U+FFFD
	return s
}

// validate reports a misconfigured runner.
func (r *Runner) validate() error {
	switch {
	case r.Store == nil:
		return errors.New("runner: no store")
	case r.Ledger == nil:
		return errors.New("runner: no ledger (an *approval.Service) to claim and record executions with")
	case r.Lease < 0 || r.Poll < 0 || r.Batch < 0 || r.Concurrency < 0:
		return fmt.Errorf("runner: negative lease %s, poll %s, batch %d or concurrency %d", r.Lease, r.Poll, r.Batch, r.Concurrency)
	case r.lease() < 3*time.Millisecond:
		return fmt.Errorf("runner: lease %s is too short to renew", r.Lease)
	}
	for action, t := range r.Targets {
		if err := t.validate(); err != nil {
			return fmt.Errorf("runner: target of action %q: %w", action, err)
		}
	}
	return nil
}

func (t Target) validate() error {
	if err := checkURL(t.URL); err != nil {
		return fmt.Errorf("url: %w", err)
	}
	if t.LookupURL != "" {
		if err := checkURL(t.LookupURL); err != nil {
			return fmt.Errorf("lookup url: %w", err)
		}
	}
	if t.Timeout < 0 {
		return fmt.Errorf("timeout %s: must not be negative", t.Timeout)
	}
	return t.policy().Validate()
}

func checkURL(u string) error {
	p, err := url.Parse(u)
	if err != nil {
		return err
	} else if (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
		return fmt.Errorf("%q is not an absolute http or https URL", u)
	}
	return nil
}

// policy is t's Policy with defaults filled in and the target's own facts.
func (t Target) policy() Policy {
	p := t.Policy
	if p.MaxAttempts == 0 {
		p.MaxAttempts = DefaultPolicy.MaxAttempts
	}
	if p.Backoff == (Backoff{}) {
		p.Backoff = DefaultPolicy.Backoff
	}
	p.Idempotent = t.Idempotent
	p.HasLookup = t.LookupURL != ""
	return p
}

func (r *Runner) httpClient() *http.Client {
	r.clientOnce.Do(func() {
		// Idle connections are kept for every call that may be in flight: with the default
		// of two per host, a runner calling one target from more slots than that would close
		// a connection after most calls and open a new one for the next.
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = max(t.MaxIdleConnsPerHost, r.concurrency())
		c := &http.Client{Transport: t}
		if r.Client != nil {
			copied := *r.Client
			c = &copied
		}
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		r.client = c
	})
	return r.client
}

func (r *Runner) lease() time.Duration { return orDefault(r.Lease, DefaultLease) }

// margin is how long before the end of a lease an attempt's call is cut short. It covers the
// clocks of replicas disagreeing and the moment the call takes to stop.
func (r *Runner) margin() time.Duration { return r.lease() / 10 }

func (r *Runner) concurrency() int {
	if r.Concurrency == 0 {
		return DefaultConcurrency
	}
	return r.Concurrency
}

// minAhead is the fewest claims Run holds ahead of its slots. With a slot or two, claiming
// only as many ahead as there are slots would make every call wait for a claim's commit
// again as soon as the calls are quicker than the claims; with a few ahead, each claim takes
// every execution that ended during the last one.
const minAhead = 4

// ahead is how many claims Run holds waiting for a slot, at most: a batch, no larger than
// Concurrency, and no fewer than minAhead.
func (r *Runner) ahead() int {
	return max(min(r.batch(), r.concurrency()), minAhead)
}

// holds is the most claims Run holds at once: one per slot, and those claimed ahead.
func (r *Runner) holds() int {
	return r.concurrency() + r.ahead()
}

func (r *Runner) batch() int {
	if r.Batch == 0 {
		return r.concurrency()
	}
	return r.Batch
}

func (r *Runner) now() time.Time {
	if r.Now == nil {
		return time.Now()
	}
	return r.Now()
}

func (r *Runner) logger() *slog.Logger {
	if r.Logger == nil {
		return slog.Default()
	}
	return r.Logger
}

// round shortens a jittered delay for a reason sentence.
func round(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

// takeReady takes every value ready in ch without waiting, and returns how many it took.
func takeReady(ch <-chan struct{}) int {
	for n := 0; ; n++ {
		select {
		case <-ch:
		default:
			return n
		}
	}
}
