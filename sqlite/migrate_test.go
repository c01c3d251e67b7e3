package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/approvald/approval"
)

// A database made before the inbox and the execution ledger existed upgrades in place: its
// approvals survive and the new features work on them.
func TestMigrate_UpgradesFromPhaseOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "approvald.db")

	// Build the 0001-only database the way that release's Migrate left it.
	script, err := os.ReadFile(filepath.Join("migrations", "0001_init.sql"))
	if err != nil {
		t.Fatalf("read 0001: %v", err)
	}
	execRaw(t, path, `PRAGMA journal_mode = WAL`)
	execRaw(t, path, string(script))
	execRaw(t, path, `CREATE TABLE schema_migrations (name TEXT PRIMARY KEY, applied_at INTEGER NOT NULL) STRICT`)
	execRaw(t, path, `INSERT INTO schema_migrations (name, applied_at) VALUES ('0001_init', 0)`)
	execRaw(t, path, `INSERT INTO approvals (id, requester, operation_key, fingerprint, action, title,
		required_approvals, status, expires_at, created_at, version)
		VALUES ('apr_old', 'ci-bot', 'deploy-old', 'fp', 'deploy', 'old', 1, 'pending', 9000000000000000, 0, 1)`)
	execRaw(t, path, `INSERT INTO approval_approvers (approval_id, position, approver) VALUES ('apr_old', 0, 'alice')`)

	s := MustOpen(t, path)
	if got, want := appliedMigrations(t, path), migrationFiles(t); got != want {
		t.Fatalf("schema_migrations rows after the upgrade: got %d, want %d", got, want)
	}
	// 0009 gave the old approver row its approval's created_at: the approver's and the
	// requester's listings, read from their indexes, find it; 0027 made the pending approval
	// ask its approver, so it waits for alice.
	for _, f := range []approval.ApprovalFilter{{Approver: "alice"}, {VisibleTo: "alice"}, {VisibleTo: "ci-bot"}, {Requester: "ci-bot"},
		{AskedOf: "alice", NotVotedBy: "alice"}} {
		list, _, err := s.Approvals(ctx, f)
		if err != nil || len(list) != 1 || list[0].ID != "apr_old" {
			t.Fatalf("approvals %+v after the upgrade: got %d (%v), want apr_old", f, len(list), err)
		}
	}
	a, err := (&approval.Service{Store: s, Targeted: func(string) bool { return true }}).Decide(ctx, approval.Principal{Subject: "alice", Role: approval.RoleAdmin}, approval.DecideRequest{ApprovalID: "apr_old", Approver: "alice", Verdict: approval.VerdictApprove})
	if err != nil {
		t.Fatalf("approve the old approval: %v", err)
	}
	if a.Status != approval.StatusApproved || a.Execution == nil || a.Execution.Status != approval.ExecutionQueued {
		t.Fatalf("old approval after approve: got %s with execution %+v, want approved with a queued execution", a.Status, a.Execution)
	}
}

// A database upgraded in the middle of executions keeps what the runner knew of their earlier
// attempts, which before 0003 lived in the audit trail only.
func TestMigrate_BackfillsExecutionUncertainty(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "approvald.db")
	execRaw(t, path, `PRAGMA journal_mode = WAL`)
	execRaw(t, path, `CREATE TABLE schema_migrations (name TEXT PRIMARY KEY, applied_at INTEGER NOT NULL) STRICT`)
	for _, name := range []string{"0001_init", "0002_inbox_executions"} {
		script, err := os.ReadFile(filepath.Join("migrations", name+".sql"))
		if err != nil {
			t.Fatalf("read %s: %v", name, err)
		}
		execRaw(t, path, string(script))
		execRaw(t, path, `INSERT INTO schema_migrations (name, applied_at) VALUES (?, 0)`, name)
	}
	// Each approval's execution with its trail of (type, detail) events after the approval.
	executions := []struct {
		id, status string
		attempts   int
		events     [][2]string
	}{
		// Queued to ask the lookup URL after an uncertain attempt.
		{"exe_uncertain", "queued", 1, [][2]string{
			{"execution.attempt", `{"recovered": false}`},
			{"execution.retry_scheduled", `{"reason": "attempt 1 of 5 may have reached the target (timeout); the lookup URL will be asked in 1s whether it ran"}`},
		}},
		// Running after a claim that recovered an interrupted attempt, one release between.
		{"exe_recovered", "running", 2, [][2]string{
			{"execution.attempt", `{"recovered": false}`},
			{"execution.released", `{}`},
			{"execution.attempt", `{"recovered": false}`},
			{"execution.attempt", `{"recovered": true}`},
		}},
		// Re-queued by an operator after an uncertain attempt: a new run, nothing uncertain.
		{"exe_retried", "queued", 2, [][2]string{
			{"execution.attempt", `{"recovered": false}`},
			{"execution.needs_review", `{"reason": "attempt 1 of 5 may have reached the target (reset)"}`},
			{"execution.retried", `{}`},
			{"execution.attempt", `{"recovered": false}`},
			{"execution.retry_scheduled", `{"reason": "attempt 1 of 5: HTTP 503 Service Unavailable; retrying in 1s"}`},
		}},
	}
	for _, x := range executions {
		approvalID := "apr_" + x.id
		execRaw(t, path, `INSERT INTO approvals (id, requester, operation_key, fingerprint, action, title,
			required_approvals, status, expires_at, created_at, version)
			VALUES (?, 'ci-bot', ?, 'fp', 'deploy', 'old', 1, 'approved', 9000000000000000, 0, 2)`, approvalID, x.id)
		execRaw(t, path, `INSERT INTO executions (id, approval_id, operation_key, action, status, attempts,
			next_attempt_at, lease_expires_at, created_at, updated_at)
			VALUES (?, ?, ?, 'deploy', ?, ?, 0, 0, 0, 0)`, x.id, approvalID, x.id, x.status, x.attempts)
		for i, ev := range append([][2]string{{"approval.approved", `{}`}}, x.events...) {
			execRaw(t, path, `INSERT INTO events (approval_id, seq, type, at, actor, cause, detail)
				VALUES (?, ?, ?, 0, 'system', '{"kind": "worker"}', ?)`, approvalID, i+1, ev[0], ev[1])
		}
	}

	s := MustOpen(t, path)
	for _, want := range []struct {
		id        string
		uncertain bool
		base      int
	}{
		{"exe_uncertain", true, 0},
		{"exe_recovered", true, 0},
		{"exe_retried", false, 1},
	} {
		rec, err := s.Execution(ctx, want.id)
		if err != nil {
			t.Fatalf("execution %s: %v", want.id, err)
		}
		if rec.Uncertain != want.uncertain || rec.AttemptBase != want.base {
			t.Errorf("execution %s after the upgrade: got uncertain %v, attempt base %d; want %v, %d", want.id, rec.Uncertain, rec.AttemptBase, want.uncertain, want.base)
		}
	}
}

// A database upgraded past 0004 knows which executions approvald calls itself: those whose
// approving transaction queued them, whatever their status now.
func TestMigrate_BackfillsExecutionTargeted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "approvald.db")
	execRaw(t, path, `PRAGMA journal_mode = WAL`)
	execRaw(t, path, `CREATE TABLE schema_migrations (name TEXT PRIMARY KEY, applied_at INTEGER NOT NULL) STRICT`)
	for _, name := range []string{"0001_init", "0002_inbox_executions", "0003_execution_uncertainty"} {
		script, err := os.ReadFile(filepath.Join("migrations", name+".sql"))
		if err != nil {
			t.Fatalf("read %s: %v", name, err)
		}
		execRaw(t, path, string(script))
		execRaw(t, path, `INSERT INTO schema_migrations (name, applied_at) VALUES (?, 0)`, name)
	}
	// Both succeeded with an applied report; only the first was queued for a target.
	for _, x := range []struct {
		id     string
		events []string
	}{
		{"exe_targeted", []string{"approval.approved", "execution.queued", "execution.attempt", "execution.accepted", "execution.reported"}},
		{"exe_reported", []string{"approval.approved", "execution.reported"}},
	} {
		approvalID := "apr_" + x.id
		execRaw(t, path, `INSERT INTO approvals (id, requester, operation_key, fingerprint, action, title,
			required_approvals, status, expires_at, created_at, version)
			VALUES (?, 'ci-bot', ?, 'fp', 'deploy', 'old', 1, 'approved', 9000000000000000, 0, 2)`, approvalID, x.id)
		execRaw(t, path, `INSERT INTO executions (id, approval_id, operation_key, action, status, attempts,
			applied_version, created_at, updated_at)
			VALUES (?, ?, ?, 'deploy', 'succeeded', 1, 1, 0, 0)`, x.id, approvalID, x.id)
		for i, typ := range x.events {
			execRaw(t, path, `INSERT INTO events (approval_id, seq, type, at, actor, cause, detail)
				VALUES (?, ?, ?, 0, 'system', '{"kind": "worker"}', '{}')`, approvalID, i+1, typ)
		}
	}

	s := MustOpen(t, path)
	for id, want := range map[string]bool{"exe_targeted": true, "exe_reported": false} {
		rec, err := s.Execution(ctx, id)
		if err != nil {
			t.Fatalf("execution %s: %v", id, err)
		}
		if rec.Targeted != want {
			t.Errorf("execution %s after the upgrade: got targeted %v, want %v", id, rec.Targeted, want)
		}
	}
}

// A database upgraded past 0017 calls a targeted execution that was never called under the
// requester's downstream key, escaped as approval.DownstreamKey escapes it, and keeps the
// bare operation key for one that was called, whose target may know it under that key.
func TestMigrate_BackfillsDownstreamKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "approvald.db")
	execRaw(t, path, `PRAGMA journal_mode = WAL`)
	execRaw(t, path, `CREATE TABLE schema_migrations (name TEXT PRIMARY KEY, applied_at INTEGER NOT NULL) STRICT`)
	names, err := filepath.Glob(filepath.Join("migrations", "*.sql"))
	if err != nil {
		t.Fatalf("list migrations: %v", err)
	}
	for _, file := range names {
		name := strings.TrimSuffix(filepath.Base(file), ".sql")
		if name >= "0017" {
			break
		}
		script, err := os.ReadFile(file)
		if err != nil {
			t.Fatalf("read %s: %v", name, err)
		}
		execRaw(t, path, string(script))
		execRaw(t, path, `INSERT INTO schema_migrations (name, applied_at) VALUES (?, 0)`, name)
	}
	for _, x := range []struct {
		id, requester string
		targeted      bool
		attempts      int
	}{
		{"exe_queued", "ops/ci%é ~x", true, 0},
		{"exe_called", "ci-bot", true, 2},
		{"exe_untargeted", "ci-bot", false, 0},
	} {
		approvalID := "apr_" + x.id
		execRaw(t, path, `INSERT INTO approvals (id, requester, operation_key, fingerprint, action, title,
			required_approvals, status, expires_at, created_at, version)
			VALUES (?, ?, ?, 'fp', 'deploy', 'old', 1, 'approved', 9000000000000000, 0, 2)`, approvalID, x.requester, x.id)
		execRaw(t, path, `INSERT INTO executions (id, approval_id, operation_key, action, targeted, status, attempts,
			created_at, updated_at)
			VALUES (?, ?, ?, 'deploy', ?, 'queued', ?, 0, 0)`, x.id, approvalID, x.id, x.targeted, x.attempts)
	}

	s := MustOpen(t, path)
	for id, want := range map[string]string{
		"exe_queued":     approval.DownstreamKey("ops/ci%é ~x", "exe_queued"),
		"exe_called":     "exe_called",
		"exe_untargeted": "exe_untargeted",
	} {
		rec, err := s.Execution(ctx, id)
		if err != nil {
			t.Fatalf("execution %s: %v", id, err)
		}
		if got := rec.IdempotencyKey(); got != want {
			t.Errorf("execution %s after the upgrade: got idempotency key %q (downstream key %q), want %q", id, got, rec.DownstreamKey, want)
		}
	}
}
