package approval_test

import (
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
)

// oidcPolicies: sre is alice, and whoever the identity provider puts in platform-sre.
const oidcPolicies = `
groups:
  sre: {members: [alice], oidc_group: platform-sre}
policies:
  - name: deploy
    match: {action: deploy}
    rules: [{group: sre, approvals: 2}]
  - name: hotfix
    match: {action: hotfix}
    rules: [{group: sre, approvals: 1}]
`

// TestVoteThroughIdentityGroup: people whose last OIDC sign-in put them in a group's
// oidc_group are its members at the create (Satisfiable, the approvers) and at the vote, as
// of that sign-in: a later sign-in without the group ends their say at once.
func TestVoteThroughIdentityGroup(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		ctx := t.Context()
		st := testdb.Open(t, kind, nil)
		policies, members := MustPolicies(t, oidcPolicies)
		svc := &approval.Service{Store: st, Policies: policies, Members: members}
		deploy := `{"action":"deploy","title":"Deploy api"}`

		// Nobody has signed in with the group: alice alone cannot meet 2 of sre.
		if _, err := svc.Create(ctx, ciBot, policyCreate("early", deploy)); approval.ErrorCode(err) != approval.EUNPROCESSABLE {
			t.Fatalf("create before any sign-in: got %v, want %s", err, approval.EUNPROCESSABLE)
		}
		mustRecordGroups(t, svc, "carol", "platform-sre", "other", "platform-sre")
		res, err := svc.Create(ctx, ciBot, policyCreate("deploy-1", deploy))
		if err != nil {
			t.Fatalf("create once carol signed in with the group: %v", err)
		}
		a := res.Approval
		if got, want := strings.Join(a.Approvers, ","), "alice,carol"; got != want {
			t.Errorf("approvers: got %s, want %s (the configured member and the stored one)", got, want)
		}

		// bob has not signed in with the group: refused, nothing written.
		if _, err := vote(ctx, svc, a.ID, "bob", approval.VerdictApprove); approval.ErrorCode(err) != approval.ENOTFOUND {
			t.Errorf("bob before his sign-in: got %v, want %s (not listed, not a member)", err, approval.ENOTFOUND)
		}
		// Once he has, his vote counts toward sre, though the approval does not list him.
		mustRecordGroups(t, svc, "Bob", "platform-sre")
		got, err := vote(ctx, svc, a.ID, "bob", approval.VerdictApprove)
		if err != nil || got.Status != approval.StatusPending {
			t.Fatalf("bob after his sign-in: got %v, %v; want pending", got, err)
		}
		if toward := countedToward(t, st, a.ID, "bob"); toward != "sre" {
			t.Errorf("bob's vote counted toward %q, want sre", toward)
		}
		m, err := svc.ProgressMembers(ctx, got)
		if err != nil {
			t.Fatal(err)
		}
		if st := got.PolicyStatus(m); strings.Join(st.Stages[0].Rules[0].Counted, ",") != "bob" {
			t.Errorf("progress: got %+v, want bob's vote counted", st.Stages[0].Rules[0])
		}

		// carol signs in again without the group: her say ends at once.
		mustRecordGroups(t, svc, "carol", "other")
		before, err := st.Approval(ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := vote(ctx, svc, a.ID, "carol", approval.VerdictApprove); approval.ErrorCode(err) != approval.EFORBIDDEN ||
			!strings.Contains(err.Error(), "not an approver of stage 1") {
			t.Errorf("carol after leaving the group: got %v, want %s, not an approver", err, approval.EFORBIDDEN)
		}
		if after, err := st.Approval(ctx, a.ID); err != nil || after.Version != before.Version || len(after.Decisions) != 1 {
			t.Errorf("after the refused vote: got %+v, %v; want it unchanged", after, err)
		}
		// The configured member is a member whatever the provider says.
		if got, err := vote(ctx, svc, a.ID, "alice", approval.VerdictApprove); err != nil || got.Status != approval.StatusApproved {
			t.Fatalf("alice approves: got %v, %v; want approved", got, err)
		}
	})
}

// TestRecordIdentityGroups: a sign-in's groups replace the person's stored ones; a name no
// oidc_group could be is left out; too many groups or a person who is no name change nothing.
func TestRecordIdentityGroups(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		ctx := t.Context()
		st := testdb.Open(t, kind, nil)
		policies, members := MustPolicies(t, oidcPolicies)
		svc := &approval.Service{Store: st, Policies: policies, Members: members}
		mustRecordGroups(t, svc, "carol", "platform-sre", "", "bad\ngroup", strings.Repeat("x", approval.MaxNameLength+1))
		wantMembers(t, st, "platform-sre", "carol")
		many := make([]string, approval.MaxIdentityGroups+1)
		for i := range many {
			many[i] = "g" + strconv.Itoa(i)
		}
		if err := svc.RecordIdentityGroups(ctx, "carol", many); approval.ErrorCode(err) != approval.EINVALID {
			t.Errorf("too many groups: got %v, want %s", err, approval.EINVALID)
		}
		if err := svc.RecordIdentityGroups(ctx, "", []string{"platform-sre"}); approval.ErrorCode(err) != approval.EINVALID {
			t.Errorf("no person: got %v, want %s", err, approval.EINVALID)
		}
		wantMembers(t, st, "platform-sre", "carol")
		mustRecordGroups(t, svc, "carol")
		wantMembers(t, st, "platform-sre", "")
	})
}

// TestVoteRacingRemoval: votes of a member through the identity provider race a sign-in that
// drops the group, many times: each vote is either refused, writing nothing, or counted, the
// approval approved with its execution; never recorded without counting.
func TestVoteRacingRemoval(t *testing.T) {
	const rounds, approvals = 10, 6
	testdb.Each(t, func(t *testing.T, kind string) {
		ctx := t.Context()
		st := testdb.Open(t, kind, nil)
		policies, members := MustPolicies(t, oidcPolicies)
		svc := &approval.Service{Store: st, Policies: policies, Members: members}
		outcomes := map[string]int{}
		for round := range rounds {
			mustRecordGroups(t, svc, "carol", "platform-sre")
			ids := make([]string, approvals)
			for i := range ids {
				res, err := svc.Create(ctx, ciBot, policyCreate("race-"+strconv.Itoa(round)+"-"+strconv.Itoa(i), `{"action":"hotfix","title":"race"}`))
				if err != nil {
					t.Fatal(err)
				}
				ids[i] = res.Approval.ID
			}
			start := make(chan struct{})
			var wg sync.WaitGroup
			errs := make([]error, approvals)
			for i, id := range ids {
				wg.Go(func() {
					<-start
					_, errs[i] = vote(ctx, svc, id, "carol", approval.VerdictApprove)
				})
			}
			var removal error
			wg.Go(func() {
				<-start
				removal = svc.RecordIdentityGroups(ctx, "carol", nil)
			})
			close(start)
			wg.Wait()
			if removal != nil {
				t.Fatalf("round %d: removal: %v", round, removal)
			}
			for i, id := range ids {
				a, err := st.Approval(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				switch approval.ErrorCode(errs[i]) {
				case "":
					outcomes["counted"]++
					if a.Status != approval.StatusApproved || len(a.Decisions) != 1 || a.Execution == nil {
						t.Fatalf("round %d: counted vote: got %s with %d votes, execution %v; want approved with carol's vote and an execution", round, a.Status, len(a.Decisions), a.Execution)
					}
					if toward := countedToward(t, st, id, "carol"); toward != "sre" {
						t.Fatalf("round %d: counted vote toward %q, want sre", round, toward)
					}
				case approval.EFORBIDDEN:
					outcomes["refused"]++
					if a.Status != approval.StatusPending || len(a.Decisions) != 0 || a.Version != 1 {
						t.Fatalf("round %d: refused vote: got %s, %d votes, version %d; want it untouched", round, a.Status, len(a.Decisions), a.Version)
					}
				default:
					t.Fatalf("round %d: vote: got %v, want counted or refused", round, errs[i])
				}
			}
			// Once the removal has committed, carol has no say.
			res, err := svc.Create(ctx, ciBot, policyCreate("after-"+strconv.Itoa(round), `{"action":"hotfix","title":"after"}`))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := vote(ctx, svc, res.Approval.ID, "carol", approval.VerdictApprove); approval.ErrorCode(err) == "" {
				t.Fatalf("round %d: a vote after the removal was counted", round)
			}
		}
		t.Logf("%s: %v", kind, outcomes)
	})
}

// mustRecordGroups stores groups as person's identity-provider groups.
func mustRecordGroups(tb testing.TB, svc *approval.Service, person string, groups ...string) {
	tb.Helper()
	if err := svc.RecordIdentityGroups(tb.Context(), person, groups); err != nil {
		tb.Fatalf("record %s's groups: %v", person, err)
	}
}

// wantMembers fails unless the stored members of group are want (comma-separated).
func wantMembers(tb testing.TB, st approval.Store, group, want string) {
	tb.Helper()
	list, err := st.IdentityGroupMembers(tb.Context(), []string{group})
	if err != nil {
		tb.Fatal(err)
	}
	var got []string
	for _, m := range list {
		got = append(got, m.Person)
	}
	if s := strings.Join(got, ","); s != want {
		tb.Fatalf("members of %s: got %q, want %q", group, s, want)
	}
}

// countedToward is the rule person's vote on the approval counted toward, from its event.
func countedToward(tb testing.TB, st approval.Store, id, person string) string {
	tb.Helper()
	events, err := st.Events(tb.Context(), id)
	if err != nil {
		tb.Fatal(err)
	}
	for _, e := range events {
		if e.Type == approval.EventVoted && e.Actor == person {
			c, _ := e.Detail["counted_toward"].(map[string]any)
			return anyText(c["rule"])
		}
	}
	return ""
}
