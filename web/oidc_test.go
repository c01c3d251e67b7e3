package web_test

import (
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
	"github.com/oauth2-proxy/mockoidc"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/internal/workerhook"
	"github.com/approvald/approval/policy"
	"github.com/approvald/approval/web"
)

// oidcSetup starts a real OpenID Connect provider on loopback and the pages configured for it.
func oidcSetup(t *testing.T, kind string, adjust func(*web.OIDCConfig)) (*fixture, *mockoidc.MockOIDC) {
	t.Helper()
	return oidcSetupConfig(t, kind, func(cfg *web.Config) {
		if adjust != nil {
			adjust(cfg.OIDC)
		}
	})
}

// oidcSetupConfig is oidcSetup with the whole configuration of the pages to adjust.
func oidcSetupConfig(t *testing.T, kind string, adjust func(*web.Config)) (*fixture, *mockoidc.MockOIDC) {
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
		adjust(cfg)
	})
	return f, m
}

// followingBrowser follows redirects, as a browser does, with a cookie jar.
func followingBrowser() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar}
}

func TestOIDC_SignIn(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f, m := oidcSetup(t, kind, func(c *web.OIDCConfig) {
			c.SubjectClaim = "email"
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
	t.Parallel()
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

// TestOIDC_ProviderAddress: a sign-in whose ID token (or userinfo) carries a verified e-mail
// address stores it as the subject's, and the notifier mails that subject there when the
// configuration names no address; the configured address wins over the provider's; an
// address the provider did not verify is not stored and gets no mail. The mails go through
// the outbox worker to a real SMTP server in the test.
func TestOIDC_ProviderAddress(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		routing := approval.Routing{
			Channels:       map[string][]string{"u-alice": {approval.ChannelEmail}},
			Emails:         map[string]string{"u-alice": "alice@config.example"},
			ProviderEmails: true,
		}
		m, err := mockoidc.Run()
		if err != nil {
			t.Fatalf("start the provider: %v", err)
		}
		t.Cleanup(func() { m.Shutdown() })
		pc := m.Config()
		f := setupRouted(t, kind, routing, func(cfg *web.Config, base string) {
			cfg.OIDC = &web.OIDCConfig{
				Issuer: pc.Issuer, ClientID: pc.ClientID, ClientSecret: pc.ClientSecret,
				RedirectURL: base + "/ui/signin/oidc/callback", SubjectClaim: "sub",
			}
		})
		signIn := func(u mockoidc.User) {
			t.Helper()
			m.QueueUser(u)
			r, err := followingBrowser().Get(f.srv.URL + "/ui/signin/oidc")
			if err != nil {
				t.Fatal(err)
			}
			r.Body.Close()
			must(t, r.StatusCode == http.StatusOK && r.Request.URL.Path == "/ui/", "sign-in of %s: %d at %s", u.ID(), r.StatusCode, r.Request.URL.Path)
		}
		signIn(&mockoidc.MockUser{Subject: "u-carol", Email: "carol@old.example", EmailVerified: true})
		signIn(&mockoidc.MockUser{Subject: "u-carol", Email: "carol@idp.example", EmailVerified: true}) // changed since
		signIn(&mockoidc.MockUser{Subject: "u-alice", Email: "alice@idp.example", EmailVerified: true})
		signIn(&mockoidc.MockUser{Subject: "u-eve", Email: "eve@idp.example"}) // no email_verified
		signIn(userinfoUser{sub: "u-dana", email: "dana@idp.example"})         // the address in userinfo only

		stored, err := f.store.PersonEmails(t.Context(), []string{"u-alice", "u-carol", "u-dana", "u-eve"})
		must(t, err == nil && maps.Equal(stored, map[string]string{
			"u-alice": "alice@idp.example", "u-carol": "carol@idp.example", "u-dana": "dana@idp.example",
		}), "stored addresses: %v, %v", stored, err)

		a := f.create("Deploy api", []string{"u-alice", "u-carol", "u-dana", "u-eve"}, 1, "")
		outbox, srv := f.mailOutbox(t)
		n, err := workerhook.OutboxRunOnce(t.Context(), outbox)
		must(t, err == nil && n == 3, "outbox round: %d sent, %v; want 3", n, err)
		got := srv.Recipients()
		want := []string{"alice@config.example", "carol@idp.example", "dana@idp.example"}
		must(t, slices.Equal(got, want), "mails to %v, want %v", got, want)
		for _, msg := range srv.Mails() {
			must(t, strings.Contains(string(msg.Data), web.ApprovalPath(a.ID)), "a mail without the approval's link")
		}
		msgs, _, err := f.store.OutboxMessages(t.Context(), approval.OutboxFilter{Limit: approval.MaxPageSize})
		must(t, err == nil && len(msgs) == 3, "outbox: %d messages, %v; want 3 (none to u-eve)", len(msgs), err)
		for _, m := range msgs {
			must(t, m.Status == approval.OutboxSent && m.Recipient != "u-eve", "message %s to %s: %s", m.ID, m.Recipient, m.Status)
		}
	})
}

// TestOIDC_TrustEmail: with TrustEmail an address without email_verified is stored.
func TestOIDC_TrustEmail(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f, m := oidcSetup(t, kind, func(c *web.OIDCConfig) { c.SubjectClaim, c.TrustEmail = "sub", true })
		m.QueueUser(&mockoidc.MockUser{Subject: "u-eve", Email: "eve@idp.example"})
		r, err := followingBrowser().Get(f.srv.URL + "/ui/signin/oidc")
		must(t, err == nil && r.StatusCode == http.StatusOK, "sign-in: %v %v", r, err)
		stored, err := f.store.PersonEmails(t.Context(), []string{"u-eve"})
		must(t, err == nil && stored["u-eve"] == "eve@idp.example", "stored: %v, %v; want eve's address", stored, err)
	})
}

// userinfoUser is a provider's user whose ID token carries no address: it is in userinfo,
// verified.
type userinfoUser struct{ sub, email string }

func (u userinfoUser) ID() string { return u.sub }
func (u userinfoUser) Userinfo([]string) ([]byte, error) {
	return json.Marshal(map[string]any{"sub": u.sub, "email": u.email, "email_verified": true})
}
func (u userinfoUser) Claims(_ []string, c *mockoidc.IDTokenClaims) (jwt.Claims, error) {
	return c, nil
}

// claimsUser is a provider's user whose ID token carries email_verified exactly as given
// (nil leaves the claim out), which mockoidc.MockUser cannot send as false. Its userinfo
// names only the subject.
type claimsUser struct {
	sub, email string
	verified   any
}

func (u claimsUser) ID() string { return u.sub }
func (u claimsUser) Userinfo([]string) ([]byte, error) {
	return json.Marshal(map[string]any{"sub": u.sub})
}
func (u claimsUser) Claims(_ []string, c *mockoidc.IDTokenClaims) (jwt.Claims, error) {
	return &struct {
		*mockoidc.IDTokenClaims
		Email         string `json:"email,omitempty"`
		EmailVerified any    `json:"email_verified,omitempty"`
	}{c, u.email, u.verified}, nil
}

// oidcSignIn signs in u through the provider in a fresh browser that follows redirects,
// asking for next, and returns the browser and the last answer with its body.
func oidcSignIn(t *testing.T, f *fixture, m *mockoidc.MockOIDC, u mockoidc.User, next string) (*http.Client, *http.Response, string) {
	t.Helper()
	m.QueueUser(u)
	c := followingBrowser()
	resp, err := c.Get(f.srv.URL + "/ui/signin/oidc?next=" + url.QueryEscape(next))
	if err != nil {
		t.Fatal(err)
	}
	return c, resp, readAll(t, resp)
}

// TestOIDC_UnverifiedEmailSubject: with subject_claim email, an address the provider does
// not vouch for (email_verified false, or absent without trust_email) is refused with a 403
// that says why, and nobody is signed in; a verified one signs in, as the operator the
// configuration names.
func TestOIDC_UnverifiedEmailSubject(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f, m := oidcSetup(t, kind, func(c *web.OIDCConfig) {
			c.SubjectClaim = "email"
			c.Operators = []string{"olga@example.com"}
		})
		for _, u := range []mockoidc.User{
			claimsUser{sub: "u-mallory", email: "olga@example.com", verified: false},
			claimsUser{sub: "u-mallory", email: "olga@example.com", verified: "false"},
			claimsUser{sub: "u-mallory", email: "olga@example.com"}, // no email_verified
		} {
			c, resp, body := oidcSignIn(t, f, m, u, "/ui/operations")
			if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "not verified") {
				t.Errorf("%+v: %d, want 403 saying the address is not verified", u, resp.StatusCode)
			}
			if r, _ := c.Get(f.srv.URL + "/ui/operations"); r.StatusCode != http.StatusUnauthorized {
				t.Errorf("%+v: signed in after the refusal: operations %d, want 401", u, r.StatusCode)
			}
		}
		_, resp, _ := oidcSignIn(t, f, m, claimsUser{sub: "u-olga", email: "olga@example.com", verified: true}, "/ui/operations")
		if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/ui/operations" {
			t.Errorf("verified olga: %d at %s, want 200 at the operations page", resp.StatusCode, resp.Request.URL.Path)
		}
	})
}

// TestOIDC_EmailRoleNeedsVerification: with the default subject claim (sub), a role entry
// that is an e-mail address matches only an address the provider verified; other entries
// match the subject.
func TestOIDC_EmailRoleNeedsVerification(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f, m := oidcSetup(t, kind, func(c *web.OIDCConfig) {
			c.Operators = []string{"olga@example.com"}
			c.Admins = []string{"u-adam"}
		})
		for _, u := range []mockoidc.User{
			claimsUser{sub: "u-mallory", email: "olga@example.com", verified: false},
			claimsUser{sub: "u-mallory", email: "olga@example.com"},
			claimsUser{sub: "olga@example.com", email: "olga@example.com", verified: false},
		} {
			c, resp, _ := oidcSignIn(t, f, m, u, "/ui/")
			must(t, resp.StatusCode == http.StatusOK, "%+v: sign-in %d, want 200 (an approver)", u, resp.StatusCode)
			if r, _ := c.Get(f.srv.URL + "/ui/operations"); r.StatusCode != http.StatusForbidden {
				t.Errorf("%+v: operations %d, want 403: an unverified address gives no role", u, r.StatusCode)
			}
		}
		for _, u := range []mockoidc.User{
			claimsUser{sub: "u-olga", email: "OLGA@example.com", verified: true},
			claimsUser{sub: "u-adam"},
		} {
			_, resp, _ := oidcSignIn(t, f, m, u, "/ui/operations")
			if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/ui/operations" {
				t.Errorf("%+v: %d at %s, want 200 at the operations page", u, resp.StatusCode, resp.Request.URL.Path)
			}
		}
	})
}

// TestOIDC_SubDefault: without subject_claim the subject is the provider's sub, whatever
// address the ID token carries.
func TestOIDC_SubDefault(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f, m := oidcSetup(t, kind, nil)
		a := f.create("Deploy api", []string{"u-alice"}, 1, "")
		_, resp, body := oidcSignIn(t, f, m, &mockoidc.MockUser{Subject: "u-alice", Email: "alice@example.com", EmailVerified: true}, web.ApprovalPath(a.ID))
		if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != web.ApprovalPath(a.ID) {
			t.Fatalf("sign-in: %d at %s, want 200 at the approval", resp.StatusCode, resp.Request.URL.Path)
		}
		if !strings.Contains(body, "u-alice") || !strings.Contains(body, `name="token"`) {
			t.Errorf("the approval page does not show u-alice signed in with the decision form")
		}
	})
}

// TestOIDC_Groups: a sign-in stores the provider's groups claim, replacing the groups the
// person's earlier sign-in stored; a sign-in whose token has no groups claim stores none.
func TestOIDC_Groups(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		m, err := mockoidc.Run()
		if err != nil {
			t.Fatalf("start the provider: %v", err)
		}
		t.Cleanup(func() { m.Shutdown() })
		pc := m.Config()
		scopes := []string{"groups"}
		f := setup(t, kind, func(cfg *web.Config, base string) {
			cfg.OIDC = &web.OIDCConfig{Issuer: pc.Issuer, ClientID: pc.ClientID, ClientSecret: pc.ClientSecret,
				RedirectURL: base + "/ui/signin/oidc/callback", Scopes: scopes}
		})
		signIn := func(groups ...string) {
			t.Helper()
			m.QueueUser(&mockoidc.MockUser{Subject: "Carol", Email: "carol@example.com", EmailVerified: true, Groups: groups})
			resp, err := followingBrowser().Get(f.srv.URL + "/ui/signin/oidc")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("sign-in with groups %v: got %d, want 200", groups, resp.StatusCode)
			}
		}
		stored := func() string {
			t.Helper()
			list, err := f.store.IdentityGroupMembers(t.Context(), []string{"platform-sre", "platform-dba", "staff"})
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, g := range list {
				out = append(out, g.Person+":"+g.Group)
			}
			return strings.Join(out, " ")
		}
		signIn("platform-sre", "staff")
		if got, want := stored(), "carol:platform-sre carol:staff"; got != want {
			t.Fatalf("after the first sign-in: got %q, want %q", got, want)
		}
		signIn("platform-dba", "staff")
		if got, want := stored(), "carol:platform-dba carol:staff"; got != want {
			t.Fatalf("after a sign-in with other groups: got %q, want %q", got, want)
		}
		signIn()
		if got := stored(); got != "" {
			t.Fatalf("after a sign-in with no groups: got %q, want none", got)
		}
	})
}

// TestOIDC_GroupsScopeNotAsked: a provider that sends no groups claim (mockoidc sends it only
// for the groups scope) leaves the person in no group.
func TestOIDC_GroupsScopeNotAsked(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f, m := oidcSetup(t, kind, nil)
		if err := f.rules(f.store).RecordIdentityGroups(t.Context(), "carol", []string{"platform-sre"}); err != nil {
			t.Fatal(err)
		}
		m.QueueUser(&mockoidc.MockUser{Subject: "carol", Email: "carol@example.com", EmailVerified: true, Groups: []string{"platform-sre"}})
		resp, err := followingBrowser().Get(f.srv.URL + "/ui/signin/oidc")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("sign-in: got %d, want 200", resp.StatusCode)
		}
		if list, err := f.store.IdentityGroupMembers(t.Context(), []string{"platform-sre"}); err != nil || len(list) != 0 {
			t.Fatalf("groups after a sign-in without the claim: got %v, %v; want none", list, err)
		}
	})
}

// TestOIDC_WaitingThroughGroupJoinedLater: carol's sign-in with the identity provider's group
// after the create puts the approval in her "waiting for me", and she may open it and vote; a
// later sign-in without the group takes it away again, page included.
func TestOIDC_WaitingThroughGroupJoinedLater(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		set, err := policy.Compile(map[string]policy.Group{"sre": {Members: []string{"alice"}, OIDCGroup: "platform-sre"}}, []policy.Policy{
			{Name: "release", Match: policy.Match{Action: "release"}, Stages: []policy.Stage{{Rules: []policy.Rule{{Group: "sre", Approvals: 1}}}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		f, m := oidcSetupConfig(t, kind, func(cfg *web.Config) {
			cfg.OIDC.Scopes = []string{"groups"}
			cfg.Service = &approval.Service{Store: cfg.Store, Policies: set.ForService(), Members: set.Members()}
		})
		a := f.createRelease("Release 2.5.0")
		signIn := func(groups ...string) *browser {
			t.Helper()
			m.QueueUser(&mockoidc.MockUser{Subject: "carol", Email: "carol@example.com", EmailVerified: true, Groups: groups})
			b := &browser{f: f, client: followingBrowser()}
			if p := b.get("/ui/signin/oidc"); p.status != http.StatusOK {
				t.Fatalf("sign-in with groups %v: got %d, want 200", groups, p.status)
			}
			return b
		}

		carol := signIn("platform-sre")
		home := carol.get("/ui/").body
		must(t, strings.Contains(home, "Release 2.5.0") && strings.Contains(home, a.ID), "carol's waiting page does not list the release: %q", textOf(home))
		page := carol.get("/ui/approvals/" + a.ID)
		must(t, page.status == http.StatusOK && strings.Contains(page.body, `id="approve"`), "carol's page of the release: status %d, no vote offered: %q", page.status, textOf(page.body))

		carol = signIn("staff")
		home = carol.get("/ui/").body
		must(t, !strings.Contains(home, a.ID), "carol's waiting page lists the release after she left the group: %q", textOf(home))
		must(t, carol.get("/ui/approvals/"+a.ID).status == http.StatusNotFound, "carol opens the release after she left the group")
	})
}
