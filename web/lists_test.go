package web_test

import (
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/web"
)

// link returns the href of the first link with rel in a page, unescaped; "" when none.
func link(body, rel string) string {
	m := regexp.MustCompile(`href="([^"]*)" rel="` + rel + `"`).FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return html.UnescapeString(m[1])
}

// TestPages_AllApprovals: the list of all approvals shows an operator every approval, 25 a
// page with Next and Previous that keep the filters; the filters of the API's list (status,
// action, requester, approver, title) narrow it; an approver sees only the approvals listing
// them; an unknown status is a 400 page.
func TestPages_AllApprovals(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		bob := f.token("bob", approval.RoleApprover)
		for i := range 28 {
			a := f.create(fmt.Sprintf("Deploy build %d", i), []string{"alice"}, 1, "")
			if i < 3 {
				f.create(fmt.Sprintf("Rotate key %d", i), []string{"bob"}, 1, "")
			}
			if i == 0 {
				if code := f.api(http.MethodPost, "/v1/approvals/"+a.ID+"/reject", f.token("alice", approval.RoleApprover), "", nil); code != http.StatusOK {
					t.Fatalf("alice rejects: %d", code)
				}
			}
		}
		olga := f.browser()
		olga.signIn(f.token("olga", approval.RoleOperator))
		first := olga.get("/ui/approvals")
		must(t, first.status == http.StatusOK, "all approvals: status %d", first.status)
		must(t, rowsOf(first.body, "approvals") == 25, "first page: %d rows, want 25", rowsOf(first.body, "approvals"))
		must(t, link(first.body, "prev") == "", "first page offers a previous page")
		next := link(first.body, "next")
		must(t, next != "", "first page: no next link")
		second := olga.get(next)
		must(t, rowsOf(second.body, "approvals") == 6, "second page: %d rows, want 6 of 31", rowsOf(second.body, "approvals"))
		must(t, link(second.body, "next") == "", "last page offers a next page")
		back := olga.get(link(second.body, "prev"))
		must(t, back.body == first.body || rowsOf(back.body, "approvals") == 25 && link(back.body, "prev") == "",
			"previous from the second page is not the first page")

		rotate := olga.get("/ui/approvals?approver=bob")
		must(t, rowsOf(rotate.body, "approvals") == 3 && strings.Contains(rotate.body, "Rotate key 2"), "approver=bob: %d rows, want 3", rowsOf(rotate.body, "approvals"))
		rejected := olga.get("/ui/approvals?status=rejected")
		must(t, rowsOf(rejected.body, "approvals") == 1 && strings.Contains(rejected.body, "Deploy build 0<"), "status=rejected: %d rows, want build 0", rowsOf(rejected.body, "approvals"))
		must(t, strings.Contains(rejected.body, `<option value="rejected" selected>`), "the filter form does not keep the status")
		none := olga.get("/ui/approvals?" + url.Values{"from": {"nobody"}, "action": {"deploy"}}.Encode())
		must(t, rowsOf(none.body, "approvals") == 0 && strings.Contains(none.body, "No approval matches the filter"), "from=nobody: %d rows", rowsOf(none.body, "approvals"))
		titled := olga.get("/ui/approvals?q=build+2")
		must(t, rowsOf(titled.body, "approvals") == 9, "q=build 2: %d rows, want 9 (2, 20-27)", rowsOf(titled.body, "approvals"))
		deploys := olga.get("/ui/approvals?action=deploy&q=build")
		pageTwo := link(deploys.body, "next")
		must(t, strings.Contains(pageTwo, "action=deploy") && strings.Contains(pageTwo, "q=build"), "next link %q loses the filters", pageTwo)

		bad := olga.get("/ui/approvals?status=maybe")
		must(t, bad.status == http.StatusBadRequest && strings.Contains(bad.body, "unknown status"), "status=maybe: %d, want 400 naming the status", bad.status)

		b := f.browser()
		b.signIn(bob)
		mine := b.get("/ui/approvals")
		must(t, rowsOf(mine.body, "approvals") == 3 && !strings.Contains(mine.body, "Deploy build"), "bob's list: %d rows, want his 3", rowsOf(mine.body, "approvals"))
	})
}

// TestPages_DecidedForEveryRole: "Decided recently" lists what the viewer may read that is
// decided: every decided approval for an operator, 25 a page; the approvals listing an
// approver for them.
func TestPages_DecidedForEveryRole(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		alice := f.token("alice", approval.RoleApprover)
		for i := range 27 {
			a := f.create(fmt.Sprintf("Deploy build %d", i), []string{"alice"}, 1, "")
			if code := f.api(http.MethodPost, "/v1/approvals/"+a.ID+"/approve", alice, "", nil); code != http.StatusOK {
				t.Fatalf("alice approves: %d", code)
			}
		}
		f.create("Rotate key", []string{"bob"}, 1, "")
		olga := f.browser()
		olga.signIn(f.token("olga", approval.RoleOperator))
		p := olga.get("/ui/")
		must(t, !strings.Contains(p.body, "Nothing decided yet"), "the operator's page says nothing is decided")
		must(t, rowsOf(p.body, "decided") == 25, "operator's decided: %d rows, want 25", rowsOf(p.body, "decided"))
		next := link(p.body, "next")
		must(t, strings.Contains(next, "d="), "operator's decided: no next page (%q)", next)
		must(t, rowsOf(olga.get(next).body, "decided") == 2, "operator's decided, page 2: want 2 rows")

		b := f.browser()
		b.signIn(f.token("bob", approval.RoleApprover))
		bp := b.get("/ui/")
		must(t, rowsOf(bp.body, "waiting") == 1 && strings.Contains(bp.body, "Nothing decided yet"), "bob: %d waiting, want 1 and nothing decided", rowsOf(bp.body, "waiting"))
	})
}

// TestPages_TrailInWords: the audit trail says who did what and where: a vote in the browser,
// one through the API; the request ids are behind a toggle.
func TestPages_TrailInWords(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		a := f.create("Deploy api v1.42 to prod", []string{"alice", "bob"}, 2, "")
		alice := f.browser()
		alice.signIn(f.token("alice", approval.RoleApprover))
		token := alice.decisionToken(a.ID)
		if p := alice.do(http.MethodPost, "/ui/approvals/"+a.ID+"/approve", url.Values{"token": {token}}); p.status != http.StatusSeeOther {
			t.Fatalf("alice approves in the browser: %d", p.status)
		}
		if code := f.api(http.MethodPost, "/v1/approvals/"+a.ID+"/reject", f.token("bob", approval.RoleApprover), `{"comment": "not today"}`, nil); code != http.StatusOK {
			t.Fatalf("bob rejects through the API: %d", code)
		}
		body := alice.get("/ui/approvals/" + a.ID).body
		trail := textOf(body[strings.Index(body, `id="trail-h"`):])
		for _, want := range []string{"ci-bot asked for approval from the API", "alice approved in the browser", "bob rejected from the API", "not today", "The request is rejected"} {
			must(t, strings.Contains(trail, want), "trail %q does not say %q", trail, want)
		}
		must(t, regexp.MustCompile(`<details class="ids">\s*<summary>Details</summary>[^<]*<dl class="detail">\s*<dt>event</dt><dd><code>approval.created</code></dd>\s*<dt>cause</dt><dd>request req_`).MatchString(body),
			"the request id is not behind a Details toggle")
	})
}

// TestPages_ApprovingSays: an approval's page says what approving does: the call to the
// action's target, shown without its query, or that the requester runs it.
func TestPages_ApprovingSays(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind, func(cfg *web.Config, base string) {
			cfg.Targets = map[string]string{"payout": "https://payments.internal:8443/v1/payouts?api_key=secret"}
		})
		deploy := f.create("Deploy api", []string{"ana"}, 1, "")
		rec := f.needsReview()
		ana := f.browser()
		ana.signIn(f.token("ana", approval.RoleApprover))
		p := textOf(ana.get("/ui/approvals/" + deploy.ID).body)
		must(t, strings.Contains(p, "Approving runs nothing here: the requester, ci-bot, runs it"), "deploy's page: %q", p)
		p = ana.get("/ui/approvals/" + rec.ApprovalID).body
		must(t, strings.Contains(p, "POST https://payments.internal:8443/v1/payouts.") && !strings.Contains(p, "secret"),
			"payout's page does not name the target without its query: %q", textOf(p))
	})
}

// TestPages_OperationsShowTitles: the operators' page names an execution by its approval's
// title.
func TestPages_OperationsShowTitles(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		rec := f.needsReview()
		olga := f.browser()
		olga.signIn(f.token("olga", approval.RoleOperator))
		p := olga.get("/ui/operations")
		must(t, p.status == http.StatusOK, "operations: %d", p.status)
		must(t, strings.Contains(p.body, `<a class="title" href="/ui/approvals/`+rec.ApprovalID+`">Pay out invoice 88</a>`), "the card does not show the approval's title")
	})
}
