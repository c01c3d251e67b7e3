package postgres_test

import (
	"strings"
	"testing"

	"github.com/approvald/approval"
	"github.com/approvald/approval/postgres"
)

// TestWaitingReadsItsRanges plans and runs "waiting for me" (Approvals with AskedOf, as
// Service.Waiting sends it) over many approvals, most of them decided, and checks that it
// reads one range of approval_asks_name_idx per name, the person's and each group's, and no
// table whole (docs/query-plans.md, "Waiting for me"). APPROVALD_WAITING_PLAN_ROWS sets how
// many approvals (100,000; 1,000,000 for the documented plan).
func TestWaitingReadsItsRanges(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rows, conn := planDatabase(t, "APPROVALD_WAITING_PLAN_ROWS")
	// Of every 100 approvals, 80 decided and 20 pending; half of the pending ones under a
	// policy, asking one of 10 groups, the others asking their two approvers by name. Every
	// approval lists two of 100 people: the history of a name is 2% of the table.
	if _, err := conn.Exec(ctx, `
		INSERT INTO approvals (id, requester, operation_key, fingerprint, action, title,
			required_approvals, status, expires_at, created_at, version, policy)
		SELECT 'apr_' || lpad(n::text, 8, '0'), 'svc', 'key-' || n, 'f', 'deploy', 't', 1,
			CASE WHEN n % 100 < 80 THEN 'approved' ELSE 'pending' END,
			now() + interval '1 day', now() - (n || ' seconds')::interval, 1,
			CASE WHEN n % 2 = 0 THEN '{}'::jsonb END
		FROM generate_series(1, $1::integer) AS n`, rows); err != nil {
		t.Fatalf("fill approvals: %v", err)
	}
	if _, err := conn.Exec(ctx, `
		INSERT INTO approval_approvers (approval_id, position, approver, created_at)
		SELECT a.id, p.position, 'p' || ((substr(a.id, 5)::integer + p.position) % 100), a.created_at
		FROM approvals a, (VALUES (0), (1)) AS p(position);
		INSERT INTO approval_asks (approval_id, kind, name, created_at)
		SELECT a.id, 'group', 'g' || (substr(a.id, 5)::integer % 10), a.created_at
		FROM approvals a WHERE a.status = 'pending' AND a.policy IS NOT NULL;
		INSERT INTO approval_asks (approval_id, kind, name, created_at)
		SELECT p.approval_id, 'person', p.approver, p.created_at
		FROM approval_approvers p JOIN approvals a ON a.id = p.approval_id
		WHERE a.status = 'pending' AND a.policy IS NULL;
		ANALYZE approvals; ANALYZE approval_approvers; ANALYZE approval_asks`); err != nil {
		t.Fatalf("fill the tables: %v", err)
	}
	f := approval.ApprovalFilter{Status: approval.StatusPending, NotVotedBy: "p7", AskedOf: "p7",
		AskedGroups: []string{"g1", "g4", "g8"}, Limit: 25}
	plan, err := postgres.ExplainApprovals(ctx, conn, f)
	if err != nil {
		t.Fatalf("explain: %v", err)
	}
	t.Logf("waiting for p7 in three groups over %d approvals:\n%s", rows, plan)
	if strings.Count(plan, "approval_asks_name_idx") != 4 || strings.Contains(plan, "Seq Scan") {
		t.Errorf("waiting for me does not read four ranges of approval_asks_name_idx alone:\n%s", plan)
	}
}
