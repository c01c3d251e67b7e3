package web_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/web"
)

// value returns the value of the form control sel.
func (tb *tab) value(sel string) string {
	tb.t.Helper()
	v, err := chromedp.Run(tb.ctx, chromedp.Evaluate[string](`document.querySelector(`+"`"+sel+"`"+`).value`))
	if err != nil {
		tb.t.Fatalf("value of %s: %v", sel, err)
	}
	return v
}

// TestBrowser_RestartLosesSession: a page is open when the server goes away and comes back
// with another session key. While it is away the page says the server cannot be reached;
// once it is back, that the session has ended. A vote then is refused with a page that says
// it was not recorded and keeps the comment; its sign-in link returns to the approval with
// the comment still in the form, and the vote is recorded with it.
func TestBrowser_RestartLosesSession(t *testing.T) {
	// Not in parallel: the server listens again on the port it closed, which another test's
	// server could take in between.
	needBrowser(t)
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		a := f.create("Migrate the orders table", []string{"alice", "bob"}, 1, "")
		alice := f.newTab(t)
		alice.quietNetwork = true
		alice.signIn(f.token("alice", approval.RoleApprover))
		alice.open("/ui/approvals/" + a.ID)
		alice.do(chromedp.WaitVisible(chromedp.CSS("#live.waiting")))

		// The server goes away: the long-poll in flight is cut.
		addr := f.srv.Listener.Addr().String()
		f.srv.CloseClientConnections()
		f.srv.Close()
		alice.do(chromedp.WaitVisible(chromedp.CSS("#live.offline")))
		if got := alice.text("#live"); !strings.Contains(got, "The server cannot be reached") {
			t.Fatalf("while the server is away the page says %q", got)
		}
		if kind == testdb.SQLite {
			alice.screenshot("server-unreachable")
		}

		// It comes back at the same address with another key: the cookie is refused.
		other := setupStore(t, f.store, approval.Routing{}, func(cfg *web.Config, _ string) {
			cfg.SessionKey = []byte("another-key-of-at-least-thirty-two-bytes")
		})
		back := httptest.NewUnstartedServer(other.srv.Config.Handler)
		back.Listener.Close()
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("listen again on %s: %v", addr, err)
		}
		back.Listener = l
		back.Start()
		t.Cleanup(back.Close)
		alice.do(chromedp.WaitVisible(chromedp.CSS("#live.lost")))
		if got := alice.text("#live"); !strings.Contains(got, "Your session has ended") || !strings.Contains(got, "Sign in again") {
			t.Fatalf("after the restart the page says %q, want that the session has ended", got)
		}
		if kind == testdb.SQLite {
			alice.screenshot("session-lost")
		}

		const comment = "Row counts match on the replica."
		alice.do(
			chromedp.SendKeys(chromedp.CSS("#comment"), comment),
			chromedp.Click(chromedp.CSS("#approve")),
			chromedp.WaitVisible(chromedp.CSS("#answer[data-refused]")),
		)
		if got := alice.text("#answer"); !strings.Contains(got, "Your approval was not recorded") {
			t.Fatalf("the refused vote says %q", got)
		}
		if got := alice.value("#comment"); got != comment {
			t.Fatalf("the refused vote's page keeps %q, want %q", got, comment)
		}
		if kind == testdb.SQLite {
			alice.screenshot("vote-not-recorded")
		}
		if got := f.read(a.ID); len(got.Decisions) != 0 {
			t.Fatalf("after the refused vote: %d decisions, want none", len(got.Decisions))
		}

		alice.do(
			chromedp.Click(chromedp.CSS("#signin")),
			chromedp.SendKeys(chromedp.CSS("#token"), f.token("alice", approval.RoleApprover)),
			chromedp.Click(chromedp.CSS(`form[action="/ui/signin/token"] button`)),
			chromedp.WaitVisible(chromedp.CSS("#approve")),
		)
		if got := alice.text("#title"); got != "Migrate the orders table" {
			t.Fatalf("after signing in the page shows %q, want the approval", got)
		}
		if got := alice.value("#comment"); got != comment {
			t.Fatalf("after signing in the form holds %q, want %q", got, comment)
		}
		alice.do(chromedp.Click(chromedp.CSS("#approve")), chromedp.WaitVisible(chromedp.CSS("#answer")))
		if got := alice.text("#answer"); !strings.Contains(got, "You approved this") {
			t.Fatalf("the vote after signing in: %q", got)
		}
		got := f.read(a.ID)
		if len(got.Decisions) != 1 || got.Decisions[0].Comment != comment {
			t.Fatalf("decisions %+v, want alice's with the kept comment", got.Decisions)
		}
	})
}

// TestBrowser_TypedCommentSurvivesUpdate: bob is typing a comment when others vote. The
// page does not reload: each new outcome is shown beside the form, the textarea keeps its
// text, and once the approval is decided the buttons are disabled.
func TestBrowser_TypedCommentSurvivesUpdate(t *testing.T) {
	t.Parallel()
	needBrowser(t)
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		a := f.create("Drop the legacy queue", []string{"alice", "bob", "carol"}, 2, "")
		bob := f.newTab(t)
		bob.signIn(f.token("bob", approval.RoleApprover))
		bob.open("/ui/approvals/" + a.ID)
		bob.do(chromedp.WaitVisible(chromedp.CSS("#live.waiting")))
		const typed = "Half a thought about the consumers"
		bob.do(chromedp.SendKeys(chromedp.CSS("#comment"), typed))

		if code := f.api(http.MethodPost, "/v1/approvals/"+a.ID+"/approve", f.token("alice", approval.RoleApprover), "", nil); code != http.StatusOK {
			t.Fatalf("alice approves: %d", code)
		}
		bob.do(chromedp.WaitVisible(chromedp.CSS("#update")))
		if got := bob.text("#update"); !strings.Contains(got, "alice approved this") || !strings.Contains(got, "1 of 2 approvals so far") {
			t.Fatalf("after alice's vote the page says %q", got)
		}
		if got := bob.value("#comment"); got != typed {
			t.Fatalf("after alice's vote the comment is %q, want %q", got, typed)
		}

		if code := f.api(http.MethodPost, "/v1/approvals/"+a.ID+"/reject", f.token("carol", approval.RoleApprover), "", nil); code != http.StatusOK {
			t.Fatalf("carol rejects: %d", code)
		}
		bob.do(chromedp.WaitVisible(chromedp.CSS(`article[data-status="rejected"]`)))
		if got := bob.text("#update"); !strings.Contains(got, "now rejected (carol rejected it)") {
			t.Fatalf("after carol's rejection the page says %q", got)
		}
		if got := bob.text("#status"); !strings.Contains(got, "Rejected") {
			t.Fatalf("the status shows %q, want Rejected", got)
		}
		if got := bob.value("#comment"); got != typed {
			t.Fatalf("after carol's rejection the comment is %q, want %q", got, typed)
		}
		// Nothing stale stays on the page: the votes are the new ones, the time left is gone,
		// and the parts the answer does not carry say they may have changed.
		if got := bob.text(".votes"); !strings.Contains(got, "alice approved at") || !strings.Contains(got, "carol rejected at") {
			t.Fatalf("the votes show %q, want alice's and carol's", got)
		}
		if got := bob.text("#votes-h"); !strings.Contains(got, "1 of 2 needed") {
			t.Fatalf("the count shows %q, want 1 of 2 needed", got)
		}
		n, err := chromedp.Run(bob.ctx, chromedp.Evaluate[int](`document.querySelectorAll(".meta .left").length + 10 * document.querySelectorAll("section[data-changes] .stale").length`))
		if err != nil || n != 20 {
			t.Fatalf("time left shown and sections marked stale: %d (%v), want no time left and 2 marked", n, err)
		}
		disabled, err := chromedp.Run(bob.ctx, chromedp.Evaluate[bool](`document.getElementById("approve").disabled && document.getElementById("reject").disabled`))
		if err != nil || !disabled {
			t.Fatalf("buttons disabled: %v (%v), want true once the approval is decided", disabled, err)
		}
		if kind == testdb.SQLite {
			bob.screenshot("typed-comment-kept")
		}
	})
}
