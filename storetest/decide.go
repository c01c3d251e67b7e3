package storetest

import (
	"testing"
	"time"

	"github.com/approvald/approval"
)

// exerciseDecide covers Decide, Cancel and ExpireDue one call at a time: invariant 1, one
// terminal decision, and its version and decided_at bookkeeping.
func exerciseDecide(t *testing.T, s suite) {
	s.run(t, "QuorumCountsDistinctApprovers", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		a := PendingApproval(t, f.clock.Now())
		a.Approvers = []string{"alice", "bob", "carol"}
		a.RequiredApprovals = 2
		MustCreate(t, f.store, a)

		f.clock.Advance(time.Minute)
		voted := f.clock.Now()
		got, err := f.service().Decide(ctx, asAdmin("alice"), approval.DecideRequest{
			ApprovalID: a.ID, Approver: "alice", Verdict: approval.VerdictApprove, Comment: "lgtm", Cause: voteCause("alice"),
		})
		if err != nil {
			t.Fatalf("alice approves: %v", err)
		}
		wantState(t, got, approval.StatusPending, 2)
		if got.DecidedAt != nil {
			t.Fatalf("decided_at after one of two approvals: got %v, want nil", got.DecidedAt)
		}

		// A repeat of the same vote changes nothing and does not count twice.
		f.clock.Advance(time.Minute)
		got = mustDecide(t, f.store, a.ID, "alice", approval.VerdictApprove)
		wantState(t, got, approval.StatusPending, 2)
		if n := got.Approvals(); n != 1 {
			t.Fatalf("approvals after a repeated vote: got %d, want 1", n)
		}

		f.clock.Advance(time.Minute)
		got = mustDecide(t, f.store, a.ID, "bob", approval.VerdictApprove)
		wantState(t, got, approval.StatusApproved, 3)
		if got.DecidedAt == nil {
			t.Fatalf("decided_at of an approved approval: got nil, want %v", f.clock.Now())
		}
		wantTime(t, "decided_at", *got.DecidedAt, f.clock.Now())

		// Read back: decisions oldest first, each with its own time and comment.
		got = mustApproval(t, f.store, a.ID)
		wantState(t, got, approval.StatusApproved, 3)
		if len(got.Decisions) != 2 {
			t.Fatalf("decisions: got %+v, want alice's then bob's", got.Decisions)
		}
		first, second := got.Decisions[0], got.Decisions[1]
		if first.Approver != "alice" || first.Verdict != approval.VerdictApprove || first.Comment != "lgtm" {
			t.Fatalf("first decision: got %+v, want alice approving with comment lgtm", first)
		}
		wantTime(t, "alice's decision", first.At, voted)
		if second.Approver != "bob" || second.Verdict != approval.VerdictApprove {
			t.Fatalf("second decision: got %+v, want bob approving", second)
		}
		wantTime(t, "bob's decision", second.At, f.clock.Now())
	})

	s.run(t, "RepeatAfterTheOutcome", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		a := PendingApproval(t, f.clock.Now())
		a.Approvers = []string{"alice", "bob", "carol"}
		MustCreate(t, f.store, a)
		mustDecide(t, f.store, a.ID, "alice", approval.VerdictApprove)

		// The winning voter repeating the vote gets the approval back unchanged ...
		f.clock.Advance(time.Minute)
		wantState(t, mustDecide(t, f.store, a.ID, "alice", approval.VerdictApprove), approval.StatusApproved, 2)
		// ... anyone else voting now is in conflict with the outcome, whatever the verdict.
		for _, v := range []approval.Verdict{approval.VerdictApprove, approval.VerdictReject} {
			_, err := f.service().Decide(ctx, asAdmin("carol"), approval.DecideRequest{ApprovalID: a.ID, Approver: "carol", Verdict: v, Cause: voteCause("carol")})
			wantConflict(t, err, approval.StatusApproved, 2)
		}
		got := mustApproval(t, f.store, a.ID)
		wantState(t, got, approval.StatusApproved, 2)
		if len(got.Decisions) != 1 {
			t.Fatalf("decisions: got %+v, want alice's only", got.Decisions)
		}
		wantEventTypes(t, f.store, a.ID, approval.EventCreated, approval.EventVoted, approval.EventApproved)
	})

	s.run(t, "OppositeVoteConflicts", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		a := PendingApproval(t, f.clock.Now())
		a.RequiredApprovals = 2
		MustCreate(t, f.store, a)
		mustDecide(t, f.store, a.ID, "alice", approval.VerdictApprove)
		_, err := f.service().Decide(ctx, asAdmin("alice"), approval.DecideRequest{ApprovalID: a.ID, Approver: "alice", Verdict: approval.VerdictReject, Cause: voteCause("alice")})
		wantConflict(t, err, approval.StatusPending, 2)
		got := mustApproval(t, f.store, a.ID)
		wantState(t, got, approval.StatusPending, 2)
		if d, ok := got.DecisionBy("alice"); !ok || d.Verdict != approval.VerdictApprove {
			t.Fatalf("alice's decision: got %+v, %v, want her approval kept", d, ok)
		}
	})

	s.run(t, "AnyRejectIsFinal", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		a := PendingApproval(t, f.clock.Now())
		a.Approvers = []string{"alice", "bob", "carol"}
		a.RequiredApprovals = 2
		MustCreate(t, f.store, a)
		mustDecide(t, f.store, a.ID, "alice", approval.VerdictApprove)
		f.clock.Advance(time.Minute)
		got := mustDecide(t, f.store, a.ID, "bob", approval.VerdictReject)
		wantState(t, got, approval.StatusRejected, 3)
		if got.DecidedAt == nil {
			t.Fatalf("decided_at of a rejected approval: got nil, want %v", f.clock.Now())
		}
		wantTime(t, "decided_at", *got.DecidedAt, f.clock.Now())
		_, err := f.service().Decide(ctx, asAdmin("carol"), approval.DecideRequest{ApprovalID: a.ID, Approver: "carol", Verdict: approval.VerdictApprove, Cause: voteCause("carol")})
		wantConflict(t, err, approval.StatusRejected, 3)
	})

	s.run(t, "Forbidden", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		a := PendingApproval(t, f.clock.Now())
		a.Approvers = []string{"ci-bot", "alice"} // the requester is listed too
		MustCreate(t, f.store, a)

		for _, d := range []approval.DecideRequest{
			{ApprovalID: a.ID, Approver: "ci-bot", Verdict: approval.VerdictApprove},  // own request
			{ApprovalID: a.ID, Approver: "mallory", Verdict: approval.VerdictApprove}, // not listed
			{ApprovalID: a.ID, Approver: "mallory", Verdict: approval.VerdictReject},
		} {
			_, err := f.service().Decide(ctx, asAdmin(d.Approver), d)
			if got := approval.ErrorCode(err); got != approval.EFORBIDDEN {
				t.Fatalf("%s votes %s: got code %q (%v), want %q", d.Approver, d.Verdict, got, err, approval.EFORBIDDEN)
			}
		}
		got := mustApproval(t, f.store, a.ID)
		wantState(t, got, approval.StatusPending, 1)
		if len(got.Decisions) != 0 {
			t.Fatalf("decisions after forbidden votes: got %+v, want none", got.Decisions)
		}
		// A listed requester may still reject their own request: only approving it is barred.
		wantState(t, mustDecide(t, f.store, a.ID, "ci-bot", approval.VerdictReject), approval.StatusRejected, 2)
	})

	s.run(t, "ExpiresAtIsTheDeadline", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		a := PendingApproval(t, f.clock.Now())
		MustCreate(t, f.store, a)
		b := PendingApproval(t, f.clock.Now())
		b.ExpiresAt = a.ExpiresAt.Add(time.Microsecond)
		MustCreate(t, f.store, b)

		// Exactly at expires_at an approval is over, even though no sweeper has run: the vote
		// expires it, in its own transaction, and loses. One microsecond earlier it counts.
		f.clock.Advance(a.ExpiresAt.Sub(f.clock.Now()))
		_, err := f.service().Decide(ctx, asAdmin("alice"), approval.DecideRequest{ApprovalID: a.ID, Approver: "alice", Verdict: approval.VerdictApprove, Cause: voteCause("alice")})
		wantConflict(t, err, approval.StatusExpired, 2)
		got := mustApproval(t, f.store, a.ID)
		wantState(t, got, approval.StatusExpired, 2)
		if len(got.Decisions) != 0 {
			t.Fatalf("decisions of an expired approval: got %+v, want none", got.Decisions)
		}
		wantState(t, mustDecide(t, f.store, b.ID, "alice", approval.VerdictApprove), approval.StatusApproved, 2)

		// Expired once: another vote, or the sweeper, finds it terminal and adds nothing.
		_, err = f.service().Decide(ctx, asAdmin("bob"), approval.DecideRequest{ApprovalID: a.ID, Approver: "bob", Verdict: approval.VerdictReject, Cause: voteCause("bob")})
		wantConflict(t, err, approval.StatusExpired, 2)
		if n := mustExpire(t, f.store, 10); n != 0 {
			t.Fatalf("expire due after the vote expired it: got %d, want 0", n)
		}
		wantEventTypes(t, f.store, a.ID, approval.EventCreated, approval.EventExpired)
	})

	s.run(t, "Cancel", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		cause := approval.Cause{Kind: approval.CauseOperator, Operator: "admin", Note: "wrong branch"}
		a := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		f.clock.Advance(time.Minute)
		got, err := f.service().Cancel(ctx, asAdmin("admin"), a.ID, cause)
		if err != nil {
			t.Fatalf("cancel: %v", err)
		}
		wantState(t, got, approval.StatusCancelled, 2)
		if got.DecidedAt == nil {
			t.Fatalf("decided_at of a cancelled approval: got nil, want %v", f.clock.Now())
		}
		wantTime(t, "decided_at", *got.DecidedAt, f.clock.Now())
		wantState(t, mustApproval(t, f.store, a.ID), approval.StatusCancelled, 2)

		_, err = f.service().Cancel(ctx, asAdmin("admin"), a.ID, cause)
		wantConflict(t, err, approval.StatusCancelled, 2)
		_, err = f.service().Decide(ctx, asAdmin("alice"), approval.DecideRequest{ApprovalID: a.ID, Approver: "alice", Verdict: approval.VerdictApprove, Cause: voteCause("alice")})
		wantConflict(t, err, approval.StatusCancelled, 2)

		b := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		mustDecide(t, f.store, b.ID, "alice", approval.VerdictApprove)
		_, err = f.service().Cancel(ctx, asAdmin("ci-bot"), b.ID, approval.HTTPCause("cancel-b"))
		wantConflict(t, err, approval.StatusApproved, 2)

		// Past expires_at a cancel finds the approval expired, as a vote would.
		c := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		f.clock.Advance(c.ExpiresAt.Sub(f.clock.Now()))
		_, err = f.service().Cancel(ctx, asAdmin("ci-bot"), c.ID, approval.HTTPCause("cancel-c"))
		wantConflict(t, err, approval.StatusExpired, 2)
		wantState(t, mustApproval(t, f.store, c.ID), approval.StatusExpired, 2)
		wantEventTypes(t, f.store, c.ID, approval.EventCreated, approval.EventExpired)
	})

	s.run(t, "ExpireDue", func(t *testing.T, f *fixture) {
		created := f.clock.Now()
		var due []*approval.Approval
		for i := range 3 {
			a := PendingApproval(t, created)
			a.ExpiresAt = created.Add(time.Duration(i+1) * time.Hour)
			due = append(due, MustCreate(t, f.store, a))
		}
		later := PendingApproval(t, created)
		later.ExpiresAt = created.Add(5*time.Hour + time.Microsecond)
		MustCreate(t, f.store, later)
		rejected := PendingApproval(t, created)
		rejected.ExpiresAt = created.Add(time.Hour) // due, but no longer pending
		decided := MustCreate(t, f.store, rejected)
		mustDecide(t, f.store, decided.ID, "bob", approval.VerdictReject)

		f.clock.Advance(5 * time.Hour)
		for _, want := range []int{2, 1, 0} {
			if n := mustExpire(t, f.store, 2); n != want {
				t.Fatalf("expire due with limit 2: got %d, want %d", n, want)
			}
		}
		for _, a := range due {
			wantState(t, mustApproval(t, f.store, a.ID), approval.StatusExpired, 2)
		}
		wantState(t, mustApproval(t, f.store, later.ID), approval.StatusPending, 1)
		wantState(t, mustApproval(t, f.store, decided.ID), approval.StatusRejected, 2)
	})

	// An inbox decision may name the approval by its operation key instead of its id. Keys are
	// unique per requester only, so a key two requesters used names no one approval.
	s.run(t, "ByOperationKey", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		a := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		got, err := f.service().Decide(ctx, asAdmin("alice"), approval.DecideRequest{
			OperationKey: a.OperationKey, Approver: "alice", Verdict: approval.VerdictApprove, Cause: voteCause("alice"),
		})
		if err != nil {
			t.Fatalf("alice approves by operation key: %v", err)
		}
		if got.ID != a.ID {
			t.Fatalf("decided by operation key %s: got approval %s, want %s", a.OperationKey, got.ID, a.ID)
		}
		wantState(t, got, approval.StatusApproved, 2)
		wantEventTypes(t, f.store, a.ID, approval.EventCreated, approval.EventVoted, approval.EventApproved)

		_, err = f.service().Decide(ctx, asAdmin("alice"), approval.DecideRequest{
			OperationKey: "no-such-operation", Approver: "alice", Verdict: approval.VerdictApprove, Cause: voteCause("alice"),
		})
		wantCode(t, err, approval.ENOTFOUND)

		// The same key under two requesters: ambiguous, refused, and neither approval touched.
		b := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		other := PendingApproval(t, f.clock.Now())
		other.Requester, other.OperationKey, other.Fingerprint = "deployer", b.OperationKey, "fp-deployer-"+b.OperationKey
		MustCreate(t, f.store, other)
		_, err = f.service().Decide(ctx, asAdmin("alice"), approval.DecideRequest{
			OperationKey: b.OperationKey, Approver: "alice", Verdict: approval.VerdictApprove, Cause: voteCause("alice"),
		})
		wantCode(t, err, approval.ECONFLICT)
		wantState(t, mustApproval(t, f.store, b.ID), approval.StatusPending, 1)
		wantState(t, mustApproval(t, f.store, other.ID), approval.StatusPending, 1)

		// The id wins when both are given: the key is only looked at when the id is empty.
		got, err = f.service().Decide(ctx, asAdmin("bob"), approval.DecideRequest{
			ApprovalID: other.ID, OperationKey: "no-such-operation", Approver: "bob", Verdict: approval.VerdictReject, Cause: voteCause("bob"),
		})
		if err != nil {
			t.Fatalf("bob rejects by id with a stray operation key: %v", err)
		}
		if got.ID != other.ID {
			t.Fatalf("decided by id: got approval %s, want %s", got.ID, other.ID)
		}
		wantState(t, got, approval.StatusRejected, 2)
		wantState(t, mustApproval(t, f.store, b.ID), approval.StatusPending, 1)
	})

	s.run(t, "NotFound", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		MustCreate(t, f.store, PendingApproval(t, f.clock.Now())) // a store that is not empty
		missing := approval.NewID("apr")
		_, err := f.store.Approval(ctx, missing)
		wantCode(t, err, approval.ENOTFOUND)
		_, err = f.service().Decide(ctx, asAdmin("alice"), approval.DecideRequest{ApprovalID: missing, Approver: "alice", Verdict: approval.VerdictApprove, Cause: voteCause("alice")})
		wantCode(t, err, approval.ENOTFOUND)
		_, err = f.service().Cancel(ctx, asAdmin("ci-bot"), missing, approval.HTTPCause("cancel"))
		wantCode(t, err, approval.ENOTFOUND)
		_, err = f.store.Events(ctx, missing)
		wantCode(t, err, approval.ENOTFOUND)
	})
}

func mustExpire(tb testing.TB, s approval.Store, limit int) int {
	tb.Helper()
	n, err := rules(s).ExpireDue(tb.Context(), limit)
	if err != nil {
		tb.Fatalf("expire due: %v", err)
	}
	return n
}
