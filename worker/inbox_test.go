package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/fakeclock"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/internal/wait"
	"github.com/approvald/approval/worker"
)

// sources is the processor's configuration in these tests: chat may decide, the deployer
// may only report outcomes.
var sources = map[string][]string{
	"chat":     {approval.TypeApprovalDecision},
	"deployer": {approval.TypeExecutionResult},
}

// inboxBackoff makes retry times exact: a one-second wait, no jitter.
var inboxBackoff = worker.Backoff{Initial: time.Second, Max: time.Second, Multiplier: 1}

func newProcessor(s approval.Store, clk *fakeclock.Clock) *worker.InboxProcessor {
	return &worker.InboxProcessor{Store: s, Rules: &approval.Service{Store: s}, Logger: discard, Sources: sources, Lease: lease,
		Batch: 10, Backoff: inboxBackoff, MaxAttempts: 3, Now: clk.Now}
}

func TestInbox_DecisionAppliedOnce(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		clk := newClock()
		s := testdb.Open(t, kind, clk.Now)
		a := mustCreateApproval(t, s, clk, "deploy-1", time.Hour)
		e := mustRecordInbox(t, s, clk, "chat", "msg_1", approval.TypeApprovalDecision,
			decisionBody(a.ID, "alice", approval.VerdictApprove))
		p := newProcessor(s, clk)

		mustProcess(t, p, 1)
		// Nothing is left to do, and a redelivery of the same event stores nothing new.
		mustProcess(t, p, 0)
		mustRecordDuplicate(t, s, clk, "chat", "msg_1")
		mustProcess(t, p, 0)

		got := mustApproval(t, s, a.ID)
		if got.Status != approval.StatusApproved {
			t.Errorf("approval: got status %s, want %s", got.Status, approval.StatusApproved)
		}
		if n := countEvents(t, s, a.ID, approval.EventVoted); n != 1 {
			t.Errorf("approval: got %d vote events, want 1", n)
		}
		wantCause := approval.Cause{Kind: approval.CauseInbox, Source: "chat", EventID: "msg_1"}
		for _, ev := range mustEvents(t, s, a.ID) {
			if (ev.Type == approval.EventVoted || ev.Type == approval.EventApproved) && ev.Cause != wantCause {
				t.Errorf("event %s: got cause %+v, want %+v", ev.Type, ev.Cause, wantCause)
			}
		}
		done := mustInboxEvent(t, s, e.ID)
		if done.Status != approval.InboxProcessed || done.Attempts != 1 || done.ApprovalID != a.ID {
			t.Errorf("inbox event: got status %s, attempts %d, approval %q; want %s, 1, %q",
				done.Status, done.Attempts, done.ApprovalID, approval.InboxProcessed, a.ID)
		}
	})
}

// A decision the rules refuse is a processed event that says why, not a failure to retry.
func TestInbox_RefusedDecision(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		clk := newClock()
		s := testdb.Open(t, kind, clk.Now)
		a := mustCreateApproval(t, s, clk, "deploy-1", time.Hour)
		e := mustRecordInbox(t, s, clk, "chat", "msg_1", approval.TypeApprovalDecision,
			decisionBody(a.ID, "mallory", approval.VerdictApprove))

		mustProcess(t, newProcessor(s, clk), 1)

		done := mustInboxEvent(t, s, e.ID)
		if done.Status != approval.InboxProcessed || !strings.HasPrefix(done.Outcome, "refused") {
			t.Errorf("inbox event: got status %s, outcome %q; want %s, refused", done.Status, done.Outcome, approval.InboxProcessed)
		}
		if got := mustApproval(t, s, a.ID); got.Status != approval.StatusPending {
			t.Errorf("approval: got status %s, want %s", got.Status, approval.StatusPending)
		}
	})
}

func TestInbox_Ignored(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		clk := newClock()
		s := testdb.Open(t, kind, clk.Now)
		a := mustCreateApproval(t, s, clk, "deploy-1", time.Hour)
		unknown := mustRecordInbox(t, s, clk, "chat", "msg_1", "invoice.paid", `{"type": "invoice.paid", "data": {}}`)
		// The deployer may report outcomes, not decide.
		notAllowed := mustRecordInbox(t, s, clk, "deployer", "msg_2", approval.TypeApprovalDecision,
			decisionBody(a.ID, "alice", approval.VerdictApprove))

		mustProcess(t, newProcessor(s, clk), 2)

		for _, tt := range []struct {
			e      *approval.InboxEvent
			reason string
		}{
			{unknown, `unknown event type "invoice.paid"`},
			{notAllowed, `source "deployer" may not trigger the approval.decision handler`},
		} {
			got := mustInboxEvent(t, s, tt.e.ID)
			if got.Status != approval.InboxIgnored || !strings.Contains(got.Outcome, tt.reason) {
				t.Errorf("inbox event %s: got status %s, outcome %q; want %s, %q", tt.e.EventID, got.Status, got.Outcome, approval.InboxIgnored, tt.reason)
			}
		}
		if got := mustApproval(t, s, a.ID); got.Status != approval.StatusPending {
			t.Errorf("approval: got status %s, want %s", got.Status, approval.StatusPending)
		}
	})
}

// Reports delivered newest first: the newer outcome stays, the older is recorded as stale
// (invariant 4).
func TestInbox_ExecutionResultsNewestFirst(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		clk := newClock()
		s := testdb.Open(t, kind, clk.Now)
		a := mustApprove(t, s, mustCreateApproval(t, s, clk, "deploy-1", time.Hour))
		newer := mustRecordInbox(t, s, clk, "deployer", "msg_2", approval.TypeExecutionResult,
			resultBody("deploy-1", approval.ExecutionSucceeded, 2, `{"build": 2}`))
		clk.Advance(time.Second) // claimed oldest first: the newer report is applied first
		older := mustRecordInbox(t, s, clk, "deployer", "msg_1", approval.TypeExecutionResult,
			resultBody("deploy-1", approval.ExecutionFailed, 1, `{"build": 1}`))

		mustProcess(t, newProcessor(s, clk), 2)

		if got := mustInboxEvent(t, s, newer.ID); got.Status != approval.InboxProcessed {
			t.Errorf("newer report: got status %s (%s), want %s", got.Status, got.Outcome, approval.InboxProcessed)
		}
		if got := mustInboxEvent(t, s, older.ID); got.Status != approval.InboxStale {
			t.Errorf("older report: got status %s (%s), want %s", got.Status, got.Outcome, approval.InboxStale)
		}
		ex := mustApproval(t, s, a.ID).Execution
		if ex == nil {
			t.Fatal("approval has no execution")
		}
		rec, err := s.Execution(ctx, ex.ID)
		if err != nil {
			t.Fatalf("execution: %v", err)
		}
		if rec.Status != approval.ExecutionSucceeded || rec.AppliedVersion != 2 || !jsonEqual(rec.Result, `{"build": 2}`) {
			t.Errorf("execution: got status %s, version %d, result %s; want succeeded, 2, {\"build\": 2}", rec.Status, rec.AppliedVersion, rec.Result)
		}
		for _, ev := range mustEvents(t, s, a.ID) {
			if ev.Type == approval.EventExecutionReported && ev.Actor != "source:deployer" {
				t.Errorf("report event: got actor %q, want source:deployer", ev.Actor)
			}
		}
	})
}

// A processor killed between its claim and the apply leaves the event to the next one once
// the lease ends, and the event is still applied exactly once.
func TestInbox_KilledProcessorTakenOver(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		clk := newClock()
		s := testdb.Open(t, kind, clk.Now)
		a := mustCreateApproval(t, s, clk, "deploy-1", time.Hour)
		e := mustRecordInbox(t, s, clk, "chat", "msg_1", approval.TypeApprovalDecision,
			decisionBody(a.ID, "alice", approval.VerdictApprove))

		// The dead processor's claim: taken, then dropped without a word.
		if claimed, err := (&approval.Service{Store: s}).ClaimInbox(ctx, lease, 10); err != nil || len(claimed) != 1 {
			t.Fatalf("claim: got %d events, %v; want 1", len(claimed), err)
		}
		p := newProcessor(s, clk)
		mustProcess(t, p, 0) // the lease still holds
		clk.Advance(lease)
		mustProcess(t, p, 1)
		mustProcess(t, p, 0)

		if got := mustApproval(t, s, a.ID); got.Status != approval.StatusApproved {
			t.Errorf("approval: got status %s, want %s", got.Status, approval.StatusApproved)
		}
		if n := countEvents(t, s, a.ID, approval.EventVoted); n != 1 {
			t.Errorf("approval: got %d vote events, want 1", n)
		}
		if got := mustInboxEvent(t, s, e.ID); got.Status != approval.InboxProcessed || got.Attempts != 2 {
			t.Errorf("inbox event: got status %s, attempts %d; want %s, 2", got.Status, got.Attempts, approval.InboxProcessed)
		}
	})
}

// An event whose apply keeps failing is retried with backoff, then parked as failed, and
// never holds up the others.
func TestInbox_PoisonEventFails(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		clk := newClock()
		s := testdb.Open(t, kind, clk.Now)
		first := mustCreateApproval(t, s, clk, "deploy-1", time.Hour)
		second := mustCreateApproval(t, s, clk, "deploy-2", time.Hour)
		poisonTarget := mustCreateApproval(t, s, clk, "deploy-3", time.Hour)
		poison := mustRecordInbox(t, s, clk, "chat", "msg_poison", approval.TypeApprovalDecision,
			decisionBody(poisonTarget.ID, "alice", approval.VerdictApprove))
		good := []*approval.InboxEvent{
			mustRecordInbox(t, s, clk, "chat", "msg_1", approval.TypeApprovalDecision, decisionBody(first.ID, "alice", approval.VerdictApprove)),
			mustRecordInbox(t, s, clk, "chat", "msg_2", approval.TypeApprovalDecision, decisionBody(second.ID, "bob", approval.VerdictReject)),
		}

		p := newProcessor(&failingApply{Store: s, eventID: poison.ID}, clk)
		mustProcess(t, p, 3)
		for _, e := range good {
			if got := mustInboxEvent(t, s, e.ID); got.Status != approval.InboxProcessed {
				t.Errorf("good event %s: got status %s, want %s", e.EventID, got.Status, approval.InboxProcessed)
			}
		}
		for attempt := 1; attempt < p.MaxAttempts; attempt++ {
			got := mustInboxEvent(t, s, poison.ID)
			wantAt := clk.Now().Add(time.Second)
			if got.Status != approval.InboxPending || got.NextAttemptAt == nil || !got.NextAttemptAt.Equal(wantAt) {
				t.Fatalf("poison event after attempt %d: got status %s, next attempt %v; want %s at %v",
					attempt, got.Status, got.NextAttemptAt, approval.InboxPending, wantAt)
			}
			mustProcess(t, p, 0) // not due yet
			clk.Advance(time.Second)
			mustProcess(t, p, 1)
		}

		got := mustInboxEvent(t, s, poison.ID)
		if got.Status != approval.InboxFailed || got.Attempts != p.MaxAttempts || !strings.Contains(got.LastError, "database unavailable") {
			t.Errorf("poison event: got status %s, attempts %d, last error %q; want %s, %d, database unavailable",
				got.Status, got.Attempts, got.LastError, approval.InboxFailed, p.MaxAttempts)
		}
		clk.Advance(time.Hour)
		mustProcess(t, p, 0) // failed is final until an operator retries it
		if got := mustApproval(t, s, poisonTarget.ID); got.Status != approval.StatusPending {
			t.Errorf("poison event's approval: got status %s, want %s", got.Status, approval.StatusPending)
		}
	})
}

// Processors on every replica race for the same events: each is applied exactly once.
func TestInbox_RacingProcessors(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		clk := newClock()
		s := testdb.Open(t, kind, clk.Now)
		const events, processors = 30, 6
		var approvals []*approval.Approval
		for i := range events {
			a := mustCreateApproval(t, s, clk, fmt.Sprintf("deploy-%d", i), time.Hour)
			approvals = append(approvals, a)
			mustRecordInbox(t, s, clk, "chat", fmt.Sprintf("msg_%d", i), approval.TypeApprovalDecision,
				decisionBody(a.ID, "alice", approval.VerdictApprove))
		}

		start := make(chan struct{})
		claimed := make(chan int, processors)
		var wg sync.WaitGroup
		for range processors {
			p := newProcessor(s, clk)
			p.Batch = 2
			wg.Go(func() {
				<-start
				total := 0
				for {
					n, err := p.ProcessOnce(context.Background())
					if err != nil {
						t.Errorf("process: %v", err)
						return
					}
					if n == 0 {
						break
					}
					total += n
				}
				claimed <- total
			})
		}
		close(start)
		wg.Wait()
		close(claimed)
		total := 0
		for n := range claimed {
			total += n
		}
		if total != events {
			t.Errorf("got %d claims in all, want %d", total, events)
		}
		for _, a := range approvals {
			if got := mustApproval(t, s, a.ID); got.Status != approval.StatusApproved {
				t.Errorf("approval %s: got status %s, want %s", a.OperationKey, got.Status, approval.StatusApproved)
			}
			if n := countEvents(t, s, a.ID, approval.EventVoted); n != 1 {
				t.Errorf("approval %s: got %d vote events, want 1", a.OperationKey, n)
			}
		}
	})
}

// Run wakes on the store's signal: with a poll interval of an hour, an event stored after
// Run started is still processed at once.
func TestInboxProcessor_Run(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		clk := newClock()
		s := testdb.Open(t, kind, clk.Now)
		a := mustCreateApproval(t, s, clk, "deploy-1", time.Hour)

		logs := newRecorder()
		rules := newPassRecorder(&approval.Service{Store: s})
		p := newProcessor(s, clk)
		// A pace of an hour too: the processor is idle (its first pass found nothing), so the
		// signal starts a pass at once.
		p.Rules, p.Logger, p.Poll, p.Pace = rules, slog.New(logs), time.Hour, time.Hour
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()

		if first := rules.next(t); first.took != 0 {
			t.Fatalf("first pass: took %d events, want none", first.took)
		}
		mustRecordInbox(t, s, clk, "chat", "msg_1", approval.TypeApprovalDecision, decisionBody(a.ID, "alice", approval.VerdictApprove))
		logs.wait(t, "inbox event handled")
		if got := mustApproval(t, s, a.ID); got.Status != approval.StatusApproved {
			t.Errorf("approval: got status %s, want %s", got.Status, approval.StatusApproved)
		}
		cancel()
		waitRun(t, done)
	})
}

func TestInboxProcessor_RunRejectsBadConfig(t *testing.T) {
	t.Parallel()
	s := testdb.Open(t, testdb.SQLite, nil)
	r := &approval.Service{Store: s}
	for _, p := range []*worker.InboxProcessor{
		{},
		{Store: s},
		{Store: s, Rules: r, Lease: -time.Second},
		{Store: s, Rules: r, Batch: -1},
		{Store: s, Rules: r, Pace: -time.Millisecond},
		{Store: s, Rules: r, MaxAttempts: -1},
		{Store: s, Rules: r, Backoff: worker.Backoff{Initial: time.Second, Max: time.Millisecond, Multiplier: 2}},
	} {
		if err := p.Run(context.Background()); err == nil {
			t.Errorf("run %+v: got nil error, want one", p)
		}
	}
}

// failingApply is the real store, except that applying one event fails as if the database
// had gone away: a failure that cannot be made to happen on demand for one event alone.
type failingApply struct {
	approval.Store
	eventID string
}

func (s *failingApply) Begin(ctx context.Context) (approval.Tx, error) {
	tx, err := s.Store.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &failingTx{Tx: tx, eventID: s.eventID}, nil
}

// failingTx fails marking the one event done, the last statement of applying it (alone or
// in a batch), so the transaction rolls back with all it applied; recording the failed
// attempt, which does not mark it done, still works.
type failingTx struct {
	approval.Tx
	eventID string
}

func (t *failingTx) InboxSetDone(ctx context.Context, id string, status approval.InboxStatus, outcome, approvalID string) (*approval.InboxEvent, error) {
	if id == t.eventID {
		return nil, approval.Errorf(approval.EUNAVAILABLE, "database unavailable")
	}
	return t.Tx.InboxSetDone(ctx, id, status, outcome, approvalID)
}

func (t *failingTx) InboxMarkDoneMany(ctx context.Context, marks []approval.InboxMark) error {
	for _, m := range marks {
		if m.ID == t.eventID {
			return approval.Errorf(approval.EUNAVAILABLE, "database unavailable")
		}
	}
	return t.Tx.InboxMarkDoneMany(ctx, marks)
}

func decisionBody(approvalID, approver string, verdict approval.Verdict) string {
	return fmt.Sprintf(`{"type": %q, "timestamp": "2030-01-02T03:04:05Z", "data": {"approval_id": %q, "approver": %q, "verdict": %q}}`,
		approval.TypeApprovalDecision, approvalID, approver, verdict)
}

func resultBody(key string, status approval.ExecutionStatus, version int, result string) string {
	return fmt.Sprintf(`{"type": %q, "data": {"operation_key": %q, "status": %q, "version": %d, "result": %s}}`,
		approval.TypeExecutionResult, key, status, version, result)
}

func mustRecordInbox(tb testing.TB, s approval.Store, clk *fakeclock.Clock, source, eventID, typ, body string) *approval.InboxEvent {
	tb.Helper()
	e := &approval.InboxEvent{ID: approval.NewID("inb"), Source: source, EventID: eventID, Type: typ,
		Headers: map[string]string{"webhook-id": eventID}, Body: []byte(body), ReceivedAt: clk.Now()}
	if dup, err := s.RecordInbox(context.Background(), e); err != nil || dup {
		tb.Fatalf("record %s: got duplicate %t, %v; want stored", eventID, dup, err)
	}
	return e
}

func mustRecordDuplicate(tb testing.TB, s approval.Store, clk *fakeclock.Clock, source, eventID string) {
	tb.Helper()
	e := &approval.InboxEvent{ID: approval.NewID("inb"), Source: source, EventID: eventID, Type: approval.TypeApprovalDecision,
		Headers: map[string]string{"webhook-id": eventID}, Body: []byte(`{}`), ReceivedAt: clk.Now()}
	if dup, err := s.RecordInbox(context.Background(), e); err != nil || !dup {
		tb.Fatalf("record %s again: got duplicate %t, %v; want duplicate", eventID, dup, err)
	}
}

// mustProcess runs one pass and checks how many events it claimed.
func mustProcess(tb testing.TB, p *worker.InboxProcessor, want int) {
	tb.Helper()
	n, err := p.ProcessOnce(context.Background())
	if err != nil {
		tb.Fatalf("process: %v", err)
	}
	if n != want {
		tb.Fatalf("process: got %d events claimed, want %d", n, want)
	}
}

func mustInboxEvent(tb testing.TB, s approval.Store, id string) *approval.InboxEvent {
	tb.Helper()
	e, err := s.InboxEvent(context.Background(), id)
	if err != nil {
		tb.Fatalf("inbox event %s: %v", id, err)
	}
	return e
}

func mustEvents(tb testing.TB, s approval.Store, approvalID string) []approval.Event {
	tb.Helper()
	events, err := s.Events(context.Background(), approvalID)
	if err != nil {
		tb.Fatalf("events of %s: %v", approvalID, err)
	}
	return events
}

// mustApprove has alice approve a, through the API's path.
func mustApprove(tb testing.TB, s approval.Store, a *approval.Approval) *approval.Approval {
	tb.Helper()
	return mustApproveBy(tb, &approval.Service{Store: s}, a)
}

// mustApproveBy is mustApprove under the given rules.
func mustApproveBy(tb testing.TB, rules *approval.Service, a *approval.Approval) *approval.Approval {
	tb.Helper()
	got, err := rules.Decide(context.Background(), approval.Principal{Subject: "alice", Role: approval.RoleAdmin}, approval.DecideRequest{ApprovalID: a.ID, Approver: "alice",
		Verdict: approval.VerdictApprove, Cause: approval.HTTPCause("req-approve-" + a.OperationKey)})
	if err != nil {
		tb.Fatalf("approve %s: %v", a.OperationKey, err)
	}
	if got.Status != approval.StatusApproved {
		tb.Fatalf("approve %s: got status %s, want %s", a.OperationKey, got.Status, approval.StatusApproved)
	}
	return got
}

// jsonEqual reports whether got is the JSON document want, whatever the spacing.
func jsonEqual(got []byte, want string) bool {
	var g, w any
	if json.Unmarshal(got, &g) != nil || json.Unmarshal([]byte(want), &w) != nil {
		return false
	}
	return reflect.DeepEqual(g, w)
}

// While full batches keep coming back, Run doubles its claim up to MaxBatch; after one that
// was not full it claims twice what that one found, at least Batch. Every event is applied
// once.
func TestInbox_ClaimGrowsWithBacklog(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		clk := newClock()
		s := testdb.Open(t, kind, clk.Now)
		var events []*approval.InboxEvent
		for i := range 40 {
			events = append(events, mustRecordInbox(t, s, clk, "chat", fmt.Sprintf("msg_%d", i), "ping", `{"type": "ping"}`))
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		shorts := 0
		rules := newPassRecorder(&approval.Service{Store: s})
		rules.short = func() {
			if shorts++; shorts == 2 {
				cancel()
			}
		}
		p := newProcessor(s, clk)
		p.Rules, p.Batch, p.MaxBatch, p.Poll = rules, 2, 64, 10*time.Millisecond
		if err := p.Run(ctx); err != nil {
			t.Fatalf("run: %v", err)
		}
		// 2+4+8+16 = 30 in full batches, then 32 asked for and the last 10 found, then twice
		// 10 asked for at the next poll, and none found.
		if want := []int{2, 4, 8, 16, 32, 20}; !slices.Equal(rules.limits, want) {
			t.Errorf("batches taken: got limits %v, want %v", rules.limits, want)
		}
		for _, e := range events {
			if got := mustInboxEvent(t, s, e.ID); got.Status != approval.InboxIgnored || got.Attempts != 1 {
				t.Errorf("event %s: got status %s, attempts %d; want %s, 1", e.EventID, got.Status, got.Attempts, approval.InboxIgnored)
			}
		}
	})
}

// After a pass that found events, Run starts the next no sooner than Pace after it, however
// many signals come meanwhile; the events stored in between wait for that pass.
func TestInbox_PacedAfterEvents(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		clk := newClock()
		s := testdb.Open(t, kind, clk.Now)
		mustRecordInbox(t, s, clk, "chat", "msg_first", "ping", `{"type": "ping"}`)

		const pace = 150 * time.Millisecond
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		rules := newPassRecorder(&approval.Service{Store: s})
		p := newProcessor(s, clk)
		p.Rules, p.Poll, p.Pace = rules, time.Hour, pace
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()

		first := rules.next(t) // took msg_first
		if first.took != 1 {
			t.Fatalf("first pass: took %d events, want 1", first.took)
		}
		// Each stored event signals the processor; the first signal would start a pass at once.
		for i := range 3 {
			mustRecordInbox(t, s, clk, "chat", fmt.Sprintf("msg_%d", i), "ping", `{"type": "ping"}`)
		}
		second := rules.next(t)
		// Run times the pace from just before the recorder's own start time: a little slack.
		if gap := second.start.Sub(first.start); gap < pace-10*time.Millisecond {
			t.Errorf("second pass started %s after the first, want at least the pace %s", gap, pace)
		}
		// Usually the second pass takes all three; a slow machine may have stored some after it.
		for took := second.took; took < 3; {
			took += rules.next(t).took
		}
		cancel()
		waitRun(t, done)
	})
}

// Run ends when ctx does, also while it waits out the pace.
func TestInbox_PaceEndsWithContext(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		clk := newClock()
		s := testdb.Open(t, kind, clk.Now)
		mustRecordInbox(t, s, clk, "chat", "msg_first", "ping", `{"type": "ping"}`)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		rules := newPassRecorder(&approval.Service{Store: s})
		p := newProcessor(s, clk)
		p.Rules, p.Poll, p.Pace = rules, time.Hour, time.Hour
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()
		if first := rules.next(t); first.took != 1 {
			t.Fatalf("first pass: took %d events, want 1", first.took)
		}
		// Its signal wakes the processor into the hour's pace.
		mustRecordInbox(t, s, clk, "chat", "msg_second", "ping", `{"type": "ping"}`)
		cancel()
		waitRun(t, done)
	})
}

// pass is one ClaimApplyInbox call: when it started and how many events it took.
type pass struct {
	start time.Time
	took  int
}

// passRecorder is the real rules, recording each batch taken (ClaimApplyInbox): its limit in
// limits; the pass in passes, the first and then each that took events; and calling short,
// when set, after each that found fewer events than it asked for.
type passRecorder struct {
	worker.InboxRules
	limits []int
	short  func()
	passes chan pass
	first  bool
}

func newPassRecorder(rules worker.InboxRules) *passRecorder {
	return &passRecorder{InboxRules: rules, passes: make(chan pass, 64), first: true}
}

func (r *passRecorder) ClaimApplyInbox(ctx context.Context, limit int, actionFor func(*approval.InboxEvent) approval.InboxAction) ([]*approval.InboxEvent, error) {
	r.limits = append(r.limits, limit)
	start := time.Now()
	evs, err := r.InboxRules.ClaimApplyInbox(ctx, limit, actionFor)
	if err == nil && (len(evs) > 0 || r.first) {
		r.first = false
		r.passes <- pass{start: start, took: len(evs)}
	}
	if err == nil && len(evs) < limit && r.short != nil {
		r.short()
	}
	return evs, err
}

// next waits for the next pass sent.
func (r *passRecorder) next(t *testing.T) pass {
	t.Helper()
	select {
	case p := <-r.passes:
		return p
	case <-time.After(10 * time.Second):
		t.Fatal("no pass took events within 10 s")
		return pass{}
	}
}

// Bursts of racing deliveries are all applied at once by a processor that never polls (Poll
// an hour): every stored event is followed by a signal, although the store may hold back
// and coalesce the signals of a burst's batches (PostgreSQL).
func TestInbox_BurstsAppliedOnSignals(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		clk := newClock()
		s := testdb.Open(t, kind, clk.Now)
		p := newProcessor(s, clk)
		p.Poll = time.Hour
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()

		const bursts, clients = 4, 48
		for b := range bursts {
			events := make([]*approval.InboxEvent, clients)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range clients {
				wg.Go(func() {
					e := &approval.InboxEvent{ID: approval.NewID("inb"), Source: "chat", EventID: fmt.Sprintf("burst_%d_%d", b, i),
						Type: "ping", Headers: map[string]string{}, Body: []byte(`{"type": "ping"}`), ReceivedAt: clk.Now()}
					<-start
					if dup, err := s.RecordInbox(context.Background(), e); err != nil || dup {
						t.Errorf("record %s: got duplicate %t, %v; want stored", e.EventID, dup, err)
					}
					events[i] = e
				})
			}
			close(start)
			wg.Wait()
			for _, e := range events {
				wait.Until(t, fmt.Sprintf("burst %d: event %s to leave pending (a signal to follow its commit)", b, e.EventID),
					func() bool { return mustInboxEvent(t, s, e.ID).Status != approval.InboxPending })
			}
		}
		cancel()
		waitRun(t, done)
	})
}
