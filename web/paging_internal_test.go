package web

import (
	"net/url"
	"strconv"
	"testing"
)

// TestPager: Next and Previous walk a list forth and back, keep the other parameters (not
// ?done=), and a long walk keeps the last maxBack pages, from where Previous ends on the
// first page.
func TestPager(t *testing.T) {
	t.Parallel()
	q := func(link string) url.Values {
		u, err := url.Parse(link)
		if err != nil {
			t.Fatal(err)
		}
		return u.Query()
	}
	first := pagerOf("/ui/approvals", url.Values{"status": {"pending"}, "done": {"retried"}, "d": {"x"}}, "c")
	if first.Prev() != "" || first.Paged() {
		t.Fatalf("first page without a next: prev %q, paged %v", first.Prev(), first.Paged())
	}
	first.next = "n1"
	link := first.Next()
	if got := q(link); got.Get("c") != "n1" || got.Get("cb") != firstPage || got.Get("status") != "pending" || got.Get("d") != "x" || got.Has("done") {
		t.Fatalf("next link %q", link)
	}
	p := pagerOf("/ui/approvals", q(link), "c")
	for i := 2; i < maxBack+5; i++ {
		p.next = "n" + strconv.Itoa(i)
		p = pagerOf("/ui/approvals", q(p.Next()), "c")
	}
	if len(p.back) != maxBack {
		t.Fatalf("after a long walk: %d pages remembered, want %d", len(p.back), maxBack)
	}
	back := pagerOf("/ui/approvals", q(p.Prev()), "c")
	if back.Cursor != "n"+strconv.Itoa(maxBack+3) {
		t.Fatalf("previous: cursor %q", back.Cursor)
	}
	for back.Cursor != "" {
		back = pagerOf("/ui/approvals", q(back.Prev()), "c")
	}
	if got := q(back.link("", nil)); got.Get("status") != "pending" || got.Has("c") || got.Has("cb") {
		t.Fatalf("walking back ends at %v", got)
	}
	two := pagerOf("/ui/approvals", q(link), "c")
	if prev := two.Prev(); prev != "/ui/approvals?d=x&status=pending" {
		t.Fatalf("second page's previous: %q", prev)
	}
}
