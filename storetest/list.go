package storetest

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/approvald/approval"
)

// exerciseList covers Approvals: order, cursor pagination, filters and page sizes.
func exerciseList(t *testing.T, s suite) {
	// Seven approvals a second apart, then three in the same microsecond: ties on created_at
	// are broken by id, and pagination must still visit every row exactly once.
	s.run(t, "NewestFirstAcrossPages", func(t *testing.T, f *fixture) {
		var created []*approval.Approval
		for range 7 {
			created = append(created, MustCreate(t, f.store, PendingApproval(t, f.clock.Now())))
			f.clock.Advance(time.Second)
		}
		for range 3 {
			created = append(created, MustCreate(t, f.store, PendingApproval(t, f.clock.Now())))
		}
		want := newestFirst(created)

		all, next := mustList(t, f.store, approval.ApprovalFilter{})
		if next != "" {
			t.Fatalf("one page of everything: got next cursor %q, want none", next)
		}
		wantIDs(t, "default page", all, want)

		for _, limit := range []int{1, 3, 5, 10} {
			got := walkPages(t, f.store, approval.ApprovalFilter{Limit: limit}, len(want))
			wantIDs(t, "pages", got, want)
		}
	})

	s.run(t, "Filters", func(t *testing.T, f *fixture) {
		create := func(requester string, approvers ...string) *approval.Approval {
			a := PendingApproval(t, f.clock.Now())
			a.Requester, a.Approvers = requester, approvers
			f.clock.Advance(time.Second)
			return MustCreate(t, f.store, a)
		}
		a1 := create("ci-bot", "alice", "bob")
		a2 := create("ci-bot", "carol")
		mustDecide(t, f.store, a2.ID, "carol", approval.VerdictApprove)
		a3 := create("deployer", "alice")
		mustDecide(t, f.store, a3.ID, "alice", approval.VerdictReject)
		a4 := create("deployer", "bob", "carol")

		for _, tc := range []struct {
			name   string
			filter approval.ApprovalFilter
			want   []*approval.Approval
		}{
			{"status pending", approval.ApprovalFilter{Status: approval.StatusPending}, list(a4, a1)},
			{"status approved", approval.ApprovalFilter{Status: approval.StatusApproved}, list(a2)},
			{"status expired", approval.ApprovalFilter{Status: approval.StatusExpired}, nil},
			{"approver alice", approval.ApprovalFilter{Approver: "alice"}, list(a3, a1)},
			{"approver carol, pending", approval.ApprovalFilter{Approver: "carol", Status: approval.StatusPending}, list(a4)},
			{"approver ci-bot", approval.ApprovalFilter{Approver: "ci-bot"}, nil}, // a requester, not an approver
			{"visible to ci-bot", approval.ApprovalFilter{VisibleTo: "ci-bot"}, list(a2, a1)},
			{"visible to carol", approval.ApprovalFilter{VisibleTo: "carol"}, list(a4, a2)},
			{"visible to deployer", approval.ApprovalFilter{VisibleTo: "deployer"}, list(a4, a3)},
			{"visible to dave", approval.ApprovalFilter{VisibleTo: "dave"}, nil},
			{"visible to ci-bot, approver bob", approval.ApprovalFilter{VisibleTo: "ci-bot", Approver: "bob"}, list(a1)},
			{"visible to bob, rejected", approval.ApprovalFilter{VisibleTo: "bob", Status: approval.StatusRejected}, nil},
		} {
			got, next := mustList(t, f.store, tc.filter)
			if next != "" {
				t.Fatalf("%s: got next cursor %q on the only page, want none", tc.name, next)
			}
			wantIDs(t, tc.name, got, tc.want)
			// Filters hold across pages too.
			wantIDs(t, tc.name+", one per page", walkPages(t, f.store, withLimit(tc.filter, 1), len(tc.want)), tc.want)
		}

		// Listed approvals are complete: approvers in order, decisions loaded.
		got, _ := mustList(t, f.store, approval.ApprovalFilter{Approver: "carol"})
		if len(got) != 2 || got[1].ID != a2.ID {
			t.Fatalf("approver carol: got %d approvals, want a4 and a2", len(got))
		}
		if !slices.Equal(got[0].Approvers, []string{"bob", "carol"}) {
			t.Fatalf("listed approvers: got %v, want [bob carol]", got[0].Approvers)
		}
		if got[0].Decisions == nil || len(got[0].Decisions) != 0 {
			t.Fatalf("listed decisions of a pending approval: got %#v, want an empty non-nil slice", got[0].Decisions)
		}
		if len(got[1].Decisions) != 1 || got[1].Decisions[0].Approver != "carol" || got[1].Status != approval.StatusApproved {
			t.Fatalf("listed approved approval: got %s with %+v, want approved with carol's decision", got[1].Status, got[1].Decisions)
		}
	})

	s.run(t, "PageSizes", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		const n = approval.MaxPageSize + 1
		for range n {
			MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
			f.clock.Advance(time.Millisecond)
		}
		for _, tc := range []struct {
			limit, want int
		}{
			{0, approval.DefaultPageSize},
			{1, 1},
			{approval.MaxPageSize, approval.MaxPageSize},
		} {
			got, next := mustList(t, f.store, approval.ApprovalFilter{Limit: tc.limit})
			if len(got) != tc.want || next == "" {
				t.Fatalf("limit %d: got %d approvals and cursor %q, want %d and a cursor", tc.limit, len(got), next, tc.want)
			}
		}
		first, next := mustList(t, f.store, approval.ApprovalFilter{Limit: approval.MaxPageSize})
		last, after := mustList(t, f.store, approval.ApprovalFilter{Limit: approval.MaxPageSize, Cursor: next})
		if len(last) != 1 || after != "" {
			t.Fatalf("second page: got %d approvals and cursor %q, want 1 and none", len(last), after)
		}
		if slices.ContainsFunc(first, func(a *approval.Approval) bool { return a.ID == last[0].ID }) {
			t.Fatalf("second page repeats %s from the first", last[0].ID)
		}

		// store.go gives the valid range, 1..MaxPageSize (0 for the default), but not what
		// happens outside it: refusing with EINVALID and clamping are both acceptable; a
		// page larger than MaxPageSize, or any other error, is not.
		for _, limit := range []int{-1, approval.MaxPageSize + 1, 1 << 20} {
			got, _, err := f.store.Approvals(ctx, approval.ApprovalFilter{Limit: limit})
			switch code := approval.ErrorCode(err); {
			case code == approval.EINVALID:
			case err != nil:
				t.Fatalf("limit %d: got %v, want EINVALID or a page", limit, err)
			case len(got) > approval.MaxPageSize:
				t.Fatalf("limit %d: got %d approvals, want at most %d", limit, len(got), approval.MaxPageSize)
			}
		}
	})

	s.run(t, "BadCursor", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		_, next := mustList(t, f.store, approval.ApprovalFilter{Limit: 1})
		if next != "" {
			t.Fatalf("one approval, limit 1: got cursor %q, want none", next)
		}
		f.clock.Advance(time.Second)
		MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		_, next = mustList(t, f.store, approval.ApprovalFilter{Limit: 1})
		if next == "" {
			t.Fatalf("two approvals, limit 1: got no cursor, want one")
		}
		for _, cursor := range []string{
			"not a cursor!",
			"Zm9v", // valid base64 of "foo", not a cursor
		} {
			_, _, err := f.store.Approvals(ctx, approval.ApprovalFilter{Cursor: cursor})
			if code := approval.ErrorCode(err); code != approval.EINVALID {
				t.Fatalf("cursor %.20q: got code %q (%v), want %q", cursor, code, err, approval.EINVALID)
			}
		}
	})
}

func mustList(tb testing.TB, s approval.Store, f approval.ApprovalFilter) ([]*approval.Approval, string) {
	tb.Helper()
	list, next, err := s.Approvals(tb.Context(), f)
	if err != nil {
		tb.Fatalf("approvals %+v: %v", f, err)
	}
	return list, next
}

// walkPages follows cursors from the first page to the last and returns every approval seen.
// Each page but the last must be full, and the last (the one holding the last row) must come
// with an empty cursor. Knowing how many rows to expect keeps a looping cursor from hanging.
func walkPages(tb testing.TB, s approval.Store, f approval.ApprovalFilter, want int) []*approval.Approval {
	tb.Helper()
	var all []*approval.Approval
	for {
		page, next := mustList(tb, s, f)
		all = append(all, page...)
		if next == "" {
			return all
		}
		if len(page) != f.Limit {
			tb.Fatalf("page after %q: got %d approvals and a cursor, want a full page of %d", f.Cursor, len(page), f.Limit)
		}
		if len(all) >= want {
			tb.Fatalf("pages of %d: got %d approvals and still a cursor, want %d in all and no cursor after the last", f.Limit, len(all), want)
		}
		f.Cursor = next
	}
}

// newestFirst orders approvals as Approvals must: created_at, then id, descending.
func newestFirst(as []*approval.Approval) []*approval.Approval {
	sorted := slices.Clone(as)
	slices.SortFunc(sorted, func(a, b *approval.Approval) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
	return sorted
}

func wantIDs(tb testing.TB, what string, got, want []*approval.Approval) {
	tb.Helper()
	ids := func(as []*approval.Approval) []string {
		out := make([]string, len(as))
		for i, a := range as {
			out[i] = a.ID
		}
		return out
	}
	if g, w := ids(got), ids(want); !slices.Equal(g, w) {
		tb.Fatalf("%s: got %v, want %v", what, g, w)
	}
}

func list(as ...*approval.Approval) []*approval.Approval { return as }

func withLimit(f approval.ApprovalFilter, limit int) approval.ApprovalFilter {
	f.Limit = limit
	return f
}
