package storetest

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/approvald/approval"
)

// exerciseIdempotency covers BeginIdempotent, CreateApproval, ReleaseIdempotent and
// PurgeResponses: invariant 2, one approval per operation.
func exerciseIdempotency(t *testing.T, s suite) {
	s.run(t, "ClaimCreateReplay", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		a := PendingApproval(t, f.clock.Now())
		claim := mustBegin(t, f.store, ClaimFor(a), approval.Claimed)
		if claim.Token == "" {
			t.Fatalf("claimed: got empty fencing token, want one")
		}
		resp := ResponseFor(a)
		if err := f.store.CreateApproval(ctx, a, claim, resp, Retention, createCause(a)); err != nil {
			t.Fatalf("create approval: %v", err)
		}

		// The claim is spent: it cannot create a second approval.
		again := PendingApproval(t, f.clock.Now())
		again.OperationKey, again.Fingerprint = a.OperationKey, a.Fingerprint
		err := f.store.CreateApproval(ctx, again, claim, ResponseFor(again), Retention, createCause(again))
		wantCode(t, err, approval.ECONFLICT)
		_, err = f.store.Approval(ctx, again.ID)
		wantCode(t, err, approval.ENOTFOUND)

		// Every retry inside the retention period replays the stored response exactly.
		var elapsed time.Duration
		for _, at := range []time.Duration{0, time.Hour, Retention - time.Second} {
			f.clock.Advance(at - elapsed)
			elapsed = at
			got := mustBegin(t, f.store, ClaimFor(a), approval.Replayed)
			wantResponse(t, got.Response, resp)
		}
		wantState(t, mustApproval(t, f.store, a.ID), approval.StatusPending, 1)
	})

	s.run(t, "CreateStoresTheApproval", func(t *testing.T, f *fixture) {
		a := PendingApproval(t, f.clock.Now())
		a.Approvers = []string{"zoe", "alice", "mallory"} // listed order, not sorted
		a.RequiredApprovals = 2
		// The context is kept byte for byte as given: white space and key order included.
		a.Context = []byte(`{"z": 1, "a": {"nested": [true, null]}}`)
		got := MustCreate(t, f.store, a)

		if got.ID != a.ID || got.OperationKey != a.OperationKey || got.Fingerprint != a.Fingerprint {
			t.Fatalf("identity: got (%s, %s, %s), want (%s, %s, %s)", got.ID, got.OperationKey, got.Fingerprint, a.ID, a.OperationKey, a.Fingerprint)
		}
		if got.Action != a.Action || got.Title != a.Title || got.Requester != a.Requester {
			t.Fatalf("action, title, requester: got (%q, %q, %q), want (%q, %q, %q)", got.Action, got.Title, got.Requester, a.Action, a.Title, a.Requester)
		}
		if !bytes.Equal(got.Context, a.Context) {
			t.Fatalf("context: got %s, want %s", got.Context, a.Context)
		}
		if fmt.Sprint(got.Approvers) != fmt.Sprint(a.Approvers) || got.RequiredApprovals != 2 {
			t.Fatalf("approvers: got %v needing %d, want %v needing 2", got.Approvers, got.RequiredApprovals, a.Approvers)
		}
		wantState(t, got, approval.StatusPending, 1)
		// Decisions is an empty list, not nil, so the API shows [] rather than null.
		if got.Decisions == nil || len(got.Decisions) != 0 {
			t.Fatalf("decisions: got %#v, want an empty non-nil slice", got.Decisions)
		}
		if got.DecidedAt != nil || got.Execution != nil {
			t.Fatalf("decided_at, execution: got %v, %v, want nil, nil", got.DecidedAt, got.Execution)
		}
		wantTime(t, "created_at", got.CreatedAt, a.CreatedAt)
		wantTime(t, "expires_at", got.ExpiresAt, a.ExpiresAt)
	})

	s.run(t, "OtherFingerprintMismatches", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		done := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		other := ClaimFor(done)
		other.Fingerprint = "fp-another-request"
		_, err := f.store.BeginIdempotent(ctx, other)
		wantCode(t, err, approval.EMISMATCH)
		// The mismatch changed nothing: the original still replays.
		got := mustBegin(t, f.store, ClaimFor(done), approval.Replayed)
		wantResponse(t, got.Response, ResponseFor(done))

		// A different request under a key still in flight is a mismatch too, and leaves the
		// claim to its owner.
		a := PendingApproval(t, f.clock.Now())
		claim := mustBegin(t, f.store, ClaimFor(a), approval.Claimed)
		other = ClaimFor(a)
		other.Fingerprint = "fp-another-request"
		_, err = f.store.BeginIdempotent(ctx, other)
		wantCode(t, err, approval.EMISMATCH)
		if err := f.store.CreateApproval(ctx, a, claim, ResponseFor(a), Retention, createCause(a)); err != nil {
			t.Fatalf("create after a mismatching request: %v", err)
		}
	})

	s.run(t, "KeysArePerRequester", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		first := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		// Another requester using the same key (and even the same fingerprint) names another
		// operation: MustCreate requires Claimed.
		b := PendingApproval(t, f.clock.Now())
		b.Requester, b.OperationKey, b.Fingerprint = "deployer", first.OperationKey, first.Fingerprint
		second := MustCreate(t, f.store, b)
		if second.ID == first.ID || second.OperationKey != first.OperationKey {
			t.Fatalf("second approval: got id %s key %s, want a new id under key %s", second.ID, second.OperationKey, first.OperationKey)
		}
		got := mustBegin(t, f.store, ClaimFor(first), approval.Replayed)
		wantResponse(t, got.Response, ResponseFor(first))
		got = mustBegin(t, f.store, ClaimFor(b), approval.Replayed)
		wantResponse(t, got.Response, ResponseFor(b))
		list, _, err := f.store.Approvals(ctx, approval.ApprovalFilter{})
		if err != nil {
			t.Fatalf("approvals: %v", err)
		}
		if len(list) != 2 {
			t.Fatalf("approvals: got %d, want 2", len(list))
		}
	})

	s.run(t, "InFlightConflicts", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		a := PendingApproval(t, f.clock.Now())
		mustBegin(t, f.store, ClaimFor(a), approval.Claimed)
		// RetryAfter is the time left on the lease, and never less than a second.
		var elapsed time.Duration
		for _, step := range []struct {
			at, want time.Duration
		}{
			{0, Lease},
			{20 * time.Second, 10 * time.Second},
			{Lease - 100*time.Millisecond, time.Second},
		} {
			f.clock.Advance(step.at - elapsed)
			elapsed = step.at
			_, err := f.store.BeginIdempotent(ctx, ClaimFor(a))
			e := wantCode(t, err, approval.ECONFLICT)
			if e.RetryAfter != step.want {
				t.Fatalf("retry after, %v into a %v lease: got %v, want %v", step.at, Lease, e.RetryAfter, step.want)
			}
		}
	})

	s.run(t, "ExpiredLeaseIsTakenOver", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		a := PendingApproval(t, f.clock.Now())
		first := mustBegin(t, f.store, ClaimFor(a), approval.Claimed)
		f.clock.Advance(Lease + time.Second)
		second := mustBegin(t, f.store, ClaimFor(a), approval.Claimed)
		if second.Token == first.Token {
			t.Fatalf("takeover: got the old token %q again, want a new one", second.Token)
		}

		// The first owner lost its lease: its create is fenced off and creates nothing.
		err := f.store.CreateApproval(ctx, a, first, ResponseFor(a), Retention, createCause(a))
		wantCode(t, err, approval.ECONFLICT)
		_, err = f.store.Approval(ctx, a.ID)
		wantCode(t, err, approval.ENOTFOUND)
		_, err = f.store.Events(ctx, a.ID)
		wantCode(t, err, approval.ENOTFOUND)
		// ... and did not disturb the new owner's claim.
		_, err = f.store.BeginIdempotent(ctx, ClaimFor(a))
		wantCode(t, err, approval.ECONFLICT)

		resp := ResponseFor(a)
		resp.Body = append(resp.Body, "second attempt"...)
		if err := f.store.CreateApproval(ctx, a, second, resp, Retention, createCause(a)); err != nil {
			t.Fatalf("create by the new owner: %v", err)
		}
		got := mustBegin(t, f.store, ClaimFor(a), approval.Replayed)
		wantResponse(t, got.Response, resp)
	})

	s.run(t, "Release", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		a := PendingApproval(t, f.clock.Now())
		first := mustBegin(t, f.store, ClaimFor(a), approval.Claimed)
		mustRelease(t, f.store, a, first)
		// A released claim cannot create.
		err := f.store.CreateApproval(ctx, a, first, ResponseFor(a), Retention, createCause(a))
		wantCode(t, err, approval.ECONFLICT)
		_, err = f.store.Approval(ctx, a.ID)
		wantCode(t, err, approval.ENOTFOUND)
		// Released: the retry is claimed at once, without waiting for the lease.
		second := mustBegin(t, f.store, ClaimFor(a), approval.Claimed)
		if second.Token == first.Token {
			t.Fatalf("claim after release: got the released token %q, want a new one", second.Token)
		}

		// Releasing with a token that lost its lease is a no-op.
		f.clock.Advance(Lease + time.Second)
		third := mustBegin(t, f.store, ClaimFor(a), approval.Claimed)
		mustRelease(t, f.store, a, second)
		_, err = f.store.BeginIdempotent(ctx, ClaimFor(a))
		wantCode(t, err, approval.ECONFLICT)

		// Releasing a completed record is a no-op as well.
		if err := f.store.CreateApproval(ctx, a, third, ResponseFor(a), Retention, createCause(a)); err != nil {
			t.Fatalf("create: %v", err)
		}
		mustRelease(t, f.store, a, third)
		got := mustBegin(t, f.store, ClaimFor(a), approval.Replayed)
		wantResponse(t, got.Response, ResponseFor(a))
	})

	s.run(t, "PurgedResponseFindsTheApproval", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		old := PendingApproval(t, f.clock.Now())
		old.ExpiresAt = old.CreatedAt.Add(72 * time.Hour)
		oldClaim := mustBegin(t, f.store, ClaimFor(old), approval.Claimed)
		if err := f.store.CreateApproval(ctx, old, oldClaim, ResponseFor(old), Retention, createCause(old)); err != nil {
			t.Fatalf("create: %v", err)
		}
		f.clock.Advance(12 * time.Hour)
		recent := PendingApproval(t, f.clock.Now())
		recent.ExpiresAt = recent.CreatedAt.Add(72 * time.Hour)
		MustCreate(t, f.store, recent)
		mustDecide(t, f.store, old.ID, "alice", approval.VerdictApprove)

		// 25 hours in: old's record has outlived its retention, recent's has not. The grace
		// period applies to in-flight records only, so it must not save old's.
		f.clock.Advance(13 * time.Hour)
		if n := mustPurge(t, f.store, 2*time.Hour, 100); n != 1 {
			t.Fatalf("purge: got %d records, want 1", n)
		}
		if n := mustPurge(t, f.store, 2*time.Hour, 100); n != 0 {
			t.Fatalf("second purge: got %d records, want 0", n)
		}

		// The same request now finds the approval in its current state, decision included.
		got := mustBegin(t, f.store, ClaimFor(old), approval.Existing)
		if got.Approval == nil || got.Approval.ID != old.ID {
			t.Fatalf("existing: got %+v, want approval %s", got.Approval, old.ID)
		}
		wantState(t, got.Approval, approval.StatusApproved, 2)
		// A different request under the key is still a mismatch: the approval keeps its
		// fingerprint for ever.
		other := ClaimFor(old)
		other.Fingerprint = "fp-another-request"
		_, err := f.store.BeginIdempotent(ctx, other)
		wantCode(t, err, approval.EMISMATCH)
		// Nor can the spent claim, its record gone, create a second approval under the key.
		second := PendingApproval(t, f.clock.Now())
		second.OperationKey, second.Fingerprint = old.OperationKey, old.Fingerprint
		err = f.store.CreateApproval(ctx, second, oldClaim, ResponseFor(second), Retention, createCause(second))
		wantCode(t, err, approval.ECONFLICT)
		_, err = f.store.Approval(ctx, second.ID)
		wantCode(t, err, approval.ENOTFOUND)

		resp := mustBegin(t, f.store, ClaimFor(recent), approval.Replayed)
		wantResponse(t, resp.Response, ResponseFor(recent))
	})

	s.run(t, "PurgeAbandonedClaims", func(t *testing.T, f *fixture) {
		const grace = time.Minute
		a := PendingApproval(t, f.clock.Now())
		mustBegin(t, f.store, ClaimFor(a), approval.Claimed)
		f.clock.Advance(Lease + grace - time.Second)
		if n := mustPurge(t, f.store, grace, 100); n != 0 {
			t.Fatalf("purge within the grace period: got %d records, want 0", n)
		}
		f.clock.Advance(2 * time.Second)
		if n := mustPurge(t, f.store, grace, 100); n != 1 {
			t.Fatalf("purge after the grace period: got %d records, want 1", n)
		}
		mustBegin(t, f.store, ClaimFor(a), approval.Claimed)
	})

	s.run(t, "PurgeLimit", func(t *testing.T, f *fixture) {
		for range 3 {
			MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		}
		f.clock.Advance(Retention + time.Second)
		for _, want := range []int{2, 1, 0} {
			if n := mustPurge(t, f.store, 0, 2); n != want {
				t.Fatalf("purge with limit 2: got %d records, want %d", n, want)
			}
		}
	})

	// Many identical requests at once, as from a client retrying on a short timeout: one
	// creates, the rest replay or are told to retry, and one approval exists per key.
	s.run(t, "ConcurrentCreates", func(t *testing.T, f *fixture) {
		const keys, racers = 10, 100
		ctx := t.Context()
		for range keys {
			// Computed before the race: a store may write to a in CreateApproval.
			a := PendingApproval(t, f.clock.Now())
			claim, resp := ClaimFor(a), ResponseFor(a)
			type result struct {
				claim     approval.ClaimResult
				err       error
				createErr error
			}
			results := make([]result, racers)
			race(racers, func(i int) {
				r := &results[i]
				r.claim, r.err = f.store.BeginIdempotent(ctx, claim)
				if r.err == nil && r.claim.Outcome == approval.Claimed {
					r.createErr = f.store.CreateApproval(ctx, a, r.claim, resp, Retention, approval.HTTPCause(fmt.Sprintf("racer-%d", i)))
				}
			})
			claimed := 0
			for i, r := range results {
				switch {
				case r.err == nil && r.claim.Outcome == approval.Claimed:
					claimed++
					if r.createErr != nil {
						t.Fatalf("racer %d claimed but could not create: %v", i, r.createErr)
					}
				case r.err == nil && r.claim.Outcome == approval.Replayed:
					wantResponse(t, r.claim.Response, resp)
				case approval.ErrorCode(r.err) == approval.ECONFLICT:
				default:
					t.Fatalf("racer %d: got outcome %v, error %v, want Claimed, Replayed or ECONFLICT", i, r.claim.Outcome, r.err)
				}
			}
			if claimed != 1 {
				t.Fatalf("key %s: got %d racers claiming, want 1", a.OperationKey, claimed)
			}
		}
		list, _, err := f.store.Approvals(ctx, approval.ApprovalFilter{Limit: approval.MaxPageSize})
		if err != nil {
			t.Fatalf("approvals: %v", err)
		}
		perKey := make(map[string]int)
		for _, a := range list {
			perKey[a.OperationKey]++
		}
		if len(list) != keys || len(perKey) != keys {
			t.Fatalf("after the races: got %d approvals under %d keys, want %d under %d", len(list), len(perKey), keys, keys)
		}
	})

	// Several retries finding the same expired lease: the takeover is a conditional write, so
	// exactly one wins.
	s.run(t, "ConcurrentTakeovers", func(t *testing.T, f *fixture) {
		const rounds, racers = 10, 20
		ctx := t.Context()
		for range rounds {
			a := PendingApproval(t, f.clock.Now())
			first := mustBegin(t, f.store, ClaimFor(a), approval.Claimed)
			f.clock.Advance(Lease + time.Second)
			claims := make([]approval.ClaimResult, racers)
			errs := make([]error, racers)
			claim := ClaimFor(a)
			race(racers, func(i int) { claims[i], errs[i] = f.store.BeginIdempotent(ctx, claim) })
			var winner *approval.ClaimResult
			for i := range racers {
				switch {
				case errs[i] == nil && claims[i].Outcome == approval.Claimed:
					if winner != nil {
						t.Fatalf("key %s: two takeovers won (tokens %q and %q), want one", a.OperationKey, winner.Token, claims[i].Token)
					}
					winner = &claims[i]
				case approval.ErrorCode(errs[i]) != approval.ECONFLICT:
					t.Fatalf("racer %d: got outcome %v, error %v, want Claimed or ECONFLICT", i, claims[i].Outcome, errs[i])
				}
			}
			if winner == nil {
				t.Fatalf("key %s: no takeover won, want one", a.OperationKey)
			}
			err := f.store.CreateApproval(ctx, a, first, ResponseFor(a), Retention, createCause(a))
			wantCode(t, err, approval.ECONFLICT)
			if err := f.store.CreateApproval(ctx, a, *winner, ResponseFor(a), Retention, createCause(a)); err != nil {
				t.Fatalf("create by the winner: %v", err)
			}
		}
	})
}

func mustBegin(tb testing.TB, s approval.Store, c approval.IdempotencyClaim, want approval.ClaimOutcome) approval.ClaimResult {
	tb.Helper()
	res, err := s.BeginIdempotent(tb.Context(), c)
	if err != nil {
		tb.Fatalf("begin idempotent %s/%s: %v", c.Requester, c.Key, err)
	}
	if res.Outcome != want {
		tb.Fatalf("begin idempotent %s/%s: got outcome %v, want %v", c.Requester, c.Key, res.Outcome, want)
	}
	return res
}

func mustRelease(tb testing.TB, s approval.Store, a *approval.Approval, claim approval.ClaimResult) {
	tb.Helper()
	if err := s.ReleaseIdempotent(tb.Context(), a.Requester, a.OperationKey, claim); err != nil {
		tb.Fatalf("release %s: %v", a.OperationKey, err)
	}
}

func mustPurge(tb testing.TB, s approval.Store, grace time.Duration, limit int) int {
	tb.Helper()
	n, err := s.PurgeResponses(tb.Context(), grace, limit)
	if err != nil {
		tb.Fatalf("purge responses: %v", err)
	}
	return n
}

func wantResponse(tb testing.TB, got *approval.StoredResponse, want approval.StoredResponse) {
	tb.Helper()
	if got == nil {
		tb.Fatalf("replayed response: got nil, want %d %s", want.StatusCode, want.Location)
	}
	if got.StatusCode != want.StatusCode || got.Location != want.Location || !bytes.Equal(got.Body, want.Body) {
		tb.Fatalf("replayed response: got %d %q %q, want %d %q %q", got.StatusCode, got.Location, got.Body, want.StatusCode, want.Location, want.Body)
	}
}
