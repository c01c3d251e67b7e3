package approval_test

import (
	"testing"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
)

// TestMayVoteNow: the pages' question before they offer a vote gives Vote's answer: the
// current stage's people may vote, a later stage's are told when, a group member by identity
// provider counts from their sign-in, and nobody may vote twice or on a decided approval.
func TestMayVoteNow(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		ctx := t.Context()
		st := testdb.Open(t, kind, nil)
		policies, members := MustPolicies(t, `
groups:
  sre: {members: [alice], oidc_group: platform-sre}
policies:
  - name: refunds
    match: {action: refund}
    stages:
      - rules: [{group: sre, approvals: 1}]
      - rules: [{people: [fiona], approvals: 1}]
`)
		svc := &approval.Service{Store: st, Policies: policies, Members: members}
		res, err := svc.Create(ctx, ciBot, policyCreate("r-1", `{"action":"refund","title":"Refund 7731"}`))
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		a := res.Approval
		ask := func(who string, role approval.Role) (bool, string) {
			t.Helper()
			cur, err := st.Approval(ctx, a.ID)
			if err != nil {
				t.Fatal(err)
			}
			ok, why, err := svc.MayVoteNow(ctx, approval.Principal{Subject: who, Role: role}, cur)
			if err != nil {
				t.Fatalf("MayVoteNow(%s): %v", who, err)
			}
			return ok, why
		}
		for _, c := range []struct {
			who  string
			role approval.Role
			ok   bool
			why  string
		}{
			{"alice", approval.RoleApprover, true, ""},
			{"fiona", approval.RoleApprover, false, "asked only in stage 2, once stage 1 is met"},
			{"carol", approval.RoleApprover, false, "not an approver of stage 1: 1 of sre"},
			{"olga", approval.RoleOperator, false, "role operator may not vote"},
		} {
			if ok, why := ask(c.who, c.role); ok != c.ok || why != c.why {
				t.Errorf("%s: got %v %q, want %v %q", c.who, ok, why, c.ok, c.why)
			}
		}
		mustRecordGroups(t, svc, "carol", "platform-sre")
		if ok, why := ask("carol", approval.RoleApprover); !ok {
			t.Errorf("carol once in platform-sre: got no (%s), want yes", why)
		}
		if _, err := vote(ctx, svc, a.ID, "alice", approval.VerdictApprove); err != nil {
			t.Fatalf("alice approves: %v", err)
		}
		if ok, why := ask("alice", approval.RoleApprover); ok || why != "already voted on this approval" {
			t.Errorf("alice after her vote: got %v %q", ok, why)
		}
		if ok, _ := ask("fiona", approval.RoleApprover); !ok {
			t.Errorf("fiona in stage 2: got no, want yes")
		}
		if ok, why := ask("carol", approval.RoleApprover); ok || why != "not an approver of stage 2: 1 of fiona" {
			t.Errorf("carol in stage 2: got %v %q", ok, why)
		}
		if _, err := vote(ctx, svc, a.ID, "fiona", approval.VerdictApprove); err != nil {
			t.Fatalf("fiona approves: %v", err)
		}
		if ok, why := ask("fiona", approval.RoleApprover); ok || why != "the approval is already approved" {
			t.Errorf("fiona once approved: got %v %q", ok, why)
		}
	})
}

// TestApprovalsByID: one read returns the approvals the principal may read, by id; those it
// may not read, and unknown ids, are left out.
func TestApprovalsByID(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		ctx := t.Context()
		st := testdb.Open(t, kind, nil)
		svc := &approval.Service{Store: st}
		mine, err := svc.Create(ctx, ciBot, policyCreate("a", `{"action":"deploy","title":"Deploy","approvers":["alice"]}`))
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		other, err := svc.Create(ctx, ciBot, policyCreate("b", `{"action":"deploy","title":"Rotate","approvers":["bob"]}`))
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		ids := []string{mine.Approval.ID, other.Approval.ID, "apr_unknown"}
		all, err := svc.ApprovalsByID(ctx, approval.Principal{Subject: "olga", Role: approval.RoleOperator}, ids)
		if err != nil || len(all) != 2 || all[other.Approval.ID].Title != "Rotate" {
			t.Fatalf("operator: got %d approvals, %v; want both", len(all), err)
		}
		alice, err := svc.ApprovalsByID(ctx, approval.Principal{Subject: "alice", Role: approval.RoleApprover}, ids)
		if err != nil || len(alice) != 1 || alice[mine.Approval.ID] == nil {
			t.Fatalf("alice: got %d approvals, %v; want hers alone", len(alice), err)
		}
		none, err := svc.ApprovalsByID(ctx, approval.Principal{Subject: "olga", Role: approval.RoleOperator}, nil)
		if err != nil || len(none) != 0 {
			t.Fatalf("no ids: got %d, %v", len(none), err)
		}
	})
}
