package web_test

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"

	"github.com/oauth2-proxy/mockoidc"

	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/web"
)

// oidcSetup starts a real OpenID Connect provider on loopback and the pages configured for it.
func oidcSetup(t *testing.T, kind string, adjust func(*web.OIDCConfig)) (*fixture, *mockoidc.MockOIDC) {
	t.Helper()
	m, err := mockoidc.Run()
	if err != nil {
		t.Fatalf("start the provider: %v", err)
	}
	t.Cleanup(func() { m.Shutdown() })
	pc := m.Config()
	f := setup(t, kind, func(cfg *web.Config, base string) {
		cfg.OIDC = &web.OIDCConfig{
			Issuer: pc.Issuer, ClientID: pc.ClientID, ClientSecret: pc.ClientSecret,
			RedirectURL: base + "/ui/signin/oidc/callback",
		}
		if adjust != nil {
			adjust(cfg.OIDC)
		}
	})
	return f, m
}

// followingBrowser follows redirects, as a browser does, with a cookie jar.
func followingBrowser() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar}
}

func TestOIDC_SignIn(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		f, m := oidcSetup(t, kind, func(c *web.OIDCConfig) {
			c.AllowedDomains = []string{"example.com"}
			c.Operators = []string{"olga@example.com"}
		})
		a := f.create("Deploy api", []string{"alice@example.com"}, 1, "")

		// alice: the full redirect flow, provider included, ends on the page she asked for.
		m.QueueUser(&mockoidc.MockUser{Subject: "u-alice", Email: "alice@example.com", EmailVerified: true})
		alice := followingBrowser()
		resp, err := alice.Get(f.srv.URL + "/ui/signin/oidc?next=" + url.QueryEscape("/ui/approvals/"+a.ID))
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(t, resp)
		if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/ui/approvals/"+a.ID {
			t.Fatalf("after sign-in: %d at %s, want 200 at the approval", resp.StatusCode, resp.Request.URL.Path)
		}
		if !strings.Contains(body, "alice@example.com") || !strings.Contains(body, `name="token"`) {
			t.Fatalf("the approval page does not show alice signed in with the decision form")
		}
		// She is an approver: operations are not hers.
		if r, _ := alice.Get(f.srv.URL + "/ui/operations"); r.StatusCode != http.StatusForbidden {
			t.Errorf("alice's operations page: %d, want 403", r.StatusCode)
		}

		// olga is configured as an operator.
		m.QueueUser(&mockoidc.MockUser{Subject: "u-olga", Email: "olga@example.com", EmailVerified: true})
		olga := followingBrowser()
		if r, err := olga.Get(f.srv.URL + "/ui/signin/oidc?next=/ui/operations"); err != nil || r.StatusCode != http.StatusOK || r.Request.URL.Path != "/ui/operations" {
			t.Fatalf("olga's sign-in: %v %v", r, err)
		}

		// mallory's address is of another domain, and eve's is not verified.
		for _, u := range []*mockoidc.MockUser{
			{Subject: "u-mallory", Email: "mallory@evil.example", EmailVerified: true},
			{Subject: "u-eve", Email: "eve@example.com", EmailVerified: false},
		} {
			m.QueueUser(u)
			c := followingBrowser()
			r, err := c.Get(f.srv.URL + "/ui/signin/oidc")
			if err != nil {
				t.Fatal(err)
			}
			r.Body.Close()
			if r.StatusCode != http.StatusForbidden {
				t.Errorf("%s: %d, want 403", u.Email, r.StatusCode)
			}
			if r, _ := c.Get(f.srv.URL + "/ui/"); r.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s is signed in after a refusal", u.Email)
			}
		}
	})
}

// TestOIDC_StateAndReplay: a callback whose state is not the one this browser started is
// refused, and a callback works once.
func TestOIDC_StateAndReplay(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		f, m := oidcSetup(t, kind, nil)
		m.QueueUser(&mockoidc.MockUser{Subject: "u-alice", Email: "alice@example.com", EmailVerified: true})
		b := f.browser() // does not follow redirects

		start := b.get("/ui/signin/oidc")
		must(t, start.status == http.StatusFound, "start: %d, want 302", start.status)
		authURL, _ := url.Parse(start.header.Get("Location"))
		q := authURL.Query()
		for _, p := range []string{"state", "nonce", "code_challenge"} {
			must(t, q.Get(p) != "", "the authorization request has no %s", p)
		}
		must(t, q.Get("code_challenge_method") == "S256", "code_challenge_method %q, want S256", q.Get("code_challenge_method"))
		// The provider answers with a code (mockoidc signs in the queued user at once).
		resp, err := b.client.Get(authURL.String())
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		callback, _ := url.Parse(resp.Header.Get("Location"))
		must(t, callback.Query().Get("code") != "", "no code from the provider: %s", callback)

		forged := *callback
		cq := forged.Query()
		cq.Set("state", "forged")
		forged.RawQuery = cq.Encode()
		if p := b.get(forged.String()); p.status != http.StatusBadRequest {
			t.Fatalf("forged state: %d, want 400", p.status)
		}
		// The state cookie went with the refused callback: the real one is refused too.
		if p := b.get(callback.String()); p.status != http.StatusBadRequest {
			t.Fatalf("callback after its sign-in ended: %d, want 400", p.status)
		}
		if p := b.get("/ui/"); p.status != http.StatusSeeOther {
			t.Fatalf("signed in after refused callbacks: %d", p.status)
		}
	})
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
