package web

import (
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"

	"github.com/approvald/approval"
)

// LinksConfig enables sign-in links by e-mail: a person named in the configuration with an
// e-mail address asks for a link on the sign-in page and signs in with it once. People
// signed in this way are approvers under their name, unless Operators or Admins name them.
type LinksConfig struct {
	Operators []string
	Admins    []string
	// TrustedProxies are the proxies in front of approvald whose X-Forwarded-For is believed
	// when counting requests per client address (LinksPerAddress); empty, the connection's
	// peer is the client.
	TrustedProxies []netip.Prefix
	// TrackedAddresses bounds how many client addresses the per-address count remembers;
	// 0 = DefaultTrackedAddresses. When it is full, the address whose window began first is
	// forgotten to make room.
	TrackedAddresses int
}

// role is the role of a person signed in by a link.
func (c *LinksConfig) role(person string) approval.Role {
	switch {
	case slices.Contains(c.Admins, person):
		return approval.RoleAdmin
	case slices.Contains(c.Operators, person):
		return approval.RoleOperator
	}
	return approval.RoleApprover
}

// handleSignInEmail is POST /ui/signin/email: a sign-in link is asked for by name or
// address. The answer is the same whether anybody matched, had an address, or had asked too
// often, so that it tells nobody who has an account; only input no name can be (blank, more
// than one line) is refused.
func (s *Server) handleSignInEmail(w http.ResponseWriter, r *http.Request) {
	if s.links == nil {
		s.fail(w, r, approval.Errorf(approval.ENOTFOUND, "sign-in links are not enabled"))
		return
	}
	if err := s.checkPreSignIn(w, r); err != nil {
		s.fail(w, r, err)
		return
	}
	// Counted per client address before anything is looked up, so that the answer, 429 or
	// not, says nothing about who has an account.
	addr, ok := clientAddr(r, s.links.TrustedProxies)
	client := ""
	if ok {
		client = addrKey(addr).String()
		if allowed, retry := s.linkAddrs.allow(addr, s.now()); !allowed {
			s.log.Warn("sign-in links limited for a client address", "addr", addr.String())
			w.Header().Set("Retry-After", strconv.Itoa(max(1, int(retry.Sub(s.now()).Seconds()+0.5))))
			s.renderSignIn(w, r, http.StatusTooManyRequests, "Too many sign-in links were asked for from your address. Try again later.")
			return
		}
	}
	// The rules count a person's links per client too, by the same address, so that a
	// stranger asking for someone does not spend the allowance of that person's own client.
	// The link returns to the page the sign-in started from, such as the approval whose
	// page lost its session; anything but a page of ours is dropped (safeNext).
	next := safeNext(r.PostFormValue("next"))
	if next == Prefix {
		next = ""
	}
	res, err := s.svc.RequestSignin(r.Context(), r.PostFormValue("who"), client, next)
	if approval.ErrorCode(err) == approval.EINVALID {
		s.renderSignIn(w, r, http.StatusBadRequest, "Enter your name or e-mail address, on one line.")
		return
	} else if err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.Info("sign-in link requested", "person", res.Person, "queued", res.Queued, "limited", res.Limited)
	s.renderSignInPage(w, r, http.StatusOK, signInPage{Sent: true})
}

// handleSignInLinkPage is GET /ui/signin/link?t=TOKEN&next=PAGE, the page an e-mailed link
// opens. It changes nothing: mail scanners fetch the links in mails, so only the confirming POST of
// this page uses the token.
func (s *Server) handleSignInLinkPage(w http.ResponseWriter, r *http.Request) {
	if s.links == nil {
		s.fail(w, r, approval.Errorf(approval.ENOTFOUND, "sign-in links are not enabled"))
		return
	}
	token := r.URL.Query().Get("t")
	if token == "" {
		s.renderSignIn(w, r, http.StatusBadRequest, "This sign-in link is incomplete. Copy all of it from the mail, or ask for a new one.")
		return
	}
	s.renderSignInPage(w, r, http.StatusOK, signInPage{Confirm: token})
}

// handleSignInLink is POST /ui/signin/link: the link's token is used, once, and becomes a
// session for the person it was made for, who is sent on to the link's page to return to.
func (s *Server) handleSignInLink(w http.ResponseWriter, r *http.Request) {
	if s.links == nil {
		s.fail(w, r, approval.Errorf(approval.ENOTFOUND, "sign-in links are not enabled"))
		return
	}
	if err := s.checkPreSignIn(w, r); err != nil {
		s.fail(w, r, err)
		return
	}
	next := safeNext(r.PostFormValue("next"))
	person, err := s.svc.UseSignin(r.Context(), r.PostFormValue("t"))
	if approval.ErrorCode(err) == approval.EUNAUTHORIZED {
		// Post, redirect, get: the sign-in page says why, and a reload posts nothing again;
		// signing in there still returns to next.
		q := url.Values{"link": {"refused"}}
		if next != Prefix {
			q.Set("next", next)
		}
		http.Redirect(w, r, Prefix+"signin?"+q.Encode(), http.StatusSeeOther)
		return
	} else if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.startSession(w, r, approval.Principal{Subject: person, Role: s.links.role(person)}, approval.SessionViaLink, nil, ""); err != nil {
		s.fail(w, r, err)
		return
	}
	s.setCookie(w, r, preCookie, "", 0)
	http.Redirect(w, r, next, http.StatusSeeOther)
}
