package postgres_test

import (
	"sync"
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/postgres"
	"github.com/approvald/approval/storetest"
)

// Every transaction reads the clock once it holds its pooled connection, never while it may
// still wait for one: a method queued behind others must not compare expires_at or leases
// with the instant it began to wait.
func TestClockReadInsideTheTransaction(t *testing.T) {
	t.Parallel()
	s := testdb.OpenWith(t, testdb.Postgres, testdb.Options{}).(*postgres.Store)
	var (
		mu    sync.Mutex
		reads []int32 // connections in use at each clock read
	)
	s.Now = func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		reads = append(reads, s.AcquiredConns())
		return time.Now()
	}
	a := storetest.MustCreate(t, s, storetest.PendingApproval(t, approval.Now()))
	if _, err := (&approval.Service{Store: s}).Decide(t.Context(), approval.Principal{Subject: "alice", Role: approval.RoleAdmin}, approval.DecideRequest{
		ApprovalID: a.ID, Approver: "alice", Verdict: approval.VerdictApprove, Cause: approval.HTTPCause("vote"),
	}); err != nil {
		t.Fatalf("decide: %v", err)
	}
	if _, err := s.Approval(t.Context(), a.ID); err != nil {
		t.Fatalf("approval: %v", err)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(reads) == 0 {
		t.Fatal("got no clock reads, want one per transaction")
	}
	for i, n := range reads {
		if n < 1 {
			t.Fatalf("clock read %d of %d: got %d connections in use, want the transaction's own", i+1, len(reads), n)
		}
	}
}
