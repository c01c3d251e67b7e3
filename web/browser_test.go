package web_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/web"
)

// The browser tests share one headless Chromium, started by TestMain; each test opens its
// own browser contexts (separate cookies, like separate people) in it.
var (
	browserCtx context.Context // nil when no Chromium was found
	browserErr error
)

func TestMain(m *testing.M) {
	var cancel func()
	browserCtx, cancel, browserErr = startBrowser()
	code := m.Run()
	if cancel != nil {
		cancel()
	}
	os.Exit(code)
}

// startBrowser starts headless Chromium: $APPROVALD_CHROMIUM, or chromium from PATH.
func startBrowser() (context.Context, func(), error) {
	path := os.Getenv("APPROVALD_CHROMIUM")
	if path == "" {
		for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
			if p, err := exec.LookPath(name); err == nil {
				path = p
				break
			}
		}
	}
	if path == "" {
		return nil, nil, errors.New("no chromium in PATH (apt-get install chromium, or set APPROVALD_CHROMIUM)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.Flag("disable-gpu", true))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(alloc)
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		cancelCtx()
		cancelAlloc()
		return nil, nil, fmt.Errorf("start %s: %w", path, err)
	}
	return ctx, func() { cancelCtx(); cancelAlloc() }, nil
}

// needBrowser fails the test when Chromium is missing and APPROVALD_REQUIRE_BROWSER=1 (as
// scripts/test sets), and skips it otherwise.
func needBrowser(t *testing.T) {
	t.Helper()
	if browserCtx != nil {
		return
	}
	if os.Getenv("APPROVALD_REQUIRE_BROWSER") == "1" {
		t.Fatalf("browser required (APPROVALD_REQUIRE_BROWSER=1): %v", browserErr)
	}
	t.Skipf("no browser: %v", browserErr)
}

// tab is one page in a browser context of its own, with what its console reported.
type tab struct {
	t   *testing.T
	ctx context.Context
	f   *fixture

	mu       sync.Mutex
	problems []string // console errors, exceptions, error log entries, dialogs
	// quietNetwork lets the network's own log entries pass (a refused connection, a 401
	// answer), for the tests that take the server away or refuse the session on purpose.
	quietNetwork bool
}

// newTab opens a page in a new browser context. It fails the test at the end if the page
// logged any error or exception, or opened a dialog.
func (f *fixture) newTab(t *testing.T) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browserCtx, chromedp.WithNewBrowserContext())
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	tb := &tab{t: t, ctx: ctx, f: f}
	if err := chromedp.Listen(ctx, tb.observe); err != nil {
		t.Fatalf("listen: %v", err)
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1100, 900)); err != nil {
		t.Fatalf("open tab: %v", err)
	}
	t.Cleanup(func() {
		cancelTimeout()
		cancel()
		tb.mu.Lock()
		defer tb.mu.Unlock()
		for _, p := range tb.problems {
			t.Errorf("browser console: %s", p)
		}
	})
	return tb
}

func (tb *tab) observe(ev any) {
	var problem string
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeWarning {
			var args []string
			for _, a := range ev.Args {
				args = append(args, string(a.Value)+a.Description)
			}
			problem = fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(args, " "))
		}
	case *runtime.EventExceptionThrown:
		problem = "exception: " + ev.ExceptionDetails.Text
		if ev.ExceptionDetails.Exception != nil {
			problem += " " + ev.ExceptionDetails.Exception.Description
		}
	case *cdplog.EventEntryAdded:
		tb.mu.Lock()
		quiet := tb.quietNetwork && ev.Entry.Source == cdplog.EntrySourceNetwork
		tb.mu.Unlock()
		if quiet {
			return
		}
		if ev.Entry.Level == cdplog.EntryLevelError || ev.Entry.Level == cdplog.EntryLevelWarning {
			problem = fmt.Sprintf("%s %s: %s (%s)", ev.Entry.Source, ev.Entry.Level, ev.Entry.Text, ev.Entry.URL)
		}
	case *cdppage.EventJavascriptDialogOpening:
		problem = "dialog opened: " + ev.Message
	}
	if problem != "" {
		tb.mu.Lock()
		tb.problems = append(tb.problems, problem)
		tb.mu.Unlock()
	}
}

func (tb *tab) do(steps ...chromedp.Action[chromedp.Void]) {
	tb.t.Helper()
	if err := chromedp.Do(tb.ctx, steps...); err != nil {
		tb.t.Fatalf("browser: %v", err)
	}
}

func (tb *tab) text(sel string) string {
	tb.t.Helper()
	s, err := chromedp.Run(tb.ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		tb.t.Fatalf("text of %s: %v", sel, err)
	}
	return strings.Join(strings.Fields(s), " ")
}

// signIn signs in through the token form, as a person would.
func (tb *tab) signIn(token string) {
	tb.t.Helper()
	tb.do(
		chromedp.Navigate(tb.f.srv.URL+"/ui/signin"),
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS(`form[action="/ui/signin/token"] button`)),
		chromedp.WaitVisible(chromedp.CSS(".who")),
	)
}

func (tb *tab) open(path string) {
	tb.t.Helper()
	tb.do(chromedp.Navigate(tb.f.srv.URL+path), chromedp.WaitVisible(chromedp.CSS("main h1")))
}

// screenshot saves the page under web/testdata/screenshots (git-ignored).
func (tb *tab) screenshot(name string) {
	tb.t.Helper()
	png, err := chromedp.Run(tb.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		tb.t.Fatalf("screenshot: %v", err)
	}
	dir := filepath.Join("testdata", "screenshots")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		tb.t.Fatal(err)
	}
}

// TestBrowser_DoubleClickApprove: a double click on Approve records one vote, and the
// answer page says so; no console error, and the CSP header is on the page.
func TestBrowser_DoubleClickApprove(t *testing.T) {
	t.Parallel()
	needBrowser(t)
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		a := f.create("Deploy api v1.42 to prod", []string{"alice", "bob"}, 2,
			`{"commit": "9f2c1e", "service": "api", "regions": ["eu-west-1", "us-east-1"], "change": {"ticket": "OPS-1042", "risk": "low", "rollback": true}}`)
		f.create("Refund order 7731", []string{"alice"}, 1, `{"order": 7731, "amount": {"value": 129.5, "currency": "EUR"}}`)
		alice := f.newTab(t)
		alice.signIn(f.token("alice", approval.RoleApprover))
		if kind == testdb.SQLite {
			alice.screenshot("waiting")
		}

		resp, err := chromedp.RunResponse(alice.ctx, chromedp.Navigate(f.srv.URL+"/ui/approvals/"+a.ID))
		if err != nil {
			t.Fatal(err)
		}
		if csp := resp.Headers["Content-Security-Policy"]; !strings.Contains(fmt.Sprint(csp), "script-src 'self'") {
			t.Fatalf("Content-Security-Policy = %v", csp)
		}
		alice.do(chromedp.WaitVisible(chromedp.CSS("#approve")))
		if kind == testdb.SQLite {
			alice.screenshot("approval")
		}
		// A double click as the mouse sends it: two presses and releases at the button's
		// centre, the second with click count 2, dispatched back to back.
		xy, err := chromedp.Run(alice.ctx, chromedp.Evaluate[[]float64](
			`(() => { const b = document.getElementById("approve"); b.scrollIntoView(); const r = b.getBoundingClientRect(); return [r.x + r.width/2, r.y + r.height/2]; })()`))
		if err != nil || len(xy) != 2 {
			t.Fatalf("approve button position: %v %v", xy, err)
		}
		alice.do(chromedp.MouseClickXY(xy[0], xy[1]), chromedp.MouseClickXY(xy[0], xy[1], chromedp.ClickCount(2)))
		alice.do(chromedp.WaitVisible(chromedp.CSS("#answer")))
		if got := alice.text("#answer"); !strings.Contains(got, "You approved this") {
			t.Fatalf("answer: %q, want \"You approved this\"", got)
		}
		got := f.read(a.ID)
		if len(got.Decisions) != 1 || got.Version != 2 {
			t.Fatalf("%d decisions, version %d; want 1, 2", len(got.Decisions), got.Version)
		}
	})
}

// TestBrowser_TwoTabs: alice approves and bob rejects at the same moment, each in a browser of
// their own: one outcome, and the other tab says what it was.
func TestBrowser_TwoTabs(t *testing.T) {
	t.Parallel()
	needBrowser(t)
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		a := f.create("Delete the staging database", []string{"alice", "bob"}, 1, `{"database": "staging-main"}`)
		alice, bob := f.newTab(t), f.newTab(t)
		alice.signIn(f.token("alice", approval.RoleApprover))
		bob.signIn(f.token("bob", approval.RoleApprover))
		alice.open("/ui/approvals/" + a.ID)
		bob.open("/ui/approvals/" + a.ID)

		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, c := range []struct {
			tab    *tab
			button string
		}{{alice, "#approve"}, {bob, "#reject"}} {
			wg.Go(func() {
				<-start
				errs[i] = chromedp.Do(c.tab.ctx, chromedp.Click(chromedp.CSS(c.button)), chromedp.WaitVisible(chromedp.CSS("#answer")))
			})
		}
		close(start)
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		got := f.read(a.ID)
		if len(got.Decisions) != 1 || !got.Status.Terminal() {
			t.Fatalf("%d decisions, %s; want one decision and a final status", len(got.Decisions), got.Status)
		}
		winner, loser := alice, bob
		won, lost := "You approved this", "Already approved by alice at"
		lostTail := "your rejection was not recorded"
		if got.Status == approval.StatusRejected {
			winner, loser = bob, alice
			won, lost, lostTail = "You rejected this", "Already rejected by bob at", "your approval was not recorded"
		}
		if text := winner.text("#answer"); !strings.Contains(text, won) {
			t.Errorf("winner's answer: %q, want %q", text, won)
		}
		text := loser.text("#answer")
		if !strings.Contains(text, lost) || !strings.Contains(text, lostTail) {
			t.Errorf("loser's answer: %q, want %q ... %q", text, lost, lostTail)
		}
		if kind == testdb.SQLite {
			loser.screenshot("already-decided")
		}
	})
}

// TestBrowser_ScriptTitleIsText: a title holding a script tag is shown as text and runs
// nothing (a dialog or a console error would fail the tab).
func TestBrowser_ScriptTitleIsText(t *testing.T) {
	t.Parallel()
	needBrowser(t)
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		title := `<script>alert(1)</script>`
		a := f.create(title, []string{"alice"}, 1, `{"note": "<img src=x onerror=alert(2)>"}`)
		alice := f.newTab(t)
		alice.signIn(f.token("alice", approval.RoleApprover))
		alice.open("/ui/approvals/" + a.ID)
		if got := alice.text("#title"); got != title {
			t.Fatalf("title shows %q, want %q", got, title)
		}
		n, err := chromedp.Run(alice.ctx, chromedp.Evaluate[int](`document.querySelectorAll("main script, main img").length`))
		if err != nil || n != 0 {
			t.Fatalf("the page holds %d script or img elements from requester input (%v)", n, err)
		}
	})
}

// TestBrowser_Search: a search typed into the waiting page's form lists the matching
// approvals only, and the title's markup stays text.
func TestBrowser_Search(t *testing.T) {
	t.Parallel()
	needBrowser(t)
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		f.create("Deploy api v1.42 to prod", []string{"alice"}, 1, "")
		refund := f.create("Refund <b>order</b> 7731", []string{"alice"}, 1, "")
		alice := f.newTab(t)
		alice.signIn(f.token("alice", approval.RoleApprover))
		alice.do(
			chromedp.SendKeys(chromedp.CSS(`form.search input[name="q"]`), "REFUND"),
			chromedp.Click(chromedp.CSS(`form.search button`)),
			chromedp.WaitVisible(chromedp.CSS(`form.search a`)), // "Clear", shown once a search is active
		)
		if got := alice.text("#waiting"); !strings.Contains(got, "Refund <b>order</b> 7731") || strings.Contains(got, "Deploy") {
			t.Fatalf("search REFUND lists %q, want the refund alone", got)
		}
		href, err := chromedp.Run(alice.ctx, chromedp.Evaluate[string](`document.querySelector("#waiting a.title").getAttribute("href")`))
		if err != nil || href != "/ui/approvals/"+refund.ID {
			t.Fatalf("search result links to %q (%v), want the refund's page", href, err)
		}
		if kind == testdb.SQLite {
			alice.screenshot("search")
		}
	})
}

// TestBrowser_PendingPageUpdates: the page of a pending approval shows the outcome by itself
// when someone else decides through the API.
func TestBrowser_PendingPageUpdates(t *testing.T) {
	t.Parallel()
	needBrowser(t)
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		a := f.create("Scale down the batch cluster", []string{"alice", "bob"}, 2, "")
		alice := f.newTab(t)
		alice.signIn(f.token("alice", approval.RoleApprover))
		alice.open("/ui/approvals/" + a.ID)
		alice.do(chromedp.WaitVisible(chromedp.CSS("#live.waiting"))) // the script is waiting
		if code := f.api(http.MethodPost, "/v1/approvals/"+a.ID+"/reject", f.token("bob", approval.RoleApprover), `{"comment":"cluster is busy"}`, nil); code != http.StatusOK {
			t.Fatalf("bob rejects: %d", code)
		}
		alice.do(chromedp.WaitVisible(chromedp.CSS(`article[data-status="rejected"]`)))
		if got := alice.text("#status"); !strings.Contains(got, "Rejected") {
			t.Fatalf("status shows %q, want Rejected", got)
		}
	})
}

// TestBrowser_Operations: an operator sees an execution that needs review and retries it
// from the page.
func TestBrowser_Operations(t *testing.T) {
	t.Parallel()
	needBrowser(t)
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		rec := f.needsReview()
		olga := f.newTab(t)
		olga.signIn(f.token("olga", approval.RoleOperator))
		olga.open("/ui/operations")
		if got := olga.text("#" + rec.ID); !strings.Contains(got, "Needs review") {
			t.Fatalf("operations page shows %q for the execution", got)
		}
		if kind == testdb.SQLite {
			olga.screenshot("operations")
		}
		olga.do(
			chromedp.Click(chromedp.CSS(`form[action="/ui/executions/`+rec.ID+`/retry"] button`)),
			chromedp.WaitVisible(chromedp.CSS(`.answer.good`)),
		)
		got, err := f.store.Execution(context.Background(), rec.ID)
		if err != nil || got.Status != approval.ExecutionQueued {
			t.Fatalf("after retry: %+v %v, want queued", got, err)
		}
	})
}

// TestBrowser_SigninLinkUsedTwice: a person asks for a sign-in link on the page, opens it
// and confirms, and is signed in; the same link, used again in another browser, is refused
// the second time.
func TestBrowser_SigninLinkUsedTwice(t *testing.T) {
	t.Parallel()
	needBrowser(t)
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setupLinks(t, kind)
		alice := f.newTab(t)
		alice.do(
			chromedp.Navigate(f.srv.URL+"/ui/signin"),
			chromedp.SendKeys(chromedp.CSS("#who"), "alice@example.com"),
			chromedp.Click(chromedp.CSS(`#ask-link button`)),
			chromedp.WaitVisible(chromedp.CSS("#link-sent")),
		)
		tokens := f.linkTokens()
		if len(tokens) != 1 {
			t.Fatalf("sign-in mails queued: %d, want 1", len(tokens))
		}
		link := f.srv.URL + web.SigninLinkPath(tokens[0], "")
		alice.do(
			chromedp.Navigate(link),
			chromedp.Click(chromedp.CSS(`#use-link button`)),
			chromedp.WaitVisible(chromedp.CSS(".who")),
		)
		if got := alice.text(".who"); !strings.Contains(got, "alice") {
			t.Fatalf("signed in as %q, want alice", got)
		}
		if kind == testdb.SQLite {
			alice.screenshot("signin-link-used")
		}

		other := f.newTab(t)
		other.do(
			chromedp.Navigate(link),
			chromedp.Click(chromedp.CSS(`#use-link button`)),
			chromedp.WaitVisible(chromedp.CSS(".answer.bad")),
		)
		if got := other.text(".answer.bad"); !strings.Contains(got, "already used") {
			t.Fatalf("second use says %q, want that the link was already used", got)
		}
		if kind == testdb.SQLite {
			other.screenshot("signin-link-refused")
		}
	})
}
