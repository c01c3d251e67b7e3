package web_test

import (
	"context"
	"html"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/web"
)

// outage is a fault of downStore's database.
type outage int

const (
	up          outage = iota
	writesDown         // a transaction cannot begin: the vote's write fails, reads work
	allDown            // the session's read fails too
	writesHang         // a transaction waits for the database until the request's deadline
	commitsLost        // a transaction commits, and its answer is lost
)

// downStore is a store whose database can be made unavailable, as the drivers report it
// (EUNAVAILABLE, 503), or slow past the request's deadline.
type downStore struct {
	approval.Store
	mu  sync.Mutex
	now outage
}

func (s *downStore) set(o outage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = o
}

func (s *downStore) get() outage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}

func (s *downStore) Begin(ctx context.Context) (approval.Tx, error) {
	switch s.get() {
	case writesDown, allDown:
		return nil, approval.Errorf(approval.EUNAVAILABLE, "the database is unavailable")
	case writesHang:
		<-ctx.Done()
		return nil, approval.Unfinished(ctx, ctx.Err())
	case commitsLost:
		tx, err := s.Store.Begin(ctx)
		if err != nil {
			return nil, err
		}
		return lostCommit{tx}, nil
	}
	return s.Store.Begin(ctx)
}

func (s *downStore) Session(ctx context.Context, id string) (*approval.Session, error) {
	if s.get() == allDown {
		return nil, approval.Errorf(approval.EUNAVAILABLE, "the database is unavailable")
	}
	return s.Store.Session(ctx, id)
}

// lostCommit commits, then reports the database unavailable, as a connection cut after the
// COMMIT was sent does.
type lostCommit struct{ approval.Tx }

func (t lostCommit) Commit(ctx context.Context) error {
	if err := t.Tx.Commit(ctx); err != nil {
		return err
	}
	return approval.Errorf(approval.EUNAVAILABLE, "the database is unavailable")
}

// hangTimeout is the request deadline of the tests whose writes hang (writesHang waits this
// long, no more).
const hangTimeout = 300 * time.Millisecond

// setupDown is setup over a store whose database can be taken down, with requests given
// timeout (0: the default).
func setupDown(t *testing.T, kind string, timeout time.Duration) (*fixture, *downStore) {
	t.Helper()
	ds := &downStore{Store: testdb.Open(t, kind, nil)}
	f := setupStore(t, ds, approval.Routing{}, func(cfg *web.Config, _ string) {
		cfg.RequestTimeout = timeout
	})
	return f, ds
}

// TestDecide_DatabaseDownNotRecorded: a vote that fails because the service cannot reach its
// database (the write refused, the session's read refused, the write past the request's
// deadline) is answered with a page that says plainly the vote was NOT recorded and why,
// keeps the comment in a form that sends the same vote again, and once the database is back
// that form records the vote with the comment. A commit whose answer was lost is not called
// unrecorded: the page reads the approval again and shows the vote on record.
func TestDecide_DatabaseDownNotRecorded(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		comment := "Checked the <b>rollback</b> plan\nwith ops & QA"
		for name, fault := range map[string]outage{"write refused": writesDown, "session unread": allDown, "write timed out": writesHang} {
			t.Run(name, func(t *testing.T) {
				f, ds := setupDown(t, kind, hangTimeout)
				a := f.create("Rotate the signing keys", []string{"alice", "bob"}, 1, "")
				alice := f.browser()
				alice.signIn(f.token("alice", approval.RoleApprover))
				token := alice.decisionToken(a.ID)

				ds.set(fault)
				p := alice.do(http.MethodPost, "/ui/approvals/"+a.ID+"/reject", url.Values{"token": {token}, "comment": {comment}})
				must(t, p.status == http.StatusServiceUnavailable && p.header.Get("Retry-After") != "", "status %d, Retry-After %q; want 503 with Retry-After", p.status, p.header.Get("Retry-After"))
				must(t, strings.HasPrefix(p.header.Get("Content-Type"), "text/html"), "Content-Type %q, want a page", p.header.Get("Content-Type"))
				text := textOf(p.body)
				must(t, strings.Contains(text, "Your rejection was not recorded"), "page says %q, want that the rejection was not recorded", text)
				must(t, strings.Contains(text, "could not reach its database"), "page says %q, want why", text)
				must(t, strings.Contains(p.body, `>`+html.EscapeString(comment)+`</textarea>`), "the comment is not kept in the form:\n%s", p.body)
				must(t, strings.Contains(p.body, `id="retry"`) && strings.Contains(p.body, `action="/ui/approvals/`+a.ID+`/reject"`), "no form to try again:\n%s", p.body)
				ds.set(up)
				must(t, len(f.read(a.ID).Decisions) == 0, "a vote is on record after the failure")

				// Try again, as the page's form sends it.
				again := alice.do(http.MethodPost, "/ui/approvals/"+a.ID+"/reject", url.Values{"token": {field(t, p.body, "token")}, "comment": {comment}})
				must(t, again.status == http.StatusSeeOther, "try again: status %d, want 303: %s", again.status, textOf(again.body))
				answer := alice.get(again.header.Get("Location"))
				must(t, strings.Contains(textOf(answer.body), "You rejected this"), "after trying again the page says %q", textOf(answer.body))
				got := f.read(a.ID)
				must(t, len(got.Decisions) == 1 && got.Decisions[0].Comment == comment, "decisions %+v, want alice's with the comment", got.Decisions)
			})
		}

		t.Run("commit answer lost", func(t *testing.T) {
			f, ds := setupDown(t, kind, hangTimeout)
			a := f.create("Rotate the signing keys", []string{"alice", "bob"}, 1, "")
			alice := f.browser()
			alice.signIn(f.token("alice", approval.RoleApprover))
			token := alice.decisionToken(a.ID)
			ds.set(commitsLost)
			p := alice.do(http.MethodPost, "/ui/approvals/"+a.ID+"/approve", url.Values{"token": {token}, "comment": {"fine"}})
			ds.set(up)
			must(t, p.status == http.StatusSeeOther, "status %d, want 303 to the answer: %s", p.status, textOf(p.body))
			answer := alice.get(p.header.Get("Location"))
			must(t, strings.Contains(textOf(answer.body), "You approved this"), "the page says %q", textOf(answer.body))
		})
	})
}

// TestBrowser_VoteWhileDatabaseDown: with the script, a vote sent while the database is
// down lands on the page that says it was not recorded and why, with the typed comment in
// its form; once the database is back, "Try again" records the vote with the comment.
func TestBrowser_VoteWhileDatabaseDown(t *testing.T) {
	t.Parallel()
	needBrowser(t)
	testdb.Each(t, func(t *testing.T, kind string) {
		// The default deadline: a page's live updates on a loaded machine (the race detector,
		// other tests' browsers) may take longer than hangTimeout, and this test hangs nothing.
		f, ds := setupDown(t, kind, 0)
		a := f.create("Migrate the orders table", []string{"alice", "bob"}, 1, "")
		alice := f.newTab(t)
		alice.quietNetwork = true // the failed vote's 503
		alice.signIn(f.token("alice", approval.RoleApprover))
		alice.open("/ui/approvals/" + a.ID)
		alice.do(chromedp.WaitVisible(chromedp.CSS("#live.waiting")))

		const comment = "Row counts match on the replica."
		ds.set(writesDown)
		alice.do(
			chromedp.SendKeys(chromedp.CSS("#comment"), comment),
			chromedp.Click(chromedp.CSS("#approve")),
			chromedp.WaitVisible(chromedp.CSS("#answer[data-refused]")),
		)
		if got := alice.text("#answer"); !strings.Contains(got, "Your approval was not recorded") || !strings.Contains(got, "could not reach its database") {
			t.Fatalf("the failed vote says %q", got)
		}
		if got := alice.value("#comment"); got != comment {
			t.Fatalf("the failed vote's page keeps %q, want %q", got, comment)
		}
		if kind == testdb.SQLite {
			alice.screenshot("vote-database-down")
		}
		ds.set(up)
		if got := f.read(a.ID); len(got.Decisions) != 0 {
			t.Fatalf("after the failed vote: %d decisions, want none", len(got.Decisions))
		}

		alice.do(chromedp.Click(chromedp.CSS("#try-again")), chromedp.WaitVisible(chromedp.CSS("#answer.good")))
		if got := alice.text("#answer"); !strings.Contains(got, "You approved this") {
			t.Fatalf("trying again says %q", got)
		}
		got := f.read(a.ID)
		if len(got.Decisions) != 1 || got.Decisions[0].Comment != comment {
			t.Fatalf("decisions %+v, want alice's with the kept comment", got.Decisions)
		}
	})
}
