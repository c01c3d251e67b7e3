package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/fakeclock"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/sqlite"
	"github.com/approvald/approval/worker"
)

var discard = slog.New(slog.DiscardHandler)

const (
	lease  = 30 * time.Second
	retain = time.Hour
)

func TestSweeper_ExpiresDueApprovals(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		clk := newClock()
		s := testdb.Open(t, kind, clk.Now)

		// Seven due approvals with a batch of two: one pass must loop until all are gone.
		var due []*approval.Approval
		for i := range 7 {
			due = append(due, mustCreateApproval(t, s, clk, fmt.Sprintf("due-%d", i), time.Minute))
		}
		later := mustCreateApproval(t, s, clk, "later", time.Hour)

		clk.Advance(time.Minute) // expires_at <= now is due
		sw := &worker.Sweeper{Rules: &approval.Service{Store: s}, Logger: discard, Batch: 2}
		if err := sw.Sweep(ctx); err != nil {
			t.Fatalf("sweep: %v", err)
		}

		for _, a := range due {
			got := mustApproval(t, s, a.ID)
			if got.Status != approval.StatusExpired {
				t.Errorf("approval %s: got status %s, want %s", a.OperationKey, got.Status, approval.StatusExpired)
			}
			if n := countEvents(t, s, a.ID, approval.EventExpired); n != 1 {
				t.Errorf("approval %s: got %d expired events, want 1", a.OperationKey, n)
			}
		}
		if got := mustApproval(t, s, later.ID); got.Status != approval.StatusPending {
			t.Errorf("approval not yet due: got status %s, want %s", got.Status, approval.StatusPending)
		}
		if n := countEvents(t, s, later.ID, approval.EventExpired); n != 0 {
			t.Errorf("approval not yet due: got %d expired events, want 0", n)
		}

		// A second pass finds nothing more to do.
		if err := sw.Sweep(ctx); err != nil {
			t.Fatalf("second sweep: %v", err)
		}
		for _, a := range due {
			if n := countEvents(t, s, a.ID, approval.EventExpired); n != 1 {
				t.Errorf("approval %s after second sweep: got %d expired events, want 1", a.OperationKey, n)
			}
		}
	})
}

// Every replica runs a sweeper, so many of them race for the same approvals: each must still
// be expired exactly once, with exactly one event.
func TestSweeper_ConcurrentSweepsExpireOnce(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		clk := newClock()
		s := testdb.Open(t, kind, clk.Now)

		var due []*approval.Approval
		for i := range 20 {
			due = append(due, mustCreateApproval(t, s, clk, fmt.Sprintf("race-%d", i), time.Minute))
		}
		clk.Advance(time.Hour)

		const sweepers = 8
		start := make(chan struct{})
		errs := make(chan error, sweepers)
		var wg sync.WaitGroup
		for range sweepers {
			wg.Go(func() {
				<-start
				sw := &worker.Sweeper{Rules: &approval.Service{Store: s}, Logger: discard, Batch: 3}
				errs <- sw.Sweep(ctx)
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("sweep: %v", err)
			}
		}

		for _, a := range due {
			if got := mustApproval(t, s, a.ID); got.Status != approval.StatusExpired {
				t.Errorf("approval %s: got status %s, want %s", a.OperationKey, got.Status, approval.StatusExpired)
			}
			if n := countEvents(t, s, a.ID, approval.EventExpired); n != 1 {
				t.Errorf("approval %s: got %d expired events, want 1", a.OperationKey, n)
			}
		}
	})
}

func TestSweeper_Run(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		clk := newClock()
		s := testdb.Open(t, kind, clk.Now)
		a := mustCreateApproval(t, s, clk, "run", time.Minute)
		clk.Advance(time.Minute)

		logs := newRecorder()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		sw := &worker.Sweeper{Rules: &approval.Service{Store: s}, Logger: slog.New(logs), Interval: time.Hour}
		done := make(chan error, 1)
		go func() { done <- sw.Run(ctx) }()

		// Run sweeps at once, without waiting for the first tick.
		logs.wait(t, "swept")
		if got := mustApproval(t, s, a.ID); got.Status != approval.StatusExpired {
			t.Errorf("got status %s, want %s", got.Status, approval.StatusExpired)
		}
		cancel()
		waitRun(t, done)
	})
}

// A failing pass is logged and the sweeper keeps going: a database that is down for a while
// must not stop expiry for good.
func TestSweeper_RunSurvivesErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, testdb.DSN(t, testdb.SQLite))
	if err != nil {
		t.Fatalf("open sqlite: %v", err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}

	logs := newRecorder()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sw := &worker.Sweeper{Rules: &approval.Service{Store: s}, Logger: slog.New(logs), Interval: time.Millisecond}
	done := make(chan error, 1)
	go func() { done <- sw.Run(ctx) }()
	logs.wait(t, "sweep failed")
	logs.wait(t, "sweep failed")
	cancel()
	waitRun(t, done)
}

func TestSweeper_RunRejectsBadConfig(t *testing.T) {
	t.Parallel()
	s := testdb.Open(t, testdb.SQLite, nil)
	r := &approval.Service{Store: s}
	for _, sw := range []*worker.Sweeper{
		{},
		{Rules: r, Interval: -time.Second},
		{Rules: r, Batch: -1},
		{Rules: r, InboxIDs: -time.Second},
	} {
		if err := sw.Run(context.Background()); err == nil {
			t.Errorf("run %+v: got nil error, want one", sw)
		}
	}
}

// waitRun waits for Run to return after its context was cancelled. The deadline only bounds
// a failing test; a passing one returns as soon as Run does.
func waitRun(tb testing.TB, done <-chan error) {
	tb.Helper()
	select {
	case err := <-done:
		if err != nil {
			tb.Fatalf("run: got %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		tb.Fatal("run did not return after its context was cancelled")
	}
}

// recorder is a slog.Handler that hands each record's message to the test.
type recorder struct{ msgs chan string }

func newRecorder() *recorder { return &recorder{msgs: make(chan string, 64)} }

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *recorder) WithGroup(string) slog.Handler            { return r }

func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	select {
	case r.msgs <- rec.Message:
	default: // the test has seen what it waits for; later records do not matter
	}
	return nil
}

// wait returns when a record with message msg has been logged.
func (r *recorder) wait(tb testing.TB, msg string) {
	tb.Helper()
	deadline := time.After(10 * time.Second)
	var seen []string
	for {
		select {
		case got := <-r.msgs:
			if got == msg {
				return
			}
			seen = append(seen, got)
		case <-deadline:
			tb.Fatalf("no %q record logged; saw %q", msg, seen)
		}
	}
}

// newClock returns a fake clock at a fixed start, for the stores and the workers.
func newClock() *fakeclock.Clock {
	return fakeclock.New(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
}

const requester = "ci-bot"

func newApproval(clk *fakeclock.Clock, key string, expiresIn time.Duration) *approval.Approval {
	now := clk.Now()
	return &approval.Approval{
		ID:                approval.NewID("apr"),
		OperationKey:      key,
		Action:            "deploy",
		Title:             "Deploy " + key,
		Context:           json.RawMessage(`{}`),
		Requester:         requester,
		Approvers:         []string{"alice", "bob"},
		RequiredApprovals: 1,
		Status:            approval.StatusPending,
		ExpiresAt:         now.Add(expiresIn),
		CreatedAt:         now,
		Version:           1,
		Fingerprint:       "fp-" + key,
	}
}

// mustCreateApproval creates a pending approval the way the API does.
func mustCreateApproval(tb testing.TB, s approval.Store, clk *fakeclock.Clock, key string, expiresIn time.Duration) *approval.Approval {
	tb.Helper()
	a := newApproval(clk, key, expiresIn)
	if h, err := s.InsertApproval(context.Background(), a, approval.HTTPCause("req-"+key), nil); err != nil || h != nil {
		tb.Fatalf("create approval %s: got holder %+v, error %v, want neither", key, h, err)
	}
	return a
}

func mustApproval(tb testing.TB, s approval.Store, id string) *approval.Approval {
	tb.Helper()
	a, err := s.Approval(context.Background(), id)
	if err != nil {
		tb.Fatalf("approval %s: %v", id, err)
	}
	return a
}

func countEvents(tb testing.TB, s approval.Store, id, typ string) int {
	tb.Helper()
	events, err := s.Events(context.Background(), id)
	if err != nil {
		tb.Fatalf("events of %s: %v", id, err)
	}
	n := 0
	for _, e := range events {
		if e.Type == typ {
			n++
		}
	}
	return n
}

func TestSweeper_PurgesInbox(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		clk := newClock()
		s := testdb.Open(t, kind, clk.Now)
		const keepIDs, keepBodies = 720 * time.Hour, 24 * time.Hour

		record := func(eventID string) *approval.InboxEvent {
			t.Helper()
			e := &approval.InboxEvent{ID: approval.NewID("evt"), Source: "chat", EventID: eventID, Type: "chat.unknown",
				Headers: map[string]string{"webhook-id": eventID}, Body: []byte(`{"type": "chat.unknown"}`), ReceivedAt: clk.Now()}
			if dup, err := s.RecordInbox(ctx, e); err != nil || dup {
				t.Fatalf("record %s: got duplicate %t, %v; want stored", eventID, dup, err)
			}
			return e
		}
		// Five finished events, with a batch of two, and one still pending.
		var finished []*approval.InboxEvent
		for i := range 5 {
			finished = append(finished, record(fmt.Sprintf("msg_%d", i)))
		}
		claimed, err := (&approval.Service{Store: s}).ClaimInbox(ctx, lease, 10)
		if err != nil || len(claimed) != 5 {
			t.Fatalf("claim: got %d events, %v; want 5", len(claimed), err)
		}
		for _, e := range claimed {
			if _, err := (&approval.Service{Store: s}).ApplyInbox(ctx, e, approval.InboxAction{Kind: approval.ActionIgnore, Reason: "unknown type"}); err != nil {
				t.Fatalf("apply %s: %v", e.EventID, err)
			}
		}
		pending := record("msg_pending")

		sw := &worker.Sweeper{Rules: &approval.Service{Store: s}, Logger: discard, Batch: 2, InboxIDs: keepIDs, InboxBodies: keepBodies}
		clk.Advance(keepBodies + time.Second)
		if err := sw.Sweep(ctx); err != nil {
			t.Fatalf("sweep: %v", err)
		}
		for _, e := range finished {
			got, err := s.InboxEvent(ctx, e.ID)
			if err != nil {
				t.Fatalf("event %s after the body retention: %v", e.EventID, err)
			}
			if got.Body != nil {
				t.Errorf("event %s after the body retention: got body %q, want none", e.EventID, got.Body)
			}
		}
		// The id outlives the body: a redelivery is still a duplicate.
		again := &approval.InboxEvent{ID: approval.NewID("evt"), Source: "chat", EventID: "msg_0", Type: "chat.unknown", ReceivedAt: clk.Now()}
		if dup, err := s.RecordInbox(ctx, again); err != nil || !dup {
			t.Errorf("redelivery after the body retention: got duplicate %t, %v; want duplicate", dup, err)
		}

		clk.Advance(keepIDs)
		if err := sw.Sweep(ctx); err != nil {
			t.Fatalf("sweep: %v", err)
		}
		for _, e := range finished {
			if _, err := s.InboxEvent(ctx, e.ID); approval.ErrorCode(err) != approval.ENOTFOUND {
				t.Errorf("event %s after the id retention: got %v, want %s", e.EventID, err, approval.ENOTFOUND)
			}
		}
		got, err := s.InboxEvent(ctx, pending.ID)
		if err != nil || got.Status != approval.InboxPending || string(got.Body) != string(pending.Body) {
			t.Errorf("pending event: got %+v, %v; want it kept with its body", got, err)
		}
	})
}

// TestSweeper_Reminds: a sweep queues the reminders that are due, once per person and round,
// whatever how many sweeps follow.
func TestSweeper_Reminds(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := t.Context()
		clk := newClock()
		s := testdb.Open(t, kind, clk.Now)
		a := newApproval(clk, "remind", 3*time.Hour)
		a.Resolved = &approval.Resolved{Policy: "p", Version: "v", RemindEvery: time.Hour,
			Stages: []approval.Stage{{Rules: []approval.Rule{{People: []string{"alice", "bob"}, Approvals: 1}}}}}
		if h, err := s.InsertApproval(ctx, a, approval.HTTPCause("req-remind"), nil); err != nil || h != nil {
			t.Fatalf("create approval: got holder %+v, error %v, want neither", h, err)
		}
		svc := &approval.Service{Store: s, Routing: approval.Routing{Channels: map[string][]string{
			"alice": {approval.ChannelEmail}, "bob": {approval.ChannelChat}}}}
		sw := &worker.Sweeper{Rules: svc, Logger: discard}
		reminders := func() []string {
			t.Helper()
			msgs, _, err := s.OutboxMessages(ctx, approval.OutboxFilter{Kind: approval.OutboxNotification})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range msgs {
				if m.Event == approval.EventReminder {
					got = append(got, m.Recipient+"/"+m.Channel)
				}
			}
			slices.Sort(got)
			return got
		}
		clk.Advance(time.Hour)
		for range 3 {
			if err := sw.Sweep(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if got, want := reminders(), []string{"alice/email", "bob/chat"}; !slices.Equal(got, want) {
			t.Fatalf("reminders after three sweeps in round 1: got %v, want %v", got, want)
		}
	})
}
