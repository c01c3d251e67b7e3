package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
)

// TestTokenLifecycle runs token create, list, rotate and revoke as a user does, on both stores:
// list never shows a secret, rotate prints the new token alone and revokes the old, revoke
// is seen by list, and an unknown id fails with exit 1.
func TestTokenLifecycle(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		dsn := testdb.DSN(t, kind)
		stdout, stderr, code := run(t, "token", "create", "--subject", "ci-bot", "--role", "requester",
			"--name", "ci deploy bot", "--expires-in", "720h", "--database-url", dsn)
		if code != 0 {
			t.Fatalf("token create: exit %d, stderr %s", code, stderr)
		}
		secret := strings.TrimSuffix(stdout, "\n")
		if !tokenLine.MatchString(secret) {
			t.Fatalf("token create stdout: got %q, want one token line", stdout)
		}
		createToken(t, dsn, "alice", "approver")

		list := listTokens(t, dsn)
		if len(list) != 2 {
			t.Fatalf("token list: got %d tokens, want 2", len(list))
		}
		ci := list[1] // newest first
		if ci.Name != "ci deploy bot" || ci.Subject != "ci-bot" || ci.Role != approval.RoleRequester || ci.ExpiresAt == nil || ci.RevokedAt != nil {
			t.Fatalf("ci-bot's token: got %+v", ci)
		}
		if d := ci.ExpiresAt.Sub(ci.CreatedAt); d != 720*time.Hour {
			t.Errorf("ci-bot's token lifetime: got %s, want 720h", d)
		}

		table, stderr, code := run(t, "token", "list", "--database-url", dsn)
		if code != 0 {
			t.Fatalf("token list: exit %d, stderr %s", code, stderr)
		}
		if !strings.HasPrefix(table, "ID ") || !strings.Contains(table, "ci deploy bot") || strings.Count(table, "\n") != 3 {
			t.Errorf("token list table: got\n%s", table)
		}

		stdout, stderr, code = run(t, "token", "rotate", ci.ID, "--database-url", dsn)
		if code != 0 {
			t.Fatalf("token rotate: exit %d, stderr %s", code, stderr)
		}
		rotated := strings.TrimSuffix(stdout, "\n")
		if !tokenLine.MatchString(rotated) || rotated == secret || strings.Contains(stderr, rotated) {
			t.Fatalf("token rotate: got stdout %q, want one new token line, not logged", stdout)
		}

		list = listTokens(t, dsn)
		byID := map[string]approval.Token{}
		var successor approval.Token
		for _, tok := range list {
			byID[tok.ID] = tok
			if tok.Name == "ci deploy bot" && tok.ID != ci.ID {
				successor = tok
			}
		}
		if len(list) != 3 || byID[ci.ID].RevokedAt == nil || successor.ID == "" || successor.RevokedAt != nil {
			t.Fatalf("after rotate: got %+v, want the old token revoked and a named successor", list)
		}

		stdout, stderr, code = run(t, "token", "revoke", successor.ID, "--database-url", dsn)
		if code != 0 || stdout != successor.ID+"\n" {
			t.Fatalf("token revoke: exit %d, stdout %q, stderr %s", code, stdout, stderr)
		}
		for _, tok := range listTokens(t, dsn) {
			if tok.ID == successor.ID && tok.RevokedAt == nil {
				t.Fatalf("after revoke: %s not revoked", tok.ID)
			}
		}

		_, stderr, code = run(t, "token", "revoke", "tok_missing", "--database-url", dsn)
		if code != 1 || !strings.Contains(stderr, "not found") {
			t.Errorf("token revoke of an unknown id: exit %d, stderr %q, want 1 and not found", code, stderr)
		}
		_, stderr, code = run(t, "token", "rotate", ci.ID, "--database-url", dsn)
		if code != 1 || !strings.Contains(stderr, "revoked") {
			t.Errorf("token rotate of a revoked token: exit %d, stderr %q, want 1 and revoked", code, stderr)
		}
	})
}

// TestTokenRevokeReachesServer: a token revoked by the command, another process, is refused
// by a running server on its very next request; the server then stops cleanly.
func TestTokenRevokeReachesServer(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		dsn := testdb.DSN(t, kind)
		srv := startServe(t, dsn)
		srv.bootstrapToken(t)
		secret := createToken(t, dsn, "ci-bot", "requester")
		if r := srv.do(t, "GET", "/v1/approvals", secret, "", ""); r.status != 200 {
			t.Fatalf("GET with the new token: got %d %s, want 200", r.status, r.body)
		}
		var id string
		for _, tok := range listTokens(t, dsn) {
			if tok.Subject == "ci-bot" {
				id = tok.ID
			}
		}
		if _, stderr, code := run(t, "token", "revoke", id, "--database-url", dsn); code != 0 {
			t.Fatalf("token revoke: exit %d, stderr %s", code, stderr)
		}
		if r := srv.do(t, "GET", "/v1/approvals", secret, "", ""); r.status != 401 {
			t.Fatalf("GET right after the revocation: got %d %s, want 401", r.status, r.body)
		}
		srv.stop(t)
	})
}

// TestTokenUsageErrors: a token command used wrongly exits 2, says why on stderr, prints
// nothing on stdout and changes nothing.
func TestTokenUsageErrors(t *testing.T) {
	t.Parallel()
	dsn := testdb.DSN(t, testdb.SQLite)
	createToken(t, dsn, "alice", "approver")
	for _, args := range [][]string{
		{"token", "frobnicate"},
		{"token", "revoke"},
		{"token", "rotate"},
		{"token", "revoke", "tok_a", "tok_b"},
		{"token", "list", "extra"},
		{"token", "list", "--table"},
		{"token", "create", "--subject", "bob", "--role", "approver", "--expires-in", "-1h"},
		{"token", "create", "--subject", "bob", "--role", "approver", "--expires-in", "soon"},
		{"token", "create", "--subject", "bob", "--role", "approver", "--name", "two\nlines"},
		{"token", "create", "--subject", "bob", "--role", "approver", "--name", strings.Repeat("n", approval.MaxTokenNameLength+1)},
	} {
		stdout, stderr, code := run(t, append(args, "--database-url", dsn)...)
		if code != 2 || stdout != "" || stderr == "" {
			t.Errorf("approvald %q: got exit %d, stdout %q, stderr %q, want exit 2, a reason, no output", args, code, stdout, stderr)
		}
	}
	if list := listTokens(t, dsn); len(list) != 1 {
		t.Errorf("tokens after usage errors: got %d, want 1", len(list))
	}
}

// listTokens runs `approvald token list --json` and decodes it.
func listTokens(t *testing.T, dsn string) []approval.Token {
	t.Helper()
	stdout, stderr, code := run(t, "token", "list", "--json", "--database-url", dsn)
	if code != 0 {
		t.Fatalf("token list: exit %d, stderr %s", code, stderr)
	}
	for _, word := range []string{"apv_", "hash", "secret"} {
		if strings.Contains(stdout, word) {
			t.Fatalf("token list shows %q:\n%s", word, stdout)
		}
	}
	var list []approval.Token
	if err := json.Unmarshal([]byte(stdout), &list); err != nil {
		t.Fatalf("token list --json: %v\n%s", err, stdout)
	}
	return list
}
