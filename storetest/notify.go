package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/approvald/approval"
)

// A signal is only a hint and may be lost: PostgreSQL's listener, for one, may still be
// connecting when Subscribe returns. So a case waiting for a signal makes a fresh change every
// signalPatience until one is signalled, and fails only when none is within signalDeadline.
// Neither bounds a correct store's speed; they only end a broken store's case.
const (
	signalPatience = 250 * time.Millisecond
	signalDeadline = 15 * time.Second
)

// exerciseNotifier covers Notifier: a subscriber is woken after changes on its topic, stops
// being woken when it unsubscribes, and Close ends it all. It never asserts that a signal does
// not arrive, since signals may be spurious.
func exerciseNotifier(t *testing.T, s suite) {
	s.run(t, "Inbox", func(t *testing.T, f *fixture) {
		ch, stop := f.store.Subscribe(approval.TopicInbox)
		defer stop()
		wantSignal(t, ch, approval.TopicInbox, recordChange(t, f))
	})

	s.run(t, "Executions", func(t *testing.T, f *fixture) {
		ch, stop := f.store.Subscribe(approval.TopicExecutions)
		defer stop()
		wantSignal(t, ch, approval.TopicExecutions, func(int) { mustApprovedExecution(t, f) })
	})

	s.run(t, "Unsubscribe", func(t *testing.T, f *fixture) {
		gone, stopGone := f.store.Subscribe(approval.TopicInbox)
		kept, stopKept := f.store.Subscribe(approval.TopicInbox)
		defer stopKept()
		stopGone()
		drain(gone)
		// Once the remaining subscriber has been told of a change, the one that left must not
		// have been, and its channel stays open: only Close closes channels.
		wantSignal(t, kept, approval.TopicInbox, recordChange(t, f))
		select {
		case _, ok := <-gone:
			if ok {
				t.Fatalf("unsubscribed channel: got a signal after unsubscribing, want none")
			}
			t.Fatalf("unsubscribed channel: closed, want it left open")
		default:
		}
	})

	// A change of one approval wakes the subscribers of its own topic (TopicApproval) and of
	// TopicApprovals, and not those of another approval: a thousand long-polls must not all
	// re-read on every change. Signals may be spurious: a PostgreSQL listener that
	// (re)connects wakes every subscriber, and may do so at any moment. So a round that sees
	// the other approval's subscriber woken is tried again with a fresh change; a store that
	// signals a whole topic for a key's change wakes it in every round.
	s.run(t, "ApprovalKeys", func(t *testing.T, f *fixture) {
		const rounds = 3
		a := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		onA, stopA := f.store.Subscribe(approval.TopicApproval(a.ID))
		defer stopA()
		onAll, stopAll := f.store.Subscribe(approval.TopicApprovals)
		defer stopAll()
		others := make([]string, 2*rounds) // changed in turn, one per round
		onOther := make([]<-chan struct{}, len(others))
		for i := range others {
			others[i] = MustCreate(t, f.store, PendingApproval(t, f.clock.Now())).ID
			ch, stop := f.store.Subscribe(approval.TopicApproval(others[i]))
			defer stop()
			onOther[i] = ch
		}
		// Once the whole topic's subscriber hears a change, the listener is up and any signal
		// of its connecting has been sent to every subscriber: take it from the others too.
		wantSignal(t, onAll, approval.TopicApprovals, func(int) {
			c := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
			mustCancel(t, f, c.ID)
		})

		// Another approval's change, a cancel or a vote, does not wake A's subscriber.
		next := 0
		quietFor := func(what string, change func(id string)) {
			t.Helper()
			for round := 1; ; round++ {
				id, on := others[next], onOther[next]
				next++
				drain(onA)
				drain(on)
				change(id)
				wantSignalled(t, on, "the other approval's subscriber after its "+what)
				wantSignalled(t, onAll, "the whole topic's subscriber after the other's "+what)
				select {
				case <-onA:
					if round == rounds {
						t.Fatalf("approval A's subscriber: woken by another approval's %s in %d rounds out of %d, want not", what, rounds, rounds)
					}
					continue
				default:
				}
				return
			}
		}
		quietFor("cancel", func(id string) { mustCancel(t, f, id) })
		quietFor("vote", func(id string) { mustDecide(t, f.store, id, "alice", approval.VerdictApprove) })

		// A's own change wakes it.
		drain(onA)
		mustDecide(t, f.store, a.ID, "alice", approval.VerdictApprove)
		wantSignalled(t, onA, "approval A's subscriber after A's change")
		wantSignalled(t, onAll, "the whole topic's subscriber after A's change")
	})

	// Close must end the listener the store started for its subscribers (or any goroutine a
	// subscription owns) and return, even while subscriptions are open, and close every
	// subscription's channel; ending a subscription after Close must not block either, and a
	// subscription made after Close gets a closed channel. The test's cleanup closes the
	// store again, which, like closing a *sql.DB twice, must be harmless.
	s.run(t, "CloseWithSubscribers", func(t *testing.T, f *fixture) {
		inbox, stopInbox := f.store.Subscribe(approval.TopicInbox)
		executions, stopExecutions := f.store.Subscribe(approval.TopicExecutions)
		wantSignal(t, inbox, approval.TopicInbox, recordChange(t, f)) // the listener is up
		closed := make(chan error, 1)
		go func() {
			err := f.store.Close()
			stopInbox()
			stopExecutions()
			closed <- err
		}()
		select {
		case err := <-closed:
			if err != nil {
				t.Fatalf("close with subscribers: %v", err)
			}
		case <-time.After(signalDeadline):
			t.Fatalf("close with subscribers: still blocked after %v", signalDeadline)
		}
		late, stopLate := f.store.Subscribe(approval.TopicApprovals)
		defer stopLate()
		for name, ch := range map[string]<-chan struct{}{"inbox": inbox, "executions": executions, "after close": late} {
			wantClosed(t, name, ch)
		}
	})
}

// wantClosed checks, without waiting, that a subscription's channel is closed once it holds
// no signal (it may still hold the one it was sent last).
func wantClosed(tb testing.TB, name string, ch <-chan struct{}) {
	tb.Helper()
	for range 2 {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		default:
			tb.Fatalf("subscription %s: channel open after Close, want it closed", name)
		}
	}
	tb.Fatalf("subscription %s: signalled after Close, want the channel closed", name)
}

// recordChange returns a change for wantSignal: storing a new inbox event.
func recordChange(tb testing.TB, f *fixture) func(i int) {
	return func(i int) {
		mustRecordNew(tb, f.store, newInboxEvent(f.clock.Now(), "chat", fmt.Sprintf("evt_signal_%d", i), "ping", `{}`))
	}
}

// wantSignal makes change(0), change(1), ... until ch is signalled.
func wantSignal(tb testing.TB, ch <-chan struct{}, topic string, change func(i int)) {
	tb.Helper()
	deadline := time.NewTimer(signalDeadline)
	defer deadline.Stop()
	for i := 0; ; i++ {
		change(i)
		patience := time.NewTimer(signalPatience)
		select {
		case _, ok := <-ch:
			patience.Stop()
			if !ok {
				tb.Fatalf("subscription to %s: channel closed, want a signal", topic)
			}
			return
		case <-deadline.C:
			tb.Fatalf("subscription to %s: no signal within %v over %d changes", topic, signalDeadline, i+1)
		case <-patience.C:
		}
	}
}

// drain empties a subscription channel without waiting.
func drain(ch <-chan struct{}) {
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		default:
			return
		}
	}
}

// wantSignalled waits for one signal that must come: the case has already seen the store's
// listener deliver, so it is not lost.
func wantSignalled(tb testing.TB, ch <-chan struct{}, what string) {
	tb.Helper()
	select {
	case _, ok := <-ch:
		if !ok {
			tb.Fatalf("%s: channel closed, want a signal", what)
		}
	case <-time.After(signalDeadline):
		tb.Fatalf("%s: no signal within %v", what, signalDeadline)
	}
}

func mustCancel(tb testing.TB, f *fixture, id string) {
	tb.Helper()
	if _, err := f.service().Cancel(tb.Context(), asAdmin("ci-bot"), id, approval.HTTPCause("cancel-"+id)); err != nil {
		tb.Fatalf("cancel %s: %v", id, err)
	}
}
