package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/approvald/approval"
)

// exerciseExecutions covers ExecutionStore and the Service's ledger rules over the store's
// statements: invariant 5, one effect per approved action (the outbox, attempts fenced by
// their number, leases recovered), and invariant 4 for reported outcomes.
func exerciseExecutions(t *testing.T, s suite) {
	s.run(t, "QueuedWithApproval", func(t *testing.T, f *fixture) {
		a := PendingApproval(t, f.clock.Now())
		a.Action = TargetedAction
		if got := MustCreate(t, f.store, a); got.Execution != nil {
			t.Fatalf("pending approval: got execution %+v, want none", got.Execution)
		}
		f.clock.Advance(time.Minute)
		decided := mustDecide(t, f.store, a.ID, "alice", approval.VerdictApprove)
		if decided.Execution == nil || decided.Execution.Status != approval.ExecutionQueued {
			t.Fatalf("approval returned by the approving vote: got execution %+v, want a queued one", decided.Execution)
		}

		got := mustApproval(t, f.store, a.ID)
		if got.Execution == nil || got.Execution.ID == "" || got.Execution.Status != approval.ExecutionQueued || got.Execution.Attempts != 0 {
			t.Fatalf("approved approval: got execution %+v, want a queued one with an id and no attempts", got.Execution)
		}
		rec := mustExecution(t, f.store, got.Execution.ID)
		if rec.ApprovalID != a.ID || rec.OperationKey != a.OperationKey || rec.Action != TargetedAction {
			t.Fatalf("execution: got approval %s, key %s, action %s; want %s, %s, %s", rec.ApprovalID, rec.OperationKey, rec.Action, a.ID, a.OperationKey, TargetedAction)
		}
		wantExecution(t, rec, approval.ExecutionQueued, 0, "")
		if rec.Attempts != 0 || rec.LeaseExpiresAt != nil || rec.NextAttemptAt == nil {
			t.Fatalf("queued execution: got %d attempts, lease until %v, next attempt %v; want 0, none, due now", rec.Attempts, rec.LeaseExpiresAt, rec.NextAttemptAt)
		}
		wantTime(t, "next_attempt_at", *rec.NextAttemptAt, f.clock.Now())
		wantTime(t, "created_at", rec.CreatedAt, f.clock.Now())

		evs := wantEventTypes(t, f.store, a.ID, approval.EventCreated, approval.EventVoted, approval.EventApproved, approval.EventExecutionQueued)
		wantTime(t, "queued event", evs[3].At, f.clock.Now())

		wantExecutionList(t, f.store, approval.ExecutionFilter{}, rec)
		page, _ := mustList(t, f.store, approval.ApprovalFilter{})
		if len(page) != 1 || page[0].Execution == nil || page[0].Execution.ID != rec.ID {
			t.Fatalf("listed approval: got %d approvals, want one carrying execution %s", len(page), rec.ID)
		}
	})

	// An action without a target is executed by the caller: the approval says so and nothing
	// is queued.
	s.run(t, "NotConfigured", func(t *testing.T, f *fixture) {
		a := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		mustDecide(t, f.store, a.ID, "alice", approval.VerdictApprove)
		got := mustApproval(t, f.store, a.ID)
		if got.Execution == nil || got.Execution.Status != approval.ExecutionNotConfigured {
			t.Fatalf("approved approval without a target: got execution %+v, want not_configured", got.Execution)
		}
		js, err := json.Marshal(got.Execution)
		if err != nil {
			t.Fatalf("marshal execution: %v", err)
		}
		if string(js) != `{"status":"not_configured"}` {
			t.Fatalf("execution JSON: got %s, want {\"status\":\"not_configured\"}", js)
		}
		wantEventTypes(t, f.store, a.ID, approval.EventCreated, approval.EventVoted, approval.EventApproved)
		wantClaims(t, "claim", mustClaimExecutions(t, f.service(), 10), 0)
	})

	s.run(t, "NoExecutionUnlessApproved", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		create := func(mod func(a *approval.Approval)) *approval.Approval {
			t.Helper()
			a := PendingApproval(t, f.clock.Now())
			a.Action = TargetedAction
			if mod != nil {
				mod(a)
			}
			return MustCreate(t, f.store, a)
		}
		rejected := create(nil)
		mustDecide(t, f.store, rejected.ID, "bob", approval.VerdictReject)
		cancelled := create(nil)
		if _, err := f.service().Cancel(ctx, asAdmin("ci-bot"), cancelled.ID, approval.HTTPCause("cancel")); err != nil {
			t.Fatalf("cancel: %v", err)
		}
		halfway := create(func(a *approval.Approval) { a.RequiredApprovals = 2 })
		mustDecide(t, f.store, halfway.ID, "alice", approval.VerdictApprove)
		expired := create(func(a *approval.Approval) { a.ExpiresAt = a.CreatedAt.Add(time.Minute) })
		f.clock.Advance(time.Minute)
		mustExpire(t, f.store, 10)

		for _, a := range []*approval.Approval{rejected, cancelled, halfway, expired} {
			if got := mustApproval(t, f.store, a.ID); got.Execution != nil {
				t.Fatalf("%s approval: got execution %+v, want none", got.Status, got.Execution)
			}
		}
		wantExecutionList(t, f.store, approval.ExecutionFilter{})
		wantClaims(t, "claim", mustClaimExecutions(t, f.service(), 10), 0)
	})

	// Two approvers approving at once: one approval, so one execution, queued once.
	s.run(t, "OneExecutionPerApproval", func(t *testing.T, f *fixture) {
		const rounds = 15
		for range rounds {
			a := PendingApproval(t, f.clock.Now())
			a.Action = TargetedAction
			MustCreate(t, f.store, a)
			race(2, func(i int) {
				// One vote wins; the other finds the approval approved (ECONFLICT), which the
				// checks below account for.
				f.service().Decide(t.Context(), asAdmin(a.Approvers[i]), approval.DecideRequest{
					ApprovalID: a.ID, Approver: a.Approvers[i], Verdict: approval.VerdictApprove, Cause: voteCause(a.Approvers[i]),
				})
			})
			wantEventTypes(t, f.store, a.ID, approval.EventCreated, approval.EventVoted, approval.EventApproved, approval.EventExecutionQueued)
		}
		all, _, err := f.store.Executions(t.Context(), approval.ExecutionFilter{Limit: approval.MaxPageSize})
		if err != nil {
			t.Fatalf("executions: %v", err)
		}
		approvals := make(map[string]bool)
		for _, rec := range all {
			approvals[rec.ApprovalID] = true
		}
		if len(all) != rounds || len(approvals) != rounds {
			t.Fatalf("executions: got %d for %d approvals, want %d for %d", len(all), len(approvals), rounds, rounds)
		}
	})

	// Operation keys are unique per requester, and the target's Idempotency-Key names the
	// requester too: approvals of several requesters under one key and action are separate
	// operations, each queued under its own downstream key, kept on the row as created.
	s.run(t, "OperationKeySharedByRequesters", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		approve := func(requester, key, action string) *approval.ExecutionRecord {
			t.Helper()
			a := PendingApproval(t, f.clock.Now())
			a.Requester, a.OperationKey, a.Fingerprint, a.Action = requester, key, "fp-"+requester+"-"+key, action
			MustCreate(t, f.store, a)
			mustDecide(t, f.store, a.ID, "alice", approval.VerdictApprove)
			rec := mustExecution(t, f.store, mustApproval(t, f.store, a.ID).Execution.ID)
			if want := approval.DownstreamKey(requester, key); rec.DownstreamKey != want || rec.IdempotencyKey() != want {
				t.Fatalf("%s's execution: got downstream key %q (idempotency key %q), want %q", requester, rec.DownstreamKey, rec.IdempotencyKey(), want)
			}
			return rec
		}
		first := approve("ci-bot", "payout-order-9281", TargetedAction)
		wantExecution(t, first, approval.ExecutionQueued, 0, "")
		f.clock.Advance(time.Second)
		second := approve("ops/ci", "payout-order-9281", TargetedAction)
		wantExecution(t, second, approval.ExecutionQueued, 0, "")
		if first.DownstreamKey == second.DownstreamKey {
			t.Fatalf("two requesters' executions share the downstream key %q", first.DownstreamKey)
		}
		untargeted := approve("mailer", "payout-order-9281", "deploy")
		wantExecution(t, untargeted, approval.ExecutionNotConfigured, 0, "")

		f.clock.Advance(time.Second)
		wantClaims(t, "claim", mustClaimExecutions(t, f.service(), 10), 1, first, second)

		// Two requesters' approvals under one key approved at the same moment: both queued.
		for round := range 10 {
			var pair [2]*approval.Approval
			key := fmt.Sprintf("payout-race-%d", round)
			for i, requester := range []string{"ci-bot", "deployer"} {
				a := PendingApproval(t, f.clock.Now())
				a.Requester, a.OperationKey, a.Fingerprint, a.Action = requester, key, "fp-"+requester+"-"+key, TargetedAction
				pair[i] = MustCreate(t, f.store, a)
			}
			errs := make([]error, 2)
			race(2, func(i int) {
				_, errs[i] = f.service().Decide(ctx, asAdmin("alice"), approval.DecideRequest{ApprovalID: pair[i].ID, Approver: "alice", Verdict: approval.VerdictApprove, Cause: voteCause("alice")})
			})
			for i := range pair {
				if errs[i] != nil {
					t.Fatalf("round %d: approve %s: %v", round, pair[i].ID, errs[i])
				}
				if got := mustApproval(t, f.store, pair[i].ID).Execution.Status; got != approval.ExecutionQueued {
					t.Fatalf("round %d: %s's execution: got %s, want queued", round, pair[i].Requester, got)
				}
			}
		}
	})

	s.run(t, "ClaimAndRecover", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		a, rec := mustApprovedExecution(t, f)
		f.clock.Advance(time.Second)
		claimed := mustClaimExecutions(t, f.service(), 10)
		wantClaims(t, "first claim", claimed, 1, rec)
		c := claimed[0]
		if c.Recovered || c.Record.Status != approval.ExecutionRunning || c.Record.Attempts != 1 {
			t.Fatalf("first claim: got recovered %v, record %s with %d attempts; want false, running, 1", c.Recovered, c.Record.Status, c.Record.Attempts)
		}
		if c.Record.LeaseExpiresAt == nil {
			t.Fatalf("first claim: got no lease expiry, want %v", f.clock.Now().Add(workLease))
		}
		wantTime(t, "lease_expires_at", *c.Record.LeaseExpiresAt, f.clock.Now().Add(workLease))
		if c.Approval == nil || c.Approval.ID != a.ID || c.Approval.Action != TargetedAction || c.Approval.Status != approval.StatusApproved {
			t.Fatalf("first claim: got approval %+v, want approved %s, the body of the call", c.Approval, a.ID)
		}
		if got := mustApproval(t, f.store, a.ID).Execution; got.Status != approval.ExecutionRunning || got.Attempts != 1 {
			t.Fatalf("approval's execution while claimed: got %s with %d attempts, want running with 1", got.Status, got.Attempts)
		}
		// The attempt is on record before any call is made.
		evs := wantExecutionEvents(t, f.store, a.ID, approval.EventExecutionAttempt)
		wantWorkerCause(t, evs[0], 1)
		wantTime(t, "attempt event", evs[0].At, f.clock.Now())
		// Its call starts: from now on an expired lease may have reached the target.
		mustSend(t, f.service(), rec.ID, 1)

		f.clock.Advance(workLease - time.Microsecond)
		wantClaims(t, "claim while the lease is live", mustClaimExecutions(t, f.service(), 10), 0)
		f.clock.Advance(2 * time.Microsecond)
		claimed = mustClaimExecutions(t, f.service(), 10)
		wantClaims(t, "claim after the lease expired", claimed, 2, rec)
		if !claimed[0].Recovered || claimed[0].Abandoned || claimed[0].Record.Attempts != 2 || !claimed[0].Record.Uncertain {
			t.Fatalf("claim after the lease expired: got recovered %v, abandoned %v, %d attempts, uncertain %v; want true, false, 2, true",
				claimed[0].Recovered, claimed[0].Abandoned, claimed[0].Record.Attempts, claimed[0].Record.Uncertain)
		}
		evs = wantExecutionEvents(t, f.store, a.ID, approval.EventExecutionAttempt, approval.EventExecutionAttempt)
		wantWorkerCause(t, evs[1], 2)

		// The first attempt's worker wakes up: its number is no longer current, so it can
		// neither record an outcome nor keep its lease.
		_, err := f.service().FinishAttempt(ctx, rec.ID, 1, approval.AttemptOutcome{Status: approval.ExecutionSucceeded, Result: []byte(`{"late": true}`)})
		wantCode(t, err, approval.ECONFLICT)
		wantCode(t, f.service().RenewExecution(ctx, rec.ID, 1, workLease), approval.ECONFLICT)
		got := mustExecution(t, f.store, rec.ID)
		wantExecution(t, got, approval.ExecutionRunning, 0, "")
		if got.Attempts != 2 {
			t.Fatalf("after a stale finish: got %d attempts, want 2", got.Attempts)
		}

		done, err := f.service().FinishAttempt(ctx, rec.ID, 2, approval.AttemptOutcome{
			Status: approval.ExecutionSucceeded, Result: []byte(`{"payout": "po_123"}`), Reason: "200 from target",
		})
		if err != nil {
			t.Fatalf("finish attempt 2: %v", err)
		}
		wantExecution(t, done, approval.ExecutionSucceeded, 0, `{"payout": "po_123"}`)
		pub := mustApproval(t, f.store, a.ID).Execution
		if pub.Status != approval.ExecutionSucceeded || pub.Attempts != 2 || !bytes.Equal(pub.Result, []byte(`{"payout": "po_123"}`)) {
			t.Fatalf("approval's execution: got %s, %d attempts, result %s; want succeeded, 2, the target's body", pub.Status, pub.Attempts, pub.Result)
		}
		evs = wantExecutionEvents(t, f.store, a.ID, approval.EventExecutionAttempt, approval.EventExecutionAttempt, approval.EventExecutionSucceeded)
		wantWorkerCause(t, evs[2], 2)

		// Finished: never claimed again, and the attempt cannot finish twice.
		f.clock.Advance(workLease + time.Second)
		wantClaims(t, "claim after success", mustClaimExecutions(t, f.service(), 10), 0)
		_, err = f.service().FinishAttempt(ctx, rec.ID, 2, approval.AttemptOutcome{Status: approval.ExecutionFailed, Error: "again"})
		wantCode(t, err, approval.ECONFLICT)
		wantExecution(t, mustExecution(t, f.store, rec.ID), approval.ExecutionSucceeded, 0, `{"payout": "po_123"}`)
	})

	// A claim whose lease ran out before its call started sent nothing: the next claim
	// takes it over as an ordinary attempt, abandoned, not recovered, and nothing becomes
	// uncertain. One whose call started is recovered.
	s.run(t, "ClaimNeverSent", func(t *testing.T, f *fixture) {
		a, rec := mustApprovedExecution(t, f)
		wantClaims(t, "first claim", mustClaimExecutions(t, f.service(), 10), 1, rec)
		f.clock.Advance(workLease)
		claimed := mustClaimExecutions(t, f.service(), 10)
		wantClaims(t, "claim after an unsent lease expired", claimed, 2, rec)
		if c := claimed[0]; c.Recovered || !c.Abandoned || c.Record.Uncertain {
			t.Fatalf("claim after an unsent lease expired: got recovered %v, abandoned %v, uncertain %v; want false, true, false", c.Recovered, c.Abandoned, c.Record.Uncertain)
		}
		if got := mustExecution(t, f.store, rec.ID); got.Uncertain {
			t.Fatal("execution after an unsent lease expired: got uncertain, want not")
		}
		evs := wantExecutionEvents(t, f.store, a.ID, approval.EventExecutionAttempt, approval.EventExecutionAttempt)
		if evs[1].Detail["abandoned"] != true || evs[1].Detail["recovered"] != false {
			t.Fatalf("attempt 2's event: got detail %v, want abandoned and not recovered", evs[1].Detail)
		}
		// The attempt that replaced it starts its call, and its lease runs out too.
		mustSend(t, f.service(), rec.ID, 2)
		f.clock.Advance(workLease)
		claimed = mustClaimExecutions(t, f.service(), 10)
		wantClaims(t, "claim after a sent lease expired", claimed, 3, rec)
		if c := claimed[0]; !c.Recovered || c.Abandoned || !c.Record.Uncertain {
			t.Fatalf("claim after a sent lease expired: got recovered %v, abandoned %v, uncertain %v; want true, false, true", c.Recovered, c.Abandoned, c.Record.Uncertain)
		}
	})

	// Takeover within a lease behind a backlog: an expired lease is claimed before every
	// queued execution, however long those have been due.
	s.run(t, "ClaimTakesExpiredFirst", func(t *testing.T, f *fixture) {
		_, crashed := mustApprovedExecution(t, f)
		wantClaims(t, "the crashed runner's claim", mustClaimExecutions(t, f.service(), 1), 1, crashed)
		mustSend(t, f.service(), crashed.ID, 1)
		// A backlog, each due long before the lease runs out.
		backlog := make(map[string]bool)
		for range 12 {
			f.clock.Advance(time.Millisecond)
			_, rec := mustApprovedExecution(t, f)
			backlog[rec.ID] = true
		}
		f.clock.Advance(workLease)
		claimed := mustClaimExecutions(t, f.service(), 3)
		if len(claimed) != 3 {
			t.Fatalf("claim behind a backlog: got %d claims, want 3", len(claimed))
		}
		if c := claimed[0]; c.Record.ID != crashed.ID || c.Attempt != 2 || !c.Recovered {
			t.Fatalf("claim behind a backlog: got %s first (attempt %d, recovered %v), want the expired %s, attempt 2, recovered",
				c.Record.ID, c.Attempt, c.Recovered, crashed.ID)
		}
		for _, c := range claimed[1:] {
			if !backlog[c.Record.ID] || c.Attempt != 1 || c.Recovered || c.Abandoned {
				t.Fatalf("claim behind a backlog: got %s at attempt %d (recovered %v, abandoned %v), want a queued one at attempt 1", c.Record.ID, c.Attempt, c.Recovered, c.Abandoned)
			}
		}
	})

	s.run(t, "AttemptOutcomes", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		approvals, recs := claimedExecutions(t, f, 4)
		f.clock.Advance(time.Second)
		retryAt := f.clock.Now().Add(time.Minute)
		for i, tc := range []struct {
			outcome approval.AttemptOutcome
			event   string
		}{
			{approval.AttemptOutcome{Status: approval.ExecutionSucceeded, Result: []byte(`{"ok": true}`), Reason: "200 from target"}, approval.EventExecutionSucceeded},
			{approval.AttemptOutcome{Status: approval.ExecutionFailed, Error: "400 Bad Request", Reason: "400 from target: not retryable"}, approval.EventExecutionFailed},
			{approval.AttemptOutcome{Status: approval.ExecutionNeedsReview, Error: "timeout after the request was sent", Reason: "uncertain and the target cannot be asked"}, approval.EventExecutionNeedsReview},
			{approval.AttemptOutcome{Status: approval.ExecutionQueued, RetryAt: &retryAt, Error: "503 Service Unavailable", Reason: "503 from target, retry 2 of 10 in 1m"}, approval.EventExecutionRetry},
		} {
			got, err := f.service().FinishAttempt(ctx, recs[i].ID, 1, tc.outcome)
			if err != nil {
				t.Fatalf("finish attempt as %s: %v", tc.outcome.Status, err)
			}
			result := ""
			if tc.outcome.Status == approval.ExecutionSucceeded {
				result = string(tc.outcome.Result)
			}
			wantExecution(t, got, tc.outcome.Status, 0, result)
			if got.LastError != tc.outcome.Error || got.Attempts != 1 {
				t.Fatalf("finished as %s: got last error %q, %d attempts; want %q, 1", tc.outcome.Status, got.LastError, got.Attempts, tc.outcome.Error)
			}
			wantExecution(t, mustExecution(t, f.store, recs[i].ID), tc.outcome.Status, 0, result)
			evs := wantExecutionEvents(t, f.store, approvals[i].ID, approval.EventExecutionAttempt, tc.event)
			wantWorkerCause(t, evs[1], 1)
			if !strings.Contains(fmt.Sprint(evs[1].Detail)+evs[1].Cause.Note, tc.outcome.Reason) {
				t.Fatalf("event %s: got detail %v and note %q, want them to give the reason %q", evs[1].Type, evs[1].Detail, evs[1].Cause.Note, tc.outcome.Reason)
			}
		}

		// The retry waits for RetryAt; the others are done.
		queued := mustExecution(t, f.store, recs[3].ID)
		if queued.NextAttemptAt == nil {
			t.Fatalf("execution queued to retry: got no next attempt, want %v", retryAt)
		}
		wantTime(t, "next_attempt_at", *queued.NextAttemptAt, retryAt)
		f.clock.Advance(retryAt.Sub(f.clock.Now()) - time.Microsecond)
		wantClaims(t, "claim before the retry is due", mustClaimExecutions(t, f.service(), 10), 0)
		f.clock.Advance(time.Microsecond)
		claimed := mustClaimExecutions(t, f.service(), 10)
		wantClaims(t, "claim when the retry is due", claimed, 2, recs[3])
		if claimed[0].Recovered {
			t.Fatalf("claim of a scheduled retry: got recovered, want not (the last attempt's outcome is known)")
		}
	})

	// Several attempts' outcomes in one transaction, each fenced by its own attempt: the one
	// whose claim was lost to a re-claim is refused and changes nothing, the others are
	// recorded, each with its own event; an unknown execution, an outcome no attempt can have
	// and a second outcome of one execution are refused alone.
	s.run(t, "FinishAttemptsBatch", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		approvals, recs := claimedExecutions(t, f, 4)
		// The first attempt's lease runs out and it is claimed again (attempt 2); the others
		// renew theirs in time.
		f.clock.Advance(workLease / 2)
		for _, rec := range recs[1:] {
			if err := f.service().RenewExecution(ctx, rec.ID, 1, workLease); err != nil {
				t.Fatalf("renew %s: %v", rec.ID, err)
			}
		}
		f.clock.Advance(workLease/2 + time.Second)
		wantClaims(t, "re-claim", mustClaimExecutions(t, f.service(), 10), 2, recs[0])

		retryAt := f.clock.Now().Add(time.Minute)
		done, err := f.service().FinishAttempts(ctx, []approval.AttemptFinish{
			{ID: recs[0].ID, Attempt: 1, Outcome: approval.AttemptOutcome{Status: approval.ExecutionSucceeded, Result: []byte(`{"late": true}`), Reason: "late"}},
			{ID: recs[1].ID, Attempt: 1, Outcome: approval.AttemptOutcome{Status: approval.ExecutionSucceeded, Result: []byte(`{"ok": 1}`), Reason: "200 from target"}},
			{ID: "exe_unknown", Attempt: 1, Outcome: approval.AttemptOutcome{Status: approval.ExecutionSucceeded}},
			{ID: recs[2].ID, Attempt: 1, Outcome: approval.AttemptOutcome{Status: approval.ExecutionQueued, RetryAt: &retryAt, Error: "503", Reason: "503 from target"}},
			{ID: recs[3].ID, Attempt: 1, Outcome: approval.AttemptOutcome{Status: approval.ExecutionQueued, Reason: "no retry time"}},
			{ID: recs[3].ID, Attempt: 1, Outcome: approval.AttemptOutcome{Status: approval.ExecutionFailed, Error: "400", Reason: "400 from target"}},
			{ID: recs[1].ID, Attempt: 1, Outcome: approval.AttemptOutcome{Status: approval.ExecutionFailed, Reason: "twice"}},
		})
		if err != nil {
			t.Fatalf("finish attempts: %v", err)
		}
		if len(done) != 7 {
			t.Fatalf("finish attempts: got %d answers, want 7", len(done))
		}
		for i, code := range []string{approval.ECONFLICT, "", approval.ENOTFOUND, "", approval.EINVALID, "", approval.EINVALID} {
			wantCode(t, done[i].Err, code)
			if (done[i].Record == nil) != (code != "") {
				t.Fatalf("answer %d: got record %+v with error %v, want a record exactly when recorded", i, done[i].Record, done[i].Err)
			}
		}

		// Refused: the re-claimed execution is still attempt 2's, with no event of attempt 1.
		lost := mustExecution(t, f.store, recs[0].ID)
		wantExecution(t, lost, approval.ExecutionRunning, 0, "")
		if lost.Attempts != 2 {
			t.Fatalf("re-claimed execution: got %d attempts, want 2", lost.Attempts)
		}
		wantExecutionEvents(t, f.store, approvals[0].ID, approval.EventExecutionAttempt, approval.EventExecutionAttempt)

		// Recorded, one event each, naming its attempt.
		for _, tc := range []struct {
			i      int
			status approval.ExecutionStatus
			result string
			event  string
		}{
			{1, approval.ExecutionSucceeded, `{"ok": 1}`, approval.EventExecutionSucceeded},
			{2, approval.ExecutionQueued, "", approval.EventExecutionRetry},
			{3, approval.ExecutionFailed, "", approval.EventExecutionFailed},
		} {
			got := mustExecution(t, f.store, recs[tc.i].ID)
			wantExecution(t, got, tc.status, 0, tc.result)
			if got.Attempts != 1 || got.LeaseExpiresAt != nil {
				t.Fatalf("execution %d: got %d attempts, lease until %v; want 1, none", tc.i, got.Attempts, got.LeaseExpiresAt)
			}
			evs := wantExecutionEvents(t, f.store, approvals[tc.i].ID, approval.EventExecutionAttempt, tc.event)
			wantWorkerCause(t, evs[1], 1)
			wantTime(t, "event", evs[1].At, f.clock.Now())
		}
		queued := mustExecution(t, f.store, recs[2].ID)
		if queued.NextAttemptAt == nil {
			t.Fatalf("retry: got no next attempt, want %v", retryAt)
		}
		wantTime(t, "next_attempt_at", *queued.NextAttemptAt, retryAt)

		// A batch with nothing left to record writes nothing and is no error.
		done, err = f.service().FinishAttempts(ctx, []approval.AttemptFinish{{ID: recs[1].ID, Attempt: 1, Outcome: approval.AttemptOutcome{Status: approval.ExecutionFailed}}})
		if err != nil || len(done) != 1 {
			t.Fatalf("finish a finished attempt: got %d answers, %v; want 1", len(done), err)
		}
		wantCode(t, done[0].Err, approval.ECONFLICT)
		wantExecutionEvents(t, f.store, approvals[1].ID, approval.EventExecutionAttempt, approval.EventExecutionSucceeded)
	})

	// One transaction writes a runner's batch: outcomes, the starts of calls (each fenced by
	// its attempt, a lost one refused alone) and a claim. A batch that cannot be written is
	// refused whole and writes nothing.
	s.run(t, "RecordAttempts", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		_, recs := claimedExecutions(t, f, 3)
		_, next := mustApprovedExecution(t, f)
		done, err := f.service().RecordAttempts(ctx, approval.AttemptBatch{
			Finishes: []approval.AttemptFinish{{ID: recs[0].ID, Attempt: 1, Outcome: approval.AttemptOutcome{Status: approval.ExecutionSucceeded, Reason: "200"}}},
			Sends:    []approval.AttemptSend{{ID: recs[1].ID, Attempt: 1}, {ID: recs[2].ID, Attempt: 2}, {ID: recs[1].ID, Attempt: 1}},
			Lease:    time.Hour, Claim: 5,
		})
		if err != nil {
			t.Fatalf("record: %v", err)
		}
		if len(done.Finished) != 1 || done.Finished[0].Err != nil || done.Finished[0].Record.Status != approval.ExecutionSucceeded {
			t.Fatalf("finished: got %+v, want attempt 1 of %s succeeded", done.Finished, recs[0].ID)
		}
		if len(done.Sent) != 3 || done.Sent[0] != nil {
			t.Fatalf("sent: got %v, want 3 answers, the first nil", done.Sent)
		}
		wantCode(t, done.Sent[1], approval.ECONFLICT) // attempt 2 does not hold it
		wantCode(t, done.Sent[2], approval.EINVALID)  // sent twice in one batch
		wantClaims(t, "claim with the batch", done.Claims, 1, next)
		if got := mustExecution(t, f.store, recs[1].ID).LeaseExpiresAt; got == nil || !got.Equal(f.clock.Now().Add(time.Hour)) {
			t.Fatalf("started call's lease: got %v, want renewed to %v", got, f.clock.Now().Add(time.Hour))
		}
		if got := mustExecution(t, f.store, recs[2].ID).LeaseExpiresAt; got == nil || !got.Equal(f.clock.Now().Add(workLease)) {
			t.Fatalf("refused call's lease: got %v, want the claim's %v", got, f.clock.Now().Add(workLease))
		}
		// Past the first claims' lease: the refused start's execution never sent its call.
		f.clock.Advance(workLease)
		again := mustClaimExecutions(t, f.service(), 10)
		wantClaims(t, "claim after the first claims' lease", again, 2, recs[2])
		if !again[0].Abandoned {
			t.Fatalf("claim after the first claims' lease: got recovered %v, want abandoned", again[0].Recovered)
		}

		// Sends or a claim without a lease, and a negative claim: refused whole.
		for _, b := range []approval.AttemptBatch{
			{Sends: []approval.AttemptSend{{ID: recs[1].ID, Attempt: 1}}},
			{Claim: 1},
			{Claim: -1, Lease: time.Hour},
		} {
			_, err := f.service().RecordAttempts(ctx, b)
			wantCode(t, err, approval.EINVALID)
		}
		// Nothing to write: no transaction, no error.
		if done, err := f.service().RecordAttempts(ctx, approval.AttemptBatch{}); err != nil || len(done.Claims) != 0 {
			t.Fatalf("empty batch: got %+v, %v; want nothing", done, err)
		}
	})

	// Batches of outcomes racing over the same executions, each listing them in another
	// order: each attempt is recorded once, by one batch, and the others are refused; the
	// batches lock in one order, so none deadlocks.
	s.run(t, "FinishAttemptsRace", func(t *testing.T, f *fixture) {
		const executions, racers = 8, 8
		_, recs := claimedExecutions(t, f, executions)
		answers := make([][]approval.AttemptFinished, racers)
		errs := make([]error, racers)
		race(racers, func(i int) {
			fs := make([]approval.AttemptFinish, executions)
			for j := range executions {
				rec := recs[(i*3+j*(1+2*(i%2)))%executions] // another order per racer
				fs[j] = approval.AttemptFinish{ID: rec.ID, Attempt: 1, Outcome: approval.AttemptOutcome{
					Status: approval.ExecutionSucceeded, Result: []byte(fmt.Sprintf(`{"racer": %d}`, i)), Reason: "200"}}
			}
			answers[i], errs[i] = f.service().FinishAttempts(t.Context(), fs)
		})
		recorded := make(map[string]int)
		for i := range racers {
			if errs[i] != nil {
				t.Fatalf("racer %d: %v", i, errs[i])
			}
			for _, d := range answers[i] {
				switch {
				case d.Err == nil:
					recorded[d.Record.ID]++
				case approval.ErrorCode(d.Err) != approval.ECONFLICT:
					t.Fatalf("racer %d: got %v, want recorded or ECONFLICT", i, d.Err)
				}
			}
		}
		for _, rec := range recs {
			if recorded[rec.ID] != 1 {
				t.Fatalf("execution %s: recorded %d times, want once", rec.ID, recorded[rec.ID])
			}
			wantExecution(t, mustExecution(t, f.store, rec.ID), approval.ExecutionSucceeded, 0, string(mustExecution(t, f.store, rec.ID).Result))
			wantExecutionEvents(t, f.store, rec.ApprovalID, approval.EventExecutionAttempt, approval.EventExecutionSucceeded)
		}
	})

	// Outcomes and the next claim in one transaction: the outcomes are recorded as by
	// FinishAttempts (a refused one alone), then the due executions are claimed as by
	// ClaimExecutions, a retry recorded as due now among them, at its next attempt.
	s.run(t, "FinishAndClaim", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		approvals, recs := claimedExecutions(t, f, 2)
		_, next0 := mustApprovedExecution(t, f)
		f.clock.Advance(time.Second)
		_, next1 := mustApprovedExecution(t, f)
		f.clock.Advance(time.Second)

		for _, bad := range []struct {
			lease time.Duration
			limit int
		}{{0, 3}, {workLease, 0}} {
			_, _, err := f.service().FinishAndClaim(ctx, []approval.AttemptFinish{{ID: recs[0].ID, Attempt: 1,
				Outcome: approval.AttemptOutcome{Status: approval.ExecutionSucceeded}}}, bad.lease, bad.limit)
			wantCode(t, err, approval.EINVALID)
		}
		wantExecution(t, mustExecution(t, f.store, recs[0].ID), approval.ExecutionRunning, 0, "")

		now := f.clock.Now()
		done, claims, err := f.service().FinishAndClaim(ctx, []approval.AttemptFinish{
			{ID: recs[0].ID, Attempt: 1, Outcome: approval.AttemptOutcome{Status: approval.ExecutionSucceeded, Result: []byte(`{"ok": 1}`), Reason: "200 from target"}},
			{ID: recs[1].ID, Attempt: 1, Outcome: approval.AttemptOutcome{Status: approval.ExecutionQueued, RetryAt: &now, Error: "503", Reason: "503 from target"}},
			{ID: "exe_unknown", Attempt: 1, Outcome: approval.AttemptOutcome{Status: approval.ExecutionSucceeded}},
		}, workLease, 3)
		if err != nil {
			t.Fatalf("finish and claim: %v", err)
		}
		if len(done) != 3 {
			t.Fatalf("finish and claim: got %d answers, want 3", len(done))
		}
		for i, code := range []string{"", "", approval.ENOTFOUND} {
			wantCode(t, done[i].Err, code)
		}
		wantExecution(t, mustExecution(t, f.store, recs[0].ID), approval.ExecutionSucceeded, 0, `{"ok": 1}`)
		wantExecutionEvents(t, f.store, approvals[0].ID, approval.EventExecutionAttempt, approval.EventExecutionSucceeded)

		// Oldest due first: the two queued before the retry, then the retry at attempt 2.
		wantClaims(t, "claimed with the outcomes", claims[:2], 1, next0, next1)
		wantClaims(t, "claimed with the outcomes", claims[2:], 2, recs[1])
		for _, c := range claims {
			if c.Approval == nil || c.Approval.ID != c.Record.ApprovalID || c.Recovered {
				t.Fatalf("claim of %s: got approval %+v, recovered %v; want its approval, not recovered", c.Record.ID, c.Approval, c.Recovered)
			}
			wantTime(t, "lease", *mustExecution(t, f.store, c.Record.ID).LeaseExpiresAt, now.Add(workLease))
		}
		evs := wantExecutionEvents(t, f.store, approvals[1].ID, approval.EventExecutionAttempt, approval.EventExecutionRetry, approval.EventExecutionAttempt)
		wantWorkerCause(t, evs[2], 2)
		wantExecutionEvents(t, f.store, next0.ApprovalID, approval.EventExecutionAttempt)

		// Nothing to record and nothing due: no error, no claim.
		done, claims, err = f.service().FinishAndClaim(ctx, nil, workLease, 3)
		if err != nil || len(done) != 0 || len(claims) != 0 {
			t.Fatalf("finish nothing and claim with nothing due: got %d answers, %d claims, %v; want none", len(done), len(claims), err)
		}
	})

	s.run(t, "Renew", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		_, rec := mustApprovedExecution(t, f)
		wantClaims(t, "claim", mustClaimExecutions(t, f.service(), 10), 1, rec)
		claimedAt := f.clock.Now()
		mustSend(t, f.service(), rec.ID, 1)

		f.clock.Advance(20 * time.Second)
		if err := f.service().RenewExecution(ctx, rec.ID, 1, time.Minute); err != nil {
			t.Fatalf("renew attempt 1: %v", err)
		}
		renewedUntil := f.clock.Now().Add(time.Minute)
		got := mustExecution(t, f.store, rec.ID)
		if got.LeaseExpiresAt == nil {
			t.Fatalf("renewed execution: got no lease expiry, want %v", renewedUntil)
		}
		wantTime(t, "renewed lease_expires_at", *got.LeaseExpiresAt, renewedUntil)
		wantCode(t, f.service().RenewExecution(ctx, rec.ID, 2, time.Minute), approval.ECONFLICT)

		// Past the first lease, within the renewed one: still held.
		f.clock.Advance(claimedAt.Add(workLease + time.Second).Sub(f.clock.Now()))
		wantClaims(t, "claim after the first lease, within the renewed one", mustClaimExecutions(t, f.service(), 10), 0)
		f.clock.Advance(renewedUntil.Sub(f.clock.Now()) + time.Microsecond)
		claimed := mustClaimExecutions(t, f.service(), 10)
		wantClaims(t, "claim after the renewed lease", claimed, 2, rec)
		if !claimed[0].Recovered {
			t.Fatalf("claim after the renewed lease expired: got not recovered, want recovered")
		}
		wantCode(t, f.service().RenewExecution(ctx, rec.ID, 1, time.Minute), approval.ECONFLICT)
	})

	// A worker shutting down gives back a claim whose call it has not sent: the attempt does
	// not count and the next claim is not a recovery.
	s.run(t, "Release", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		a, rec := mustApprovedExecution(t, f)
		wantClaims(t, "claim", mustClaimExecutions(t, f.service(), 10), 1, rec)
		f.clock.Advance(time.Second)
		if err := f.service().ReleaseExecution(ctx, rec.ID, 1); err != nil {
			t.Fatalf("release attempt 1: %v", err)
		}
		got := mustExecution(t, f.store, rec.ID)
		wantExecution(t, got, approval.ExecutionQueued, 0, "")
		if got.Attempts != 0 || got.NextAttemptAt == nil {
			t.Fatalf("released execution: got %d attempts, next attempt %v; want 0, due now", got.Attempts, got.NextAttemptAt)
		}
		wantTime(t, "next_attempt_at of a released execution", *got.NextAttemptAt, f.clock.Now())
		wantExecutionEvents(t, f.store, a.ID, approval.EventExecutionAttempt, approval.EventExecutionReleased)

		claimed := mustClaimExecutions(t, f.service(), 10)
		wantClaims(t, "claim after the release", claimed, 1, rec)
		if claimed[0].Recovered {
			t.Fatalf("claim after a release: got recovered, want not (no call was sent)")
		}
		// A release naming another attempt gives nothing back.
		f.service().ReleaseExecution(ctx, rec.ID, 2)
		got = mustExecution(t, f.store, rec.ID)
		if got.Status != approval.ExecutionRunning || got.Attempts != 1 {
			t.Fatalf("after a release of another attempt: got %s with %d attempts, want running with 1", got.Status, got.Attempts)
		}
	})

	// An asynchronous target's acceptance: FinishAttempt with status running clears the lease,
	// so the execution is never claimed again nor released back to the queue (its call has
	// been sent), and waits for ReportExecution to finish it.
	s.run(t, "AsyncAccepted", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		a, rec := mustApprovedExecution(t, f)
		wantClaims(t, "claim", mustClaimExecutions(t, f.service(), 10), 1, rec)
		got, err := f.service().FinishAttempt(ctx, rec.ID, 1, approval.AttemptOutcome{
			Status: approval.ExecutionRunning, Result: []byte(`{"accepted": true}`), Reason: "accepted by the target; waiting for its report",
		})
		if err != nil {
			t.Fatalf("finish attempt as accepted: %v", err)
		}
		wantExecution(t, got, approval.ExecutionRunning, 0, `{"accepted": true}`)
		if got.LeaseExpiresAt != nil || got.NextAttemptAt != nil || got.Attempts != 1 {
			t.Fatalf("accepted execution: got lease until %v, next attempt %v, %d attempts; want none, none, 1", got.LeaseExpiresAt, got.NextAttemptAt, got.Attempts)
		}
		wantExecutionEvents(t, f.store, a.ID, approval.EventExecutionAttempt, approval.EventExecutionAccepted)

		// No attempt holds it: the attempt can neither renew it nor put it back in the queue,
		// nor record an outcome again (as a runner would that retried a batch whose commit
		// went unanswered).
		wantCode(t, f.service().RenewExecution(ctx, rec.ID, 1, workLease), approval.ECONFLICT)
		wantCode(t, f.service().ReleaseExecution(ctx, rec.ID, 1), approval.ECONFLICT)
		for _, o := range []approval.AttemptOutcome{{Status: approval.ExecutionRunning, Reason: "accepted again"}, {Status: approval.ExecutionSucceeded, Reason: "200"}} {
			_, err := f.service().FinishAttempt(ctx, rec.ID, 1, o)
			wantCode(t, err, approval.ECONFLICT)
		}
		wantExecutionEvents(t, f.store, a.ID, approval.EventExecutionAttempt, approval.EventExecutionAccepted)
		f.clock.Advance(24 * time.Hour)
		wantClaims(t, "claim a day later", mustClaimExecutions(t, f.service(), 10), 0)
		still := mustExecution(t, f.store, rec.ID)
		wantExecution(t, still, approval.ExecutionRunning, 0, `{"accepted": true}`)
		if still.Attempts != 1 || still.LeaseExpiresAt != nil {
			t.Fatalf("accepted execution after the refusals: got %d attempts, lease until %v; want 1, none", still.Attempts, still.LeaseExpiresAt)
		}
		if counts, stuck, err := f.store.ExecutionCounts(ctx); err != nil || counts[approval.ExecutionRunning] != 1 || stuck != 0 {
			t.Fatalf("execution counts: got %v, %d stuck, %v; want 1 running, none stuck (it waits for a report, not a runner)", counts, stuck, err)
		}

		// The target's report settles it.
		done := mustReport(t, f.service(), approval.ExecutionReport{
			ApprovalID: a.ID, Status: approval.ExecutionSucceeded, Version: 1, Result: []byte(`{"done": true}`),
			Actor: "payments", Cause: approval.Cause{Kind: approval.CauseInbox, Source: "payments", EventID: "res_1"},
		}, true)
		wantExecution(t, done, approval.ExecutionSucceeded, 1, `{"done": true}`)
		wantExecutionEvents(t, f.store, a.ID, approval.EventExecutionAttempt, approval.EventExecutionAccepted, approval.EventExecutionReported)
	})

	// An accepted async call whose report never comes would wait for ever: an operator may
	// retry it or resolve it, as long as no attempt holds it (a call in flight stays the
	// runner's).
	s.run(t, "AsyncAcceptedOperator", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		cause := approval.Cause{Kind: approval.CauseOperator, Operator: "root"}
		retriedA, retried := mustApprovedExecution(t, f)
		resolvedA, resolved := mustApprovedExecution(t, f)
		_, inFlight := mustApprovedExecution(t, f)
		wantClaims(t, "claim", mustClaimExecutions(t, f.service(), 10), 1, retried, resolved, inFlight)
		for _, rec := range []*approval.ExecutionRecord{retried, resolved} {
			if _, err := f.service().FinishAttempt(ctx, rec.ID, 1, approval.AttemptOutcome{Status: approval.ExecutionRunning, Reason: "accepted"}); err != nil {
				t.Fatalf("finish attempt as accepted: %v", err)
			}
		}
		f.clock.Advance(24 * time.Hour)

		// The call in flight: its lease has run out, but it is still the runner's to recover.
		_, err := f.service().RetryExecution(ctx, asAdmin("root"), inFlight.ID, cause)
		wantCode(t, err, approval.ECONFLICT)
		_, err = f.service().ResolveExecution(ctx, asAdmin("root"), inFlight.ID, approval.ExecutionFailed, "gave up", cause)
		wantCode(t, err, approval.ECONFLICT)
		if got := mustExecution(t, f.store, inFlight.ID); got.Status != approval.ExecutionRunning || got.LeaseExpiresAt == nil {
			t.Fatalf("refused operator actions on a call in flight: got %s, lease %v; want running with its lease", got.Status, got.LeaseExpiresAt)
		}

		got, err := f.service().RetryExecution(ctx, asAdmin("root"), retried.ID, cause)
		if err != nil {
			t.Fatalf("retry an accepted execution awaiting its report: %v", err)
		}
		wantExecution(t, got, approval.ExecutionQueued, 0, "")
		if got.AttemptBase != 1 || got.Uncertain || got.NextAttemptAt == nil {
			t.Fatalf("retried accepted execution: got attempt base %d, uncertain %v, next attempt %v; want 1, false, due now", got.AttemptBase, got.Uncertain, got.NextAttemptAt)
		}
		evs := wantExecutionEvents(t, f.store, retriedA.ID, approval.EventExecutionAttempt, approval.EventExecutionAccepted, approval.EventExecutionRetried)
		wantEvent(t, evs[2], "root", cause, f.clock.Now())

		const note = "the target lost the job; refunded by hand"
		got, err = f.service().ResolveExecution(ctx, asAdmin("root"), resolved.ID, approval.ExecutionSucceeded, note, cause)
		if err != nil {
			t.Fatalf("resolve an accepted execution awaiting its report: %v", err)
		}
		wantExecution(t, got, approval.ExecutionSucceeded, 0, "")
		evs = wantExecutionEvents(t, f.store, resolvedA.ID, approval.EventExecutionAttempt, approval.EventExecutionAccepted, approval.EventExecutionResolved)
		if !strings.Contains(fmt.Sprint(evs[2].Detail)+evs[2].Cause.Note, note) {
			t.Fatalf("resolved event: got detail %v, want the note %q", evs[2].Detail, note)
		}

		// The retried one runs again; the resolved one is done, and the operator's word
		// stands against a report that comes too late.
		f.clock.Advance(time.Second)
		claimed := mustClaimExecutions(t, f.service(), 10)
		ids := make([]string, len(claimed))
		for i, c := range claimed {
			ids[i] = c.Record.ID
			if c.Record.ID == retried.ID && (c.Attempt != 2 || c.Recovered) {
				t.Fatalf("claim of the retried execution: got attempt %d, recovered %v; want 2, not recovered", c.Attempt, c.Recovered)
			}
		}
		if !slices.Contains(ids, retried.ID) || slices.Contains(ids, resolved.ID) {
			t.Fatalf("claim after the operator: got %v, want %s and not %s", ids, retried.ID, resolved.ID)
		}
		_, _, err = reportAs(ctx, f.service(), approval.ExecutionReport{ApprovalID: resolvedA.ID, Status: approval.ExecutionFailed, Version: 1, Actor: "payments", Cause: approval.HTTPCause("late")})
		wantCode(t, err, approval.ECONFLICT)
		wantExecution(t, mustExecution(t, f.store, resolved.ID), approval.ExecutionSucceeded, 0, "")
	})

	// What the runner knows of earlier attempts is state, not a reading of the audit trail:
	// Uncertain (an attempt may have reached the target) is set by an uncertain outcome or a
	// recovered claim and only an operator clears it; AttemptBase starts a new run's count.
	s.run(t, "Uncertainty", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		cause := approval.Cause{Kind: approval.CauseOperator, Operator: "root"}
		_, rec := mustApprovedExecution(t, f)
		want := func(what string, got *approval.ExecutionRecord, uncertain bool, base int) {
			t.Helper()
			if got.Uncertain != uncertain || got.AttemptBase != base {
				t.Fatalf("%s: got uncertain %v, attempt base %d; want %v, %d", what, got.Uncertain, got.AttemptBase, uncertain, base)
			}
			if stored := mustExecution(t, f.store, rec.ID); stored.Uncertain != uncertain || stored.AttemptBase != base {
				t.Fatalf("%s, read back: got uncertain %v, attempt base %d; want %v, %d", what, stored.Uncertain, stored.AttemptBase, uncertain, base)
			}
		}
		want("approved", rec, false, 0)
		// claim claims the execution (the only one due) at attempt and returns its record.
		claim := func(what string, attempt int, recovered bool) *approval.ExecutionRecord {
			t.Helper()
			claimed := mustClaimExecutions(t, f.service(), 10)
			wantClaims(t, what, claimed, attempt, rec)
			if claimed[0].Recovered != recovered {
				t.Fatalf("%s: got recovered %v, want %v", what, claimed[0].Recovered, recovered)
			}
			return claimed[0].Record
		}
		finish := func(attempt int, o approval.AttemptOutcome) *approval.ExecutionRecord {
			t.Helper()
			if o.Status == approval.ExecutionQueued {
				at := f.clock.Now()
				o.RetryAt = &at // due at once
			}
			got, err := f.service().FinishAttempt(ctx, rec.ID, attempt, o)
			if err != nil {
				t.Fatalf("finish attempt %d as %s: %v", attempt, o.Status, err)
			}
			return got
		}
		retry := approval.AttemptOutcome{Status: approval.ExecutionQueued, Error: "timeout", Reason: "test"}

		want("claim 1", claim("claim 1", 1, false), false, 0)
		want("retry 1, sure", finish(1, retry), false, 0)
		want("claim 2", claim("claim 2", 2, false), false, 0)
		retry.Uncertain = true
		want("retry 2, uncertain", finish(2, retry), true, 0)
		// Sticky: later claims and outcomes that are themselves certain keep it.
		want("claim 3", claim("claim 3", 3, false), true, 0)
		want("review 3, sure", finish(3, approval.AttemptOutcome{Status: approval.ExecutionNeedsReview, Error: "boom", Reason: "test"}), true, 0)

		// An operator's retry starts a new run: counted from attempt 3, nothing uncertain.
		got, err := f.service().RetryExecution(ctx, asAdmin("root"), rec.ID, cause)
		if err != nil {
			t.Fatalf("retry: %v", err)
		}
		want("operator retry", got, false, 3)
		want("claim 4", claim("claim 4", 4, false), false, 3)
		// Released unsent: neither changes, and the next claim reuses the number.
		if err := f.service().ReleaseExecution(ctx, rec.ID, 4); err != nil {
			t.Fatalf("release attempt 4: %v", err)
		}
		want("released", mustExecution(t, f.store, rec.ID), false, 3)
		want("claim 4 again", claim("claim 4 again", 4, false), false, 3)
		// A claim whose lease ran out after its call started may have sent it: the recovery
		// makes it uncertain.
		mustSend(t, f.service(), rec.ID, 4)
		f.clock.Advance(workLease)
		want("claim 5, recovered", claim("claim 5, recovered", 5, true), true, 3)
		want("failed 5", finish(5, approval.AttemptOutcome{Status: approval.ExecutionFailed, Error: "refused", Reason: "test"}), true, 3)

		// An operator's resolution settles what happened.
		got, err = f.service().ResolveExecution(ctx, asAdmin("root"), rec.ID, approval.ExecutionFailed, "never reached the ledger", cause)
		if err != nil {
			t.Fatalf("resolve: %v", err)
		}
		want("resolved", got, false, 3)
		got, err = f.service().RetryExecution(ctx, asAdmin("root"), rec.ID, cause)
		if err != nil {
			t.Fatalf("retry after the resolution: %v", err)
		}
		want("second operator retry", got, false, 5)
	})

	s.run(t, "OperatorActions", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		cause := approval.Cause{Kind: approval.CauseOperator, Operator: "root", Note: "checked with the payments team"}
		// finish claims the execution (which must be the only one due) and records outcome.
		finish := func(status approval.ExecutionStatus) (*approval.Approval, *approval.ExecutionRecord) {
			t.Helper()
			a, rec := mustApprovedExecution(t, f)
			wantClaims(t, "claim", mustClaimExecutions(t, f.service(), 10), 1, rec)
			if status == approval.ExecutionRunning {
				return a, rec
			}
			if _, err := f.service().FinishAttempt(ctx, rec.ID, 1, approval.AttemptOutcome{Status: status, Error: "boom", Reason: "test"}); err != nil {
				t.Fatalf("finish attempt as %s: %v", status, err)
			}
			return a, rec
		}
		failedA, failed := finish(approval.ExecutionFailed)
		_, failed2 := finish(approval.ExecutionFailed)
		reviewA, review := finish(approval.ExecutionNeedsReview)
		_, review2 := finish(approval.ExecutionNeedsReview)
		_, succeeded := finish(approval.ExecutionSucceeded)
		_, running := finish(approval.ExecutionRunning)
		queuedA, queued := mustApprovedExecution(t, f)
		missing := approval.NewID("exe")

		// Each action refuses the states it does not apply to, and unknown ids.
		for _, tc := range []struct {
			name   string
			do     func(id string) error
			refuse []*approval.ExecutionRecord
		}{
			{"retry", func(id string) error {
				_, err := f.service().RetryExecution(ctx, asAdmin("root"), id, cause)
				return err
			}, []*approval.ExecutionRecord{queued, running, succeeded}},
			{"resolve", func(id string) error {
				_, err := f.service().ResolveExecution(ctx, asAdmin("root"), id, approval.ExecutionSucceeded, "done by hand", cause)
				return err
			}, []*approval.ExecutionRecord{queued, running, succeeded}},
			{"cancel", func(id string) error {
				_, err := f.service().CancelExecution(ctx, asAdmin("root"), id, cause)
				return err
			}, []*approval.ExecutionRecord{running, succeeded, failed2, review2}},
		} {
			for _, rec := range tc.refuse {
				status := mustExecution(t, f.store, rec.ID).Status
				if got := approval.ErrorCode(tc.do(rec.ID)); got != approval.ECONFLICT {
					t.Fatalf("%s of a %s execution: got code %q, want %q", tc.name, status, got, approval.ECONFLICT)
				}
				if after := mustExecution(t, f.store, rec.ID).Status; after != status {
					t.Fatalf("refused %s of a %s execution: got status %s after it", tc.name, status, after)
				}
			}
			if got := approval.ErrorCode(tc.do(missing)); got != approval.ENOTFOUND {
				t.Fatalf("%s of an unknown execution: got code %q, want %q", tc.name, got, approval.ENOTFOUND)
			}
		}

		// Cancel: queued only, and then it is not claimed.
		f.clock.Advance(time.Second)
		got, err := f.service().CancelExecution(ctx, asAdmin("root"), queued.ID, cause)
		if err != nil {
			t.Fatalf("cancel a queued execution: %v", err)
		}
		wantExecution(t, got, approval.ExecutionCancelled, 0, "")
		evs := wantExecutionEvents(t, f.store, queuedA.ID, approval.EventExecutionCancelled)
		wantEvent(t, evs[0], "root", cause, f.clock.Now())
		_, err = f.service().CancelExecution(ctx, asAdmin("root"), queued.ID, cause)
		wantCode(t, err, approval.ECONFLICT)
		wantClaims(t, "claim after the cancel", mustClaimExecutions(t, f.service(), 10), 0)

		// Retry: failed, needs_review and cancelled run again, under the same operation key,
		// without a new approval. A second apart, so the claims below come in this order.
		failedRetriedAt := f.clock.Now().Add(time.Second)
		for _, rec := range []*approval.ExecutionRecord{failed, review2, queued} {
			f.clock.Advance(time.Second)
			got, err := f.service().RetryExecution(ctx, asAdmin("root"), rec.ID, cause)
			if err != nil {
				t.Fatalf("retry a %s execution: %v", mustExecution(t, f.store, rec.ID).Status, err)
			}
			wantExecution(t, got, approval.ExecutionQueued, 0, "")
			if got.NextAttemptAt == nil {
				t.Fatalf("retried execution: got no next attempt, want due now")
			}
			wantTime(t, "next_attempt_at of a retried execution", *got.NextAttemptAt, f.clock.Now())
		}
		evs = wantExecutionEvents(t, f.store, failedA.ID, approval.EventExecutionAttempt, approval.EventExecutionFailed, approval.EventExecutionRetried)
		wantEvent(t, evs[2], "root", cause, failedRetriedAt)
		wantClaims(t, "claim of the retried failure", mustClaimExecutions(t, f.service(), 1), 2, failed)
		wantClaims(t, "claim of the retried review", mustClaimExecutions(t, f.service(), 1), 2, review2)
		wantClaims(t, "claim of the retried cancel", mustClaimExecutions(t, f.service(), 1), 1, queued)

		// Resolve: needs_review and failed only, to what really happened.
		const note = "payout po_77 found in the ledger"
		got, err = f.service().ResolveExecution(ctx, asAdmin("root"), review.ID, approval.ExecutionSucceeded, note, cause)
		if err != nil {
			t.Fatalf("resolve an execution in needs_review: %v", err)
		}
		wantExecution(t, got, approval.ExecutionSucceeded, 0, "")
		evs = wantExecutionEvents(t, f.store, reviewA.ID, approval.EventExecutionAttempt, approval.EventExecutionNeedsReview, approval.EventExecutionResolved)
		if evs[2].Actor != "root" || evs[2].Cause.Kind != approval.CauseOperator || !strings.Contains(fmt.Sprint(evs[2].Detail)+evs[2].Cause.Note, note) {
			t.Fatalf("resolved event: got actor %q, cause %+v, detail %v; want root, the operator's cause and the note %q", evs[2].Actor, evs[2].Cause, evs[2].Detail, note)
		}
		got, err = f.service().ResolveExecution(ctx, asAdmin("root"), failed2.ID, approval.ExecutionFailed, "never sent", cause)
		if err != nil {
			t.Fatalf("resolve a failed execution: %v", err)
		}
		wantExecution(t, got, approval.ExecutionFailed, 0, "")
	})

	// Invariant 4 for outcomes reported by the caller or the target: only a newer version
	// moves the execution.
	s.run(t, "Report", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		// By approval id, for an action without a target: the caller executed it.
		a := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		mustDecide(t, f.store, a.ID, "alice", approval.VerdictApprove)
		byID := func(version int64, status approval.ExecutionStatus) approval.ExecutionReport {
			return approval.ExecutionReport{
				ApprovalID: a.ID, Status: status, Version: version, Result: []byte(fmt.Sprintf(`{"version": %d}`, version)),
				Actor: "ci-bot", Cause: approval.HTTPCause(fmt.Sprintf("report-%d", version)),
			}
		}
		var reportedAt []time.Time // when each report below is made
		f.clock.Advance(time.Second)
		reportedAt = append(reportedAt, f.clock.Now())
		rec := mustReport(t, f.service(), byID(2, approval.ExecutionSucceeded), true)
		wantExecution(t, rec, approval.ExecutionSucceeded, 2, `{"version": 2}`)
		// Reported, the execution shows in full.
		pub := mustApproval(t, f.store, a.ID).Execution
		if js, _ := json.Marshal(pub); !strings.Contains(string(js), `"id":`) || pub.Status != approval.ExecutionSucceeded {
			t.Fatalf("approval's execution after a report: got %s, want the full record, succeeded", js)
		}
		f.clock.Advance(time.Second)
		reportedAt = append(reportedAt, f.clock.Now())
		wantExecution(t, mustReport(t, f.service(), byID(1, approval.ExecutionFailed), false), approval.ExecutionSucceeded, 2, `{"version": 2}`)
		wantExecution(t, mustExecution(t, f.store, rec.ID), approval.ExecutionSucceeded, 2, `{"version": 2}`)
		f.clock.Advance(time.Second)
		reportedAt = append(reportedAt, f.clock.Now())
		wantExecution(t, mustReport(t, f.service(), byID(3, approval.ExecutionFailed), true), approval.ExecutionFailed, 3, `{"version": 3}`)
		evs := wantExecutionEvents(t, f.store, a.ID, approval.EventExecutionReported, approval.EventExecutionReportStale, approval.EventExecutionReported)
		for i, v := range []int{2, 1, 3} {
			wantEvent(t, evs[i], "ci-bot", approval.HTTPCause(fmt.Sprintf("report-%d", v)), reportedAt[i])
		}

		// By operation key, for an execution whose call is in flight: the target's report may
		// overtake the runner's record of its answer, and wins.
		b, recB := mustApprovedExecution(t, f)
		wantClaims(t, "claim", mustClaimExecutions(t, f.service(), 10), 1, recB)
		byKey := func(version int64, status approval.ExecutionStatus) approval.ExecutionReport {
			return approval.ExecutionReport{
				OperationKey: b.OperationKey, Status: status, Version: version, Result: []byte(fmt.Sprintf(`{"version": %d}`, version)),
				Actor: "payments", Cause: approval.Cause{Kind: approval.CauseInbox, Source: "payments", EventID: fmt.Sprintf("res_%d", version)},
			}
		}
		wantExecution(t, mustReport(t, f.service(), byKey(2, approval.ExecutionSucceeded), true), approval.ExecutionSucceeded, 2, `{"version": 2}`)
		wantExecution(t, mustReport(t, f.service(), byKey(1, approval.ExecutionFailed), false), approval.ExecutionSucceeded, 2, `{"version": 2}`)
		// The same version again is not newer.
		wantExecution(t, mustReport(t, f.service(), byKey(2, approval.ExecutionFailed), false), approval.ExecutionSucceeded, 2, `{"version": 2}`)
		wantExecution(t, mustReport(t, f.service(), byKey(3, approval.ExecutionFailed), true), approval.ExecutionFailed, 3, `{"version": 3}`)
		wantExecution(t, mustExecution(t, f.store, recB.ID), approval.ExecutionFailed, 3, `{"version": 3}`)
		wantExecutionEvents(t, f.store, b.ID, approval.EventExecutionAttempt, approval.EventExecutionReported,
			approval.EventExecutionReportStale, approval.EventExecutionReportStale, approval.EventExecutionReported)

		// Refused reports change nothing.
		for _, tc := range []struct {
			name string
			r    approval.ExecutionReport
			code string
		}{
			{"unknown approval", approval.ExecutionReport{ApprovalID: approval.NewID("apr"), Status: approval.ExecutionSucceeded, Version: 9}, approval.ENOTFOUND},
			{"unknown operation key", approval.ExecutionReport{OperationKey: "no-such-operation", Status: approval.ExecutionSucceeded, Version: 9}, approval.ENOTFOUND},
			{"status queued", approval.ExecutionReport{ApprovalID: b.ID, Status: approval.ExecutionQueued, Version: 9}, approval.EINVALID},
			{"status running", approval.ExecutionReport{ApprovalID: b.ID, Status: approval.ExecutionRunning, Version: 9}, approval.EINVALID},
			{"version 0", approval.ExecutionReport{ApprovalID: b.ID, Status: approval.ExecutionSucceeded, Version: 0}, approval.EINVALID},
		} {
			_, _, err := reportAs(ctx, f.service(), tc.r)
			if got := approval.ErrorCode(err); got != tc.code {
				t.Fatalf("report with %s: got code %q (%v), want %q", tc.name, got, err, tc.code)
			}
		}
		wantExecution(t, mustExecution(t, f.store, recB.ID), approval.ExecutionFailed, 3, `{"version": 3}`)

		// An operation key two requesters used names no one execution.
		c := PendingApproval(t, f.clock.Now())
		c.Requester, c.OperationKey, c.Fingerprint = "deployer", b.OperationKey, "fp-deployer-"+b.OperationKey
		MustCreate(t, f.store, c)
		mustDecide(t, f.store, c.ID, "alice", approval.VerdictApprove)
		_, _, err := reportAs(ctx, f.service(), byKey(9, approval.ExecutionSucceeded))
		wantCode(t, err, approval.ECONFLICT)
		wantExecution(t, mustExecution(t, f.store, recB.ID), approval.ExecutionFailed, 3, `{"version": 3}`)
	})

	// A report sets the outcome only of an execution whose outcome comes from reports
	// (ExecutionRecord.Reportable): one created not_configured, a targeted one running (call
	// in flight or accepted by an async target), or one a report was already applied to.
	// Otherwise approvald's own call decides: a report must not turn a recorded success into
	// a failure that an operator's retry would then send to the target again.
	s.run(t, "ReportOnlyWhatReportsDecide", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		cause := approval.Cause{Kind: approval.CauseOperator, Operator: "root"}
		report := func(approvalID string, version int64) (bool, error) {
			applied, _, err := reportAs(ctx, f.service(), approval.ExecutionReport{
				ApprovalID: approvalID, Status: approval.ExecutionFailed, Version: version,
				Result: []byte(`{"reported": true}`), Actor: "ci-bot", Cause: approval.HTTPCause("report"),
			})
			return applied, err
		}
		// refused checks that a report on a's execution is refused and changes nothing, not
		// even the audit trail.
		refused := func(what string, a *approval.Approval, rec *approval.ExecutionRecord) {
			t.Helper()
			before := mustExecution(t, f.store, rec.ID)
			trail := len(mustEvents(t, f.store, a.ID))
			_, err := report(a.ID, 1)
			if e := wantCode(t, err, approval.ECONFLICT); !strings.Contains(e.Message, "its own call to the target") {
				t.Fatalf("report on %s: got message %q, want it to say approvald records the outcome from its own call", what, e.Message)
			}
			after := mustExecution(t, f.store, rec.ID)
			wantExecution(t, after, before.Status, before.AppliedVersion, string(before.Result))
			if after.LastError != before.LastError || !after.UpdatedAt.Equal(before.UpdatedAt) {
				t.Fatalf("refused report on %s: got last error %q, updated %v; want %q, %v", what, after.LastError, after.UpdatedAt, before.LastError, before.UpdatedAt)
			}
			if n := len(mustEvents(t, f.store, a.ID)); n != trail {
				t.Fatalf("refused report on %s: got %d events, want %d", what, n, trail)
			}
		}
		// claimOne claims rec, which must be the only execution due.
		claimOne := func(rec *approval.ExecutionRecord) {
			t.Helper()
			wantClaims(t, "claim", mustClaimExecutions(t, f.service(), 10), rec.Attempts+1, rec)
		}
		finish := func(rec *approval.ExecutionRecord, o approval.AttemptOutcome) {
			t.Helper()
			if _, err := f.service().FinishAttempt(ctx, rec.ID, rec.Attempts+1, o); err != nil {
				t.Fatalf("finish attempt as %s: %v", o.Status, err)
			}
		}

		// Created not_configured: the caller's reports are the outcome, and it stays
		// untargeted whatever its status.
		plain := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		mustDecide(t, f.store, plain.ID, "alice", approval.VerdictApprove)
		plainRec := mustExecution(t, f.store, mustApproval(t, f.store, plain.ID).Execution.ID)
		if plainRec.Targeted {
			t.Fatalf("not_configured execution: got targeted, want not")
		}
		if applied, err := report(plain.ID, 1); err != nil || !applied {
			t.Fatalf("report on a not_configured execution: got applied %v, %v; want applied", applied, err)
		}
		if got := mustExecution(t, f.store, plainRec.ID); got.Targeted || got.Status != approval.ExecutionFailed {
			t.Fatalf("reported untargeted execution: got targeted %v, %s; want untargeted, failed", got.Targeted, got.Status)
		}

		// Queued: approvald will make the call.
		queuedA, queued := mustApprovedExecution(t, f)
		if !queued.Targeted {
			t.Fatalf("queued execution: got untargeted, want targeted")
		}
		refused("a queued execution", queuedA, queued)

		// Succeeded synchronously: the reviewer's reproduction. The success stands, so no
		// operator retry can send the call again.
		claimOne(queued)
		finish(queued, approval.AttemptOutcome{Status: approval.ExecutionSucceeded, Result: []byte(`{"payout": "po_1"}`), Reason: "200"})
		refused("a synchronous success", queuedA, queued)
		_, err := f.service().RetryExecution(ctx, asAdmin("root"), queued.ID, cause)
		wantCode(t, err, approval.ECONFLICT)

		// Failed, in needs_review, cancelled: approvald's own record, which an operator settles.
		for _, status := range []approval.ExecutionStatus{approval.ExecutionFailed, approval.ExecutionNeedsReview} {
			a, rec := mustApprovedExecution(t, f)
			claimOne(rec)
			finish(rec, approval.AttemptOutcome{Status: status, Error: "boom", Reason: "test"})
			refused("a "+string(status)+" execution", a, rec)
		}
		cancelledA, cancelled := mustApprovedExecution(t, f)
		if _, err := f.service().CancelExecution(ctx, asAdmin("root"), cancelled.ID, cause); err != nil {
			t.Fatalf("cancel: %v", err)
		}
		refused("a cancelled execution", cancelledA, cancelled)

		// Running, its call in flight: the target's report may come before the runner records
		// the answer, and the runner's record then finds the attempt over.
		flightA, flight := mustApprovedExecution(t, f)
		claimOne(flight)
		if applied, err := report(flightA.ID, 1); err != nil || !applied {
			t.Fatalf("report on a call in flight: got applied %v, %v; want applied", applied, err)
		}
		_, err = f.service().FinishAttempt(ctx, flight.ID, 1, approval.AttemptOutcome{Status: approval.ExecutionSucceeded, Reason: "200"})
		wantCode(t, err, approval.ECONFLICT)
		// A report applied: newer reports keep their order, whatever the status.
		if applied, err := report(flightA.ID, 2); err != nil || !applied {
			t.Fatalf("newer report after an applied one: got applied %v, %v; want applied", applied, err)
		}
		if applied, err := report(flightA.ID, 2); err != nil || applied {
			t.Fatalf("same version again: got applied %v, %v; want stale", applied, err)
		}

		// Accepted by an async target: waiting for exactly this report.
		asyncA, async := mustApprovedExecution(t, f)
		claimOne(async)
		finish(async, approval.AttemptOutcome{Status: approval.ExecutionRunning, Reason: "accepted"})
		if applied, err := report(asyncA.ID, 1); err != nil || !applied {
			t.Fatalf("report on an accepted async call: got applied %v, %v; want applied", applied, err)
		}
		wantExecution(t, mustExecution(t, f.store, async.ID), approval.ExecutionFailed, 1, `{"reported": true}`)
	})

	s.run(t, "ReportsOutOfOrder", func(t *testing.T, f *fixture) {
		a := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		mustDecide(t, f.store, a.ID, "alice", approval.VerdictApprove)
		for i, v := range []int64{3, 2, 1} {
			r := approval.ExecutionReport{
				ApprovalID: a.ID, Status: approval.ExecutionFailed, Version: v, Result: []byte(fmt.Sprintf(`{"version": %d}`, v)),
				Actor: "ci-bot", Cause: approval.HTTPCause("report"),
			}
			if v == 3 {
				r.Status = approval.ExecutionSucceeded
			}
			mustReport(t, f.service(), r, i == 0)
		}
		wantExecution(t, mustExecution(t, f.store, mustApproval(t, f.store, a.ID).Execution.ID), approval.ExecutionSucceeded, 3, `{"version": 3}`)
		wantExecutionEvents(t, f.store, a.ID, approval.EventExecutionReported, approval.EventExecutionReportStale, approval.EventExecutionReportStale)
	})

	// Reports racing each other: whatever order they commit in, the newest wins, and every one
	// is in the trail, applied or stale.
	s.run(t, "ReportRace", func(t *testing.T, f *fixture) {
		const reporters = 20
		a := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		mustDecide(t, f.store, a.ID, "alice", approval.VerdictApprove)
		reports := make([]approval.ExecutionReport, reporters)
		for i := range reports {
			v := int64(i + 1)
			status := approval.ExecutionFailed
			if v%2 == 0 {
				status = approval.ExecutionSucceeded
			}
			reports[i] = approval.ExecutionReport{
				ApprovalID: a.ID, Status: status, Version: v, Result: []byte(fmt.Sprintf(`{"version": %d}`, v)),
				Actor: "ci-bot", Cause: approval.HTTPCause(fmt.Sprintf("report-%d", v)),
			}
		}
		applied := make([]bool, reporters)
		errs := make([]error, reporters)
		race(reporters, func(i int) {
			applied[i], _, errs[i] = reportAs(t.Context(), f.service(), reports[i])
		})
		nApplied := 0
		for i := range reporters {
			if errs[i] != nil {
				t.Fatalf("report version %d: %v", i+1, errs[i])
			}
			if applied[i] {
				nApplied++
			}
		}
		if !applied[reporters-1] {
			t.Fatalf("report version %d, the newest: got stale, want applied", reporters)
		}
		rec := mustExecution(t, f.store, mustApproval(t, f.store, a.ID).Execution.ID)
		wantExecution(t, rec, approval.ExecutionSucceeded, reporters, fmt.Sprintf(`{"version": %d}`, reporters))

		var reported, stale int
		for _, ev := range mustEvents(t, f.store, a.ID) {
			switch ev.Type {
			case approval.EventExecutionReported:
				reported++
			case approval.EventExecutionReportStale:
				stale++
			}
		}
		if reported != nApplied || stale != reporters-nApplied {
			t.Fatalf("trail: got %d reported and %d stale events, want %d and %d", reported, stale, nApplied, reporters-nApplied)
		}
		t.Logf("%d of %d racing reports applied", nApplied, reporters)
	})

	// Execution runners on every replica claim at once: each execution's first attempt goes to
	// exactly one of them.
	s.run(t, "ClaimRace", func(t *testing.T, f *fixture) {
		const executions, claimers, batch = 20, 8, 2
		for range executions {
			mustApprovedExecution(t, f)
		}
		claimed := make([][]*approval.ExecutionClaim, claimers)
		errs := make([]error, claimers)
		race(claimers, func(i int) {
			// Claim batches until a pass finds nothing, in at most one pass per execution and
			// one more (as in the inbox's ClaimRace).
			for range executions + 1 {
				got, err := f.service().ClaimExecutions(t.Context(), workLease, batch)
				if err != nil {
					errs[i] = err
					return
				}
				if len(got) == 0 {
					return
				}
				claimed[i] = append(claimed[i], got...)
			}
		})
		seen := make(map[string]int)
		for i := range claimers {
			if errs[i] != nil {
				t.Fatalf("claimer %d: %v", i, errs[i])
			}
			for _, c := range claimed[i] {
				seen[c.Record.ID]++
				if c.Attempt != 1 || c.Recovered {
					t.Fatalf("claimer %d got %s at attempt %d (recovered %v), want attempt 1", i, c.Record.ID, c.Attempt, c.Recovered)
				}
			}
		}
		if len(seen) != executions {
			t.Fatalf("claimers together: got %d distinct executions, want %d", len(seen), executions)
		}
		for id, n := range seen {
			if n != 1 {
				t.Fatalf("execution %s: attempt 1 claimed %d times, want once", id, n)
			}
		}
	})

	s.run(t, "Counts", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		var recs []*approval.ExecutionRecord
		for range 4 {
			_, rec := mustApprovedExecution(t, f)
			recs = append(recs, rec)
			f.clock.Advance(time.Second)
		}
		untargeted := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		mustDecide(t, f.store, untargeted.ID, "alice", approval.VerdictApprove)

		wantClaims(t, "claim", mustClaimExecutions(t, f.service(), 3), 1, recs[:3]...)
		if _, err := f.service().FinishAttempt(ctx, recs[0].ID, 1, approval.AttemptOutcome{Status: approval.ExecutionSucceeded}); err != nil {
			t.Fatalf("finish attempt: %v", err)
		}
		f.clock.Advance(workLease / 2)
		if err := f.service().RenewExecution(ctx, recs[1].ID, 1, 2*workLease); err != nil {
			t.Fatalf("renew: %v", err)
		}
		f.clock.Advance(workLease/2 + time.Second)
		// recs[2]'s worker is gone: running, its lease over, not yet recovered.
		counts, stuck, err := f.store.ExecutionCounts(ctx)
		if err != nil {
			t.Fatalf("execution counts: %v", err)
		}
		want := map[approval.ExecutionStatus]int{
			approval.ExecutionSucceeded: 1, approval.ExecutionRunning: 2, approval.ExecutionQueued: 1, approval.ExecutionNotConfigured: 1,
		}
		for _, st := range []approval.ExecutionStatus{approval.ExecutionQueued, approval.ExecutionRunning, approval.ExecutionSucceeded,
			approval.ExecutionFailed, approval.ExecutionNeedsReview, approval.ExecutionCancelled, approval.ExecutionNotConfigured} {
			if counts[st] != want[st] {
				t.Fatalf("execution counts: got %v, want %v", counts, want)
			}
		}
		if stuck != 1 {
			t.Fatalf("stuck executions: got %d, want 1 (running past its lease)", stuck)
		}
		wantBacklog(t, f.store)
		// Past the renewed lease too: both running executions are stuck.
		f.clock.Advance(2 * workLease)
		if _, stuck, err := f.store.ExecutionCounts(ctx); err != nil || stuck != 2 {
			t.Fatalf("stuck executions past both leases: got %d (%v), want 2", stuck, err)
		}
		wantBacklog(t, f.store)
	})

	s.run(t, "List", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		var recs []*approval.ExecutionRecord
		for range 5 {
			_, rec := mustApprovedExecution(t, f)
			recs = append(recs, rec)
			f.clock.Advance(time.Second)
		}
		wantClaims(t, "claim", mustClaimExecutions(t, f.service(), 2), 1, recs[:2]...)
		for _, rec := range recs[:2] {
			if _, err := f.service().FinishAttempt(ctx, rec.ID, 1, approval.AttemptOutcome{Status: approval.ExecutionSucceeded}); err != nil {
				t.Fatalf("finish attempt: %v", err)
			}
		}
		newest := slices.Clone(recs)
		slices.Reverse(newest)

		for _, tc := range []struct {
			name   string
			filter approval.ExecutionFilter
			want   []*approval.ExecutionRecord
		}{
			{"all", approval.ExecutionFilter{}, newest},
			{"queued", approval.ExecutionFilter{Status: approval.ExecutionQueued}, newest[:3]},
			{"succeeded", approval.ExecutionFilter{Status: approval.ExecutionSucceeded}, newest[3:]},
			{"needs_review", approval.ExecutionFilter{Status: approval.ExecutionNeedsReview}, nil},
		} {
			wantExecutionList(t, f.store, tc.filter, tc.want...)
			for _, limit := range []int{1, 2} {
				filter := tc.filter
				filter.Limit = limit
				got := walkExecutionPages(t, f.store, filter, len(tc.want))
				wantExecutionIDs(t, fmt.Sprintf("%s, %d per page", tc.name, limit), got, tc.want)
			}
		}
		for _, cursor := range []string{"not a cursor!", "Zm9v"} {
			_, _, err := f.store.Executions(ctx, approval.ExecutionFilter{Cursor: cursor})
			wantCode(t, err, approval.EINVALID)
		}
	})
}

// mustApprovedExecution creates an approval for TargetedAction and approves it, and returns it
// with its queued execution.
func mustApprovedExecution(tb testing.TB, f *fixture) (*approval.Approval, *approval.ExecutionRecord) {
	tb.Helper()
	a := PendingApproval(tb, f.clock.Now())
	a.Action = TargetedAction
	MustCreate(tb, f.store, a)
	mustDecide(tb, f.store, a.ID, "alice", approval.VerdictApprove)
	got := mustApproval(tb, f.store, a.ID)
	if got.Execution == nil || got.Execution.ID == "" {
		tb.Fatalf("approved %s: got execution %+v, want a queued one", TargetedAction, got.Execution)
	}
	return got, mustExecution(tb, f.store, got.Execution.ID)
}

func mustExecution(tb testing.TB, s approval.Store, id string) *approval.ExecutionRecord {
	tb.Helper()
	rec, err := s.Execution(tb.Context(), id)
	if err != nil {
		tb.Fatalf("execution %s: %v", id, err)
	}
	return rec
}

func mustClaimExecutions(tb testing.TB, svc *approval.Service, limit int) []*approval.ExecutionClaim {
	tb.Helper()
	claims, err := svc.ClaimExecutions(tb.Context(), workLease, limit)
	if err != nil {
		tb.Fatalf("claim executions: %v", err)
	}
	return claims
}

// mustSend marks the call of attempt of the execution id as started (RecordAttempts), as a
// runner does right before it sends it.
func mustSend(tb testing.TB, svc *approval.Service, id string, attempt int) {
	tb.Helper()
	done, err := svc.RecordAttempts(tb.Context(), approval.AttemptBatch{Sends: []approval.AttemptSend{{ID: id, Attempt: attempt}}, Lease: workLease})
	if err == nil {
		err = done.Sent[0]
	}
	if err != nil {
		tb.Fatalf("send attempt %d of %s: %v", attempt, id, err)
	}
}

// mustReport reports r and checks whether it was applied.
func mustReport(tb testing.TB, svc *approval.Service, r approval.ExecutionReport, applied bool) *approval.ExecutionRecord {
	tb.Helper()
	got, rec, err := reportAs(tb.Context(), svc, r)
	if err != nil {
		tb.Fatalf("report version %d: %v", r.Version, err)
	}
	if got != applied {
		tb.Fatalf("report version %d: got applied %v, want %v", r.Version, got, applied)
	}
	if rec == nil {
		tb.Fatalf("report version %d: got no execution, want its current state", r.Version)
	}
	return rec
}

// wantClaims checks a claim of executions: want, oldest due first, each running at the given
// attempt.
func wantClaims(tb testing.TB, what string, got []*approval.ExecutionClaim, attempt int, want ...*approval.ExecutionRecord) {
	tb.Helper()
	ids := make([]string, len(got))
	for i, c := range got {
		ids[i] = c.Record.ID
	}
	wantIDs := make([]string, len(want))
	for i, rec := range want {
		wantIDs[i] = rec.ID
	}
	if !slices.Equal(ids, wantIDs) {
		tb.Fatalf("%s: got executions %v, want %v", what, ids, wantIDs)
	}
	for _, c := range got {
		if c.Attempt != attempt || c.Record.Status != approval.ExecutionRunning {
			tb.Fatalf("%s: got %s %s at attempt %d, want running at attempt %d", what, c.Record.ID, c.Record.Status, c.Attempt, attempt)
		}
	}
}

// wantExecution checks an execution's status, applied report version and result ("" for
// none).
func wantExecution(tb testing.TB, rec *approval.ExecutionRecord, status approval.ExecutionStatus, applied int64, result string) {
	tb.Helper()
	if rec.Status != status || rec.AppliedVersion != applied || !bytes.Equal(rec.Result, []byte(result)) {
		tb.Fatalf("execution %s: got %s, applied version %d, result %q; want %s, %d, %q", rec.ID, rec.Status, rec.AppliedVersion, rec.Result, status, applied, result)
	}
}

// wantExecutionEvents checks the audit trail of an approved approval past its queued
// execution (for an action with a target) or past its approval (without one), and returns
// those later events.
func wantExecutionEvents(tb testing.TB, s approval.Store, approvalID string, want ...string) []approval.Event {
	tb.Helper()
	evs := mustEvents(tb, s, approvalID)
	i := slices.IndexFunc(evs, func(ev approval.Event) bool { return ev.Type == approval.EventApproved })
	if i < 0 {
		tb.Fatalf("events of %s: got no %s", approvalID, approval.EventApproved)
	}
	if i+1 < len(evs) && evs[i+1].Type == approval.EventExecutionQueued {
		i++
	}
	types := make([]string, 0, len(evs))
	for _, ev := range evs {
		types = append(types, ev.Type)
	}
	if !slices.Equal(types[i+1:], want) {
		tb.Fatalf("events of %s: got %v, want %v after %s", approvalID, types, want, types[i])
	}
	return evs[i+1:]
}

// wantWorkerCause checks that an event names the worker attempt that caused it.
func wantWorkerCause(tb testing.TB, ev approval.Event, attempt int) {
	tb.Helper()
	if ev.Cause.Kind != approval.CauseWorker || ev.Cause.Attempt != attempt {
		tb.Fatalf("event %s: got cause %+v, want the worker's attempt %d", ev.Type, ev.Cause, attempt)
	}
}

// wantExecutionList checks one page of Executions holding exactly want.
func wantExecutionList(tb testing.TB, s approval.Store, f approval.ExecutionFilter, want ...*approval.ExecutionRecord) {
	tb.Helper()
	got, next, err := s.Executions(tb.Context(), f)
	if err != nil {
		tb.Fatalf("executions %+v: %v", f, err)
	}
	if next != "" {
		tb.Fatalf("executions %+v: got next cursor %q on the only page, want none", f, next)
	}
	wantExecutionIDs(tb, fmt.Sprintf("executions %+v", f), got, want)
}

func wantExecutionIDs(tb testing.TB, what string, got, want []*approval.ExecutionRecord) {
	tb.Helper()
	ids := func(recs []*approval.ExecutionRecord) []string {
		out := make([]string, len(recs))
		for i, rec := range recs {
			out[i] = rec.ID
		}
		return out
	}
	if g, w := ids(got), ids(want); !slices.Equal(g, w) {
		tb.Fatalf("%s: got %v, want %v", what, g, w)
	}
}

// walkExecutionPages follows cursors from the first page to the last, as walkPages does for
// approvals.
func walkExecutionPages(tb testing.TB, s approval.Store, f approval.ExecutionFilter, want int) []*approval.ExecutionRecord {
	tb.Helper()
	var all []*approval.ExecutionRecord
	for {
		page, next, err := s.Executions(tb.Context(), f)
		if err != nil {
			tb.Fatalf("executions %+v: %v", f, err)
		}
		all = append(all, page...)
		if next == "" {
			return all
		}
		if len(page) != f.Limit {
			tb.Fatalf("page after %q: got %d executions and a cursor, want a full page of %d", f.Cursor, len(page), f.Limit)
		}
		if len(all) >= want {
			tb.Fatalf("pages of %d: got %d executions and still a cursor, want %d in all and no cursor after the last", f.Limit, len(all), want)
		}
		f.Cursor = next
	}
}

// claimedExecutions makes n approved approvals with executions, a second apart, and claims
// them all (attempt 1 each).
func claimedExecutions(t *testing.T, f *fixture, n int) ([]*approval.Approval, []*approval.ExecutionRecord) {
	t.Helper()
	var recs []*approval.ExecutionRecord
	var approvals []*approval.Approval
	for range n {
		a, rec := mustApprovedExecution(t, f)
		approvals, recs = append(approvals, a), append(recs, rec)
		f.clock.Advance(time.Second)
	}
	wantClaims(t, "claim", mustClaimExecutions(t, f.service(), 10), 1, recs...)
	return approvals, recs
}

// reportAs reports r for an operator named r.Actor: an operator may report on any execution
// (approval.Principal.MayReport), so the report meets the execution's rules alone.
func reportAs(ctx context.Context, svc *approval.Service, r approval.ExecutionReport) (bool, *approval.ExecutionRecord, error) {
	return svc.ReportExecution(ctx, approval.Principal{Subject: r.Actor, Role: approval.RoleOperator}, r)
}
