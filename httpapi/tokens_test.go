package httpapi_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/httpapi"
	"github.com/approvald/approval/internal/testdb"
)

// tokenAnswer is a token as the API answers it, with the secret when there is one.
type tokenAnswer struct {
	approval.Token
	Secret string `json:"secret"`
}

// TestTokens: an admin creates, lists, revokes and rotates tokens over HTTP; a revoked,
// rotated-away or expired token is refused on the next request; others may not manage tokens;
// bad input is a problem and creates nothing.
func TestTokens(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		var svc *approval.Service
		f := setup(t, kind, func(c *httpapi.Config) {
			svc = rules(c.Store.(approval.Store))
			svc.Now = c.Now
			c.Service = svc
		})
		t.Cleanup(svc.Wait)
		admin := f.token("root", approval.RoleAdmin)

		resp := f.do("POST", "/v1/tokens", admin, `{"subject":"ci-bot","role":"requester","name":"ci deploy bot","expires_in":"720h"}`)
		if resp.status != http.StatusCreated {
			t.Fatalf("create: got %d %s, want 201", resp.status, resp.body)
		}
		var ci tokenAnswer
		resp.decode(t, &ci)
		if !strings.HasPrefix(ci.Secret, approval.TokenPrefix) || ci.Name != "ci deploy bot" || ci.Subject != "ci-bot" || ci.ExpiresAt == nil {
			t.Fatalf("created token: got %+v", ci)
		}
		if loc := resp.header.Get("Location"); loc != "/v1/tokens/"+ci.ID {
			t.Errorf("Location: got %q, want /v1/tokens/%s", loc, ci.ID)
		}
		if got := f.do("GET", "/v1/approvals", ci.Secret, ""); got.status != http.StatusOK {
			t.Fatalf("the new token: got %d %s, want 200", got.status, got.body)
		}

		// The list shows both tokens, newest first, and never a secret or a hash.
		resp = f.do("GET", "/v1/tokens?limit=1", admin, "")
		var page struct {
			Tokens     []tokenAnswer `json:"tokens"`
			NextCursor string        `json:"next_cursor"`
		}
		resp.decode(t, &page)
		if len(page.Tokens) != 1 || page.NextCursor == "" {
			t.Fatalf("first page: got %+v", page)
		}
		for _, word := range []string{"secret", "hash", ci.Secret} {
			if bytes.Contains(resp.body, []byte(word)) {
				t.Fatalf("the list shows %q: %s", word, resp.body)
			}
		}
		f.do("GET", "/v1/tokens?limit=1&cursor="+page.NextCursor, admin, "").decode(t, &page)
		if len(page.Tokens) != 1 || page.NextCursor != "" {
			t.Fatalf("second page: got %+v", page)
		}

		// Only admins manage tokens.
		olga := f.token("olga", approval.RoleOperator)
		for _, r := range [][2]string{{"POST", "/v1/tokens"}, {"GET", "/v1/tokens"}, {"POST", "/v1/tokens/" + ci.ID + "/revoke"}, {"POST", "/v1/tokens/" + ci.ID + "/rotate"}} {
			body := ""
			if r[1] == "/v1/tokens" && r[0] == "POST" {
				body = `{"subject":"x","role":"admin"}`
			}
			f.do(r[0], r[1], olga, body).problem(t, http.StatusForbidden)
			f.do(r[0], r[1], "", body).problem(t, http.StatusUnauthorized)
		}

		// Bad input is refused and creates nothing.
		for _, body := range []string{
			`{"subject":"alice","role":"root"}`,
			`{"subject":"","role":"approver"}`,
			`{"subject":"alice","role":"approver","name":"two\nlines"}`,
			`{"subject":"alice","role":"approver","name":"` + strings.Repeat("n", approval.MaxTokenNameLength+1) + `"}`,
			`{"subject":"a\u0000b","role":"approver"}`,
			`{"subject":"alice","role":"approver","expires_in":"soon"}`,
			`{"subject":"alice","role":"approver","expires_in":"-1h"}`,
			`{"subject":"alice","role":"approver","role":"admin"}`,
			`{"subject":"alice","role":"approver","secret":"apv_mine"}`,
		} {
			f.do("POST", "/v1/tokens", admin, body).problem(t, http.StatusBadRequest)
		}
		f.do("POST", "/v1/tokens", admin, `subject=alice`, "Content-Type", "application/x-www-form-urlencoded").problem(t, http.StatusUnsupportedMediaType)
		f.do("GET", "/v1/tokens?limit=0x", admin, "").problem(t, http.StatusBadRequest)
		f.do("GET", "/v1/tokens", admin, "").decode(t, &page)
		if len(page.Tokens) != 3 {
			t.Fatalf("tokens after refused creates: got %d, want 3 (root, ci-bot, olga)", len(page.Tokens))
		}

		// Rotation: the new secret works, the old one is refused at once.
		resp = f.do("POST", "/v1/tokens/"+ci.ID+"/rotate", admin, "")
		var rotated tokenAnswer
		resp.decode(t, &rotated)
		if resp.status != http.StatusOK || rotated.ID == ci.ID || rotated.Secret == "" || rotated.Name != ci.Name || rotated.Subject != ci.Subject {
			t.Fatalf("rotate: got %d %+v", resp.status, rotated)
		}
		f.do("GET", "/v1/approvals", ci.Secret, "").problem(t, http.StatusUnauthorized)
		if got := f.do("GET", "/v1/approvals", rotated.Secret, ""); got.status != http.StatusOK {
			t.Fatalf("the rotated token: got %d %s, want 200", got.status, got.body)
		}
		f.do("POST", "/v1/tokens/"+ci.ID+"/rotate", admin, "").problem(t, http.StatusConflict)

		// Revocation: refused on the very next request; revoking again answers it as it is.
		var revoked approval.Token
		f.do("POST", "/v1/tokens/"+rotated.ID+"/revoke", admin, "").decode(t, &revoked)
		if revoked.RevokedAt == nil {
			t.Fatalf("revoke: got %+v, want revoked_at", revoked)
		}
		f.do("GET", "/v1/approvals", rotated.Secret, "").problem(t, http.StatusUnauthorized)
		if got := f.do("POST", "/v1/tokens/"+rotated.ID+"/revoke", admin, ""); got.status != http.StatusOK {
			t.Fatalf("revoke again: got %d %s, want 200", got.status, got.body)
		}

		f.do("POST", "/v1/tokens/tok_missing/revoke", admin, "").problem(t, http.StatusNotFound)
		f.do("POST", "/v1/tokens/tok_missing/rotate", admin, "").problem(t, http.StatusNotFound)

		// Expiry, read with the clock.
		var brief tokenAnswer
		f.do("POST", "/v1/tokens", admin, `{"subject":"bob","role":"approver","expires_in":"1h"}`).decode(t, &brief)
		if got := f.do("GET", "/v1/approvals", brief.Secret, ""); got.status != http.StatusOK {
			t.Fatalf("before expiry: got %d %s, want 200", got.status, got.body)
		}
		f.clock.Advance(time.Hour)
		f.do("GET", "/v1/approvals", brief.Secret, "").problem(t, http.StatusUnauthorized)

		// last_used_at shows use, to within a minute.
		svc.Wait()
		f.do("GET", "/v1/tokens", admin, "").decode(t, &page)
		for _, tok := range page.Tokens {
			if tok.ID == brief.ID && tok.LastUsedAt == nil {
				t.Fatalf("bob's token: got no last_used_at after use")
			}
		}
	})
}

// TestTokenRevokedOnAnotherReplica: a client's token, known to the server from its earlier
// requests, is revoked on another replica between two of them. The server checks a known
// token in the request's first round trip rather than looking it up first; the next
// request is refused 401 all the same, whatever route and body it carries, with the reason a
// lookup gives, and changes nothing.
func TestTokenRevokedOnAnotherReplica(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		ci, sloppy, alice := f.token("ci-bot", approval.RoleRequester), f.token("ci-bot", approval.RoleRequester), f.token("alice", approval.RoleApprover)
		body := createBody("Deploy api", "alice", "bob")

		// Each token is used twice: first looked up, then known.
		first := f.mustCreate(ci, "deploy-1", body)
		f.mustCreate(ci, "deploy-2", body)
		f.mustCreate(sloppy, "deploy-3", body)
		f.mustCreate(sloppy, "deploy-4", body)
		for range 2 {
			if got := f.do("GET", "/v1/approvals/"+first.ID, alice, ""); got.status != http.StatusOK {
				t.Fatalf("get: got %d %s, want 200", got.status, got.body)
			}
		}

		other := f.service() // another replica
		tokens, _, err := f.store.Tokens(t.Context(), approval.TokenFilter{})
		if err != nil {
			t.Fatalf("tokens: %v", err)
		}
		for _, tok := range tokens {
			if _, err := other.RevokeToken(t.Context(), tokenIssuer, tok.ID); err != nil {
				t.Fatalf("revoke: %v", err)
			}
		}

		for _, c := range []struct {
			name                string
			method, path, token string
			body                string
			headers             []string
		}{
			{"replay", "POST", "/v1/approvals", ci, body, []string{"Idempotency-Key", "deploy-1"}},
			{"create", "POST", "/v1/approvals", ci, body, []string{"Idempotency-Key", "deploy-5"}},
			{"create of a bad body", "POST", "/v1/approvals", sloppy, `{"action":`, []string{"Idempotency-Key", "deploy-6"}},
			{"vote", "POST", "/v1/approvals/" + first.ID + "/approve", alice, "", nil},
			{"get", "GET", "/v1/approvals/" + first.ID, alice, "", nil},
		} {
			p := f.do(c.method, c.path, c.token, c.body, c.headers...).problem(t, http.StatusUnauthorized)
			if p.Detail != "the bearer token was revoked" {
				t.Errorf("%s: got %q, want the reason a lookup gives", c.name, p.Detail)
			}
		}
		if n := f.count(); n != 4 {
			t.Fatalf("approvals: got %d, want 4", n)
		}
		a, err := f.store.Approval(t.Context(), first.ID)
		if err != nil || a.Status != approval.StatusPending || a.Version != 1 {
			t.Fatalf("the approval voted on: got %+v, %v; want pending at version 1", a, err)
		}
	})
}
