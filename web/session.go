package web

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/approvald/approval"
)

// Cookie names. Both live under Path=/ui only.
const (
	sessionCookie = "approvald_session"
	// oidcCookie holds the state, nonce and PKCE verifier of one OpenID Connect sign-in
	// between the redirect to the provider and its callback.
	oidcCookie = "approvald_oidc"
	// preCookie binds the sign-in form to the browser that loaded it (login CSRF).
	preCookie = "approvald_pre"
)

// session is a live page session: its row (approval.Session), with the role the current
// configuration gives (see Server.session).
type session struct {
	ID      string // new at every sign-in; form tokens are bound to it
	Subject string
	Role    approval.Role
	Via     string // an approval.SessionVia constant
}

// sessionCookieValue is the signed content of the session cookie: the id of the session's
// row, which is the truth, and its expiry, so that an expired cookie costs no read.
type sessionCookieValue struct {
	ID      string `json:"sid"`
	Expires int64  `json:"exp"` // Unix seconds
	// Email is the address an identity provider verified at an OIDC sign-in, signed with the
	// rest: the role entries that name addresses are matched against it at each request.
	Email string `json:"em,omitempty"`
}

func (s session) principal() approval.Principal {
	return approval.Principal{Subject: s.Subject, Role: s.Role}
}

// sign returns value.mac, both base64url, the MAC over purpose and value.
func (s *Server) sign(purpose string, value []byte) string {
	return base64.RawURLEncoding.EncodeToString(value) + "." + base64.RawURLEncoding.EncodeToString(s.mac(purpose, value))
}

// verify returns the value of a string made by sign for purpose, or false.
func (s *Server) verify(purpose, signed string) ([]byte, bool) {
	v, m, ok := strings.Cut(signed, ".")
	if !ok {
		return nil, false
	}
	value, err1 := base64.RawURLEncoding.DecodeString(v)
	mac, err2 := base64.RawURLEncoding.DecodeString(m)
	if err1 != nil || err2 != nil || !hmac.Equal(mac, s.mac(purpose, value)) {
		return nil, false
	}
	return value, true
}

// mac is HMAC-SHA256 under the session key of purpose and value, purpose first so that a
// value signed for one use is never valid for another.
func (s *Server) mac(purpose string, value []byte) []byte {
	h := hmac.New(sha256.New, s.key)
	h.Write([]byte(purpose))
	h.Write([]byte{0})
	h.Write(value)
	return h.Sum(nil)
}

// startSession signs the viewer in as p: a new session row, with a new id, and a cookie
// naming it, which replaces any cookie the browser held. Sign-in methods (the token form,
// OpenID Connect, e-mailed links) all end here. tokenHash is the hash of the token signed in
// with, for approval.SessionViaToken; email the address an identity provider verified, for
// approval.SessionViaOIDC.
func (s *Server) startSession(w http.ResponseWriter, r *http.Request, p approval.Principal, via string, tokenHash []byte, email string) error {
	row, err := s.svc.StartSession(r.Context(), p, via, tokenHash, s.ttl)
	if err != nil {
		return err
	}
	value, _ := json.Marshal(sessionCookieValue{ID: row.ID, Expires: row.ExpiresAt.Unix(), Email: email})
	s.setCookie(w, r, sessionCookie, s.sign("session", value), s.ttl)
	return nil
}

// session returns the request's live session: a cookie signed by our key and not expired,
// naming a session row that is live (Service.CheckSession: not ended, not expired, its token
// still usable, its link's person still configured), with the role the configuration gives
// now to an OIDC or link session. One read of the store.
func (s *Server) session(r *http.Request) (*session, error) {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return nil, approval.Errorf(approval.EUNAUTHORIZED, "not signed in")
	}
	value, ok := s.verify("session", c.Value)
	if !ok {
		return nil, approval.Errorf(approval.EUNAUTHORIZED, "the session cookie is not valid; sign in again")
	}
	var cv sessionCookieValue
	if err := json.Unmarshal(value, &cv); err != nil || cv.ID == "" {
		return nil, approval.Errorf(approval.EUNAUTHORIZED, "the session cookie is not valid; sign in again")
	}
	if s.now().Unix() >= cv.Expires {
		return nil, approval.Errorf(approval.EUNAUTHORIZED, "the session has expired; sign in again")
	}
	row, err := s.svc.CheckSession(r.Context(), cv.ID)
	if err != nil {
		return nil, err
	}
	sess := &session{ID: row.ID, Subject: row.Subject, Role: row.Role, Via: row.Via}
	// The roles of OIDC and link sessions are the configuration's, read again at each
	// request, so that a subject taken out of the operators or admins loses the role at once.
	switch row.Via {
	case approval.SessionViaOIDC:
		if s.oidc == nil {
			return nil, approval.Errorf(approval.EUNAUTHORIZED, "sign-in with an identity provider is no longer configured; sign in again")
		}
		sess.Role = s.oidc.role(row.Subject, cv.Email)
	case approval.SessionViaLink:
		if s.links == nil {
			return nil, approval.Errorf(approval.EUNAUTHORIZED, "sign-in links are no longer enabled; sign in again")
		}
		sess.Role = s.links.role(row.Subject)
	}
	return sess, nil
}

// setCookie sets an HttpOnly, SameSite=Lax cookie under /ui, Secure over TLS or when the
// public URL is https. ttl <= 0 deletes it.
func (s *Server) setCookie(w http.ResponseWriter, r *http.Request, name, value string, ttl time.Duration) {
	c := &http.Cookie{
		Name: name, Value: value, Path: "/ui",
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: s.secure || r.TLS != nil,
	}
	if ttl > 0 {
		c.MaxAge = int(ttl / time.Second)
		c.Expires = time.Now().Add(ttl) // for old browsers; the real clock, as the browser's
	} else {
		c.MaxAge = -1
		c.Value = ""
	}
	http.SetCookie(w, c)
}

// formToken is the CSRF token of every form but the decision forms, bound to the session.
func (s *Server) formToken(sess *session) string {
	return base64.RawURLEncoding.EncodeToString(s.mac("form", []byte(sess.ID)))
}

// checkForm refuses a post whose form token is missing or is not the session's.
func (s *Server) checkForm(r *http.Request, sess *session) error {
	got := r.PostFormValue("csrf")
	want := s.formToken(sess)
	if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
		return approval.Errorf(approval.EFORBIDDEN, "the form's token is missing or wrong; reload the page and try again")
	}
	return nil
}

// decisionFormTTL is how long a rendered decision form may be submitted.
const decisionFormTTL = 12 * time.Hour

// decisionToken is carried by a rendered Approve/Reject form: a nonce naming this form,
// its expiry, and a MAC binding both to the session, the approval and the approver. It is
// the form's CSRF token, and its nonce makes a double submit one request.
func (s *Server) decisionToken(sess *session, approvalID string) string {
	nonce := randomString(12)
	exp := strconv.FormatInt(s.now().Add(decisionFormTTL).Unix(), 10)
	payload := nonce + "." + exp
	return payload + "." + base64.RawURLEncoding.EncodeToString(s.mac("decide", decisionMACInput(sess, approvalID, payload)))
}

// checkDecisionToken returns the nonce and expiry of a valid decision token for this
// session and approval.
func (s *Server) checkDecisionToken(token string, sess *session, approvalID string) (nonce string, expires time.Time, err error) {
	refuse := approval.Errorf(approval.EFORBIDDEN, "the form's decision token is missing or wrong; reload the page and try again")
	i := strings.LastIndexByte(token, '.')
	if i < 0 {
		return "", time.Time{}, refuse
	}
	payload, mac := token[:i], token[i+1:]
	got, err := base64.RawURLEncoding.DecodeString(mac)
	if err != nil || !hmac.Equal(got, s.mac("decide", decisionMACInput(sess, approvalID, payload))) {
		return "", time.Time{}, refuse
	}
	nonce, exp, _ := strings.Cut(payload, ".")
	secs, err := strconv.ParseInt(exp, 10, 64)
	if err != nil {
		return "", time.Time{}, refuse
	}
	expires = time.Unix(secs, 0)
	if !s.now().Before(expires) {
		return "", time.Time{}, approval.Errorf(approval.EFORBIDDEN, "the form has expired; reload the page and decide again")
	}
	return nonce, expires, nil
}

func decisionMACInput(sess *session, approvalID, payload string) []byte {
	var b bytes.Buffer
	for _, part := range []string{sess.ID, sess.Subject, approvalID, payload} {
		b.WriteString(part)
		b.WriteByte(0)
	}
	return b.Bytes()
}

// randomString returns n random bytes as base64url.
func randomString(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
