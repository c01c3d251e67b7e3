package web_test

import (
	"encoding/json"
	"html"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"

	"github.com/approvald/approval"
	"github.com/approvald/approval/httpapi"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/web"
)

// TestDecide_SessionRefusedNotRecorded: a vote whose session is refused (the cookie signed
// with another key, as after a restart with another session key; the session ended; no
// cookie at all) is answered with a page, not a bare 401: it says the vote was not recorded,
// keeps the comment in the form, and links to signing in again, which returns to the
// approval. Nothing is written.
func TestDecide_SessionRefusedNotRecorded(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		a := f.create("Rotate the signing keys", []string{"alice", "bob"}, 1, "")
		restarted := setupStore(t, f.store, approval.Routing{}, func(cfg *web.Config, _ string) {
			cfg.SessionKey = []byte("another-key-of-at-least-thirty-two-bytes")
		})
		comment := "Checked the <b>rollback</b> plan\nwith ops & QA"
		signinLink := "/ui/signin?next=" + url.QueryEscape("/ui/approvals/"+a.ID)

		for name, tc := range map[string]struct {
			server *fixture
			prep   func(b *browser)
		}{
			"another key":   {restarted, func(*browser) {}},
			"ended session": {f, func(b *browser) { b.signOut() }},
			"no cookie":     {f, func(b *browser) { b.client.Jar, _ = newJar() }},
		} {
			t.Run(name, func(t *testing.T) {
				alice := f.browser()
				alice.signIn(f.token("alice", approval.RoleApprover))
				token := alice.decisionToken(a.ID)
				tc.prep(alice)
				p := alice.do(http.MethodPost, tc.server.srv.URL+"/ui/approvals/"+a.ID+"/approve",
					url.Values{"token": {token}, "comment": {comment}})
				must(t, p.status == http.StatusUnauthorized, "status %d, want 401: %s", p.status, p.body)
				must(t, strings.HasPrefix(p.header.Get("Content-Type"), "text/html"), "Content-Type %q, want a page", p.header.Get("Content-Type"))
				text := textOf(p.body)
				must(t, strings.Contains(text, "Your approval was not recorded"), "page says %q, want that the approval was not recorded", text)
				must(t, strings.Contains(p.body, `>`+html.EscapeString(comment)+`</textarea>`), "the comment is not kept in the form:\n%s", p.body)
				must(t, strings.Contains(p.body, `href="`+html.EscapeString(signinLink)+`" id="signin"`), "no sign-in link to %s:\n%s", signinLink, p.body)
				if got := f.read(a.ID); len(got.Decisions) != 0 || got.Version != 1 {
					t.Fatalf("after the refused vote: %d decisions, version %d; want none, 1", len(got.Decisions), got.Version)
				}
			})
		}

		// The sign-in link returns to the approval.
		bob := f.browser()
		p := bob.get(signinLink)
		resp := bob.do(http.MethodPost, "/ui/signin/token", url.Values{"csrf": {field(t, p.body, "csrf")},
			"token": {f.token("bob", approval.RoleApprover)}, "next": {field(t, p.body, "next")}})
		must(t, resp.status == http.StatusSeeOther && resp.header.Get("Location") == "/ui/approvals/"+a.ID,
			"sign in from the link: %d to %q, want 303 to the approval", resp.status, resp.header.Get("Location"))

		// A client that is not a browser gets problem+json, as before.
		req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/ui/approvals/"+a.ID+"/approve", strings.NewReader("comment=x"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		must(t, r.StatusCode == http.StatusUnauthorized && r.Header.Get("Content-Type") == "application/problem+json",
			"without Accept text/html: %d %s, want 401 problem+json", r.StatusCode, r.Header.Get("Content-Type"))
	})
}

// TestDecide_FormOfEndedSessionNotRecorded: a form rendered for a session that has since
// been replaced by a new sign-in is refused (403) with the same page: not recorded, the
// comment kept, and a link back to the approval.
func TestDecide_FormOfEndedSessionNotRecorded(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		a := f.create("Rotate the signing keys", []string{"alice"}, 1, "")
		alice := f.browser()
		token := f.token("alice", approval.RoleApprover)
		alice.signIn(token)
		old := alice.decisionToken(a.ID)
		alice.signIn(token) // a new session, as from another tab
		p := alice.do(http.MethodPost, "/ui/approvals/"+a.ID+"/reject", url.Values{"token": {old}, "comment": {"not today"}})
		must(t, p.status == http.StatusForbidden, "status %d, want 403", p.status)
		text := textOf(p.body)
		must(t, strings.Contains(text, "Your rejection was not recorded"), "page says %q", text)
		must(t, strings.Contains(p.body, ">not today</textarea>"), "the comment is not kept:\n%s", p.body)
		must(t, strings.Contains(p.body, `href="/ui/approvals/`+a.ID+`" id="reopen"`), "no link back to the approval:\n%s", p.body)
		if got := f.read(a.ID); len(got.Decisions) != 0 {
			t.Fatalf("after the refused vote: %d decisions, want none", len(got.Decisions))
		}
	})
}

// TestWait_SessionLostAndOutcome: the long-poll answers 401 problem+json once the session is
// refused, apart from any other failure, and otherwise says what changed, with the badge
// and whether the viewer may still vote.
func TestWait_SessionLostAndOutcome(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		a := f.create("Scale down the batch cluster", []string{"alice", "bob", "carol"}, 2, "")
		alice := f.browser()
		alice.signIn(f.token("alice", approval.RoleApprover))
		wait := "/ui/approvals/" + a.ID + "/wait?version=1"

		must(t, f.api(http.MethodPost, "/v1/approvals/"+a.ID+"/approve", f.token("bob", approval.RoleApprover), "", nil) == http.StatusOK, "bob approves")
		var got struct {
			Version int64
			Status  string
			Badge   struct{ Word, Icon, Class string }
			Said    string
			CanVote bool `json:"can_vote"`
		}
		p := alice.do(http.MethodGet, wait, nil, "Accept", "application/json")
		must(t, p.status == http.StatusOK && json.Unmarshal([]byte(p.body), &got) == nil, "wait: %d %s", p.status, p.body)
		must(t, got.Version == 2 && got.Status == "pending" && got.CanVote && got.Badge.Word == "Pending" &&
			strings.HasPrefix(got.Said, "bob approved this at ") && strings.HasSuffix(got.Said, "; 1 of 2 approvals so far."),
			"after bob's vote: %+v", got)

		must(t, f.api(http.MethodPost, "/v1/approvals/"+a.ID+"/reject", f.token("carol", approval.RoleApprover), "", nil) == http.StatusOK, "carol rejects")
		p = alice.do(http.MethodGet, wait, nil, "Accept", "application/json")
		must(t, p.status == http.StatusOK && json.Unmarshal([]byte(p.body), &got) == nil, "wait: %d %s", p.status, p.body)
		must(t, got.Status == "rejected" && !got.CanVote && got.Badge.Class == "bad" &&
			strings.HasPrefix(got.Said, "This request is now rejected (carol rejected it) at "), "after carol's rejection: %+v", got)

		alice.signOut()
		p = alice.do(http.MethodGet, wait, nil, "Accept", "application/json")
		must(t, p.status == http.StatusUnauthorized && p.header.Get("Content-Type") == "application/problem+json",
			"wait after sign-out: %d %s, want 401 problem+json", p.status, p.header.Get("Content-Type"))
	})
}

// signOut signs out through the header's form, which ends the session's row; the cookie is
// kept, as in a tab that still holds it.
func (b *browser) signOut() {
	b.f.tb.Helper()
	u, _ := url.Parse(b.f.srv.URL + "/ui/")
	cookies := b.client.Jar.Cookies(u)
	p := b.get("/ui/")
	resp := b.do(http.MethodPost, "/ui/signout", url.Values{"csrf": {field(b.f.tb, p.body, "csrf")}})
	must(b.f.tb, resp.status == http.StatusSeeOther, "sign out: status %d", resp.status)
	b.client.Jar.SetCookies(u, cookies)
}

func newJar() (http.CookieJar, error) { return cookiejar.New(nil) }

// TestDecide_RefusedSessionBodyBudgeted: the body of a vote whose session is refused comes
// from someone not known, so it is read only with room in the budget of such bodies (503
// with Retry-After without it), and gives its room back.
func TestDecide_RefusedSessionBodyBudgeted(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		budget := httpapi.NewBodyBudget(64 << 10)
		f := setup(t, kind, func(cfg *web.Config, _ string) { cfg.Bodies = budget })
		a := f.create("Rotate the signing keys", []string{"alice"}, 1, "")
		b := f.browser() // never signed in
		path := "/ui/approvals/" + a.ID + "/approve"
		form := url.Values{"comment": {"kept"}}

		release, ok := budget.Reserve(64 << 10)
		must(t, ok, "reserve the budget")
		p := b.do(http.MethodPost, path, form)
		must(t, p.status == http.StatusServiceUnavailable && p.header.Get("Retry-After") == "1",
			"with the budget full: %d, Retry-After %q; want 503, 1", p.status, p.header.Get("Retry-After"))
		release()
		p = b.do(http.MethodPost, path, form)
		must(t, p.status == http.StatusUnauthorized && strings.Contains(p.body, ">kept</textarea>"), "within the budget: %d, want 401 with the comment kept", p.status)
		release, ok = budget.Reserve(64 << 10)
		must(t, ok, "the whole budget is free again")
		release()
	})
}
