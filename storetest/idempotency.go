package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/approvald/approval"
)

// exerciseIdempotency covers InsertApproval, and the rule written once above it,
// approval.Service.Create: invariant 2, one approval per operation, the key and the approval
// committed together, and a retry answered as the create was.
func exerciseIdempotency(t *testing.T, s suite) {
	s.run(t, "InsertThenHeld", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		a := PendingApproval(t, f.clock.Now())
		a.Approvers = []string{"zoe", "alice", "mallory"} // listed order, not sorted
		a.Context = []byte(`{"z": 1, "a": {"nested": [true, null, "<&>"]}}`)
		a.CallbackURL = "https://hooks.example.com/approvals?x=1"
		resp := ResponseFor(a)
		if h, err := f.store.InsertApproval(ctx, a, createCause(a), nil); err != nil || h != nil {
			t.Fatalf("insert: got holder %+v, error %v, want nil, nil", h, err)
		}

		// The key is held now: a second approval under it writes nothing, and the holder, as
		// it was created, renders the create's answer exactly, whatever happened to it since.
		var elapsed time.Duration
		for i, at := range []time.Duration{0, time.Hour, Retention - time.Second} {
			f.clock.Advance(at - elapsed)
			elapsed = at
			again := PendingApproval(t, f.clock.Now())
			again.OperationKey = a.OperationKey
			h := mustHeld(t, f.store, again)
			if h.Fingerprint != a.Fingerprint || h.Approval == nil || h.Approval.ID != a.ID {
				t.Fatalf("holder: got %+v, want approval %s with fingerprint %q", h, a.ID, a.Fingerprint)
			}
			got := ResponseFor(h.Approval.AsCreated())
			wantResponse(t, &got, resp)
			_, err := f.store.Approval(ctx, again.ID)
			wantCode(t, err, approval.ENOTFOUND)
			if i == 0 {
				mustDecide(t, f.store, a.ID, "zoe", approval.VerdictApprove)
			}
		}
		wantState(t, mustApproval(t, f.store, a.ID), approval.StatusApproved, 2)
		wantEventTypes(t, f.store, a.ID, approval.EventCreated, approval.EventVoted, approval.EventApproved)
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
		// The approvers' unique constraint fails after the approval's row.
		bad.Approvers = []string{"alice", "alice"}
		if _, err := f.store.InsertApproval(ctx, bad, createCause(bad), nil); err == nil {
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
		_, err := svc.Create(t.Context(), requester("ci-bot"), createCommand(t, "deploy-1", `{"action":"deploy","title":"two","approvers":["alice"]}`))
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

	s.run(t, "RetryAfterRetentionFindsTheApproval", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		svc := f.service()
		const body = `{"action":"deploy","title":"old","approvers":["alice","bob"],"expires_in":"72h"}`
		old := mustServiceCreate(t, svc, "ci-bot", "deploy-old", body)
		f.clock.Advance(12 * time.Hour)
		const recentBody = `{"action":"deploy","title":"recent","approvers":["alice","bob"],"expires_in":"72h"}`
		recent := mustServiceCreate(t, svc, "ci-bot", "deploy-recent", recentBody)
		mustDecide(t, f.store, old.Approval.ID, "alice", approval.VerdictApprove)
		mustDecide(t, f.store, recent.Approval.ID, "bob", approval.VerdictApprove)

		// 25 hours in: old's create is older than the retention, recent's is not. The same
		// request for old now finds the approval in its current state, decision included.
		f.clock.Advance(13 * time.Hour)
		got := mustServiceCreate(t, svc, "ci-bot", "deploy-old", body)
		if !got.Replayed || got.Response != nil || got.Approval == nil || got.Approval.ID != old.Approval.ID {
			t.Fatalf("retry after the retention: got %+v, want Replayed with approval %s and no response", got, old.Approval.ID)
		}
		wantState(t, got.Approval, approval.StatusApproved, 2)
		// A different request under the key is still a mismatch: the approval keeps its
		// fingerprint for ever, and no second approval can be made under the key.
		_, err := svc.Create(ctx, requester("ci-bot"), createCommand(t, "deploy-old", `{"action":"deploy","title":"new","approvers":["alice"]}`))
		wantCode(t, err, approval.EMISMATCH)
		second := PendingApproval(t, f.clock.Now())
		second.OperationKey = "deploy-old"
		if h := mustHeld(t, f.store, second); h.Approval == nil || h.Approval.ID != old.Approval.ID {
			t.Fatalf("holder after the retention: got %+v, want approval %s", h, old.Approval.ID)
		}
		_, err = f.store.Approval(ctx, second.ID)
		wantCode(t, err, approval.ENOTFOUND)

		// recent's retry, within the retention, still gets the original answer although the
		// approval has been approved since.
		again := mustServiceCreate(t, svc, "ci-bot", "deploy-recent", recentBody)
		if !again.Replayed {
			t.Fatalf("retry within the retention: got Replayed false, want true")
		}
		wantResponse(t, again.Response, *recent.Response)
	})

	// A retry reaching the process that answered the create is answered from the answer that
	// process kept, with no read of the approval (approval.Service's memory of recent keys);
	// one reaching a process that never saw the key, from the write path, after which that
	// process keeps the answer too. Both answer the same, and the memory never answers what
	// the key does not hold.
	s.run(t, "ReplayFromMemory", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		const body = `{"action":"deploy","title":"memory","approvers":["alice","bob"]}`
		// here may not read an approval: its every replay must come from what it kept.
		here := &approval.Service{Store: noApprovalReads{f.store}, Now: f.clock.Now, Retention: Retention, Targeted: targeted, Routing: f.routing}
		elsewhere := f.service()
		first := mustServiceCreate(t, here, "ci-bot", "deploy-1", body)
		if first.Replayed || first.Response == nil {
			t.Fatalf("first create: got %+v, want a new approval", first)
		}
		mustDecide(t, f.store, first.Approval.ID, "alice", approval.VerdictApprove)
		for name, svc := range map[string]*approval.Service{"here": here, "elsewhere": elsewhere} {
			// The same request: the very bytes, then the same JSON spelled otherwise. A process
			// that answered the very bytes before (here the create, elsewhere the first retry)
			// answers them again without decoding them.
			for i, retry := range []string{body, body, " {\"title\": \"memory\", \"action\":\"deploy\",\"approvers\":[\"alice\",\"bob\"]}\n"} {
				cmd := createCommand(t, "deploy-1", retry)
				decoded := 0
				decode := cmd.Decode
				cmd.Decode = func() (approval.CreateRequest, error) { decoded++; return decode() }
				got, err := svc.Create(ctx, requester("ci-bot"), cmd)
				if err != nil {
					t.Fatalf("retry %s: %v", name, err)
				} else if !got.Replayed {
					t.Fatalf("retry %s: got Replayed false, want a replay of %s", name, first.Approval.ID)
				}
				wantResponse(t, got.Response, *first.Response)
				// From memory there is no approval to show; from the write path, the approval
				// as it is now.
				if memory := name == "here" || i > 0; memory != (got.Approval == nil) {
					t.Fatalf("retry %d %s: got approval %+v, want one only from the write path", i, name, got.Approval)
				} else if !memory {
					if got.Approval.ID != first.Approval.ID {
						t.Fatalf("retry %s: got approval %s, want %s", name, got.Approval.ID, first.Approval.ID)
					}
					wantState(t, got.Approval, approval.StatusApproved, 2)
				}
				want := 1
				if retry == body && (name == "here" || i > 0) {
					want = 0
				}
				if decoded != want {
					t.Fatalf("retry %d %s of %q: decoded %d times, want %d", i, name, retry, decoded, want)
				}
			}
			// Another request under the key: refused as invalid when it is, else a mismatch.
			_, err := svc.Create(ctx, requester("ci-bot"), createCommand(t, "deploy-1", `{"action":"deploy","title":"memory","approvers":[]}`))
			wantCode(t, err, approval.EINVALID)
			_, err = svc.Create(ctx, requester("ci-bot"), createCommand(t, "deploy-1", `{"action":"deploy","title":"other","approvers":["alice"]}`))
			wantCode(t, err, approval.EMISMATCH)
		}
		// The same key and body from another requester is another operation.
		other := mustServiceCreate(t, here, "cd-bot", "deploy-1", body)
		if other.Replayed || other.Approval.ID == first.Approval.ID {
			t.Fatalf("another requester's key: got Replayed %v, approval %s, want a new approval", other.Replayed, other.Approval.ID)
		}
		again := mustServiceCreate(t, here, "cd-bot", "deploy-1", body)
		if !again.Replayed {
			t.Fatalf("retry of the other requester's create: got Replayed false, want a replay of %s", other.Approval.ID)
		}
		wantResponse(t, again.Response, *other.Response)
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
			cmd := createCommand(t, key, `{"action":"deploy","title":"race","approvers":["alice","bob"]}`)
			results := make([]approval.CreateResult, racers)
			errs := make([]error, racers)
			race(racers, func(i int) {
				c := cmd
				c.Cause = approval.HTTPCause(fmt.Sprintf("racer-%d", i))
				results[i], errs[i] = svc.Create(ctx, requester("ci-bot"), c)
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
	h, err := s.InsertApproval(tb.Context(), a, createCause(a), nil)
	if err != nil {
		tb.Fatalf("insert %s: %v", a.OperationKey, err)
	} else if h == nil {
		tb.Fatalf("insert %s: got a new approval, want the key held", a.OperationKey)
	}
	return h
}

// requester is the principal of a requester token of name.
func requester(name string) approval.Principal {
	return approval.Principal{Subject: name, Role: approval.RoleRequester}
}

// createCommand is a create of body under key, as httpapi would send it to the service.
func createCommand(tb testing.TB, key, body string) approval.CreateCommand {
	tb.Helper()
	var req approval.CreateRequest
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		tb.Fatalf("decode %s: %v", body, err)
	}
	return approval.CreateCommand{
		Key:    key,
		Body:   []byte(body),
		Decode: func() (approval.CreateRequest, error) { return req, nil },
		Cause:  approval.HTTPCause("create-" + key),
		Respond: func(a *approval.Approval) (approval.StoredResponse, error) {
			return ResponseFor(a), nil
		},
	}
}

func mustServiceCreate(tb testing.TB, svc *approval.Service, name, key, body string) approval.CreateResult {
	tb.Helper()
	res, err := svc.Create(tb.Context(), requester(name), createCommand(tb, key, body))
	if err != nil {
		tb.Fatalf("create %s/%s: %v", name, key, err)
	}
	return res
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

// noApprovalReads is a store whose reads of one approval fail: a Service over it must answer
// without them.
type noApprovalReads struct{ approval.Store }

func (noApprovalReads) Approval(ctx context.Context, id string) (*approval.Approval, error) {
	return nil, fmt.Errorf("read approval %s: this store serves no reads of an approval", id)
}
