package web_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oauth2-proxy/mockoidc"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/fakeclock"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/postgres"
	"github.com/approvald/approval/sqlite"
	"github.com/approvald/approval/web"
)

// cookie returns the browser's session cookie.
func (b *browser) cookie() *http.Cookie {
	b.f.tb.Helper()
	u, _ := url.Parse(b.f.srv.URL + "/ui/")
	for _, c := range b.client.Jar.Cookies(u) {
		if c.Name == "approvald_session" {
			return c
		}
	}
	b.f.tb.Fatalf("no session cookie")
	return nil
}

// getWith sends GET base+path with only the given session cookie, as a client that copied
// it would, and returns the status.
func getWith(tb testing.TB, base, path string, c *http.Cookie) int {
	tb.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+path, nil)
	req.AddCookie(c)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// sharedStores opens one new database n times: stores over the same tables, as replicas or
// a restart with another configuration see them.
func sharedStores(tb testing.TB, kind string, n int) []approval.Store {
	tb.Helper()
	dsn := testdb.DSN(tb, kind)
	ctx := context.Background()
	var stores []approval.Store
	for i := range n {
		var s interface {
			approval.Store
			Migrate(context.Context) error
		}
		switch kind {
		case testdb.SQLite:
			st, err := sqlite.Open(ctx, dsn)
			if err != nil {
				tb.Fatal(err)
			}
			s = st
		case testdb.Postgres:
			st, err := postgres.Open(ctx, dsn)
			if err != nil {
				tb.Fatal(err)
			}
			s = st
		}
		tb.Cleanup(func() { s.Close() })
		if i == 0 {
			if err := s.Migrate(ctx); err != nil {
				tb.Fatal(err)
			}
		}
		stores = append(stores, s)
	}
	return stores
}

// TestSession_EndsWithItsToken: a page session signed in with a token ends at once when the
// token is revoked, rotated or expires: the page asks to sign in again, and a decision form
// rendered before is refused and records nothing.
func TestSession_EndsWithItsToken(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		for _, end := range []string{"revoke", "rotate", "expire"} {
			t.Run(end, func(t *testing.T) {
				clock := fakeclock.New(time.Now())
				f := setup(t, kind, func(cfg *web.Config, _ string) { cfg.Now = clock.Now })
				admin := f.token("root", approval.RoleAdmin)
				secret, tok, err := (&approval.Service{Store: f.store}).CreateToken(context.Background(), tokenIssuer,
					approval.TokenSpec{Subject: "alice", Role: approval.RoleApprover, ExpiresIn: time.Hour})
				if err != nil {
					t.Fatal(err)
				}
				a := f.create("Deploy api", []string{"alice"}, 1, "")
				alice := f.browser()
				alice.signIn(secret)
				decision := alice.decisionToken(a.ID)

				switch end {
				case "revoke", "rotate":
					if code := f.api(http.MethodPost, "/v1/tokens/"+tok.ID+"/"+end, admin, "", nil); code != http.StatusOK {
						t.Fatalf("%s the token: %d", end, code)
					}
				case "expire":
					clock.Advance(2 * time.Hour)
				}
				p := alice.get("/ui/")
				if p.status != http.StatusSeeOther || !strings.HasPrefix(p.header.Get("Location"), "/ui/signin") {
					t.Fatalf("page after the token's %s: %d to %q, want 303 to the sign-in page", end, p.status, p.header.Get("Location"))
				}
				vote := alice.do(http.MethodPost, "/ui/approvals/"+a.ID+"/approve", url.Values{"token": {decision}})
				if vote.status != http.StatusUnauthorized {
					t.Fatalf("vote after the token's %s: %d, want 401", end, vote.status)
				}
				if got := f.read(a.ID); len(got.Decisions) != 0 || got.Status != approval.StatusPending {
					t.Fatalf("after the refused vote: %d decisions, %s; want none, pending", len(got.Decisions), got.Status)
				}
			})
		}
	})
}

// TestSession_SignOutEndsCopiedCookie: after sign-out, a copy of the session cookie taken
// before it no longer works.
func TestSession_SignOutEndsCopiedCookie(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		alice := f.browser()
		alice.signIn(f.token("alice", approval.RoleApprover))
		home := alice.get("/ui/")
		copied := alice.cookie()
		must(t, getWith(t, f.srv.URL, "/ui/", copied) == http.StatusOK, "the copied cookie before sign-out is refused")
		p := alice.do(http.MethodPost, "/ui/signout", url.Values{"csrf": {field(t, home.body, "csrf")}})
		must(t, p.status == http.StatusSeeOther, "sign-out: %d, want 303", p.status)
		if got := getWith(t, f.srv.URL, "/ui/", copied); got != http.StatusUnauthorized {
			t.Fatalf("the copied cookie after sign-out: %d, want 401", got)
		}
	})
}

// TestSession_RevokeBySubject: POST /v1/sessions/revoke ends every page session of a person,
// for operators and admins only; bad input is a 400 that ends nothing.
func TestSession_RevokeBySubject(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		alice1, alice2, bob := f.browser(), f.browser(), f.browser()
		alice1.signIn(f.token("alice", approval.RoleApprover))
		alice2.signIn(f.token("alice", approval.RoleApprover))
		bob.signIn(f.token("bob", approval.RoleApprover))
		operator := f.token("olga", approval.RoleOperator)

		var problem map[string]any
		if code := f.api(http.MethodPost, "/v1/sessions/revoke", f.token("bob", approval.RoleApprover), `{"subject":"alice"}`, &problem); code != http.StatusForbidden {
			t.Fatalf("an approver revokes: %d, want 403", code)
		}
		for _, body := range []string{`{"subject":""}`, `{"subject":"a\nb"}`, `{"who":"alice"}`, `{"subject":"alice"} x`, `[]`} {
			if code := f.api(http.MethodPost, "/v1/sessions/revoke", operator, body, &problem); code != http.StatusBadRequest {
				t.Fatalf("body %s: %d, want 400", body, code)
			}
		}
		must(t, alice1.get("/ui/").status == http.StatusOK, "a refused revoke ended alice's session")

		var out struct{ Ended int }
		if code := f.api(http.MethodPost, "/v1/sessions/revoke", operator, `{"subject":"alice"}`, &out); code != http.StatusOK || out.Ended != 2 {
			t.Fatalf("revoke alice's sessions: %d, ended %d; want 200, 2", code, out.Ended)
		}
		for i, b := range []*browser{alice1, alice2} {
			if p := b.get("/ui/"); p.status != http.StatusSeeOther {
				t.Errorf("alice's session %d after the revoke: %d, want 303 to sign in", i+1, p.status)
			}
		}
		must(t, bob.get("/ui/").status == http.StatusOK, "bob's session ended with alice's")
		if code := f.api(http.MethodPost, "/v1/sessions/revoke", f.token("root", approval.RoleAdmin), `{"subject":"alice"}`, &out); code != http.StatusOK || out.Ended != 0 {
			t.Fatalf("revoke again as admin: %d, ended %d; want 200, 0", code, out.Ended)
		}
	})
}

// TestSession_LinkPersonRemoved: a person signed in by an e-mailed link and then taken out of
// the configuration loses the session at once (a second server over the same database,
// without them, is the restart with the new configuration).
func TestSession_LinkPersonRemoved(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		without := approval.Routing{
			Channels: map[string][]string{"alice": {approval.ChannelEmail}},
			Emails:   map[string]string{"alice": "alice@example.com"},
		}
		stores := sharedStores(t, kind, 2)
		links := func(cfg *web.Config, _ string) { cfg.Links = &web.LinksConfig{Operators: []string{"olga"}} }
		before, after := setupStore(t, stores[0], linkRouting, links), setupStore(t, stores[1], without, links)

		olga := before.browser()
		must(t, olga.askLink("olga").status == http.StatusOK, "ask for olga's link")
		p := olga.get("/ui/signin/link?t=" + url.QueryEscape(before.linkTokens()[0]))
		must(t, olga.do(http.MethodPost, "/ui/signin/link", url.Values{"csrf": {field(t, p.body, "csrf")}, "t": {field(t, p.body, "t")}}).status == http.StatusSeeOther, "olga's link refused")
		c := olga.cookie()
		must(t, getWith(t, before.srv.URL, "/ui/operations", c) == http.StatusOK, "olga's session where she is configured is refused")
		if got := getWith(t, after.srv.URL, "/ui/", c); got != http.StatusUnauthorized {
			t.Fatalf("olga's session once she is out of the configuration: %d, want 401", got)
		}
	})
}

// TestSession_OIDCRoleFollowsConfiguration: an OIDC session's role is the configuration's at
// each request: a subject taken out of the operators loses the operators' page at once.
func TestSession_OIDCRoleFollowsConfiguration(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		m, err := mockoidc.Run()
		if err != nil {
			t.Fatalf("start the provider: %v", err)
		}
		t.Cleanup(func() { m.Shutdown() })
		pc := m.Config()
		oidc := func(operators ...string) func(cfg *web.Config, base string) {
			return func(cfg *web.Config, base string) {
				cfg.OIDC = &web.OIDCConfig{
					Issuer: pc.Issuer, ClientID: pc.ClientID, ClientSecret: pc.ClientSecret,
					RedirectURL: base + "/ui/signin/oidc/callback", SubjectClaim: "email", Operators: operators,
				}
			}
		}
		stores := sharedStores(t, kind, 2)
		before, after := setupStore(t, stores[0], approval.Routing{}, oidc("olga@example.com")), setupStore(t, stores[1], approval.Routing{}, oidc())

		m.QueueUser(&mockoidc.MockUser{Subject: "u-olga", Email: "olga@example.com", EmailVerified: true})
		olga := followingBrowser()
		if r, err := olga.Get(before.srv.URL + "/ui/signin/oidc?next=/ui/operations"); err != nil || r.StatusCode != http.StatusOK {
			t.Fatalf("olga's sign-in: %v %v", r, err)
		}
		u, _ := url.Parse(before.srv.URL + "/ui/")
		var c *http.Cookie
		for _, k := range olga.Jar.Cookies(u) {
			if k.Name == "approvald_session" {
				c = k
			}
		}
		must(t, c != nil, "no session cookie after olga's sign-in")
		must(t, getWith(t, before.srv.URL, "/ui/operations", c) == http.StatusOK, "olga, an operator, is refused the operators' page")
		if got := getWith(t, after.srv.URL, "/ui/operations", c); got != http.StatusForbidden {
			t.Fatalf("olga's operators' page once she is no operator: %d, want 403", got)
		}
		must(t, getWith(t, after.srv.URL, "/ui/", c) == http.StatusOK, "olga's session as an approver is refused")
	})
}

// lockedBuffer is a log sink the server's goroutines write to while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestSignIn_FailuresSlowed: wrong tokens pasted into the sign-in form are logged with the
// client's address, never the token, and past web.SigninFailures in a window the address is
// answered 429 with Retry-After, a right token included.
func TestSignIn_FailuresSlowed(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		var logs lockedBuffer
		f := setup(t, kind, func(cfg *web.Config, _ string) {
			cfg.Logger = slogText(&logs)
		})
		b := f.browser()
		csrf := field(t, b.get("/ui/signin").body, "csrf")
		post := func(token string) page {
			p := b.do(http.MethodPost, "/ui/signin/token", url.Values{"csrf": {csrf}, "token": {token}})
			if strings.Contains(p.body, `name="csrf"`) {
				csrf = field(t, p.body, "csrf")
			}
			return p
		}
		const wrong = "apv_wrong-secret-never-logged"
		for i := range web.SigninFailures {
			if p := post(wrong); p.status != http.StatusUnauthorized {
				t.Fatalf("wrong token %d: %d, want 401", i+1, p.status)
			}
		}
		p := post(wrong)
		if p.status != http.StatusTooManyRequests || p.header.Get("Retry-After") == "" {
			t.Fatalf("wrong token past the limit: %d, Retry-After %q; want 429 with Retry-After", p.status, p.header.Get("Retry-After"))
		}
		if p := post(f.token("alice", approval.RoleApprover)); p.status != http.StatusTooManyRequests {
			t.Fatalf("a right token from a slowed address: %d, want 429", p.status)
		}
		out := logs.String()
		must(t, strings.Contains(out, "addr=127.0.0.1"), "no failed sign-in logged with the address: %s", out)
		must(t, !strings.Contains(out, "wrong-secret"), "the pasted token is in the log: %s", out)
	})
}

func slogText(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
