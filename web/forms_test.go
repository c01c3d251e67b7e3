package web_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/approvald/approval"
	"github.com/approvald/approval/httpapi"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/web"
)

// TestSignInFormLimits: the sign-in forms are read only within a few KiB, after the cheap
// checks: a post without the pre-sign-in cookie is refused before its body is read, one that
// is not form-encoded is refused, one that declares or sends more than the limit is answered
// 413 with a reason, and one the budget of unauthenticated bodies has no room for is answered
// 503 with Retry-After. None of them signs anyone in or asks for a link.
func TestSignInFormLimits(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		budget := httpapi.NewBodyBudget(64 << 10)
		f := setupRouted(t, kind, linkRouting, func(cfg *web.Config, base string) {
			cfg.Links = &web.LinksConfig{}
			cfg.Bodies = budget
		})
		token := f.token("alice", approval.RoleApprover)
		b := f.browser()
		csrf := field(t, b.get("/ui/signin").body, "csrf")
		pre := b.client.Jar.Cookies(mustURL(t, f.srv.URL+"/ui/"))

		noRedirects := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		// post sends body to path with the browser's cookies unless bare, as a non-browser
		// client, and returns the status, the Retry-After and the problem's detail.
		post := func(path, contentType string, body io.Reader, length int64, bare bool) (int, string, string) {
			t.Helper()
			req, _ := http.NewRequest(http.MethodPost, f.srv.URL+path, body)
			req.ContentLength = length
			req.Header.Set("Content-Type", contentType)
			if !bare {
				for _, c := range pre {
					req.AddCookie(c)
				}
			}
			resp, err := noRedirects.Do(req)
			if err != nil {
				t.Fatalf("POST %s: %v", path, err)
			}
			defer resp.Body.Close()
			var p struct{ Detail string }
			json.NewDecoder(resp.Body).Decode(&p)
			return resp.StatusCode, resp.Header.Get("Retry-After"), p.Detail
		}
		const formType = "application/x-www-form-urlencoded"
		big := url.Values{"csrf": {csrf}, "token": {token}, "who": {"alice"}, "next": {"/ui/" + strings.Repeat("x", 8<<10)}}.Encode()
		for _, path := range []string{"/ui/signin/token", "/ui/signin/email", "/ui/signin/link"} {
			if code, _, detail := post(path, formType, strings.NewReader(big), int64(len(big)), false); code != http.StatusRequestEntityTooLarge || !strings.Contains(detail, "larger than 4 KiB") {
				t.Errorf("%s, a declared 8 KiB form: %d %q, want 413 saying the form is larger than 4 KiB", path, code, detail)
			}
			// Sent without a length (chunked), it is cut at the limit.
			if code, _, detail := post(path, formType, io.MultiReader(strings.NewReader(big)), -1, false); code != http.StatusRequestEntityTooLarge || !strings.Contains(detail, "larger than 4 KiB") {
				t.Errorf("%s, an 8 KiB form without a length: %d %q, want 413", path, code, detail)
			}
			// A body declared far larger, without the pre-sign-in cookie: refused unread.
			if code, _, _ := post(path, formType, strings.NewReader(big), int64(len(big)), true); code != http.StatusForbidden {
				t.Errorf("%s without the pre-sign-in cookie: %d, want 403", path, code)
			}
			if code, _, detail := post(path, "multipart/form-data; boundary=x", strings.NewReader(big), int64(len(big)), false); code != http.StatusBadRequest || !strings.Contains(detail, formType) {
				t.Errorf("%s, not form-encoded: %d %q, want 400 naming %s", path, code, detail, formType)
			}
		}

		// With the budget taken (by bodies being read elsewhere), a sign-in form is answered
		// 503 with Retry-After; given back, the same form signs in.
		release, ok := budget.Reserve(64<<10 - 100)
		must(t, ok, "reserve the budget")
		form := url.Values{"csrf": {csrf}, "token": {token}, "next": {"/ui/"}}.Encode()
		if code, retry, _ := post("/ui/signin/token", formType, strings.NewReader(form), int64(len(form)), false); code != http.StatusServiceUnavailable || retry != "1" {
			t.Errorf("a form with the budget full: %d, Retry-After %q; want 503, 1", code, retry)
		}
		release()
		if code, _, _ := post("/ui/signin/token", formType, strings.NewReader(form), int64(len(form)), false); code != http.StatusSeeOther {
			t.Errorf("a form within the budget: %d, want 303", code)
		}
		// Every form gave its share back: the whole budget can be reserved again.
		if release, ok := budget.Reserve(64 << 10); !ok {
			t.Errorf("budget after the forms: got part of it still reserved, want all of it free")
		} else {
			release()
		}
		if tokens := f.linkTokens(); len(tokens) != 0 {
			t.Errorf("refused forms asked for %d sign-in links, want none", len(tokens))
		}
	})
}

// TestDecisionFormLimit: a decision form holds a comment of approval.MaxCommentLength
// characters of four bytes each, and one declaring more than its limit is answered 413
// without a vote.
func TestDecisionFormLimit(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		f := setup(t, kind)
		a := f.create("Deploy", []string{"alice"}, 1, "")
		alice := f.browser()
		alice.signIn(f.token("alice", approval.RoleApprover))
		path := "/ui/approvals/" + a.ID + "/approve"

		huge := alice.do(http.MethodPost, path, url.Values{"token": {alice.decisionToken(a.ID)}, "comment": {strings.Repeat("x", 64<<10)}})
		must(t, huge.status == http.StatusRequestEntityTooLarge, "a 64 KiB comment: status %d, want 413", huge.status)
		must(t, len(f.read(a.ID).Decisions) == 0, "a refused form voted")

		longest := strings.Repeat("\U0001F680", approval.MaxCommentLength) // 4 bytes each
		p := alice.do(http.MethodPost, path, url.Values{"token": {alice.decisionToken(a.ID)}, "comment": {longest}})
		must(t, p.status == http.StatusSeeOther, "the longest comment: status %d, want 303: %s", p.status, p.body)
		must(t, len(f.read(a.ID).Decisions) == 1, "the longest comment did not vote")
	})
}

func mustURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
