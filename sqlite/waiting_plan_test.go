package sqlite_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/approvald/approval"
	"github.com/approvald/approval/sqlite"
)

// TestWaitingReadsItsRanges plans "waiting for me" (Approvals with AskedOf, as
// Service.Waiting sends it) on SQLite, which keeps no statistics, over a table where every
// other index could look as good: each name's range must be read from approval_asks_name, in
// its order, with no table scanned (docs/query-plans.md, "Waiting for me").
func TestWaitingReadsItsRanges(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "plan.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	f := approval.ApprovalFilter{Status: approval.StatusPending, NotVotedBy: "p7", AskedOf: "p7",
		AskedGroups: []string{"g1", "g4", "g8"}, Limit: 25, Query: "api", Requester: "svc"}
	plan, err := s.ExplainApprovals(ctx, f)
	if err != nil {
		t.Fatalf("explain: %v", err)
	}
	t.Logf("waiting for p7 in three groups:\n%s", plan)
	if got := strings.Count(plan, "COVERING INDEX approval_asks_name (kind=? AND name=?)"); got != 4 {
		t.Errorf("waiting for me reads %d ranges of approval_asks_name, want 4:\n%s", got, plan)
	}
	// Each range is read in the index's order, up to its LIMIT: no sort inside a range's
	// co-routine (the sorts after "SCAN kN" order its few ids for the UNION), and no table
	// scanned.
	inRange := false
	for _, line := range strings.Split(plan, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "CO-ROUTINE k"):
			inRange = true
		case strings.HasPrefix(line, "SCAN k"):
			inRange = false
		case strings.HasPrefix(line, "SCAN "):
			t.Errorf("a table is scanned whole (%s):\n%s", line, plan)
		case inRange && strings.Contains(line, "TEMP B-TREE"):
			t.Errorf("a range is sorted, not read in the index's order (%s):\n%s", line, plan)
		}
	}
}
