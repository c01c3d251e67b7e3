package approval_test

import (
	"strings"
	"testing"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
)

// stagedPolicies: stage 1 asks sre (alice, and whoever the identity provider puts in
// platform-sre), stage 2 asks security (dave) and fiona; legacy's requests name their
// approvers.
const stagedPolicies = `
groups:
  sre: {members: [alice], oidc_group: platform-sre}
  security: [dave]
policies:
  - name: deploy
    match: {action: deploy}
    stages:
      - rules: [{group: sre, approvals: 1}]
      - rules: [{group: security, approvals: 1}, {people: [fiona], approvals: 1}]
  - name: legacy
    match: {action: legacy}
    approvers: from_request
`

// waitingFor returns the ids of the approvals "waiting for me" lists for person, in order,
// comma-separated, reading every page of size limit.
func waitingFor(tb testing.TB, svc *approval.Service, person string, limit int) string {
	tb.Helper()
	p := approval.Principal{Subject: person, Role: approval.RoleApprover}
	var ids []string
	cursor := ""
	for range 20 {
		list, next, err := svc.Waiting(tb.Context(), p, approval.ApprovalFilter{Limit: limit, Cursor: cursor})
		if err != nil {
			tb.Fatalf("waiting for %s: %v", person, err)
		}
		for _, a := range list {
			ids = append(ids, a.OperationKey)
		}
		if next == "" {
			return strings.Join(ids, ",")
		}
		cursor = next
	}
	tb.Fatalf("waiting for %s: more than 20 pages", person)
	return ""
}

// mayRead reports whether person, an approver, may read the approval id.
func mayRead(tb testing.TB, svc *approval.Service, id, person string) bool {
	tb.Helper()
	_, err := svc.Approval(tb.Context(), approval.Principal{Subject: person, Role: approval.RoleApprover}, id)
	switch approval.ErrorCode(err) {
	case "":
		return true
	case approval.ENOTFOUND:
		return false
	}
	tb.Fatalf("%s reads %s: %v", person, id, err)
	return false
}

// TestWaitingThroughGroupsJoinedLater: "waiting for me" lists what the person may decide now:
// an approval reaches someone who joined its group after the create (and they may open it),
// leaves someone who left the group, follows the stages, and leaves everyone once decided,
// cancelled or voted on; the requester is never asked. Paging walks the union of the ranges.
func TestWaitingThroughGroupsJoinedLater(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		ctx := t.Context()
		st := testdb.Open(t, kind, nil)
		policies, members := MustPolicies(t, stagedPolicies)
		svc := &approval.Service{Store: st, Policies: policies, Members: members}
		want := func(person, ids string) {
			t.Helper()
			for _, limit := range []int{1, 2, 50} {
				if got := waitingFor(t, svc, person, limit); got != ids {
					t.Errorf("waiting for %s (pages of %d): got %q, want %q", person, limit, got, ids)
				}
			}
		}

		res, err := svc.Create(ctx, ciBot, policyCreate("deploy-1", `{"action":"deploy","title":"Deploy api"}`))
		if err != nil {
			t.Fatal(err)
		}
		deploy := res.Approval
		want("alice", "deploy-1")
		want("bob", "")
		want("dave", "") // stage 2 is not asked yet
		want("fiona", "")
		want("ci-bot", "")
		if mayRead(t, svc, deploy.ID, "bob") {
			t.Errorf("bob read deploy-1 before he was in sre")
		}

		// bob and carol sign in with the group after the create: it reaches them.
		mustRecordGroups(t, svc, "Bob", "platform-sre")
		mustRecordGroups(t, svc, "carol", "platform-sre")
		want("bob", "deploy-1")
		want("carol", "deploy-1")
		if !mayRead(t, svc, deploy.ID, "bob") {
			t.Errorf("bob could not open deploy-1, which waits for him")
		}
		// A request naming its approvers asks them; newer first, across the ranges.
		legacy, err := svc.Create(ctx, ciBot, policyCreate("legacy-1", `{"action":"legacy","title":"Legacy","approvers":["bob","erin"]}`))
		if err != nil {
			t.Fatal(err)
		}
		want("bob", "legacy-1,deploy-1")
		want("erin", "legacy-1")

		// carol leaves the group: it no longer waits for her, and she may not open it.
		mustRecordGroups(t, svc, "carol", "other")
		want("carol", "")
		if mayRead(t, svc, deploy.ID, "carol") {
			t.Errorf("carol read deploy-1 after she left sre")
		}

		// bob's vote meets stage 1: stage 2 is asked, stage 1 no longer.
		if got, err := vote(ctx, svc, deploy.ID, "bob", approval.VerdictApprove); err != nil || got.Status != approval.StatusPending {
			t.Fatalf("bob approves: got %v, %v; want pending", got, err)
		}
		want("bob", "legacy-1")
		want("alice", "")
		want("dave", "deploy-1")
		want("fiona", "deploy-1")
		if !mayRead(t, svc, deploy.ID, "bob") {
			t.Errorf("bob could not read deploy-1, which he voted on and does not list him")
		}

		// dave votes: fiona is still asked; once she votes it is approved and asks nobody.
		if _, err := vote(ctx, svc, deploy.ID, "dave", approval.VerdictApprove); err != nil {
			t.Fatal(err)
		}
		want("dave", "")
		want("fiona", "deploy-1")
		if got, err := vote(ctx, svc, deploy.ID, "fiona", approval.VerdictApprove); err != nil || got.Status != approval.StatusApproved {
			t.Fatalf("fiona approves: got %v, %v; want approved", got, err)
		}
		want("fiona", "")

		// A rejection ends legacy-1 for erin; a cancel ends deploy-2 for alice.
		if _, err := vote(ctx, svc, legacy.Approval.ID, "bob", approval.VerdictReject); err != nil {
			t.Fatal(err)
		}
		want("erin", "")
		res, err = svc.Create(ctx, ciBot, policyCreate("deploy-2", `{"action":"deploy","title":"Deploy web"}`))
		if err != nil {
			t.Fatal(err)
		}
		want("alice", "deploy-2")
		admin := approval.Principal{Subject: "root", Role: approval.RoleAdmin}
		if _, err := svc.Cancel(ctx, admin, res.Approval.ID, approval.HTTPCause("cancel")); err != nil {
			t.Fatal(err)
		}
		want("alice", "")
	})
}

// TestRestoreAsks: a pending approval under a policy that asks nobody (created before
// migration 0027) is given its current stage's asks, counted from its votes, by RestoreAsks.
func TestRestoreAsks(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		ctx := t.Context()
		st := testdb.Open(t, kind, nil)
		policies, members := MustPolicies(t, stagedPolicies)
		svc := &approval.Service{Store: st, Policies: policies, Members: members}
		res, err := svc.Create(ctx, ciBot, policyCreate("deploy-1", `{"action":"deploy","title":"Deploy api"}`))
		if err != nil {
			t.Fatal(err)
		}
		a := res.Approval
		if _, err := vote(ctx, svc, a.ID, "alice", approval.VerdictApprove); err != nil {
			t.Fatal(err)
		}
		forget := func() {
			t.Helper()
			tx, err := st.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if err := tx.ApprovalAskReplace(ctx, a.ID, a.CreatedAt, nil); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
		forget()
		if got := waitingFor(t, svc, "dave", 50); got != "" {
			t.Fatalf("waiting for dave with the asks forgotten: got %q, want none", got)
		}
		if n, err := svc.RestoreAsks(ctx, 10); err != nil || n != 1 {
			t.Fatalf("RestoreAsks: got %d, %v; want 1", n, err)
		}
		if n, err := svc.RestoreAsks(ctx, 10); err != nil || n != 0 {
			t.Fatalf("RestoreAsks again: got %d, %v; want 0", n, err)
		}
		for person, want := range map[string]string{"dave": "deploy-1", "fiona": "deploy-1", "alice": "", "bob": ""} {
			if got := waitingFor(t, svc, person, 50); got != want {
				t.Errorf("waiting for %s after RestoreAsks: got %q, want %q (stage 2)", person, got, want)
			}
		}
	})
}
