package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
)

// TestCheckNames: approvald check reports, on both stores, the stored names that normalise
// alike (a token for "Alice" and an approver "alice") and those now refused (a zero-width
// twin), seeded straight into the store as the rules of the past let them in, and exits 1;
// on a clean database it exits 0.
func TestCheckNames(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		dsn := testdb.DSN(t, kind)
		check := func() (string, string, int) {
			var stdout, stderr bytes.Buffer
			code := NewMain(&stdout, &stderr).Run(t.Context(), []string{"check", "--database-url", dsn})
			return stdout.String(), stderr.String(), code
		}

		s, err := openStore(t.Context(), dsn, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		now := approval.Now()
		insert := func(tokens ...approval.Token) {
			tx, err := s.Begin(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(t.Context())
			for _, tok := range tokens {
				if err := tx.TokenInsert(t.Context(), tok); err != nil {
					t.Fatal(err)
				}
			}
			if err := tx.Commit(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		approvalOf := func(key, requester string, approvers ...string) *approval.Approval {
			return &approval.Approval{
				ID: approval.NewID("apr"), OperationKey: key, Action: "deploy", Title: "Deploy",
				Context: json.RawMessage("{}"), Requester: requester, Approvers: approvers,
				RequiredApprovals: 1, Status: approval.StatusPending, Decisions: []approval.Decision{},
				CreatedAt: now, ExpiresAt: now.Add(time.Hour), Version: 1, Fingerprint: key,
			}
		}

		_, clean := approval.NewToken("ci-bot", approval.RoleRequester, now)
		insert(clean)
		if _, err := s.InsertApproval(t.Context(), approvalOf("clean", "ci-bot", "alice", "bob"), approval.Cause{Kind: approval.CauseHTTP}, nil); err != nil {
			t.Fatal(err)
		}
		if stdout, stderr, code := check(); code != 0 || !strings.Contains(stdout, "none collide") {
			t.Fatalf("a clean database: got exit %d, stdout %q, stderr %q, want 0", code, stdout, stderr)
		}

		_, shouting := approval.NewToken("Alice", approval.RoleApprover, now)
		_, twin := approval.NewToken("ci-bot\u200b", approval.RoleApprover, now)
		insert(shouting, twin)
		old := approvalOf("old", "CI-BOT", "ci-bot\u200b", "ali\u0441e")
		if _, err := s.InsertApproval(t.Context(), old, approval.Cause{Kind: approval.CauseHTTP}, nil); err != nil {
			t.Fatal(err)
		}
		stdout, stderr, code := check()
		if code != 1 {
			t.Fatalf("colliding names: got exit %d, stdout %q, stderr %q, want 1", code, stdout, stderr)
		}
		for _, want := range []string{
			`names that are now one person, "alice":`, `"Alice"`, "token " + shouting.ID, "approver of ",
			`names that are now one person, "ci-bot":`, `"CI-BOT"`, "requester of " + old.ID,
			`name now refused, "ci-bot\u200b"`, "U+200B", "token " + twin.ID,
			`name now refused, "ali\u0441e"`, "Latin and Cyrillic",
		} {
			if !strings.Contains(stdout, want) {
				t.Errorf("check's report lacks %q:\n%s", want, stdout)
			}
		}
		if !strings.Contains(stderr, "2 groups normalise alike, 2 are refused") {
			t.Errorf("check's summary: got %q", stderr)
		}
		// The check changes nothing.
		got, err := s.Approval(t.Context(), old.ID)
		if err != nil || got.Requester != "CI-BOT" {
			t.Fatalf("after check: got %v, %v, want the approval unchanged", got, err)
		}
	})
}
