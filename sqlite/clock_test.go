package sqlite_test

import (
	"context"
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/fakeclock"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/internal/wait"
)

// A write transaction reads the clock once it holds the write connection, not before it
// queues for it: a vote that waited past the approval's expiry finds it expired.
func TestClockReadAfterWaitingForTheWriter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := MustOpen(t, testdb.DSN(t, testdb.SQLite))
	clock := fakeclock.New(approval.Now())
	s.Now = clock.Now
	a := MustCreateApproval(t, s, "ci-bot", "deploy-prod-1042") // expires in 24h

	release, err := s.HoldWriter(ctx)
	if err != nil {
		t.Fatalf("hold the writer: %v", err)
	}
	waits := s.WriterWaits()
	voted := make(chan error, 1)
	go func() {
		_, err := (&approval.Service{Store: s}).Decide(ctx, approval.Principal{Subject: "alice", Role: approval.RoleAdmin}, approval.DecideRequest{
			ApprovalID: a.ID, Approver: "alice", Verdict: approval.VerdictApprove, Cause: approval.HTTPCause("vote"),
		})
		voted <- err
	}()
	// The vote is queued for the write connection once the pool counts its wait.
	wait.Until(t, "the vote to queue for the write connection", func() bool { return s.WriterWaits() != waits })
	clock.Advance(25 * time.Hour)
	release()

	err = <-voted
	if e := approval.AsError(err); e == nil || e.Code != approval.ECONFLICT || e.Approval == nil || e.Approval.Status != approval.StatusExpired {
		t.Fatalf("vote that waited past the expiry: got %v, want a conflict with the approval expired", err)
	}
}
