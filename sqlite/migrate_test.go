package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
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
	s.Targeted = func(string) bool { return true }
	a, err := s.Decide(ctx, approval.DecideRequest{ApprovalID: "apr_old", Approver: "alice", Verdict: approval.VerdictApprove})
	if err != nil {
		t.Fatalf("approve the old approval: %v", err)
	}
	if a.Status != approval.StatusApproved || a.Execution == nil || a.Execution.Status != approval.ExecutionQueued {
		t.Fatalf("old approval after approve: got %s with execution %+v, want approved with a queued execution", a.Status, a.Execution)
	}
}
