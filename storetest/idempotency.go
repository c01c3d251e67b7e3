package storetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/approvald/approval"
)

// exerciseIdempotency covers InsertApproval and PurgeResponses, and the rule written once
// above them, approval.Service.Create: invariant 2, one approval per operation, with the key,
// the approval and the stored response committed together.
func exerciseIdempotency(t *testing.T, s suite) {
	s.run(t, "InsertThenHeld", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		a := PendingApproval(t, f.clock.Now())
		resp := ResponseFor(a)
		if h, err := f.store.InsertApproval(ctx, a, resp, Retention, createCause(a), nil); err != nil || h != nil {
			t.Fatalf("insert: got holder %+v, error %v, want nil, nil", h, err)
		}

		// The key is held now: a second approval under it writes nothing, and every retry
		// inside the retention period finds the stored response exactly.
		var elapsed time.Duration
		for _, at := range []time.Duration{0, time.Hour, Retention - time.Second} {
			f.clock.Advance(at - elapsed)
			elapsed = at
			again := PendingApproval(t, f.clock.Now())
			again.OperationKey = a.OperationKey
			h := mustHeld(t, f.store, again)
			if h.Fingerprint != a.Fingerprint {
				t.Fatalf("holder fingerprint: got %q, want %q", h.Fingerprint, a.Fingerprint)
			}
			wantResponse(t, h.Response, resp)
			_, err := f.store.Approval(ctx, again.ID)
			wantCode(t, err, approval.ENOTFOUND)
		}
		wantState(t, mustApproval(t, f.store, a.ID), approval.StatusPending, 1)
		wantEventTypes(t, f.store, a.ID, approval.EventCreated)
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

	// A create that fails half way leaves nothing behind, key included: the retry with the
	// same key is a first create, not a replay of nothing and not a 409.
	s.run(t, "FailedInsertLeavesNothing", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		bad := PendingApproval(t, f.clock.Now())
		// The approvers' unique constraint fails after the record and the approval rows.
		bad.Approvers = []string{"alice", "alice"}
		if _, err := f.store.InsertApproval(ctx, bad, ResponseFor(bad), Retention, createCause(bad), nil); err == nil {
			t.Fatalf("insert with an approver listed twice: got no error, want one")
		}
		_, err := f.store.Approval(ctx, bad.ID)
		wantCode(t, err, approval.ENOTFOUND)
		_, err = f.store.Events(ctx, bad.ID)
		wantCode(t, err, approval.ENOTFOUND)

		good := PendingApproval(t, f.clock.Now())
		good.OperationKey, good.Fingerprint = bad.OperationKey, bad.Fingerprint
		MustCreate(t, f.store, good)
	})

	s.run(t, "OtherRequestMismatches", func(t *testing.T, f *fixture) {
		svc := f.service()
		first := mustServiceCreate(t, svc, "ci-bot", "deploy-1", `{"action":"deploy","title":"one","approvers":["alice"]}`)
		if first.Replayed || first.Response == nil || first.Approval == nil {
			t.Fatalf("first create: got %+v, want a new approval with its response", first)
		}
		_, err := svc.Create(t.Context(), createCommand(t, "ci-bot", "deploy-1", `{"action":"deploy","title":"two","approvers":["alice"]}`))
		wantCode(t, err, approval.EMISMATCH)

		// The mismatch changed nothing: the original still replays byte for byte, key order
		// and white space of the retry notwithstanding.
		again := mustServiceCreate(t, svc, "ci-bot", "deploy-1", `{ "approvers": ["alice"], "title": "one", "action": "deploy" }`)
		if !again.Replayed {
			t.Fatalf("identical retry: got Replayed false, want true")
		}
		wantResponse(t, again.Response, *first.Response)
	})

	s.run(t, "KeysArePerRequester", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		svc := f.service()
		const body = `{"action":"deploy","title":"one","approvers":["alice"]}`
		first := mustServiceCreate(t, svc, "ci-bot", "deploy-1", body)
		second := mustServiceCreate(t, svc, "deployer", "deploy-1", body)
		if second.Replayed || second.Approval.ID == first.Approval.ID {
			t.Fatalf("another requester's create under the same key: got replayed %v, id %s, want a new approval beside %s", second.Replayed, second.Approval.ID, first.Approval.ID)
		}
		for _, c := range []struct {
			requester string
			want      *approval.StoredResponse
		}{{"ci-bot", first.Response}, {"deployer", second.Response}} {
			got := mustServiceCreate(t, svc, c.requester, "deploy-1", body)
			if !got.Replayed {
				t.Fatalf("%s's retry: got Replayed false, want true", c.requester)
			}
			wantResponse(t, got.Response, *c.want)
		}
		list, _, err := f.store.Approvals(ctx, approval.ApprovalFilter{})
		if err != nil {
			t.Fatalf("approvals: %v", err)
		}
		if len(list) != 2 {
			t.Fatalf("approvals: got %d, want 2", len(list))
		}
	})

	s.run(t, "PurgedResponseFindsTheApproval", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		svc := f.service()
		const body = `{"action":"deploy","title":"old","approvers":["alice","bob"],"expires_in":"72h"}`
		old := mustServiceCreate(t, svc, "ci-bot", "deploy-old", body)
		f.clock.Advance(12 * time.Hour)
		recent := PendingApproval(t, f.clock.Now())
		recent.ExpiresAt = recent.CreatedAt.Add(72 * time.Hour)
		MustCreate(t, f.store, recent)
		mustDecide(t, f.store, old.Approval.ID, "alice", approval.VerdictApprove)

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
		got := mustServiceCreate(t, svc, "ci-bot", "deploy-old", body)
		if !got.Replayed || got.Response != nil || got.Approval == nil || got.Approval.ID != old.Approval.ID {
			t.Fatalf("retry after the purge: got %+v, want Replayed with approval %s and no stored response", got, old.Approval.ID)
		}
		wantState(t, got.Approval, approval.StatusApproved, 2)
		// A different request under the key is still a mismatch: the approval keeps its
		// fingerprint for ever, and no second approval can be made under the key.
		_, err := svc.Create(ctx, createCommand(t, "ci-bot", "deploy-old", `{"action":"deploy","title":"new","approvers":["alice"]}`))
		wantCode(t, err, approval.EMISMATCH)
		second := PendingApproval(t, f.clock.Now())
		second.OperationKey = "deploy-old"
		if h := mustHeld(t, f.store, second); h.Approval == nil || h.Approval.ID != old.Approval.ID || h.Response != nil {
			t.Fatalf("holder after the purge: got %+v, want approval %s and no response", h, old.Approval.ID)
		}
		_, err = f.store.Approval(ctx, second.ID)
		wantCode(t, err, approval.ENOTFOUND)

		h := mustHeld(t, f.store, recent)
		wantResponse(t, h.Response, ResponseFor(recent))
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

	// Many identical requests at once, as from a client retrying on a short timeout: exactly
	// one creates, every other one waits for it and replays its answer (never a conflict to
	// retry), and one approval exists per key.
	s.run(t, "ConcurrentCreates", func(t *testing.T, f *fixture) {
		const keys, racers = 10, 100
		ctx := t.Context()
		svc := f.service()
		for k := range keys {
			key := fmt.Sprintf("deploy-%d", k)
			cmd := createCommand(t, "ci-bot", key, `{"action":"deploy","title":"race","approvers":["alice","bob"]}`)
			results := make([]approval.CreateResult, racers)
			errs := make([]error, racers)
			race(racers, func(i int) {
				c := cmd
				c.Cause = approval.HTTPCause(fmt.Sprintf("racer-%d", i))
				results[i], errs[i] = svc.Create(ctx, c)
			})
			var created *approval.StoredResponse
			for i := range racers {
				if errs[i] != nil {
					t.Fatalf("key %s, racer %d: got error %v, want a create or a replay", key, i, errs[i])
				} else if !results[i].Replayed {
					if created != nil {
						t.Fatalf("key %s: two racers created, want one", key)
					}
					created = results[i].Response
				}
			}
			if created == nil {
				t.Fatalf("key %s: no racer created, want one", key)
			}
			for i := range racers {
				wantResponse(t, results[i].Response, *created)
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
}

// mustHeld inserts a, which must find its key held, and returns the holder.
func mustHeld(tb testing.TB, s approval.Store, a *approval.Approval) *approval.KeyHolder {
	tb.Helper()
	h, err := s.InsertApproval(tb.Context(), a, ResponseFor(a), Retention, createCause(a), nil)
	if err != nil {
		tb.Fatalf("insert %s: %v", a.OperationKey, err)
	} else if h == nil {
		tb.Fatalf("insert %s: got a new approval, want the key held", a.OperationKey)
	}
	return h
}

// createCommand is a create of body by requester under key, as httpapi would send it to the
// service.
func createCommand(tb testing.TB, requester, key, body string) approval.CreateCommand {
	tb.Helper()
	var req approval.CreateRequest
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		tb.Fatalf("decode %s: %v", body, err)
	}
	return approval.CreateCommand{
		Requester: requester,
		Key:       key,
		Body:      []byte(body),
		Request:   req,
		Cause:     approval.HTTPCause("create-" + key),
		Respond: func(a *approval.Approval) (approval.StoredResponse, error) {
			return ResponseFor(a), nil
		},
	}
}

func mustServiceCreate(tb testing.TB, svc *approval.Service, requester, key, body string) approval.CreateResult {
	tb.Helper()
	res, err := svc.Create(tb.Context(), createCommand(tb, requester, key, body))
	if err != nil {
		tb.Fatalf("create %s/%s: %v", requester, key, err)
	}
	return res
}

func mustPurge(tb testing.TB, s approval.Store, grace time.Duration, limit int) int {
	tb.Helper()
	n, err := (&approval.Service{Store: s}).PurgeResponses(tb.Context(), grace, limit)
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
