package httpapi_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
)

// TestDecideRace: two approvers vote opposite ways at the same instant, many times. Each time
// exactly one vote wins, the other gets 409 carrying the winner's outcome, and the approval
// keeps that one terminal state.
func TestDecideRace(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		ci := f.token("ci-bot", approval.RoleRequester)
		voters := []struct {
			token, path string
			outcome     approval.Status
		}{
			{f.token("alice", approval.RoleApprover), "/approve", approval.StatusApproved},
			{f.token("bob", approval.RoleApprover), "/reject", approval.StatusRejected},
		}
		const rounds = 15
		wins := map[approval.Status]int{}
		for round := range rounds {
			a := f.mustCreate(ci, fmt.Sprintf("race-%d", round), createBody("Race", "alice", "bob"))
			answers := make([]*response, len(voters))
			errs := make([]error, len(voters))
			race(len(voters), func(i int) {
				answers[i], errs[i] = f.send("POST", "/v1/approvals/"+a.ID+voters[i].path, voters[i].token, `{"comment":"race"}`)
			})

			var winner approval.Status
			var loser *response
			for i, resp := range answers {
				if errs[i] != nil {
					t.Fatalf("round %d voter %d: %v", round, i, errs[i])
				}
				switch resp.status {
				case http.StatusOK:
					if winner != "" {
						t.Fatalf("round %d: both votes won", round)
					}
					winner = voters[i].outcome
					if got := resp.approval(t).Status; got != winner {
						t.Fatalf("round %d: winner sees %s, want %s", round, got, winner)
					}
				case http.StatusConflict:
					loser = resp
				default:
					t.Fatalf("round %d voter %d: got %d %s, want 200 or 409", round, i, resp.status, resp.body)
				}
			}
			if winner == "" || loser == nil {
				t.Fatalf("round %d: want one 200 and one 409, got %d and %d", round, answers[0].status, answers[1].status)
			}
			if p := loser.problem(t, http.StatusConflict); p.Approval == nil || p.Approval.Status != winner {
				t.Fatalf("round %d: the 409 carries %+v, want the approval %s", round, p.Approval, winner)
			}
			got := f.do("GET", "/v1/approvals/"+a.ID, ci, "").approval(t)
			if got.Status != winner || got.Version != 2 {
				t.Fatalf("round %d: stored %s version %d, want %s version 2 (one change after the create)", round, got.Status, got.Version, winner)
			}
			wins[winner]++
		}
		t.Logf("%s: outcomes over %d rounds: %v", kind, rounds, wins)
	})
}

// TestDecideRules covers who may vote and how repeated and contrary votes are answered.
func TestDecideRules(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		ci := f.token("ci-bot", approval.RoleRequester)
		alice := f.token("alice", approval.RoleApprover)
		bob := f.token("bob", approval.RoleApprover)
		carol := f.token("carol", approval.RoleApprover)
		root := f.token("root", approval.RoleAdmin)

		a := f.mustCreate(ci, "two-of-two", `{"action":"deploy","title":"Needs both","approvers":["alice","bob"],"required_approvals":2}`)
		path := "/v1/approvals/" + a.ID

		first := f.do("POST", path+"/approve", alice, `{"comment":"lgtm"}`)
		if first.status != http.StatusOK {
			t.Fatalf("approve: got %d %s", first.status, first.body)
		}
		if got := first.approval(t); got.Status != approval.StatusPending || len(got.Decisions) != 1 || got.Decisions[0].Comment != "lgtm" {
			t.Fatalf("after one of two approvals: %s", first.body)
		}
		if repeat := f.do("POST", path+"/approve", alice, `{"comment":"lgtm"}`); repeat.status != http.StatusOK || repeat.approval(t).Version != 2 {
			t.Fatalf("repeated vote: got %d %s, want 200 with no change", repeat.status, repeat.body)
		}
		p := f.do("POST", path+"/reject", alice, "").problem(t, http.StatusConflict)
		if p.Approval == nil || p.Approval.ID != a.ID {
			t.Fatalf("contrary vote: 409 without the approval: %+v", p)
		}
		// carol is not listed, so she may not see the approval: 404, as GET answers her.
		if p := f.do("POST", path+"/approve", carol, "").problem(t, http.StatusNotFound); p.Detail != "approval "+a.ID+" not found" {
			t.Fatalf("stranger's vote: got %q, want the not-found of a missing approval", p.Detail)
		}
		f.do("POST", path+"/reject", carol, "").problem(t, http.StatusNotFound)
		f.do("GET", path, carol, "").problem(t, http.StatusNotFound)
		f.do("POST", path+"/approve", ci, "").problem(t, http.StatusForbidden)
		f.do("POST", path+"/approve", root, "").problem(t, http.StatusForbidden) // admin, but not listed
		f.do("POST", path+"/approve", "", "").problem(t, http.StatusUnauthorized)
		f.do("POST", path+"/approve", bob, `{"comment": 5}`).problem(t, http.StatusBadRequest)
		f.do("POST", path+"/approve", bob, `{"note": "x"}`).problem(t, http.StatusBadRequest)
		f.do("POST", "/v1/approvals/apr_missing/approve", bob, "").problem(t, http.StatusNotFound)

		done := f.do("POST", path+"/approve", bob, "")
		if done.status != http.StatusOK || done.approval(t).Status != approval.StatusApproved {
			t.Fatalf("second approval: got %d %s, want approved", done.status, done.body)
		}
		if p := f.do("POST", path+"/reject", bob, "").problem(t, http.StatusConflict); p.Approval.Status != approval.StatusApproved {
			t.Fatalf("vote after the decision: got %+v", p.Approval)
		}

		// An operator token may not vote even where its subject is listed: deciding belongs to
		// approvers and admins.
		ops := f.token("ops", approval.RoleOperator)
		listed := f.mustCreate(ci, "ops-listed", createBody("Ops listed", "ops", "alice"))
		f.do("POST", "/v1/approvals/"+listed.ID+"/approve", ops, "").problem(t, http.StatusForbidden)

		// An admin who requested and is listed may still not approve their own request.
		own := f.mustCreate(root, "own", createBody("Own", "root", "alice"))
		f.do("POST", "/v1/approvals/"+own.ID+"/approve", root, "").problem(t, http.StatusForbidden)
	})
}

// TestCancel covers who may cancel and that a terminal approval stays as it is.
func TestCancel(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		ci := f.token("ci-bot", approval.RoleRequester)
		other := f.token("other-bot", approval.RoleRequester)
		alice := f.token("alice", approval.RoleApprover)
		olga := f.token("olga", approval.RoleOperator)
		root := f.token("root", approval.RoleAdmin)

		a := f.mustCreate(ci, "cancel-1", createBody("Cancel me", "alice"))
		path := "/v1/approvals/" + a.ID + "/cancel"
		f.do("POST", path, other, "").problem(t, http.StatusNotFound) // may not even see it
		f.do("POST", path, alice, "").problem(t, http.StatusForbidden)
		f.do("POST", path, olga, "").problem(t, http.StatusForbidden)
		resp := f.do("POST", path, ci, "")
		if resp.status != http.StatusOK || resp.approval(t).Status != approval.StatusCancelled {
			t.Fatalf("cancel by requester: got %d %s", resp.status, resp.body)
		}
		if p := f.do("POST", path, ci, "").problem(t, http.StatusConflict); p.Approval == nil || p.Approval.Status != approval.StatusCancelled {
			t.Fatalf("cancel again: got %+v", p)
		}
		if p := f.do("POST", "/v1/approvals/"+a.ID+"/approve", alice, "").problem(t, http.StatusConflict); p.Approval.Status != approval.StatusCancelled {
			t.Fatalf("approve after cancel: got %+v", p.Approval)
		}

		b := f.mustCreate(ci, "cancel-2", createBody("Cancelled by admin", "alice"))
		if resp := f.do("POST", "/v1/approvals/"+b.ID+"/cancel", root, ""); resp.status != http.StatusOK || resp.approval(t).Status != approval.StatusCancelled {
			t.Fatalf("cancel by admin: got %d %s", resp.status, resp.body)
		}

		c := f.mustCreate(ci, "cancel-3", createBody("Rejected first", "alice"))
		f.do("POST", "/v1/approvals/"+c.ID+"/reject", alice, "")
		if p := f.do("POST", "/v1/approvals/"+c.ID+"/cancel", root, "").problem(t, http.StatusConflict); p.Approval.Status != approval.StatusRejected {
			t.Fatalf("cancel after reject: got %+v", p.Approval)
		}
	})
}
