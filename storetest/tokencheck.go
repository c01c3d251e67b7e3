package storetest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/approvald/approval"
)

// exerciseTokenCheck covers the check of a known token that rides with a request's first
// round trip (approval.TokenCheck): the store runs it beside the request's own work, and a
// token revoked on another replica is refused at once, with nothing written or read.
func exerciseTokenCheck(t *testing.T, s suite) {
	const body = `{"action":"deploy","title":"Deploy api","approvers":["alice","bob"]}`

	// One client's requests on replica A; its tokens are revoked on replica B between two of
	// them. The next request is refused, whatever it does, and changes nothing.
	s.run(t, "RevokedBetweenRequests", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		a, b := f.service(), f.service() // two replicas: their memories of tokens are apart
		ciSecret, ciTok, err := b.CreateToken(ctx, tokenIssuer, approval.TokenSpec{Subject: "ci-bot", Role: approval.RoleRequester})
		if err != nil {
			t.Fatalf("create token: %v", err)
		}
		aliceSecret, aliceTok, err := b.CreateToken(ctx, tokenIssuer, approval.TokenSpec{Subject: "alice", Role: approval.RoleApprover})
		if err != nil {
			t.Fatalf("create token: %v", err)
		}
		// auth is one request's authentication on A; known says whether A answered from its
		// memory, leaving the check to the store.
		auth := func(secret string, known bool) context.Context {
			t.Helper()
			rctx, tok, err := a.AuthenticateFirstTrip(ctx, secret)
			if err != nil {
				t.Fatalf("authenticate: %v", err)
			}
			if got := approval.PendingTokenCheck(rctx) != nil; got != known {
				t.Fatalf("authenticate %s: got a pending check %v, want %v", tok.Subject, got, known)
			}
			return rctx
		}

		// First use: looked up. Second: from memory, checked by the create's own statement.
		first, err := a.Create(auth(ciSecret, false), requester("ci-bot"), createCommand(t, "deploy-1", body))
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		rctx := auth(ciSecret, true)
		second, err := a.Create(rctx, requester("ci-bot"), createCommand(t, "deploy-2", body))
		if err != nil {
			t.Fatalf("create with a known token: %v", err)
		}
		if approval.PendingTokenCheck(rctx) != nil {
			t.Fatalf("create with a known token: the store left its token check pending")
		}
		auth(aliceSecret, false)
		rctx = auth(aliceSecret, true)
		if _, err := f.store.Approval(rctx, first.Approval.ID); err != nil || approval.PendingTokenCheck(rctx) != nil {
			t.Fatalf("read with a known token: %v, check pending %v", err, approval.PendingTokenCheck(rctx) != nil)
		}
		// A listing carries the check in its page's statement; an empty page asks the token.
		for _, filter := range []approval.ApprovalFilter{{Limit: 10, VisibleTo: "alice"}, {Limit: 10, Action: "no-such-action"}} {
			rctx = auth(aliceSecret, true)
			list, _, err := f.store.Approvals(rctx, filter)
			if err != nil || approval.PendingTokenCheck(rctx) != nil {
				t.Fatalf("list %+v with a known token: %v, check pending %v", filter, err, approval.PendingTokenCheck(rctx) != nil)
			} else if want := map[string]int{"": 2, "no-such-action": 0}[filter.Action]; len(list) != want {
				t.Fatalf("list %+v with a known token: got %d approvals, want %d", filter, len(list), want)
			}
		}

		for _, tok := range []*approval.Token{ciTok, aliceTok} {
			if _, err := b.RevokeToken(ctx, tokenIssuer, tok.ID); err != nil {
				t.Fatalf("revoke on B: %v", err)
			}
		}

		// A still remembers both tokens, but every store call refuses them.
		_, err = a.Create(auth(ciSecret, true), requester("ci-bot"), createCommand(t, "deploy-3", body))
		wantCode(t, err, approval.EUNAUTHORIZED)
		// A has forgotten the refused token: it looks it up again, and says why.
		_, _, err = a.AuthenticateFirstTrip(ctx, ciSecret)
		if e := wantCode(t, err, approval.EUNAUTHORIZED); e.Message != "the bearer token was revoked" {
			t.Fatalf("authenticate after the refusal: got %q, want the lookup's answer", e.Message)
		}
		// A replica that still remembers the token: a replay would reveal the stored answer,
		// and is refused too.
		check := &approval.TokenCheck{ID: ciTok.ID, Hash: approval.HashToken(ciSecret), Now: f.clock.Now()}
		_, err = a.Create(approval.WithTokenCheck(ctx, check), requester("ci-bot"), createCommand(t, "deploy-2", body))
		wantCode(t, err, approval.EUNAUTHORIZED)
		check = &approval.TokenCheck{ID: aliceTok.ID, Hash: approval.HashToken(aliceSecret), Now: f.clock.Now()}
		_, err = f.store.Approval(approval.WithTokenCheck(ctx, check), first.Approval.ID)
		wantCode(t, err, approval.EUNAUTHORIZED)
		if !check.Refused() {
			t.Fatalf("read with a revoked token: the check is not marked refused")
		}
		if err := a.ConfirmToken(ctx, check); approval.ErrorMessage(err) != "the bearer token was revoked" {
			t.Fatalf("confirm a refused check: got %v, want the lookup's reason", err)
		}
		for _, filter := range []approval.ApprovalFilter{{Limit: 10, VisibleTo: "alice"}, {Limit: 10, Action: "no-such-action"}} {
			check = &approval.TokenCheck{ID: aliceTok.ID, Hash: approval.HashToken(aliceSecret), Now: f.clock.Now()}
			list, _, err := f.store.Approvals(approval.WithTokenCheck(ctx, check), filter)
			wantCode(t, err, approval.EUNAUTHORIZED)
			if len(list) != 0 || !check.Refused() {
				t.Fatalf("list %+v with a revoked token: got %d approvals, check refused %v; want none, refused", filter, len(list), check.Refused())
			}
		}
		check = &approval.TokenCheck{ID: aliceTok.ID, Hash: approval.HashToken(aliceSecret), Now: f.clock.Now()}
		_, err = a.Vote(approval.WithTokenCheck(ctx, check), asAdmin("alice"), approval.DecideRequest{
			ApprovalID: second.Approval.ID, Approver: "alice", Verdict: approval.VerdictApprove, Cause: voteCause("alice")})
		wantCode(t, err, approval.EUNAUTHORIZED)

		// Nothing was written: two approvals, the second still pending and unvoted.
		list, _, err := f.store.Approvals(ctx, approval.ApprovalFilter{Limit: 10})
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		if len(list) != 2 {
			t.Fatalf("approvals: got %d, want 2", len(list))
		}
		wantState(t, mustApproval(t, f.store, second.Approval.ID), approval.StatusPending, 1)
		wantEventTypes(t, f.store, second.Approval.ID, approval.EventCreated)
	})

	// Creates in flight on replica A while replica B revokes their token: every create sent
	// after the revocation returned is refused, no refused create wrote anything, and every
	// acknowledged one exists.
	s.run(t, "RevokeRacesCreates", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		const racers, each = 16, 6
		a, b := f.service(), f.service()
		secret, tok, err := b.CreateToken(ctx, tokenIssuer, approval.TokenSpec{Subject: "ci-bot", Role: approval.RoleRequester})
		if err != nil {
			t.Fatalf("create token: %v", err)
		}
		if _, _, err := a.AuthenticateFirstTrip(ctx, secret); err != nil { // A now knows it
			t.Fatalf("authenticate: %v", err)
		}
		type outcome struct {
			key          string
			afterRevoke  bool // sent after the revocation had returned
			acknowledged bool
			refused      bool
			otherErr     error
			approvalID   string
		}
		var revoked atomic.Bool
		results := make([][]outcome, racers)
		race(racers+1, func(i int) {
			if i == racers {
				if _, err := b.RevokeToken(ctx, tokenIssuer, tok.ID); err != nil {
					t.Errorf("revoke: %v", err)
				}
				revoked.Store(true)
				return
			}
			for n := range each {
				o := outcome{key: fmt.Sprintf("race-%d-%d", i, n), afterRevoke: revoked.Load()}
				rctx, _, err := a.AuthenticateFirstTrip(ctx, secret)
				if err == nil {
					var res approval.CreateResult
					res, err = a.Create(rctx, requester("ci-bot"), createCommand(t, o.key, body))
					if err == nil {
						o.acknowledged, o.approvalID = true, res.Approval.ID
					}
				}
				switch {
				case err == nil:
				case approval.ErrorCode(err) == approval.EUNAUTHORIZED:
					o.refused = true
				default:
					o.otherErr = err
				}
				results[i] = append(results[i], o)
			}
		})

		made := map[string]string{} // operation key -> approval id
		for cursor := ""; ; {
			page, next, err := f.store.Approvals(ctx, approval.ApprovalFilter{Limit: approval.MaxPageSize, Cursor: cursor})
			if err != nil {
				t.Fatalf("list: %v", err)
			}
			for _, ap := range page {
				made[ap.OperationKey] = ap.ID
			}
			if cursor = next; cursor == "" {
				break
			}
		}
		var acked, refused int
		for _, list := range results {
			for _, o := range list {
				id, exists := made[o.key]
				switch {
				case o.otherErr != nil:
					t.Errorf("create %s: %v", o.key, o.otherErr)
				case o.afterRevoke && !o.refused:
					t.Errorf("create %s sent after the revocation returned: got acknowledged, want refused", o.key)
				case o.refused && exists:
					t.Errorf("create %s was refused, but approval %s exists", o.key, id)
				case o.acknowledged && (!exists || id != o.approvalID):
					t.Errorf("create %s acknowledged as %s: got %q in the store", o.key, o.approvalID, id)
				}
				if o.acknowledged {
					acked++
				} else if o.refused {
					refused++
				}
			}
		}
		if len(made) != acked {
			t.Errorf("approvals: got %d, want the %d acknowledged", len(made), acked)
		}
		t.Logf("%d creates acknowledged, %d refused", acked, refused)
	})
}
