package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/fakeclock"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/web"
)

// linkRouting: alice and olga have e-mail addresses; olga signs in by link as an operator.
var linkRouting = approval.Routing{
	Channels: map[string][]string{"alice": {approval.ChannelEmail}, "olga": {approval.ChannelEmail}},
	Emails:   map[string]string{"alice": "alice@example.com", "olga": "olga@example.com"},
}

func setupLinks(tb testing.TB, kind string) *fixture {
	return setupRouted(tb, kind, linkRouting, func(cfg *web.Config, base string) {
		cfg.Links = &web.LinksConfig{Operators: []string{"olga"}}
	})
}

// askLink asks for a sign-in link for who through the sign-in page and returns the answer.
func (b *browser) askLink(who string) page {
	b.f.tb.Helper()
	p := b.get("/ui/signin")
	must(b.f.tb, strings.Contains(p.body, `id="ask-link"`), "the sign-in page offers no sign-in link")
	return b.do(http.MethodPost, "/ui/signin/email", url.Values{"csrf": {field(b.f.tb, p.body, "csrf")}, "who": {who}})
}

// linkTokens returns the tokens of the sign-in mails in the outbox, newest first.
func (f *fixture) linkTokens() []string {
	f.tb.Helper()
	msgs, _, err := f.store.OutboxMessages(context.Background(), approval.OutboxFilter{Kind: approval.OutboxSignin, Limit: approval.MaxPageSize})
	if err != nil {
		f.tb.Fatal(err)
	}
	var tokens []string
	for _, m := range msgs {
		var p approval.Signin
		if err := json.Unmarshal(m.Payload, &p); err != nil {
			f.tb.Fatal(err)
		}
		tokens = append(tokens, p.Token)
	}
	return tokens
}

// TestSignInLink: asking for a link answers the same whoever asks; opening the link changes
// nothing; confirming it signs in once, and a second use, in another browser, is refused.
func TestSignInLink(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		f := setupLinks(t, kind)
		a := f.browser()

		known, byName, unknown := a.askLink("ALICE@example.com"), a.askLink("olga"), a.askLink("mallory@example.com")
		for _, p := range []page{known, byName, unknown} {
			must(t, p.status == http.StatusOK, "ask for a link: status %d, want 200", p.status)
		}
		must(t, strings.Contains(textOf(known.body), "a sign-in link is on its way"), "answer: %s", textOf(known.body))
		must(t, textOf(known.body) == textOf(unknown.body) && textOf(known.body) == textOf(byName.body),
			"the answers differ: a known address got %q, an unknown one %q", textOf(known.body), textOf(unknown.body))
		tokens := f.linkTokens()
		must(t, len(tokens) == 2, "sign-in mails queued: %d, want 2 (alice, olga)", len(tokens))
		olgaToken, aliceToken := tokens[0], tokens[1]

		blank := a.do(http.MethodPost, "/ui/signin/email", url.Values{"csrf": {field(t, a.get("/ui/signin").body, "csrf")}, "who": {"  "}})
		must(t, blank.status == http.StatusBadRequest, "a blank name: status %d, want 400", blank.status)
		noCSRF := a.do(http.MethodPost, "/ui/signin/email", url.Values{"who": {"alice"}})
		must(t, noCSRF.status == http.StatusForbidden, "ask without the form token: status %d, want 403", noCSRF.status)
		must(t, len(f.linkTokens()) == 2, "refused asks queued mail")

		// Opening the link (as a mail scanner would) only shows the confirmation.
		confirm := a.get(web.SigninLinkPath(aliceToken, ""))
		must(t, confirm.status == http.StatusOK && strings.Contains(confirm.body, `id="use-link"`), "link page: status %d", confirm.status)
		again := a.get(web.SigninLinkPath(aliceToken, ""))
		must(t, a.get("/ui/").status == http.StatusSeeOther, "opening the link signed in")
		// A post without the page's form token is refused and does not use the link.
		forged := a.do(http.MethodPost, "/ui/signin/link", url.Values{"t": {aliceToken}})
		must(t, forged.status == http.StatusForbidden, "use without the form token: status %d, want 403", forged.status)

		used := a.do(http.MethodPost, "/ui/signin/link", url.Values{"csrf": {field(t, again.body, "csrf")}, "t": {field(t, again.body, "t")}})
		must(t, used.status == http.StatusSeeOther && used.header.Get("Location") == "/ui/", "use the link: status %d to %q, want 303 to /ui/", used.status, used.header.Get("Location"))
		home := a.get("/ui/")
		must(t, home.status == http.StatusOK && strings.Contains(home.body, "alice"), "after the link: status %d", home.status)
		must(t, !strings.Contains(home.body, `href="/ui/operations"`), "alice got the operators' page by link")

		// The same link in another browser: refused, and no session.
		b := f.browser()
		p := b.get(web.SigninLinkPath(aliceToken, ""))
		second := b.do(http.MethodPost, "/ui/signin/link", url.Values{"csrf": {field(t, p.body, "csrf")}, "t": {aliceToken}})
		must(t, second.status == http.StatusSeeOther && second.header.Get("Location") == "/ui/signin?link=refused",
			"second use: status %d to %q, want 303 to the sign-in page", second.status, second.header.Get("Location"))
		refused := b.get(second.header.Get("Location"))
		must(t, strings.Contains(textOf(refused.body), "already used or has expired"), "after a second use the page says %s", textOf(refused.body))
		must(t, b.get("/ui/").status == http.StatusSeeOther, "a refused link signed in")

		// olga's link makes an operator's session, as the links configuration says.
		p = b.get(web.SigninLinkPath(olgaToken, ""))
		must(t, b.do(http.MethodPost, "/ui/signin/link", url.Values{"csrf": {field(t, p.body, "csrf")}, "t": {olgaToken}}).status == http.StatusSeeOther, "olga's link refused")
		must(t, b.get("/ui/operations").status == http.StatusOK, "olga by link is not an operator")
	})
}

// TestSignInLinkPerAddress: one client address may ask for web.LinksPerAddress links per
// window, for anybody; then it gets 429 on the sign-in page, the same whoever it names,
// while another address is unaffected. X-Forwarded-For counts only from a trusted proxy.
func TestSignInLinkPerAddress(t *testing.T) {
	t.Parallel()
	f := setupRouted(t, testdb.SQLite, linkRouting, func(cfg *web.Config, base string) {
		cfg.Links = &web.LinksConfig{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	})
	h := f.srv.Config.Handler
	// The sign-in page's pre-sign-in cookie and form token, reused by every ask.
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ui/signin", nil))
	cookies, csrf := rec.Result().Cookies(), field(t, rec.Body.String(), "csrf")
	ask := func(remote, who string, headers ...string) *httptest.ResponseRecorder {
		t.Helper()
		req := httptest.NewRequest(http.MethodPost, "/ui/signin/email", strings.NewReader(url.Values{"csrf": {csrf}, "who": {who}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Accept", "text/html")
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		for _, c := range cookies {
			req.AddCookie(c)
		}
		req.RemoteAddr = remote
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	const attacker = "203.0.113.7:40000"
	for i := range web.LinksPerAddress {
		// A client may walk through names; its spoofed X-Forwarded-For changes nothing.
		resp := ask(attacker, fmt.Sprintf("person%d@example.com", i), "X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i))
		must(t, resp.Code == http.StatusOK && strings.Contains(textOf(resp.Body.String()), "a sign-in link is on its way"),
			"ask %d from one address: status %d", i+1, resp.Code)
	}
	for _, who := range []string{"alice", "nobody@example.com"} {
		resp := ask(attacker, who)
		must(t, resp.Code == http.StatusTooManyRequests, "ask past the limit for %s: status %d, want 429", who, resp.Code)
		must(t, resp.Header().Get("Retry-After") != "", "429 without Retry-After")
		must(t, strings.Contains(textOf(resp.Body.String()), "Too many sign-in links"), "429 page says %s", textOf(resp.Body.String()))
	}
	must(t, len(f.linkTokens()) == 0, "a refused ask queued a mail")
	// Another address, and the same port on another host, are counted on their own.
	other := ask("198.51.100.20:1234", "alice")
	must(t, other.Code == http.StatusOK, "another address: status %d, want 200", other.Code)
	must(t, len(f.linkTokens()) == 1, "sign-in mails: %d, want alice's one", len(f.linkTokens()))

	// Behind the trusted proxy, X-Forwarded-For names the client: one client's limit does
	// not close the proxy to the others.
	for i := range web.LinksPerAddress {
		must(t, ask("10.1.2.3:5000", "nobody", "X-Forwarded-For", "192.0.2.50, 10.9.9.9").Code == http.StatusOK, "ask %d through the proxy", i+1)
	}
	must(t, ask("10.1.2.3:5000", "nobody", "X-Forwarded-For", "192.0.2.50").Code == http.StatusTooManyRequests, "client behind the proxy past its limit: want 429")
	must(t, ask("10.1.2.3:5000", "nobody", "X-Forwarded-For", "192.0.2.51").Code == http.StatusOK, "another client behind the proxy: want 200")
	// An IPv6 client is counted by its /64.
	for i := range web.LinksPerAddress {
		must(t, ask(fmt.Sprintf("[2001:db8:1:2::%x]:443", i+1), "nobody").Code == http.StatusOK, "IPv6 ask %d", i+1)
	}
	must(t, ask("[2001:db8:1:2::ffff]:443", "nobody").Code == http.StatusTooManyRequests, "another address of the same /64: want 429")
	must(t, ask("[2001:db8:1:3::1]:443", "nobody").Code == http.StatusOK, "another /64: want 200")
}

// TestSignInFormExpires: the sign-in form's token carries the time it was issued and is
// refused once web.PreSignInTTL has passed on the server's clock, even with its pre-sign-in
// cookie: a page loaded once cannot be replayed for ever.
func TestSignInFormExpires(t *testing.T) {
	t.Parallel()
	clock := fakeclock.New(approval.Now())
	f := setupRouted(t, testdb.SQLite, linkRouting, func(cfg *web.Config, base string) {
		cfg.Now = clock.Now
		cfg.Links = &web.LinksConfig{}
	})
	// Three browsers load the sign-in page at once; every answer renders a new form, so
	// each posts the form it loaded once.
	early, late, byToken := f.browser(), f.browser(), f.browser()
	forms := map[*browser]string{}
	for _, b := range []*browser{early, late, byToken} {
		forms[b] = field(t, b.get("/ui/signin").body, "csrf")
	}
	ask := func(b *browser) page {
		t.Helper()
		return b.do(http.MethodPost, "/ui/signin/email", url.Values{"csrf": {forms[b]}, "who": {"nobody"}})
	}
	clock.Advance(web.PreSignInTTL - time.Second)
	must(t, ask(early).status == http.StatusOK, "the form just before its expiry is refused")
	clock.Advance(time.Second)
	p := ask(late)
	must(t, p.status == http.StatusForbidden, "the form at its expiry: status %d, want 403", p.status)
	must(t, strings.Contains(p.body, "reload the sign-in page"), "the refusal says %s", p.body)
	tok := byToken.do(http.MethodPost, "/ui/signin/token", url.Values{"csrf": {forms[byToken]}, "token": {f.token("ana", approval.RoleApprover)}})
	must(t, tok.status == http.StatusForbidden, "the token form at its expiry: status %d, want 403", tok.status)
	// Reloading the page gives a form that works again.
	fresh := field(t, late.get("/ui/signin").body, "csrf")
	must(t, late.do(http.MethodPost, "/ui/signin/email", url.Values{"csrf": {fresh}, "who": {"nobody"}}).status == http.StatusOK, "a fresh form is refused")
}

// TestSignInLinkAddressTableFull: when as many addresses have asked as the per-address table
// holds, a new address is still counted, from its first ask to its limit, by forgetting the
// address whose window began first; a full table never refuses an address that has not asked.
func TestSignInLinkAddressTableFull(t *testing.T) {
	t.Parallel()
	const tracked = 4
	f := setupRouted(t, testdb.SQLite, linkRouting, func(cfg *web.Config, base string) {
		cfg.Links = &web.LinksConfig{TrackedAddresses: tracked}
	})
	h := f.srv.Config.Handler
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ui/signin", nil))
	cookies, csrf := rec.Result().Cookies(), field(t, rec.Body.String(), "csrf")
	ask := func(remote string) int {
		t.Helper()
		req := httptest.NewRequest(http.MethodPost, "/ui/signin/email", strings.NewReader(url.Values{"csrf": {csrf}, "who": {"nobody"}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Accept", "text/html")
		for _, c := range cookies {
			req.AddCookie(c)
		}
		req.RemoteAddr = remote
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	// The table fills, then many more addresses than it holds ask, each once.
	for i := range 3 * tracked {
		code := ask(fmt.Sprintf("198.51.100.%d:1000", i+1))
		must(t, code == http.StatusOK, "address %d's first ask with the table full: status %d, want 200", i+1, code)
	}
	// The newest address is counted: it reaches its limit like any other.
	const newest = "203.0.113.9:2000"
	for i := range web.LinksPerAddress {
		must(t, ask(newest) == http.StatusOK, "the newest address's ask %d refused", i+1)
	}
	must(t, ask(newest) == http.StatusTooManyRequests, "the newest address past its limit: want 429")
}

// askFrom asks for a sign-in link for who through the sign-in page, as the client at addr
// behind the trusted loopback proxy of setupProxied.
func (b *browser) askFrom(who, addr string) page {
	b.f.tb.Helper()
	p := b.do(http.MethodGet, "/ui/signin", nil, "X-Forwarded-For", addr)
	return b.do(http.MethodPost, "/ui/signin/email", url.Values{"csrf": {field(b.f.tb, p.body, "csrf")}, "who": {who}}, "X-Forwarded-For", addr)
}

// setupProxied is setupLinks behind a trusted proxy on loopback, so that a test names each
// request's client address in X-Forwarded-For.
func setupProxied(tb testing.TB, kind string, opts ...func(cfg *web.Config, base string)) *fixture {
	return setupRouted(tb, kind, linkRouting, append([]func(*web.Config, string){func(cfg *web.Config, base string) {
		cfg.Links = &web.LinksConfig{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	}}, opts...)...)
}

// TestSignInLinkStrangerCannotLockOut: a stranger asking for alice, from one address and then
// from many, spends its own allowance, not hers: alice asking from her own address can still
// sign in, by a link made for her request or, when strangers have just had one made, by that
// fresh one in her mailbox. Every answer is the same.
func TestSignInLinkStrangerCannotLockOut(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		f := setupProxied(t, kind)
		stranger, alice := f.browser(), f.browser()
		want := textOf(stranger.askFrom("nobody", "192.0.2.1").body)
		answer := func(p page) {
			t.Helper()
			must(t, p.status == http.StatusOK && textOf(p.body) == want, "an ask answered %d %q, want 200 %q", p.status, textOf(p.body), want)
		}

		// One stranger's client spends all it can on alice.
		for range 2 * approval.SigninLimit {
			answer(stranger.askFrom("alice", "203.0.113.66"))
		}
		before := len(f.linkTokens())
		must(t, before < approval.SigninLimit, "one client had %d links made for alice, the limit of everyone", before)
		answer(alice.askFrom("alice@example.com", "198.51.100.7"))
		tokens := f.linkTokens()
		must(t, len(tokens) == before+1, "alice's own ask after a stranger's: mails %d, want %d (a link for her)", len(tokens), before+1)
		alice.useLink(tokens[0], "alice")

		// Many strangers' clients together: alice's next ask may be dropped, but a link made
		// just now is in her mailbox and works.
		for i := range 3 * approval.SigninLimit {
			answer(stranger.askFrom("alice", fmt.Sprintf("203.0.113.%d", 100+i)))
		}
		answer(alice.askFrom("alice", "198.51.100.7"))
		f.browser().useLink(f.linkTokens()[0], "alice")
	})
}

// useLink signs in with a sign-in link's token through its page and checks that the session
// is person's.
func (b *browser) useLink(token, person string) {
	b.f.tb.Helper()
	p := b.get(web.SigninLinkPath(token, ""))
	used := b.do(http.MethodPost, "/ui/signin/link", url.Values{"csrf": {field(b.f.tb, p.body, "csrf")}, "t": {token}})
	must(b.f.tb, used.status == http.StatusSeeOther && used.header.Get("Location") == "/ui/", "use %s's link: status %d to %q", person, used.status, used.header.Get("Location"))
	home := b.get("/ui/")
	must(b.f.tb, home.status == http.StatusOK && strings.Contains(home.body, person), "after %s's link: status %d", person, home.status)
}

// storeCalls records the store calls of the rules that tell a request for a sign-in link
// that made a link from one that made none.
type storeCalls struct {
	approval.Store
	mu    sync.Mutex
	calls []string
}

func (s *storeCalls) add(call string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, call)
}

// take returns the calls recorded since the last take.
func (s *storeCalls) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	calls := s.calls
	s.calls = nil
	return calls
}

func (s *storeCalls) Begin(ctx context.Context) (approval.Tx, error) {
	s.add("Begin")
	tx, err := s.Store.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &txCalls{Tx: tx, s: s}, nil
}

type txCalls struct {
	approval.Tx
	s *storeCalls
}

func (t *txCalls) SigninAskCountsForUpdate(ctx context.Context, p approval.SigninCountParams) (approval.SigninCounts, error) {
	t.s.add("SigninAskCountsForUpdate")
	return t.Tx.SigninAskCountsForUpdate(ctx, p)
}

func (t *txCalls) SigninAskInsert(ctx context.Context, subject, client string) error {
	t.s.add("SigninAskInsert")
	return t.Tx.SigninAskInsert(ctx, subject, client)
}

func (t *txCalls) SigninTokenInsert(ctx context.Context, hash []byte, subject string, expiresAt time.Time) error {
	t.s.add("SigninTokenInsert")
	return t.Tx.SigninTokenInsert(ctx, hash, subject, expiresAt)
}

func (t *txCalls) OutboxInsert(ctx context.Context, m *approval.OutboxMessage) error {
	t.s.add("OutboxInsert")
	return t.Tx.OutboxInsert(ctx, m)
}

func (t *txCalls) Notify(ctx context.Context, topic string) error {
	t.s.add("Notify")
	return t.Tx.Notify(ctx, topic)
}

func (t *txCalls) Commit(ctx context.Context) error {
	t.s.add("Commit")
	return t.Tx.Commit(ctx)
}

// TestSignInLinkSameWork: a request for a name nobody has does the same store calls as one
// for a person, but for the link and its mail: the same write transaction, committed, so
// that how long the answer takes does not tell whether the name exists. A request a limit
// holds back does the same as one for nobody.
func TestSignInLinkSameWork(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		var rec *storeCalls
		f := setupProxied(t, kind, func(cfg *web.Config, base string) {
			rec = &storeCalls{Store: cfg.Store}
			cfg.Service = &approval.Service{Store: rec}
		})
		b := f.browser()
		ask := func(who string) []string {
			t.Helper()
			rec.take()
			b.askFrom(who, "192.0.2.9")
			return rec.take()
		}
		link := []string{"SigninTokenInsert", "OutboxInsert", "Notify"}
		hit := ask("alice")
		must(t, len(f.linkTokens()) == 1, "alice's ask made no link")
		withoutLink := slices.DeleteFunc(slices.Clone(hit), func(c string) bool { return slices.Contains(link, c) })
		must(t, len(withoutLink) == len(hit)-len(link), "a link made with calls %v, want %v among them", hit, link)
		must(t, slices.Equal(withoutLink, []string{"Begin", "SigninAskCountsForUpdate", "SigninAskInsert", "Commit"}),
			"a link made with calls %v, want the request counted and recorded in one committed transaction", hit)
		for _, who := range []string{"mallory", "mallory@example.com", "nobody.at.all@example.org"} {
			miss := ask(who)
			must(t, slices.Equal(miss, withoutLink), "an ask for %q made the calls %v; one for alice %v (%v without the link)", who, miss, hit, withoutLink)
		}
		// The same client asking for alice past its allowance: held back, the same calls.
		for range 2 * approval.SigninLimit {
			if got := ask("alice"); !slices.Contains(got, "SigninTokenInsert") {
				must(t, slices.Equal(got, withoutLink), "a held-back ask made the calls %v, want %v", got, withoutLink)
			}
		}
	})
}
