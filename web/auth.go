package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/approvald/approval"
)

// OIDCConfig is sign-in with an OpenID Connect provider. Users signed in this way are
// approvers under the value of SubjectClaim, unless Operators or Admins name them.
type OIDCConfig struct {
	Issuer       string
	ClientID     string
	ClientSecret string
	// RedirectURL is this service's callback as registered with the provider:
	// https://HOST/ui/signin/oidc/callback.
	RedirectURL string
	// SubjectClaim names the claim that becomes the subject: "sub" (the default), the
	// provider's own identifier, or "email", which counts only when the provider verified
	// the address (see TrustEmail). No other claim is accepted: the provider vouches for
	// these two, not for names a user may pick.
	SubjectClaim string
	// AllowedDomains, when not empty, admits only e-mail addresses of these domains (the
	// "email" claim, which must then be verified by the provider).
	AllowedDomains []string
	// TrustEmail counts an "email" claim without an "email_verified" claim as verified, for
	// a provider that only gives addresses it checked and does not say so. An
	// "email_verified" of false is never trusted.
	TrustEmail bool
	// Operators and Admins name the users given those roles: an entry with an "@" is an
	// e-mail address and matches only the address the provider verified (any case), any
	// other entry matches the subject.
	Operators []string
	Admins    []string
	// GroupsClaim names the claim of the ID token (or of the userinfo answer, when the ID
	// token has none) that lists the user's groups at the provider, a list of strings:
	// "groups" when empty. They are stored at every sign-in, replacing the ones stored
	// before (approval.Service.RecordIdentityGroups), and make the user a member of the
	// configured groups whose oidc_group they name (docs/policies.md, "Groups").
	GroupsClaim string
	// Scopes are asked for beside openid, email and profile, such as "groups" for a provider
	// that sends the groups claim only when asked.
	Scopes []string
	// HTTPClient, when set, talks to the provider (tests); nil = http.DefaultClient.
	HTTPClient *http.Client
}

// oidcClient is an OIDCConfig with its provider, discovered at the first sign-in (a provider
// down at startup does not stop the service; the sign-in fails and is tried again).
type oidcClient struct {
	cfg OIDCConfig

	mu       sync.Mutex
	provider *oidc.Provider
}

func newOIDCClient(cfg OIDCConfig) (*oidcClient, error) {
	if cfg.Issuer == "" || cfg.ClientID == "" || cfg.RedirectURL == "" {
		return nil, errors.New("oidc: issuer, client id and redirect url are required")
	}
	switch cfg.SubjectClaim {
	case "":
		cfg.SubjectClaim = claimSub
	case claimSub, claimEmail:
	default:
		return nil, fmt.Errorf("oidc: subject claim %q: must be sub or email", cfg.SubjectClaim)
	}
	if cfg.GroupsClaim == "" {
		cfg.GroupsClaim = defaultGroupsClaim
	}
	return &oidcClient{cfg: cfg}, nil
}

// defaultGroupsClaim is the claim that lists a user's groups unless GroupsClaim names another.
const defaultGroupsClaim = "groups"

func (c *oidcClient) context(ctx context.Context) context.Context {
	if c.cfg.HTTPClient != nil {
		return oidc.ClientContext(ctx, c.cfg.HTTPClient)
	}
	return ctx
}

// setup returns the provider's OAuth 2 configuration and ID token verifier.
func (c *oidcClient) setup(ctx context.Context) (*oauth2.Config, *oidc.IDTokenVerifier, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.provider == nil {
		p, err := oidc.NewProvider(c.context(ctx), c.cfg.Issuer)
		if err != nil {
			return nil, nil, approval.Errorf(approval.EUNAVAILABLE, "the identity provider cannot be reached; try again later")
		}
		c.provider = p
	}
	oc := &oauth2.Config{
		ClientID: c.cfg.ClientID, ClientSecret: c.cfg.ClientSecret, RedirectURL: c.cfg.RedirectURL,
		Endpoint: c.provider.Endpoint(), Scopes: append([]string{oidc.ScopeOpenID, "email", "profile"}, c.cfg.Scopes...),
	}
	return oc, c.provider.Verifier(&oidc.Config{ClientID: c.cfg.ClientID}), nil
}

// The claims a subject may come from.
const (
	claimSub   = "sub"
	claimEmail = "email"
)

// role is the role of an OIDC user with subject and the address the provider verified
// (verifiedEmail, "" when none): approver unless Admins or Operators name them. An entry
// that is an address names only a verified one, so that an address anyone can claim at the
// provider gives no role.
func (c *oidcClient) role(subject, verifiedEmail string) approval.Role {
	names := func(entry string) bool {
		if strings.Contains(entry, "@") {
			return verifiedEmail != "" && strings.EqualFold(entry, verifiedEmail)
		}
		return approval.SameName(entry, subject)
	}
	switch {
	case slices.ContainsFunc(c.cfg.Admins, names):
		return approval.RoleAdmin
	case slices.ContainsFunc(c.cfg.Operators, names):
		return approval.RoleOperator
	}
	return approval.RoleApprover
}

// authed runs h for a signed-in viewer. Without a valid session a browser's GET is sent to
// the sign-in page; anything else is answered 401.
func (s *Server) authed(h func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sess, err := s.session(r)
		if err != nil {
			if approval.ErrorCode(err) == approval.EUNAUTHORIZED && r.Method == http.MethodGet &&
				strings.Contains(r.Header.Get("Accept"), "text/html") {
				http.Redirect(w, r, Prefix+"signin?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			s.fail(w, r, err)
			return
		}
		requestOf(r).subject = sess.Subject
		h(w, r, sess)
	}
}

// signInPage is the data of the sign-in page.
type signInPage struct {
	Next    string
	Token   string // the form's token, bound to the browser's pre-sign-in cookie
	OIDC    bool
	Problem string
	Links   bool   // sign-in links by e-mail are offered
	Sent    bool   // a link was asked for: the answer that reveals nothing
	Confirm string // an e-mailed link's token, to confirm with a POST
}

// handleSignInPage is GET /ui/signin: the token form, and the provider's button when OIDC
// is configured.
func (s *Server) handleSignInPage(w http.ResponseWriter, r *http.Request) {
	problem := ""
	if r.URL.Query().Get("link") == "refused" {
		problem = "This sign-in link was already used or has expired. Ask for a new one."
	}
	s.renderSignIn(w, r, http.StatusOK, problem)
}

func (s *Server) renderSignIn(w http.ResponseWriter, r *http.Request, status int, problem string) {
	s.renderSignInPage(w, r, status, signInPage{Problem: problem})
}

// PreSignInTTL is how long a sign-in page's form may be posted: its token and the browser's
// pre-sign-in cookie both end then.
const PreSignInTTL = 30 * time.Minute

// renderSignInPage renders the sign-in page p with a fresh form token bound to a fresh
// pre-sign-in cookie.
func (s *Server) renderSignInPage(w http.ResponseWriter, r *http.Request, status int, p signInPage) {
	pre := randomString(18)
	s.setCookie(w, r, preCookie, pre, PreSignInTTL)
	p.Next, p.Token, p.OIDC, p.Links = safeNext(r.FormValue("next")), s.preSignInToken(pre), s.oidc != nil, s.links != nil
	s.render(w, r, status, "signin", nil, p)
}

// handleSignInToken is POST /ui/signin/token: an API token pasted into the form becomes a
// session with the token's subject and role.
func (s *Server) handleSignInToken(w http.ResponseWriter, r *http.Request) {
	if err := s.checkPreSignIn(w, r); err != nil {
		s.fail(w, r, err)
		return
	}
	secret := strings.TrimSpace(r.PostFormValue("token"))
	if secret == "" {
		s.renderSignIn(w, r, http.StatusBadRequest, "Paste an API token to sign in.")
		return
	}
	// Counted per client address: a guesser is slowed, and the log says from where.
	addr, counted := clientAddr(r, s.trustedProxies())
	if counted {
		if blocked, until := s.failures.blocked(addr, s.now()); blocked {
			s.log.Warn("web: token sign-in refused: too many failures from the address", "addr", addr.String())
			w.Header().Set("Retry-After", strconv.Itoa(max(1, int(until.Sub(s.now()).Seconds()+0.5))))
			s.renderSignIn(w, r, http.StatusTooManyRequests, "Too many wrong tokens were pasted from your address. Try again in a minute.")
			return
		}
	}
	t, err := s.svc.Authenticate(r.Context(), secret)
	if approval.ErrorCode(err) == approval.EUNAUTHORIZED {
		if counted {
			s.failures.fail(addr, s.now())
		}
		// The reason, never the token: a token pasted into the wrong field is still a secret.
		s.log.Warn("web: token sign-in failed", "addr", addr.String(), "reason", approval.ErrorMessage(err))
		s.renderSignIn(w, r, http.StatusUnauthorized, "That token is not known. Check that you pasted all of it.")
		return
	} else if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.startSession(w, r, t.Principal(), approval.SessionViaToken, t.Hash, ""); err != nil {
		s.fail(w, r, err)
		return
	}
	s.setCookie(w, r, preCookie, "", 0)
	http.Redirect(w, r, safeNext(r.PostFormValue("next")), http.StatusSeeOther)
}

// trustedProxies are the proxies whose X-Forwarded-For names the client, for the counts per
// client address: those of the sign-in links' settings, the one place the configuration
// names them.
func (s *Server) trustedProxies() []netip.Prefix {
	if s.links == nil {
		return nil
	}
	return s.links.TrustedProxies
}

// checkPreSignIn refuses a sign-in post that does not come from a sign-in page this browser
// loaded: its token must sign the browser's pre-sign-in cookie. The form is read only when
// the cookie is there (readForm).
func (s *Server) checkPreSignIn(w http.ResponseWriter, r *http.Request) error {
	refuse := approval.Errorf(approval.EFORBIDDEN, "the sign-in form's token is missing or wrong; reload the sign-in page")
	c, err := r.Cookie(preCookie)
	if err != nil {
		w.Header().Set("Connection", "close") // the body is not read
		return refuse
	}
	if err := s.readForm(w, r); err != nil {
		return err
	}
	value, ok := s.verify("signin", r.PostFormValue("csrf"))
	pre, issued, _ := strings.Cut(string(value), ".")
	if !ok || pre != c.Value {
		return refuse
	}
	// The cookie's Max-Age binds only a browser that honours it: the token's own time is
	// what stops a page loaded once from being posted for ever.
	secs, err := strconv.ParseInt(issued, 10, 64)
	if err != nil || !s.now().Before(time.Unix(secs, 0).Add(PreSignInTTL)) {
		return refuse
	}
	return nil
}

// preSignInToken is the sign-in form's token: the pre-sign-in cookie's value and the time
// it was issued, signed.
func (s *Server) preSignInToken(pre string) string {
	return s.sign("signin", []byte(pre+"."+strconv.FormatInt(s.now().Unix(), 10)))
}

// handleSignOut is POST /ui/signout: the session's row is ended, so that a copy of the
// cookie no longer works either, and the cookie is cleared.
func (s *Server) handleSignOut(w http.ResponseWriter, r *http.Request, sess *session) {
	if err := s.checkForm(r, sess); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.svc.EndSession(r.Context(), sess.ID); err != nil {
		s.fail(w, r, err)
		return
	}
	s.setCookie(w, r, sessionCookie, "", 0)
	http.Redirect(w, r, Prefix+"signin", http.StatusSeeOther)
}

// oidcState is the content of the OIDC cookie during one sign-in.
type oidcState struct {
	State    string `json:"state"`
	Nonce    string `json:"nonce"`
	Verifier string `json:"verifier"`
	Next     string `json:"next"`
}

// oidcStateTTL bounds how long a sign-in at the provider may take.
const oidcStateTTL = 10 * time.Minute

// handleOIDCStart is GET /ui/signin/oidc: the browser is sent to the provider with a fresh
// state, nonce and PKCE challenge, which a short-lived signed cookie remembers.
func (s *Server) handleOIDCStart(w http.ResponseWriter, r *http.Request) {
	if s.oidc == nil {
		s.fail(w, r, approval.Errorf(approval.ENOTFOUND, "sign-in with an identity provider is not configured"))
		return
	}
	oc, _, err := s.oidc.setup(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	st := oidcState{State: randomString(18), Nonce: randomString(18), Verifier: oauth2.GenerateVerifier(), Next: safeNext(r.FormValue("next"))}
	value, _ := json.Marshal(st)
	s.setCookie(w, r, oidcCookie, s.sign("oidc", value), oidcStateTTL)
	http.Redirect(w, r, oc.AuthCodeURL(st.State, oidc.Nonce(st.Nonce), oauth2.S256ChallengeOption(st.Verifier)), http.StatusFound)
}

// handleOIDCCallback is GET /ui/signin/oidc/callback: the provider's code is exchanged (with
// the PKCE verifier), the ID token verified (signature, issuer, audience, expiry, nonce), the
// subject taken from sub or a verified address and the domain checked, and a session started.
func (s *Server) handleOIDCCallback(w http.ResponseWriter, r *http.Request) {
	if s.oidc == nil {
		s.fail(w, r, approval.Errorf(approval.ENOTFOUND, "sign-in with an identity provider is not configured"))
		return
	}
	c, err := r.Cookie(oidcCookie)
	if err != nil {
		s.fail(w, r, approval.Errorf(approval.EINVALID, "no sign-in is in progress in this browser; start again"))
		return
	}
	value, ok := s.verify("oidc", c.Value)
	var st oidcState
	if !ok || json.Unmarshal(value, &st) != nil {
		s.fail(w, r, approval.Errorf(approval.EINVALID, "the sign-in cookie is not valid; start again"))
		return
	}
	s.setCookie(w, r, oidcCookie, "", 0) // one callback per sign-in
	q := r.URL.Query()
	if e := q.Get("error"); e != "" {
		s.fail(w, r, approval.Errorf(approval.EUNAUTHORIZED, "the identity provider refused the sign-in: %s", e))
		return
	}
	if q.Get("state") == "" || q.Get("state") != st.State {
		s.fail(w, r, approval.Errorf(approval.EINVALID, "the sign-in's state does not match; start again"))
		return
	}
	p, email, groups, err := s.oidcPrincipal(r.Context(), q.Get("code"), st)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	// The groups are stored before the session starts, and a failure stops the sign-in: a
	// person the provider took out of a group must not keep their say through the set stored
	// at an earlier sign-in.
	if err := s.svc.RecordIdentityGroups(r.Context(), p.Subject, groups); err != nil {
		s.fail(w, r, err)
		return
	}
	if email != "" {
		// The provider's verified address becomes the subject's, for notifications and
		// sign-in links where the configuration names none (docs/notifications.md,
		// "Addresses"). A failure to store it does not stop the sign-in.
		if err := s.svc.RecordEmail(r.Context(), p.Subject, email); err != nil {
			s.log.Warn("web: the provider's e-mail address was not stored", "subject", p.Subject, "err", err)
		}
	}
	if err := s.startSession(w, r, p, approval.SessionViaOIDC, nil, email); err != nil {
		s.fail(w, r, err)
		return
	}
	http.Redirect(w, r, st.Next, http.StatusSeeOther)
}

// oidcPrincipal exchanges code and returns who the verified ID token names, the e-mail
// address the provider verified for them ("" when it verified none) and their groups at the
// provider (GroupsClaim; none when the claim is absent).
func (s *Server) oidcPrincipal(ctx context.Context, code string, st oidcState) (approval.Principal, string, []string, error) {
	oc, verifier, err := s.oidc.setup(ctx)
	if err != nil {
		return approval.Principal{}, "", nil, err
	}
	ctx = s.oidc.context(ctx)
	tok, err := oc.Exchange(ctx, code, oauth2.VerifierOption(st.Verifier))
	if err != nil {
		return approval.Principal{}, "", nil, approval.Errorf(approval.EUNAUTHORIZED, "the identity provider did not accept the sign-in code")
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return approval.Principal{}, "", nil, approval.Errorf(approval.EUNAUTHORIZED, "the identity provider sent no ID token")
	}
	idt, err := verifier.Verify(ctx, raw)
	if err != nil {
		return approval.Principal{}, "", nil, approval.Errorf(approval.EUNAUTHORIZED, "the ID token is not valid")
	}
	if idt.Nonce != st.Nonce {
		return approval.Principal{}, "", nil, approval.Errorf(approval.EUNAUTHORIZED, "the ID token's nonce does not match this sign-in")
	}
	var claims map[string]any
	if err := idt.Claims(&claims); err != nil {
		return approval.Principal{}, "", nil, approval.Errorf(approval.EUNAUTHORIZED, "the ID token's claims cannot be read")
	}
	email, verified := s.oidc.email(claims)
	var info map[string]any
	if _, ok := claims["email"]; !ok {
		// Some providers keep the address out of the ID token: ask the userinfo endpoint,
		// whose answer counts only for the same subject (OpenID Connect Core 5.3.2).
		if info, err = s.oidc.userinfo(ctx, oc.TokenSource(ctx, tok), idt.Subject); err != nil {
			s.log.Warn("web: the provider's userinfo could not be read", "sub", idt.Subject, "err", err)
		} else if info != nil {
			email, verified = s.oidc.email(info)
		}
	}
	groups, err := s.oidc.groups(claims, info)
	if err != nil {
		return approval.Principal{}, "", nil, err
	}
	// The subject comes only from a claim the provider vouches for: its own identifier, or
	// an address it says it verified. Anyone can type any address into an account at many
	// providers; taken unverified, it would sign them in as that address's owner.
	subject := idt.Subject
	if s.oidc.cfg.SubjectClaim == claimEmail {
		if email == "" {
			return approval.Principal{}, "", nil, approval.Errorf(approval.EUNAUTHORIZED, "the identity provider sent no e-mail address to sign in with")
		}
		if !verified {
			return approval.Principal{}, "", nil, approval.Errorf(approval.EFORBIDDEN, "%s may not sign in here: the identity provider has not verified this address (email_verified is not true); verify it at the provider, then sign in again", email)
		}
		subject = email
	}
	if subject == "" {
		return approval.Principal{}, "", nil, approval.Errorf(approval.EUNAUTHORIZED, "the ID token has no subject")
	}
	// The subject is a person's name like any other: normalised, and refused when it could
	// pass for someone else's (docs/security.md, "Names").
	subject, err = approval.NormalizeName("the ID token's subject", subject)
	if err != nil {
		return approval.Principal{}, "", nil, approval.Errorf(approval.EUNAUTHORIZED, "%s", approval.ErrorMessage(err))
	}
	if domains := s.oidc.cfg.AllowedDomains; len(domains) > 0 {
		_, domain, _ := strings.Cut(email, "@")
		if !verified || !slices.ContainsFunc(domains, func(d string) bool { return strings.EqualFold(d, domain) }) {
			return approval.Principal{}, "", nil, approval.Errorf(approval.EFORBIDDEN, "%s may not sign in here: only verified addresses of %s", email, strings.Join(domains, ", "))
		}
	}
	if !verified {
		email = ""
	}
	return approval.Principal{Subject: subject, Role: s.oidc.role(subject, email)}, email, groups, nil
}

// groups returns the list of strings of the GroupsClaim of the ID token's claims, or of the
// userinfo answer (info, nil when not read) when the ID token has none; none when neither
// has it. A claim of another type fails the sign-in (EUNAUTHORIZED), rather than being read
// as no groups or as a guess.
func (c *oidcClient) groups(claims, info map[string]any) ([]string, error) {
	v, ok := claims[c.cfg.GroupsClaim]
	if !ok {
		v, ok = info[c.cfg.GroupsClaim]
	}
	if !ok || v == nil {
		return nil, nil
	}
	list, isList := v.([]any)
	if !isList {
		return nil, approval.Errorf(approval.EUNAUTHORIZED, "the identity provider's %s claim is not a list of group names", c.cfg.GroupsClaim)
	}
	groups := make([]string, len(list))
	for i, g := range list {
		name, isString := g.(string)
		if !isString {
			return nil, approval.Errorf(approval.EUNAUTHORIZED, "the identity provider's %s claim is not a list of group names", c.cfg.GroupsClaim)
		}
		groups[i] = name
	}
	return groups, nil
}

// email returns the "email" claim and whether the provider verified it: "email_verified" is
// true (a boolean, or the string "true" some providers send), or absent with TrustEmail.
func (c *oidcClient) email(claims map[string]any) (string, bool) {
	email, _ := claims["email"].(string)
	if email == "" {
		return "", false
	}
	switch v := claims["email_verified"].(type) {
	case bool:
		return email, v
	case string:
		return email, v == "true"
	case nil:
		return email, c.cfg.TrustEmail
	}
	return email, false
}

// userinfo returns the claims of the provider's userinfo endpoint, nil when it has none, and
// an error when it answers for another subject than sub.
func (c *oidcClient) userinfo(ctx context.Context, ts oauth2.TokenSource, sub string) (map[string]any, error) {
	c.mu.Lock()
	p := c.provider
	c.mu.Unlock()
	if p.UserInfoEndpoint() == "" {
		return nil, nil
	}
	info, err := p.UserInfo(ctx, ts)
	if err != nil {
		return nil, err
	}
	if info.Subject != sub {
		return nil, fmt.Errorf("userinfo names the subject %q, the ID token %q", info.Subject, sub)
	}
	var claims map[string]any
	if err := info.Claims(&claims); err != nil {
		return nil, err
	}
	return claims, nil
}

// safeNext returns next when it is a path under /ui/ on this site, and /ui/ otherwise, so
// that no sign-in can send the browser elsewhere: an absolute URL ("https://evil.example"),
// a scheme-relative one ("//evil.example"), a backslash that browsers read as a slash, and
// control characters are refused, as is anything longer than a link can carry.
func safeNext(next string) string {
	if !strings.HasPrefix(next, Prefix) || len(next) > approval.MaxSigninNext ||
		strings.ContainsFunc(next, func(r rune) bool { return r == '\\' || r < 0x20 || r == 0x7f }) {
		return Prefix
	}
	return next
}
