package storetest

import (
	"testing"
	"time"

	"github.com/approvald/approval"
)

// exerciseAudit covers the audit trail (invariant 7: every transition explains itself), the
// status counts behind /metrics, and time precision.
func exerciseAudit(t *testing.T, s suite) {
	s.run(t, "ApprovedTrail", func(t *testing.T, f *fixture) {
		a := PendingApproval(t, f.clock.Now())
		a.Approvers = []string{"alice", "bob", "carol"}
		a.RequiredApprovals = 2
		MustCreate(t, f.store, a)
		created := f.clock.Now()

		f.clock.Advance(time.Minute)
		aliceVoted := f.clock.Now()
		mustDecide(t, f.store, a.ID, "alice", approval.VerdictApprove)

		// Bob decides from a chat button: the cause is the inbox event, not an HTTP request.
		f.clock.Advance(time.Minute)
		inbox := approval.Cause{Kind: approval.CauseInbox, Source: "chat", EventID: "evt_42"}
		if _, err := f.service().Decide(t.Context(), asAdmin("bob"), approval.DecideRequest{
			ApprovalID: a.ID, Approver: "bob", Verdict: approval.VerdictApprove, Comment: "ship it", Cause: inbox,
		}); err != nil {
			t.Fatalf("bob approves: %v", err)
		}

		evs := wantEventTypes(t, f.store, a.ID, approval.EventCreated, approval.EventVoted, approval.EventVoted, approval.EventApproved)
		wantEvent(t, evs[0], "ci-bot", createCause(a), created)
		wantEvent(t, evs[1], "alice", voteCause("alice"), aliceVoted)
		wantEvent(t, evs[2], "bob", inbox, f.clock.Now())
		// The approval is the consequence of bob's vote: same actor, same cause.
		wantEvent(t, evs[3], "bob", inbox, f.clock.Now())
	})

	s.run(t, "RejectedTrail", func(t *testing.T, f *fixture) {
		a := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		f.clock.Advance(time.Minute)
		mustDecide(t, f.store, a.ID, "alice", approval.VerdictReject)
		// A repeat, a conflicting vote and a cancel after the outcome add nothing.
		mustDecide(t, f.store, a.ID, "alice", approval.VerdictReject)
		_, err := f.service().Decide(t.Context(), asAdmin("alice"), approval.DecideRequest{ApprovalID: a.ID, Approver: "alice", Verdict: approval.VerdictApprove, Cause: voteCause("alice")})
		wantCode(t, err, approval.ECONFLICT)
		_, err = f.service().Cancel(t.Context(), asAdmin("ci-bot"), a.ID, approval.HTTPCause("cancel"))
		wantCode(t, err, approval.ECONFLICT)

		evs := wantEventTypes(t, f.store, a.ID, approval.EventCreated, approval.EventVoted, approval.EventRejected)
		wantEvent(t, evs[1], "alice", voteCause("alice"), f.clock.Now())
		wantEvent(t, evs[2], "alice", voteCause("alice"), f.clock.Now())
	})

	s.run(t, "CancelledTrail", func(t *testing.T, f *fixture) {
		a := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		f.clock.Advance(time.Minute)
		cause := approval.Cause{Kind: approval.CauseOperator, Operator: "root", Note: "superseded by 1043"}
		if _, err := f.service().Cancel(t.Context(), asAdmin("root"), a.ID, cause); err != nil {
			t.Fatalf("cancel: %v", err)
		}
		evs := wantEventTypes(t, f.store, a.ID, approval.EventCreated, approval.EventCancelled)
		wantEvent(t, evs[1], "root", cause, f.clock.Now())
	})

	s.run(t, "ExpiredTrail", func(t *testing.T, f *fixture) {
		a := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		f.clock.Advance(a.ExpiresAt.Sub(f.clock.Now()) + time.Minute)
		if n := mustExpire(t, f.store, 10); n != 1 {
			t.Fatalf("expire due: got %d, want 1", n)
		}
		evs := wantEventTypes(t, f.store, a.ID, approval.EventCreated, approval.EventExpired)
		ev := evs[1]
		if ev.Actor != "system" || ev.Cause.Kind != approval.CauseSweeper {
			t.Fatalf("expired event: got actor %q cause %+v, want actor system, cause kind sweeper", ev.Actor, ev.Cause)
		}
		wantTime(t, "expired event", ev.At, f.clock.Now())
	})

	s.run(t, "ApprovalCounts", func(t *testing.T, f *fixture) {
		all := []approval.Status{approval.StatusPending, approval.StatusApproved, approval.StatusRejected, approval.StatusExpired, approval.StatusCancelled}
		wantCounts := func(want map[approval.Status]int) {
			t.Helper()
			got, err := f.store.ApprovalCounts(t.Context())
			if err != nil {
				t.Fatalf("approval counts: %v", err)
			}
			for _, st := range all {
				if got[st] != want[st] {
					t.Fatalf("approval counts: got %v, want %v", got, want)
				}
			}
		}
		wantCounts(nil)

		for range 2 {
			MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		}
		approved := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		mustDecide(t, f.store, approved.ID, "alice", approval.VerdictApprove)
		rejected := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		mustDecide(t, f.store, rejected.ID, "bob", approval.VerdictReject)
		cancelled := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		if _, err := f.service().Cancel(t.Context(), asAdmin("ci-bot"), cancelled.ID, approval.HTTPCause("cancel")); err != nil {
			t.Fatalf("cancel: %v", err)
		}
		soon := PendingApproval(t, f.clock.Now())
		soon.ExpiresAt = soon.CreatedAt.Add(time.Minute)
		MustCreate(t, f.store, soon)
		f.clock.Advance(time.Minute)
		mustExpire(t, f.store, 10)

		wantCounts(map[approval.Status]int{
			approval.StatusPending:   2,
			approval.StatusApproved:  1,
			approval.StatusRejected:  1,
			approval.StatusExpired:   1,
			approval.StatusCancelled: 1,
		})
		wantBacklog(t, f.store)
	})

	// The stores keep microseconds and truncate the rest; a time read back is compared with
	// Equal, never ==, because locations may differ. The clock is put 999ns past a microsecond
	// so that rounding instead of truncating shows.
	s.run(t, "MicrosecondPrecision", func(t *testing.T, f *fixture) {
		f.clock.Advance(999 * time.Nanosecond)
		now := f.clock.Now()
		a := PendingApproval(t, now)
		a.CreatedAt, a.ExpiresAt = now, now.Add(24*time.Hour)
		got := MustCreate(t, f.store, a)
		wantTime(t, "created_at", got.CreatedAt, now)
		wantTime(t, "expires_at", got.ExpiresAt, now.Add(24*time.Hour))
		if _, offset := got.CreatedAt.Zone(); offset != 0 {
			t.Fatalf("created_at: got %v, want UTC", got.CreatedAt)
		}

		f.clock.Advance(time.Minute)
		got = mustDecide(t, f.store, a.ID, "alice", approval.VerdictApprove)
		if got.DecidedAt == nil || len(got.Decisions) != 1 {
			t.Fatalf("after approving: got decided_at %v and decisions %+v, want both set", got.DecidedAt, got.Decisions)
		}
		wantTime(t, "decided_at", *got.DecidedAt, f.clock.Now())
		wantTime(t, "decision at", got.Decisions[0].At, f.clock.Now())
		evs := mustEvents(t, f.store, a.ID)
		wantTime(t, "created event", evs[0].At, now)
		wantTime(t, "approved event", evs[len(evs)-1].At, f.clock.Now())
	})
}

// wantEvent checks who made a transition, why, and when.
func wantEvent(tb testing.TB, ev approval.Event, actor string, cause approval.Cause, at time.Time) {
	tb.Helper()
	if ev.Actor != actor || ev.Cause != cause {
		tb.Fatalf("event %d (%s): got actor %q cause %+v, want actor %q cause %+v", ev.Seq, ev.Type, ev.Actor, ev.Cause, actor, cause)
	}
	wantTime(tb, "event "+ev.Type, ev.At, at)
}

// wantBacklog checks that Store.Backlog, which /metrics reads at every scrape, counts each
// backlog status as the full counts by status do, holds no other status (the collector would
// report its count for that status), and counts the stuck executions as ExecutionCounts does.
func wantBacklog(t *testing.T, st approval.Store) {
	t.Helper()
	ctx := t.Context()
	b, err := st.Backlog(ctx)
	if err != nil {
		t.Fatalf("backlog: %v", err)
	}
	approvals, err := st.ApprovalCounts(ctx)
	if err != nil {
		t.Fatalf("approval counts: %v", err)
	}
	inbox, err := st.InboxCounts(ctx)
	if err != nil {
		t.Fatalf("inbox counts: %v", err)
	}
	executions, stuck, err := st.ExecutionCounts(ctx)
	if err != nil {
		t.Fatalf("execution counts: %v", err)
	}
	sameCounts(t, "approvals", b.Approvals, approvals, approval.BacklogStatuses)
	sameCounts(t, "inbox events", b.Inbox, inbox, approval.BacklogInboxStatuses)
	sameCounts(t, "executions", b.Executions, executions, approval.BacklogExecutionStatuses)
	if b.Stuck != stuck {
		t.Fatalf("backlog: got %d stuck executions, want %d as ExecutionCounts", b.Stuck, stuck)
	}
}

// sameCounts checks that backlog holds exactly the statuses given, each counted as in all.
func sameCounts[S ~string](t *testing.T, what string, backlog, all map[S]int, statuses []S) {
	t.Helper()
	if len(backlog) != len(statuses) {
		t.Fatalf("backlog of %s: got %v, want the statuses %v only", what, backlog, statuses)
	}
	for _, st := range statuses {
		n, ok := backlog[st]
		if !ok || n != all[st] {
			t.Fatalf("backlog of %s: got %v, want %s as the counts by status %v", what, backlog, st, all)
		}
	}
}
