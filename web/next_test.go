package web_test

import (
	"bytes"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/mail"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/oauth2-proxy/mockoidc"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/internal/workerhook"
	"github.com/approvald/approval/web"
)

// offSite are values of next that would send a browser away from the pages after signing
// in: each must land on the default page instead.
var offSite = []string{"//evil.example", "https://evil.example", "https://evil.example/ui/", "/\\evil.example", "/ui/\\\\evil.example", "javascript:alert(1)"}

// TestSignInReturnsToThePage: every way of signing in (the token form, the identity
// provider, and the e-mailed link, followed from the mail the outbox sent) returns to the
// page the sign-in started from, such as the approval whose page lost its session; a next
// that is not a page under /ui/ (absolute, scheme-relative) lands on the default page.
func TestSignInReturnsToThePage(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		t.Run("token", func(t *testing.T) {
			f := setup(t, kind)
			a := f.create("Rotate the signing keys", []string{"bob"}, 1, "")
			for next, want := range wantLanding(a.ID) {
				b := f.browser()
				p := b.get("/ui/signin?next=" + url.QueryEscape(next))
				resp := b.do(http.MethodPost, "/ui/signin/token", url.Values{"csrf": {field(t, p.body, "csrf")},
					"token": {f.token("bob", approval.RoleApprover)}, "next": {field(t, p.body, "next")}})
				must(t, resp.status == http.StatusSeeOther && resp.header.Get("Location") == want,
					"sign in with next %q: %d to %q, want 303 to %q", next, resp.status, resp.header.Get("Location"), want)
				// The form's next is not trusted either: a forged post lands on the default page.
				p = b.get("/ui/signin")
				resp = b.do(http.MethodPost, "/ui/signin/token", url.Values{"csrf": {field(t, p.body, "csrf")},
					"token": {f.token("bob", approval.RoleApprover)}, "next": {next}})
				must(t, resp.header.Get("Location") == want, "posted next %q: to %q, want %q", next, resp.header.Get("Location"), want)
			}
		})

		t.Run("identity provider", func(t *testing.T) {
			f, m := oidcSetup(t, kind, func(c *web.OIDCConfig) { c.SubjectClaim = "email" })
			a := f.create("Rotate the signing keys", []string{"alice@example.com"}, 1, "")
			for next, want := range wantLanding(a.ID) {
				_, resp, _ := oidcSignIn(t, f, m, &mockoidc.MockUser{Subject: "u-alice", Email: "alice@example.com", EmailVerified: true}, next)
				got := resp.Request.URL
				must(t, resp.StatusCode == http.StatusOK && got.Host == strings.TrimPrefix(f.srv.URL, "http://") && got.RequestURI() == want,
					"sign in with next %q: %d at %s, want 200 at %s", next, resp.StatusCode, got, want)
			}
		})

		t.Run("e-mailed link", func(t *testing.T) {
			f := setupLinks(t, kind)
			a := f.create("Rotate the signing keys", []string{"alice"}, 1, "")
			outbox, smtp := f.mailOutbox(t)
			// The notice of the approval goes first.
			_, err := workerhook.OutboxRunOnce(t.Context(), outbox)
			must(t, err == nil, "outbox round: %v", err)
			sent := len(smtp.Mails())
			for next, want := range wantLanding(a.ID) {
				// alice's page lost its session; she asks for a link from the sign-in page
				// it sent her to.
				asking := f.browser()
				p := asking.get("/ui/signin?next=" + url.QueryEscape(next))
				ask := asking.do(http.MethodPost, "/ui/signin/email", url.Values{"csrf": {field(t, p.body, "csrf")},
					"who": {"alice@example.com"}, "next": {field(t, p.body, "next")}})
				must(t, ask.status == http.StatusOK, "ask for a link: status %d", ask.status)
				n, err := workerhook.OutboxRunOnce(t.Context(), outbox)
				must(t, err == nil && n >= 1, "outbox round: %d sent, %v", n, err)
				mails := smtp.Mails()
				must(t, len(mails) == sent+1, "mails: %d, want %d", len(mails), sent+1)
				sent = len(mails)
				link := mailLink(t, mails[len(mails)-1].Data, f.srv.URL+"/ui/signin/link?")
				must(t, !strings.Contains(link, "evil"), "the mailed link %s carries the off-site page", link)

				// She opens it on another device, as from her mail, and confirms.
				b := f.browser()
				confirm := b.get(link)
				must(t, confirm.status == http.StatusOK, "open the link: status %d", confirm.status)
				used := b.do(http.MethodPost, "/ui/signin/link", url.Values{"csrf": {field(t, confirm.body, "csrf")},
					"t": {field(t, confirm.body, "t")}, "next": {field(t, confirm.body, "next")}})
				must(t, used.status == http.StatusSeeOther && used.header.Get("Location") == want,
					"use the link asked for with next %q: %d to %q, want 303 to %q", next, used.status, used.header.Get("Location"), want)
				if want != "/ui/" {
					page := b.get(want)
					must(t, page.status == http.StatusOK && strings.Contains(page.body, `id="approve"`), "the approval after the link: status %d", page.status)
				}

				// A link used already says so, and signing in from there still returns.
				again := f.browser()
				confirm = again.get(link)
				refused := again.do(http.MethodPost, "/ui/signin/link", url.Values{"csrf": {field(t, confirm.body, "csrf")},
					"t": {field(t, confirm.body, "t")}, "next": {field(t, confirm.body, "next")}})
				loc := refused.header.Get("Location")
				must(t, refused.status == http.StatusSeeOther && strings.HasPrefix(loc, "/ui/signin?"), "second use: %d to %q", refused.status, loc)
				must(t, field(t, again.get(loc).body, "next") == want, "the sign-in page after a refused link does not return to %s", want)
			}
			// A forged post of the confirmation with an off-site next lands on the default page.
			asking := f.browser()
			asking.askLink("alice")
			token := f.linkTokens()[0]
			b := f.browser()
			confirm := b.get(web.SigninLinkPath(token, ""))
			used := b.do(http.MethodPost, "/ui/signin/link", url.Values{"csrf": {field(t, confirm.body, "csrf")}, "t": {token}, "next": {"https://evil.example"}})
			must(t, used.header.Get("Location") == "/ui/", "a forged next: to %q, want /ui/", used.header.Get("Location"))
		})
	})
}

// wantLanding maps values of next to where signing in must land: the approval for its page,
// the default page for anything off-site.
func wantLanding(id string) map[string]string {
	m := map[string]string{"/ui/approvals/" + id: "/ui/approvals/" + id, "": "/ui/"}
	for _, next := range offSite {
		m[next] = "/ui/"
	}
	return m
}

var mailHref = regexp.MustCompile(`href="([^"]+)"`)

// mailLink returns the link of the mail's HTML part that starts with prefix.
func mailLink(t *testing.T, data []byte, prefix string) string {
	t.Helper()
	msg, err := mail.ReadMessage(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("parse mail: %v", err)
	}
	_, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil {
		t.Fatalf("mail content type: %v", err)
	}
	mr := multipart.NewReader(msg.Body, params["boundary"])
	for {
		part, err := mr.NextPart() // decodes quoted-printable
		if err != nil {
			break
		}
		b, _ := io.ReadAll(part)
		if !strings.HasPrefix(part.Header.Get("Content-Type"), "text/html") {
			continue
		}
		for _, m := range mailHref.FindAllStringSubmatch(string(b), -1) {
			if link := strings.ReplaceAll(m[1], "&amp;", "&"); strings.HasPrefix(link, prefix) {
				return link
			}
		}
	}
	t.Fatalf("no link starting %s in the mail:\n%s", prefix, data)
	return ""
}
