package loadtest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/loadtest"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/postgres"
	"github.com/approvald/approval/sqlite"
)

// TestSeed seeds 500 approvals on each store and reads them back through the store: every
// listing walks to the end with the count the seed wrote, a seeded approval reads whole, its
// trail is complete, a recent one's create is replayed from its record, and the inbox and the
// executions hold what was written.
func TestSeed(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		dsn := testdb.DSN(t, kind)
		var st approval.Store
		var seedFn func(context.Context, string, loadtest.Seed, *bytes.Buffer) (loadtest.SeedCounts, error)
		if kind == testdb.Postgres {
			s, err := postgres.Open(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			st = s
			seedFn = func(ctx context.Context, dsn string, s loadtest.Seed, b *bytes.Buffer) (loadtest.SeedCounts, error) {
				return loadtest.SeedPostgres(ctx, dsn, s, b)
			}
		} else {
			s, err := sqlite.Open(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			st = s
			seedFn = func(ctx context.Context, dsn string, s loadtest.Seed, b *bytes.Buffer) (loadtest.SeedCounts, error) {
				return loadtest.SeedSQLite(ctx, dsn, s, b)
			}
		}
		if err := st.(interface{ Migrate(context.Context) error }).Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		now := approval.Now()
		seed := loadtest.Seed{N: 500, Now: now, Requesters: []string{"ci-bot", "other-bot"}, Approvers: []string{"alice", "bob", "carol"}}
		var progress bytes.Buffer
		counts, err := seedFn(ctx, dsn, seed, &progress)
		if err != nil {
			t.Fatalf("seed: %v\n%s", err, progress.String())
		}
		if counts.Approvals != 500 || counts.Pending == 0 || counts.Inbox == 0 || counts.Executions == 0 {
			t.Fatalf("got counts %+v, want 500 approvals and some pending, inbox events and executions", counts)
		}

		// Every approval once, newest first, in pages of 200; and as many by status as the
		// store counts.
		var all []*approval.Approval
		cursor := ""
		for {
			page, next, err := st.Approvals(ctx, approval.ApprovalFilter{Limit: 200, Cursor: cursor})
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, page...)
			if next == "" {
				break
			}
			cursor = next
		}
		if len(all) != 500 {
			t.Fatalf("walked %d approvals, want 500", len(all))
		}
		seen := map[string]bool{}
		for i, a := range all {
			if seen[a.ID] {
				t.Fatalf("approval %s listed twice", a.ID)
			}
			seen[a.ID] = true
			if i > 0 && a.CreatedAt.After(all[i-1].CreatedAt) {
				t.Fatalf("approval %d (%s) is newer than the one before it", i, a.ID)
			}
		}
		byStatus, err := st.ApprovalCounts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if byStatus[approval.StatusPending] != counts.Pending {
			t.Errorf("got %d pending, want %d", byStatus[approval.StatusPending], counts.Pending)
		}
		pending := walk(t, func(cursor string) ([]*approval.Approval, string, error) {
			return st.Approvals(ctx, approval.ApprovalFilter{Status: approval.StatusPending, Limit: 7, Cursor: cursor})
		})
		if pending != counts.Pending {
			t.Errorf("walked %d pending approvals, want %d", pending, counts.Pending)
		}
		mine := walk(t, func(cursor string) ([]*approval.Approval, string, error) {
			return st.Approvals(ctx, approval.ApprovalFilter{VisibleTo: "ci-bot", Limit: 50, Cursor: cursor})
		})
		if mine != 250 {
			t.Errorf("ci-bot sees %d approvals, want 250 (every other one)", mine)
		}
		// The approvers' rows carry their approval's created_at: the listing reads them.
		listed := walk(t, func(cursor string) ([]*approval.Approval, string, error) {
			return st.Approvals(ctx, approval.ApprovalFilter{Approver: "alice", Limit: 50, Cursor: cursor})
		})
		if listed != 333 {
			t.Errorf("alice is listed on %d approvals, want 333 (two of every three)", listed)
		}

		// The oldest approved approval of the targeted action reads whole, with its trail.
		var targeted *approval.Approval
		for _, a := range all {
			if a.Status == approval.StatusApproved && a.Action == loadtest.SeedTargetedAction {
				targeted = a
			}
		}
		if targeted == nil {
			t.Fatal("no approved approval of the targeted action")
		}
		got, err := st.Approval(ctx, targeted.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Approvers) != 2 || len(got.Decisions) != 1 || got.Version != 2 || got.DecidedAt == nil ||
			got.Execution == nil || got.Execution.Status != approval.ExecutionSucceeded || !json.Valid(got.Context) {
			t.Errorf("got %+v, want two approvers, one decision, version 2, decided, a succeeded execution and a JSON context", got)
		}
		events, err := st.Events(ctx, targeted.ID)
		if err != nil {
			t.Fatal(err)
		}
		var types []string
		for i, e := range events {
			types = append(types, e.Type)
			if e.Seq != int64(i+1) {
				t.Errorf("event %d has seq %d", i, e.Seq)
			}
		}
		want := []string{approval.EventCreated, approval.EventVoted, approval.EventApproved,
			approval.EventExecutionQueued, approval.EventExecutionAttempt, approval.EventExecutionSucceeded}
		if len(types) != len(want) {
			t.Fatalf("got events %v, want %v", types, want)
		}
		for i := range want {
			if types[i] != want[i] {
				t.Errorf("got events %v, want %v", types, want)
				break
			}
		}

		// The newest approval holds its key: a create under it finds the approval, which
		// renders its create's 201 again.
		newest := all[0]
		again := *newest
		again.ID = approval.NewID("apr")
		holder, err := st.InsertApproval(ctx, &again, approval.HTTPCause("req_test"), nil)
		if err != nil {
			t.Fatal(err)
		}
		if holder == nil || holder.Approval == nil || holder.Approval.ID != newest.ID || holder.Fingerprint != newest.Fingerprint {
			t.Fatalf("got holder %+v, want approval %s", holder, newest.ID)
		}

		inbox := walk(t, func(cursor string) ([]*approval.InboxEvent, string, error) {
			return st.InboxEvents(ctx, approval.InboxFilter{Limit: 50, Cursor: cursor})
		})
		if inbox != counts.Inbox {
			t.Errorf("walked %d inbox events, want %d", inbox, counts.Inbox)
		}
		executions := walk(t, func(cursor string) ([]*approval.ExecutionRecord, string, error) {
			return st.Executions(ctx, approval.ExecutionFilter{Limit: 50, Cursor: cursor})
		})
		if executions != counts.Executions {
			t.Errorf("walked %d executions, want %d", executions, counts.Executions)
		}
	})
}

// walk pages through a listing to its end and returns how many items it held.
func walk[T any](t *testing.T, page func(cursor string) ([]T, string, error)) int {
	t.Helper()
	n, cursor := 0, ""
	for {
		list, next, err := page(cursor)
		if err != nil {
			t.Fatal(err)
		}
		n += len(list)
		if next == "" {
			return n
		}
		cursor = next
	}
}
