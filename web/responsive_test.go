package web_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/web"
)

// screenWidths are the widths every page is checked at: a phone, a tablet, a laptop.
var screenWidths = []int64{390, 768, 1280}

// TestBrowser_Responsive loads every page (sign-in, waiting for me, all approvals, a pending
// and a decided approval, operations) at 390, 768 and 1280 px with enough rows to page, and
// checks that nothing overflows sideways (document.documentElement.scrollWidth is at most
// clientWidth), that the lists page by 25 with a Next link (27 decided and 28 pending
// approvals, 26 failed executions), and that on a phone the filter form is folded. Each
// page's screenshot is written under a temporary directory, with the README's two
// (readmeImages); with APPROVALD_DOC_IMAGES set to a directory, those at 390 and 1280 px
// of the SQLite run, and the README's, are written there too (docs/images).
func TestBrowser_Responsive(t *testing.T) {
	t.Parallel()
	needBrowser(t)
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind, func(cfg *web.Config, base string) {
			cfg.Targets = map[string]string{"payout": "https://payments.internal/v1/payouts"}
		})
		alice := f.token("alice", approval.RoleApprover)
		var decided *approval.Approval
		for i := range 27 {
			a := f.create(fmt.Sprintf("Rotate the signing key of service %d", i), []string{"alice"}, 1, `{"service": "billing", "key": "k-2026"}`)
			if code := f.api(http.MethodPost, "/v1/approvals/"+a.ID+"/approve", alice, `{"comment": "rotated keys are tested in staging"}`, nil); code != http.StatusOK {
				t.Fatalf("approve: %d", code)
			}
			decided = a
		}
		var pending *approval.Approval
		for i := range 28 {
			pending = f.create(fmt.Sprintf("Deploy api v1.%d to prod-eu-west-1 with the long-running database migration 0042_add_an_index_to_events", i),
				[]string{"alice", "bob", "carol"}, 2,
				`{"commit": "9f2c1e7a9b3c4d5e6f708192a3b4c5d6e7f80912", "service": "api", "regions": ["eu-west-1", "us-east-1"], "change": {"ticket": "OPS-1042", "risk": "low", "url": "https://tickets.example.com/browse/OPS-1042/a/very/long/path/that/does/not/break"}}`)
		}
		if code := f.api(http.MethodPost, "/v1/approvals/"+pending.ID+"/approve", f.token("bob", approval.RoleApprover), `{"comment": "checked the migration plan"}`, nil); code != http.StatusOK {
			t.Fatalf("bob approves: %d", code)
		}
		f.needsReview()
		f.failedExecutions(26)

		dir := t.TempDir()
		docs := ""
		if kind == testdb.SQLite {
			docs = os.Getenv("APPROVALD_DOC_IMAGES")
		}
		aliceTab, olgaTab, anonTab := f.newTab(t), f.newTab(t), f.newTab(t)
		aliceTab.signIn(alice)
		olgaTab.signIn(f.token("olga", approval.RoleOperator))
		for _, p := range []struct {
			name  string
			tab   *tab
			path  string
			paged bool
		}{
			{"signin", anonTab, "/ui/signin", false},
			{"waiting", aliceTab, "/ui/", true},
			{"approvals", olgaTab, "/ui/approvals", true},
			{"approval-pending", aliceTab, "/ui/approvals/" + pending.ID, false},
			{"approval-decided", aliceTab, "/ui/approvals/" + decided.ID, false},
			{"operations", olgaTab, "/ui/operations", true},
		} {
			for _, w := range screenWidths {
				p.tab.do(chromedp.EmulateViewport(w, 900))
				p.tab.open(p.path)
				wide, err := chromedp.Run(p.tab.ctx, chromedp.Evaluate[[]string](`(() => {
					const d = document.documentElement, out = [];
					if (d.scrollWidth > d.clientWidth) {
						out.push("scrollWidth " + d.scrollWidth + " > clientWidth " + d.clientWidth);
						document.querySelectorAll("body *").forEach(el => {
							const r = el.getBoundingClientRect();
							if (r.right > d.clientWidth + 0.5 && out.length < 8) { out.push(el.tagName.toLowerCase() + "." + el.className + " right " + Math.round(r.right)); }
						});
					}
					return out;
				})()`))
				if err != nil {
					t.Fatalf("%s at %d px: %v", p.name, w, err)
				}
				if len(wide) > 0 {
					t.Errorf("%s at %d px overflows sideways: %s", p.name, w, strings.Join(wide, "; "))
				}
				if p.paged {
					rows, err := chromedp.Run(p.tab.ctx, chromedp.Evaluate[int](`Math.max(...[...document.querySelectorAll("ul.list, ul.cards")].map(l => l.children.length))`))
					if err != nil || rows != 25 {
						t.Errorf("%s at %d px: %d rows in the first list (%v), want a page of 25", p.name, w, rows, err)
					}
					next, err := chromedp.Run(p.tab.ctx, chromedp.Evaluate[int](`document.querySelectorAll('.pager a[rel="next"]').length`))
					if err != nil || next == 0 {
						t.Errorf("%s at %d px: no Next link (%v)", p.name, w, err)
					}
					// -1: the page has no filter; 1: folded; 0: open.
					folded, err := chromedp.Run(p.tab.ctx, chromedp.Evaluate[int](`(d => d ? (d.open ? 0 : 1) : -1)(document.querySelector("details.filters"))`))
					if want := map[bool]int{true: 1, false: 0}[w < 768]; err != nil || folded >= 0 && folded != want {
						t.Errorf("%s at %d px: filter folded %d (%v), want %d", p.name, w, folded, err, want)
					}
				}
				png, err := chromedp.Run(p.tab.ctx, chromedp.CaptureScreenshot())
				if err != nil {
					t.Fatalf("screenshot: %v", err)
				}
				name := fmt.Sprintf("%s-%d.png", p.name, w)
				if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
					t.Fatal(err)
				}
				if docs != "" && w != 768 {
					if err := os.WriteFile(filepath.Join(docs, name), png, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		readmeImages(t, f, dir, docs)
	})
}

// readmeImages writes the README's two images at 1280 px into dir, and into docs when it is
// not "": approval-page.png, a pending approval as an approver sees it, and
// already-decided.png, the answer to a vote sent after someone else decided.
func readmeImages(t *testing.T, f *fixture, dir, docs string) {
	t.Helper()
	write := func(tb *tab, name string) {
		png, err := chromedp.Run(tb.ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		for _, d := range []string{dir, docs} {
			if d == "" {
				continue
			}
			if err := os.WriteFile(filepath.Join(d, name), png, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	a := f.create("Deploy api v2.14 to production", []string{"alice", "bob", "carol"}, 2,
		`{"service": "api", "commit": "9f2c1e7", "ticket": "OPS-1042", "regions": ["eu-west-1", "us-east-1"]}`)
	if code := f.api(http.MethodPost, "/v1/approvals/"+a.ID+"/approve", f.token("bob", approval.RoleApprover), `{"comment": "Canary is green; migration checked."}`, nil); code != http.StatusOK {
		t.Fatalf("bob approves: %d", code)
	}
	alice := f.newTab(t)
	alice.signIn(f.token("alice", approval.RoleApprover))
	alice.do(chromedp.EmulateViewport(1280, 900))
	alice.open("/ui/approvals/" + a.ID)
	alice.do(chromedp.WaitVisible(chromedp.CSS("#live.waiting")))
	write(alice, "approval-page.png")

	// bob's form is sent after alice decided: without the script, so that the page's live
	// update does not show her decision first.
	d := f.create("Delete the staging database", []string{"alice", "bob"}, 1, `{"database": "staging-main"}`)
	bob := f.newTab(t)
	bob.signIn(f.token("bob", approval.RoleApprover))
	scripts := func(off bool) {
		if _, err := chromedp.Call(bob.ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: off}); err != nil {
			t.Fatalf("scripts off %v: %v", off, err)
		}
	}
	bob.do(chromedp.EmulateViewport(1280, 900))
	scripts(true)
	bob.open("/ui/approvals/" + d.ID)
	if code := f.api(http.MethodPost, "/v1/approvals/"+d.ID+"/approve", f.token("alice", approval.RoleApprover), `{"comment": "The backup of Monday is verified."}`, nil); code != http.StatusOK {
		t.Fatalf("alice approves: %d", code)
	}
	bob.do(
		chromedp.SendKeys(chromedp.CSS("#comment"), "Wait: the analytics team still reads it."),
		chromedp.Click(chromedp.CSS("#reject")),
		chromedp.WaitVisible(chromedp.CSS("#answer")),
	)
	scripts(false) // the times in the viewer's zone, as people see the page
	bob.do(chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#answer")))
	if got := bob.text("#answer"); !strings.Contains(got, "Already approved by alice") || !strings.Contains(got, "your rejection was not recorded") {
		t.Fatalf("bob's answer says %q, want that alice approved first", got)
	}
	write(bob, "already-decided.png")
}
