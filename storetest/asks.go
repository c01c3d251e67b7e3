package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/approvald/approval"
)

// exerciseAsks covers whom pending approvals ask (approval.Ask, migration 0027) and the
// listing of "waiting for me" by them (ApprovalFilter.AskedOf): the create writes the asks,
// ApprovalAskReplace replaces them, every write that ends an approval deletes them, and the
// listing is the union of one range per name, paged exactly.
func exerciseAsks(t *testing.T, s suite) {
	s.run(t, "WaitingByAsks", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		underPolicy := func(requester string, stages ...approval.Stage) *approval.Approval {
			a := PendingApproval(t, f.clock.Now())
			a.Requester, a.Approvers = requester, []string{"alice", "bob"}
			a.Resolved = &approval.Resolved{Policy: "deploy", Version: "v1", Stages: stages}
			f.clock.Advance(time.Second)
			return MustCreate(t, f.store, a)
		}
		sreAndFiona := approval.Stage{Rules: []approval.Rule{{Group: "sre", Approvals: 1}, {People: []string{"Fiona"}, Approvals: 1}}}
		security := approval.Stage{Rules: []approval.Rule{{Group: "security", Approvals: 1}}}

		named := PendingApproval(t, f.clock.Now()) // asks alice and bob
		named.RequiredApprovals = 2
		named = MustCreate(t, f.store, named)
		f.clock.Advance(time.Second)
		staged := underPolicy("ci-bot", sreAndFiona, security)
		own := underPolicy("alice", sreAndFiona) // alice's own: not asked of her through sre
		cancelled := PendingApproval(t, f.clock.Now())
		cancelled.Approvers = []string{"carol"}
		cancelled = MustCreate(t, f.store, cancelled)

		want := func(what string, filter approval.ApprovalFilter, want ...*approval.Approval) {
			t.Helper()
			for _, limit := range []int{1, 2, approval.MaxPageSize} {
				got := walkPages(t, f.store, withLimit(filter, limit), len(want))
				wantIDs(t, fmt.Sprintf("%s, pages of %d", what, limit), got, want)
			}
		}
		// Without a status filter: an approval that ended would show here, were its asks kept.
		asked := func(person string, groups ...string) approval.ApprovalFilter {
			return approval.ApprovalFilter{NotVotedBy: person, AskedOf: person, AskedGroups: groups}
		}
		want("alice in sre", asked("alice", "sre"), staged, named)
		want("bob in sre and ops", asked("bob", "sre", "ops"), own, staged, named)
		want("bob in no group", asked("bob"), named)
		want("fiona, named by a rule", asked("fiona"), own, staged)
		want("dave in security", asked("dave", "security"))

		mustCancel(t, f, cancelled.ID)
		want("carol, cancelled", asked("carol"))

		// The next stage asks security only.
		tx, err := f.store.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.ApprovalAskReplace(ctx, staged.ID, staged.CreatedAt, []approval.Ask{{Group: "security"}}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		want("alice in sre, stage 2", asked("alice", "sre"), named)
		want("fiona, stage 2", asked("fiona"), own)
		want("dave in security, stage 2", asked("dave", "security"), staged)

		// A vote that leaves it pending keeps the asks (but not for the voter); the last ends
		// them.
		mustDecide(t, f.store, named.ID, "alice", approval.VerdictApprove)
		want("alice after her vote", asked("alice"))
		want("bob after alice's vote", asked("bob"), named)
		mustDecide(t, f.store, named.ID, "bob", approval.VerdictApprove)
		want("bob, approved", asked("bob"))

		// A search narrows each range.
		want("fiona, searching", approval.ApprovalFilter{AskedOf: "fiona", Query: own.Title}, own)
		want("fiona, another requester", approval.ApprovalFilter{AskedOf: "fiona", Requester: "ci-bot"})

		for _, bad := range []approval.ApprovalFilter{{AskedOf: "a\x00"}, {AskedOf: "x", AskedGroups: []string{"\xff"}}} {
			if _, _, err := f.store.Approvals(ctx, bad); approval.ErrorCode(err) != approval.EINVALID {
				t.Errorf("%#v: got %v, want %s", bad, err, approval.EINVALID)
			}
		}
	})
}
