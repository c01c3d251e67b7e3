package storetest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/approvald/approval"
)

// exerciseListFilters covers the filters of Approvals beyond status: by approver, requester,
// visibility, action, votes not cast and title search, alone and combined. Each is checked
// against the same filter applied in Go to every approval, page by page: a page holds exactly
// its size while more rows follow, whichever index the store reads.
func exerciseListFilters(t *testing.T, s suite) {
	s.run(t, "PagesMatchTheFilter", func(t *testing.T, f *fixture) {
		requesters := []string{"ci-bot", "deployer", "alice"}
		approvers := [][]string{{"alice", "bob"}, {"bob", "carol"}, {"alice", "carol"}, {"carol"}}
		create := func(i int) {
			a := PendingApproval(t, f.clock.Now())
			a.Requester, a.Approvers = requesters[i%3], approvers[i%4]
			a.Action = []string{"deploy", "refund"}[i%2]
			a.Title = fmt.Sprintf("Deploy #%d", i)
			var eligible []string
			for _, name := range a.Approvers {
				if name != a.Requester {
					eligible = append(eligible, name)
				}
			}
			if i%5 == 3 && len(eligible) == 2 {
				a.RequiredApprovals = 2 // one vote leaves it pending
			}
			MustCreate(t, f.store, a)
			switch i % 5 {
			case 1, 3:
				mustDecide(t, f.store, a.ID, eligible[0], approval.VerdictApprove)
			case 2:
				mustDecide(t, f.store, a.ID, eligible[len(eligible)-1], approval.VerdictReject)
			}
		}
		const n = 30
		for i := range n {
			create(i)
			if i < n-4 { // the last four share one microsecond: the id breaks the tie
				f.clock.Advance(time.Second)
			}
		}
		all := walkPages(t, f.store, approval.ApprovalFilter{Limit: approval.MaxPageSize}, n)
		if len(all) != n {
			t.Fatalf("unfiltered: got %d approvals, want %d", len(all), n)
		}

		for _, filter := range []approval.ApprovalFilter{
			{Approver: "alice"},
			{Approver: "bob", Status: approval.StatusPending},
			{Approver: "carol", Status: approval.StatusPending, NotVotedBy: "carol"},
			{Requester: "ci-bot", Status: approval.StatusPending},
			{VisibleTo: "alice", Status: approval.StatusPending},
			{Approver: "alice", Requester: "alice"},
			{Approver: "bob", VisibleTo: "deployer"},
			{Requester: "alice"},
			{Requester: "deployer", Action: "refund"},
			{Requester: "ci-bot", VisibleTo: "carol"},
			{VisibleTo: "alice"},
			{VisibleTo: "bob", Status: approval.StatusApproved},
			{VisibleTo: "alice", Approver: "carol"},
			{VisibleTo: "alice", Requester: "ci-bot"},
			{VisibleTo: "carol", NotVotedBy: "carol", Query: "#1"},
			{Action: "deploy"},
			{Action: "refund", Status: approval.StatusRejected},
			{NotVotedBy: "bob"},
			{Approver: "alice", Decided: true},
			{VisibleTo: "carol", Decided: true, Query: "#1"},
			{Decided: true, Status: approval.StatusRejected},
			{Query: "#1"},
			{Query: "DEPLOY #2"},
			{Query: "nothing like it"},
			{Approver: "dave"},
			{VisibleTo: "dave"},
		} {
			var want []*approval.Approval
			for _, a := range all {
				if matches(a, filter) {
					want = append(want, a)
				}
			}
			for _, limit := range []int{1, 2, 5, approval.MaxPageSize} {
				got := walkPages(t, f.store, withLimit(filter, limit), len(want))
				wantIDs(t, fmt.Sprintf("%+v", filter), got, want)
			}
		}
	})

	s.run(t, "NotVotedBy", func(t *testing.T, f *fixture) {
		a := PendingApproval(t, f.clock.Now())
		a.RequiredApprovals = 2
		a = MustCreate(t, f.store, a)
		waiting := func(who string) approval.ApprovalFilter {
			return approval.ApprovalFilter{Status: approval.StatusPending, Approver: who, NotVotedBy: who}
		}
		for _, who := range []string{"alice", "bob"} {
			got, _ := mustList(t, f.store, waiting(who))
			wantIDs(t, "waiting for "+who+" before any vote", got, list(a))
		}
		mustDecide(t, f.store, a.ID, "alice", approval.VerdictApprove)
		got, _ := mustList(t, f.store, waiting("alice"))
		wantIDs(t, "waiting for alice after her vote", got, nil)
		got, _ = mustList(t, f.store, waiting("bob"))
		wantIDs(t, "waiting for bob after alice's vote", got, list(a))
	})

	s.run(t, "SearchIsLiteral", func(t *testing.T, f *fixture) {
		titled := map[string]*approval.Approval{}
		for _, title := range []string{
			"Refund 50% of order 7", "Refund 50 of order 7", "Rotate key a_b", "Rotate key axb",
			`Copy C:\temp`, "Copy C:temp", "ÉCOLE deploy", "DEPLOY Api", "x",
		} {
			a := PendingApproval(t, f.clock.Now())
			a.Title = title
			titled[title] = MustCreate(t, f.store, a)
			f.clock.Advance(time.Second)
		}
		for _, tc := range []struct {
			query string
			want  []string // titles, newest first
		}{
			{"50%", []string{"Refund 50% of order 7"}},
			{"%", []string{"Refund 50% of order 7"}},
			{"a_b", []string{"Rotate key a_b"}},
			{"_", []string{"Rotate key a_b"}},
			{`:\t`, []string{`Copy C:\temp`}},
			{`\`, []string{`Copy C:\temp`}},
			{"deploy api", []string{"DEPLOY Api"}},
			{"Deploy", []string{"DEPLOY Api", "ÉCOLE deploy"}},
			// Only ASCII letters fold, alike on both stores.
			{"École", []string{"ÉCOLE deploy"}},
			{"école", nil},
			{"X", []string{"x", "Rotate key axb"}},
		} {
			var want []*approval.Approval
			for _, title := range tc.want {
				want = append(want, titled[title])
			}
			got := walkPages(t, f.store, approval.ApprovalFilter{Query: tc.query, Limit: 1}, len(want))
			wantIDs(t, fmt.Sprintf("search %q", tc.query), got, want)
		}
	})

	s.run(t, "BadFilter", func(t *testing.T, f *fixture) {
		a := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		for _, filter := range []approval.ApprovalFilter{
			{Query: "deploy\x01"},
			{Query: "deploy\napi"},
			{Query: "   "},
			{Query: strings.Repeat("x", approval.MaxTitleLength+1)},
			{Query: "\xff"},
			{Approver: "al\x00ice"},
			{VisibleTo: "\xff"},
			{NotVotedBy: "a\x00"},
			{Requester: "ci\x00bot"},
			{Action: "\xfe"},
		} {
			_, _, err := f.store.Approvals(t.Context(), filter)
			if code := approval.ErrorCode(err); code != approval.EINVALID {
				t.Fatalf("%#v: got code %q (%v), want %q", filter, code, err, approval.EINVALID)
			}
		}
		// The longest search allowed is a search.
		got, _ := mustList(t, f.store, approval.ApprovalFilter{Query: strings.Repeat("x", approval.MaxTitleLength)})
		wantIDs(t, "longest search", got, nil)
		got, _ = mustList(t, f.store, approval.ApprovalFilter{Query: a.Title})
		wantIDs(t, "search by the whole title", got, list(a))
	})
}

// matches is the listing's filter in Go: what Approvals must keep.
func matches(a *approval.Approval, f approval.ApprovalFilter) bool {
	_, voted := a.DecisionBy(f.NotVotedBy)
	switch {
	case f.Status != "" && a.Status != f.Status,
		f.Decided && a.Status == approval.StatusPending,
		f.Approver != "" && !slices.Contains(a.Approvers, f.Approver),
		f.Requester != "" && a.Requester != f.Requester,
		f.VisibleTo != "" && a.Requester != f.VisibleTo && !slices.Contains(a.Approvers, f.VisibleTo),
		f.Action != "" && a.Action != f.Action,
		f.NotVotedBy != "" && voted,
		f.Query != "" && !strings.Contains(foldASCII(a.Title), foldASCII(f.Query)):
		return false
	}
	return true
}

// foldASCII lower-cases the ASCII letters of s, as the title search does.
func foldASCII(s string) string {
	return strings.Map(func(r rune) rune {
		if 'A' <= r && r <= 'Z' {
			return r + ('a' - 'A')
		}
		return r
	}, s)
}
