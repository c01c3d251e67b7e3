package web_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/web"
)

func TestPages_SecurityHeaders(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		b := f.browser()
		b.signIn(f.token("alice", approval.RoleApprover))
		for _, path := range []string{"/ui/", "/ui/signin", "/ui/static/app.css", "/ui/nope"} {
			p := b.get(path)
			for name, want := range map[string]string{
				"Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
				"X-Frame-Options":         "DENY",
				"X-Content-Type-Options":  "nosniff",
				"Referrer-Policy":         "same-origin",
			} {
				if got := p.header.Get(name); got != want {
					t.Errorf("%s: %s = %q, want %q", path, name, got, want)
				}
			}
		}
		if got := b.get("/ui/static/app.js").header.Get("Cache-Control"); !strings.Contains(got, "max-age") {
			t.Errorf("app.js Cache-Control = %q, want a max-age", got)
		}
	})
}

// TestDecide_RefusedWithoutValidToken: a decision post with no token, a wrong one, another
// session's, or from another origin is refused with 403 and records nothing.
func TestDecide_RefusedWithoutValidToken(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		a := f.create("Deploy api", []string{"alice", "bob"}, 1, "")
		alice := f.browser()
		alice.signIn(f.token("alice", approval.RoleApprover))
		bob := f.browser()
		bob.signIn(f.token("bob", approval.RoleApprover))
		good := alice.decisionToken(a.ID)
		bobs := bob.decisionToken(a.ID)
		path := "/ui/approvals/" + a.ID + "/approve"

		for name, tc := range map[string]struct {
			form    url.Values
			headers []string
		}{
			"no token":         {url.Values{}, nil},
			"wrong token":      {url.Values{"token": {good[:len(good)-4] + "AAAA"}}, nil},
			"another's token":  {url.Values{"token": {bobs}}, nil},
			"other approval":   {url.Values{"token": {alice.decisionToken(f.create("Other", []string{"alice"}, 1, "").ID)}}, nil},
			"other origin":     {url.Values{"token": {good}}, []string{"Origin", "https://evil.example"}},
			"cross-site fetch": {url.Values{"token": {good}}, []string{"Sec-Fetch-Site", "cross-site"}},
		} {
			p := alice.do(http.MethodPost, path, tc.form, tc.headers...)
			if p.status != http.StatusForbidden {
				t.Errorf("%s: status %d, want 403", name, p.status)
			}
		}
		if got := f.read(a.ID); len(got.Decisions) != 0 || got.Version != 1 {
			t.Fatalf("after refused posts: %d decisions, version %d; want none, 1", len(got.Decisions), got.Version)
		}
		// A refused post as problem+json for a non-browser client.
		req, _ := http.NewRequest(http.MethodPost, f.srv.URL+path, strings.NewReader(""))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for _, c := range alice.client.Jar.Cookies(req.URL) {
			req.AddCookie(c)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusForbidden || ct != "application/problem+json" {
			t.Errorf("non-browser refusal: %d %s, want 403 application/problem+json", resp.StatusCode, ct)
		}

		p := alice.do(http.MethodPost, path, url.Values{"token": {good}, "comment": {"ship it"}}, "Origin", f.srv.URL)
		must(t, p.status == http.StatusSeeOther, "valid post: status %d, want 303", p.status)
		if got := f.read(a.ID); len(got.Decisions) != 1 || got.Status != approval.StatusApproved {
			t.Fatalf("after the valid post: %d decisions, %s; want 1, approved", len(got.Decisions), got.Status)
		}
	})
}

// TestDecide_DoubleSubmitIsOneVote: one form submitted many times at once is one vote, and
// every submit is sent to the same answer.
func TestDecide_DoubleSubmitIsOneVote(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		a := f.create("Refund order 42", []string{"alice", "bob"}, 2, "")
		alice := f.browser()
		alice.signIn(f.token("alice", approval.RoleApprover))
		token := alice.decisionToken(a.ID)

		const n = 16
		start := make(chan struct{})
		locations := make([]string, n)
		statuses := make([]int, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				p := alice.do(http.MethodPost, "/ui/approvals/"+a.ID+"/approve", url.Values{"token": {token}})
				statuses[i], locations[i] = p.status, p.header.Get("Location")
			})
		}
		close(start)
		wg.Wait()
		for i := range n {
			if statuses[i] != http.StatusSeeOther || locations[i] != locations[0] {
				t.Fatalf("submit %d: %d to %q; want 303 to %q", i, statuses[i], locations[i], locations[0])
			}
		}
		got := f.read(a.ID)
		if len(got.Decisions) != 1 || got.Version != 2 {
			t.Fatalf("%d decisions, version %d; want 1, 2", len(got.Decisions), got.Version)
		}
		events, _ := f.store.Events(context.Background(), a.ID)
		if len(events) != 2 {
			t.Fatalf("%d events, want 2 (created, voted)", len(events))
		}
		p := alice.get(locations[0])
		if text := textOf(p.body); !strings.Contains(text, "You approved this") || !strings.Contains(text, "1 of 2 approvals so far") {
			t.Fatalf("answer page says %q; want \"You approved this\" and \"1 of 2 approvals so far\"", text)
		}
	})
}

// TestDecide_AlreadyDecided: a form submitted after someone else decided says so, and the
// vote is not recorded.
func TestDecide_AlreadyDecided(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		a := f.create("Rotate keys", []string{"alice", "bob"}, 1, "")
		alice := f.browser()
		alice.signIn(f.token("alice", approval.RoleApprover))
		token := alice.decisionToken(a.ID)
		if code := f.api(http.MethodPost, "/v1/approvals/"+a.ID+"/reject", f.token("bob", approval.RoleApprover), `{"comment":"not today"}`, nil); code != http.StatusOK {
			t.Fatalf("bob rejects: %d", code)
		}
		p := alice.do(http.MethodPost, "/ui/approvals/"+a.ID+"/approve", url.Values{"token": {token}})
		must(t, p.status == http.StatusSeeOther, "post: status %d, want 303", p.status)
		text := textOf(alice.get(p.header.Get("Location")).body)
		if !strings.Contains(text, "Already rejected by bob at") || !strings.Contains(text, "your approval was not recorded") {
			t.Fatalf("answer page says %q", text)
		}
		if got := f.read(a.ID); len(got.Decisions) != 1 || got.Decisions[0].Approver != "bob" {
			t.Fatalf("decisions %+v, want bob's alone", got.Decisions)
		}
		// The answer link is the viewer's: bob cannot open alice's.
		bob := f.browser()
		bob.signIn(f.token("bob", approval.RoleApprover))
		if got := bob.get(p.header.Get("Location")).status; got != http.StatusBadRequest {
			t.Errorf("bob opens alice's answer: %d, want 400", got)
		}
	})
}

// TestPages_EscapeRequesterInput: titles and context are the requester's text, shown as text.
func TestPages_EscapeRequesterInput(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		a := f.create(`<script>alert(1)</script>`, []string{"alice"}, 1,
			`{"<img src=x onerror=alert(2)>": {"nested": ["</ul><script>alert(3)</script>", 7, true, null]}}`)
		alice := f.browser()
		alice.signIn(f.token("alice", approval.RoleApprover))
		for _, path := range []string{"/ui/", "/ui/approvals/" + a.ID} {
			body := alice.get(path).body
			if strings.Contains(body, "<script>alert") || strings.Contains(body, "<img src=x") {
				t.Fatalf("%s holds the requester's markup unescaped", path)
			}
			if !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
				t.Fatalf("%s does not show the title as text", path)
			}
		}
	})
}

// TestSession_TamperedCookieRefused: a session cookie changed in any byte is refused, and a
// cookie signed with another key too.
func TestSession_TamperedCookieRefused(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		alice := f.browser()
		alice.signIn(f.token("alice", approval.RoleApprover))
		u, _ := url.Parse(f.srv.URL + "/ui/")
		var cookie *http.Cookie
		for _, c := range alice.client.Jar.Cookies(u) {
			if c.Name == "approvald_session" {
				cookie = c
			}
		}
		must(t, cookie != nil, "no session cookie after sign-in")
		must(t, alice.get("/ui/").status == http.StatusOK, "the untouched cookie is refused")

		payload, mac, _ := strings.Cut(cookie.Value, ".")
		raw, _ := base64.RawURLEncoding.DecodeString(payload)
		// The cookie names the session's row and its expiry; a longer life is a change too.
		extended := strings.Replace(string(raw), `"exp":`, `"exp":9`, 1)
		must(t, extended != string(raw), "the cookie %s has no expiry", raw)
		for name, value := range map[string]string{
			"expiry changed": base64.RawURLEncoding.EncodeToString([]byte(extended)) + "." + mac,
			"mac changed":    payload + "." + strings.Repeat("A", len(mac)),
			"no mac":         payload,
			"garbage":        "x",
		} {
			req, _ := http.NewRequest(http.MethodGet, f.srv.URL+"/ui/operations", nil)
			req.AddCookie(&http.Cookie{Name: "approvald_session", Value: value})
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s: status %d, want 401", name, resp.StatusCode)
			}
		}

		// Another process with another key does not accept this one's cookies.
		other := setup(t, kind, func(cfg *web.Config, _ string) { cfg.SessionKey = []byte(strings.Repeat("k", 32)) })
		req, _ := http.NewRequest(http.MethodGet, other.srv.URL+"/ui/", nil)
		req.AddCookie(cookie)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("a cookie signed with another key: status %d, want 401", resp.StatusCode)
		}
	})
}

// TestSession_SignOut: sign-out needs the form token, clears the cookie, and the pages then
// ask to sign in.
func TestSession_SignOut(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		alice := f.browser()
		alice.signIn(f.token("alice", approval.RoleApprover))
		home := alice.get("/ui/")
		must(t, home.status == http.StatusOK, "home: %d", home.status)

		if p := alice.do(http.MethodPost, "/ui/signout", url.Values{}); p.status != http.StatusForbidden {
			t.Fatalf("sign-out without its form token: %d, want 403", p.status)
		}
		must(t, alice.get("/ui/").status == http.StatusOK, "a refused sign-out signed out")

		p := alice.do(http.MethodPost, "/ui/signout", url.Values{"csrf": {field(t, home.body, "csrf")}})
		must(t, p.status == http.StatusSeeOther, "sign-out: %d, want 303", p.status)
		after := alice.get("/ui/")
		if after.status != http.StatusSeeOther || !strings.HasPrefix(after.header.Get("Location"), "/ui/signin") {
			t.Fatalf("after sign-out: %d to %q, want 303 to the sign-in page", after.status, after.header.Get("Location"))
		}
		// A new sign-in is a new session: the old session's form token no longer works.
		alice.signIn(f.token("alice", approval.RoleApprover))
		if p := alice.do(http.MethodPost, "/ui/signout", url.Values{"csrf": {field(t, home.body, "csrf")}}); p.status != http.StatusForbidden {
			t.Fatalf("the previous session's form token: %d, want 403", p.status)
		}
	})
}

// TestSignIn_Token: a wrong token is refused with a reason, and the sign-in form needs the
// token of the page this browser loaded.
func TestSignIn_Token(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		b := f.browser()
		form := b.get("/ui/signin")
		csrf := field(t, form.body, "csrf")
		if p := b.do(http.MethodPost, "/ui/signin/token", url.Values{"csrf": {csrf}, "token": {"apv_nope"}}); p.status != http.StatusUnauthorized || !strings.Contains(p.body, "not known") {
			t.Fatalf("unknown token: %d, want 401 saying it is not known", p.status)
		}
		other := f.browser()
		if p := other.do(http.MethodPost, "/ui/signin/token", url.Values{"csrf": {csrf}, "token": {f.token("alice", approval.RoleApprover)}}); p.status != http.StatusForbidden {
			t.Fatalf("sign-in with another browser's form token: %d, want 403", p.status)
		}
	})
}

// TestPages_WaitingIsFullAndSearchable: "waiting for me" leaves out what the viewer voted on in
// the store's listing, so each page but the last is full; the search form narrows it, is kept
// in the next page's link, and a search the input policy refuses is a 400 that changes nothing.
func TestPages_WaitingIsFullAndSearchable(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		aliceAPI := f.token("alice", approval.RoleApprover)
		var created []*approval.Approval
		for i := range 32 {
			created = append(created, f.create(fmt.Sprintf("Deploy build %d", i), []string{"alice", "bob"}, 2, ""))
		}
		f.create("Refund 50% of order 7731", []string{"alice"}, 1, "")
		f.create("Refund 50 of order 7732", []string{"alice"}, 1, "")
		for _, a := range created[len(created)-5:] { // the newest: they would fill the first page
			if code := f.api(http.MethodPost, "/v1/approvals/"+a.ID+"/approve", aliceAPI, "", nil); code != http.StatusOK {
				t.Fatalf("alice approves: %d", code)
			}
		}
		alice := f.browser()
		alice.signIn(f.token("alice", approval.RoleApprover))
		cards := func(body string) int { return rowsOf(body, "waiting") }

		first := alice.get("/ui/")
		must(t, first.status == http.StatusOK, "waiting: status %d", first.status)
		must(t, cards(first.body) == 25, "first page: %d approvals, want a full page of 25", cards(first.body))
		for _, a := range created[len(created)-5:] {
			must(t, !strings.Contains(first.body, a.ID), "first page lists %s, which alice voted on", a.ID)
		}
		next := regexp.MustCompile(`href="(/ui/\?[^"]*w=[^"]*)"`).FindStringSubmatch(first.body)
		must(t, next != nil, "first page: no link to the next page")
		second := alice.get(html.UnescapeString(next[1]))
		must(t, cards(second.body) == 4, "second page: %d approvals, want 4 (29 wait for alice: 27 deploys, 2 refunds)", cards(second.body))

		found := alice.get("/ui/?q=50%25")
		must(t, cards(found.body) == 1 && strings.Contains(found.body, "Refund 50% of order 7731"),
			"search 50%%: %d approvals, want the 50%% refund alone", cards(found.body))
		must(t, strings.Contains(found.body, `value="50%"`), "search 50%%: the form does not keep the text")
		deploys := alice.get("/ui/?q=DEPLOY+build")
		must(t, cards(deploys.body) == 25, "search DEPLOY build: %d approvals, want a full page", cards(deploys.body))
		link := regexp.MustCompile(`href="(/ui/\?[^"]*w=[^"]*)"`).FindStringSubmatch(deploys.body)
		must(t, link != nil && strings.Contains(html.UnescapeString(link[1]), "q=DEPLOY+build"), "search: the next page's link %v loses the search", link)
		none := alice.get("/ui/?from=nobody")
		must(t, cards(none.body) == 0 && strings.Contains(none.body, "matches the filter"), "search from=nobody: %d approvals", cards(none.body))

		bad := alice.get("/ui/?q=%01")
		must(t, bad.status == http.StatusBadRequest, "search with a control character: status %d, want 400", bad.status)
	})
}

// rowsOf counts the rows of the list with the given id in a page.
func rowsOf(body, id string) int {
	_, list, ok := strings.Cut(body, `<ul class="list" id="`+id+`">`)
	if !ok {
		return 0
	}
	list, _, _ = strings.Cut(list, "</ul>")
	return strings.Count(list, `<li class="row">`)
}
