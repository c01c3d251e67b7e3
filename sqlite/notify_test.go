package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/approvald/approval"
	"github.com/approvald/approval/sqlite"
)

// The Notifier contract is exercised on both stores by storetest; these tests are about how
// SQLite keeps it in process: signals follow the commit and a rollback signals nothing.

func TestSubscribe_SignalsAfterCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := MustOpen(t, filepath.Join(t.TempDir(), "approvald.db"))
	svc := &approval.Service{Store: s, Targeted: func(action string) bool { return action == "deploy" }}
	approvals := MustSubscribe(t, s, approval.TopicApprovals)
	executions := MustSubscribe(t, s, approval.TopicExecutions)
	inbox := MustSubscribe(t, s, approval.TopicInbox)

	// A create wakes nobody: nothing waits on an approval that did not exist.
	a := MustCreateApproval(t, s, "ci-bot", "deploy-1")
	assertSignalled(t, "create", approvals, false)
	assertSignalled(t, "create", executions, false)

	// A refused vote changes nothing and wakes nobody.
	if _, err := svc.Decide(ctx, approval.Principal{Subject: "mallory", Role: approval.RoleAdmin}, approval.DecideRequest{ApprovalID: a.ID, Approver: "mallory", Verdict: approval.VerdictApprove}); approval.ErrorCode(err) != approval.EFORBIDDEN {
		t.Fatalf("vote by a stranger: got %v, want forbidden", err)
	}
	assertSignalled(t, "refused vote", approvals, false)

	// The approving vote queues the execution in the same commit: both topics fire, and a
	// subscriber woken by them already sees both changes.
	if _, err := svc.Decide(ctx, approval.Principal{Subject: "alice", Role: approval.RoleAdmin}, approval.DecideRequest{ApprovalID: a.ID, Approver: "alice", Verdict: approval.VerdictApprove}); err != nil {
		t.Fatalf("approve: %v", err)
	}
	assertSignalled(t, "approve", approvals, true)
	assertSignalled(t, "approve", executions, true)
	got, err := s.Approval(ctx, a.ID)
	if err != nil {
		t.Fatalf("approval: %v", err)
	}
	if got.Execution == nil || got.Execution.Status != approval.ExecutionQueued {
		t.Fatalf("execution after approve: got %+v, want queued", got.Execution)
	}

	// Only a new inbox event is work; a duplicate is not.
	e := &approval.InboxEvent{ID: approval.NewID("inb"), Source: "chat", EventID: "evt-1", Type: approval.TypeApprovalDecision, Body: []byte(`{}`)}
	if _, err := s.RecordInbox(ctx, e); err != nil {
		t.Fatalf("record inbox: %v", err)
	}
	assertSignalled(t, "new inbox event", inbox, true)
	dup := *e
	dup.ID = approval.NewID("inb")
	if duplicate, err := s.RecordInbox(ctx, &dup); err != nil || !duplicate {
		t.Fatalf("record duplicate: got (%v, %v), want (true, nil)", duplicate, err)
	}
	assertSignalled(t, "duplicate inbox event", inbox, false)
}

func TestSubscribe_NoSignalAfterRollback(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "approvald.db")
	s := MustOpen(t, path)
	a := MustCreateApproval(t, s, "ci-bot", "deploy-1")
	approvals := MustSubscribe(t, s, approval.TopicApprovals)
	executions := MustSubscribe(t, s, approval.TopicExecutions)

	// A stray execution row for the approval makes the approving transaction fail at its
	// last write, after the approval itself has changed inside it.
	execRaw(t, path, `INSERT INTO executions (id, approval_id, operation_key, action, status,
		created_at, updated_at) VALUES ('exe_stray', ?, 'deploy-1', 'deploy', 'cancelled', 0, 0)`, a.ID)
	if _, err := (&approval.Service{Store: s, Targeted: func(string) bool { return true }}).Decide(ctx, approval.Principal{Subject: "alice", Role: approval.RoleAdmin}, approval.DecideRequest{ApprovalID: a.ID, Approver: "alice", Verdict: approval.VerdictApprove}); err == nil {
		t.Fatal("approve with a conflicting execution row: got no error, want one")
	}
	assertSignalled(t, "rolled back approve", approvals, false)
	assertSignalled(t, "rolled back approve", executions, false)
	got, err := s.Approval(ctx, a.ID)
	if err != nil {
		t.Fatalf("approval: %v", err)
	}
	if got.Status != approval.StatusPending {
		t.Fatalf("status after rollback: got %s, want pending", got.Status)
	}
}

func TestSubscribe_CoalescesAndUnsubscribes(t *testing.T) {
	t.Parallel()
	s := MustOpen(t, filepath.Join(t.TempDir(), "approvald.db"))
	ctx := context.Background()
	kept := MustSubscribe(t, s, approval.TopicApprovals)
	gone, unsubscribe := s.Subscribe(approval.TopicApprovals)
	unsubscribe()
	unsubscribe() // ending a subscription twice is harmless

	for _, key := range []string{"deploy-1", "deploy-2"} {
		a := MustCreateApproval(t, s, "ci-bot", key)
		if _, err := (&approval.Service{Store: s}).Cancel(ctx, approval.Principal{Subject: "ci-bot", Role: approval.RoleAdmin}, a.ID, approval.Cause{Kind: "request"}); err != nil {
			t.Fatalf("cancel %s: %v", key, err)
		}
	}
	// Two commits the subscriber did not take yet leave one value: a signal says "look again".
	assertSignalled(t, "two cancels", kept, true)
	assertSignalled(t, "two cancels, second receive", kept, false)
	assertSignalled(t, "after unsubscribe", gone, false)
}

func TestSubscribe_Concurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := MustOpen(t, filepath.Join(t.TempDir(), "approvald.db"))

	// Many goroutines subscribe, commit and unsubscribe at once, racing each other's
	// signals (the race detector watches the broadcaster). Each commits while subscribed, so
	// each must find a value waiting whatever the interleaving.
	const n = 32
	start := make(chan struct{})
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ch, unsubscribe := s.Subscribe(approval.TopicInbox)
			defer unsubscribe()
			<-start
			e := &approval.InboxEvent{ID: approval.NewID("inb"), Source: "chat", EventID: fmt.Sprintf("evt-%d", i), Body: []byte(`{}`)}
			if _, err := s.RecordInbox(ctx, e); err != nil {
				errs <- fmt.Errorf("record %s: %w", e.EventID, err)
				return
			}
			select {
			case <-ch:
			default:
				errs <- fmt.Errorf("subscriber %d: no signal after its own commit", i)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// MustSubscribe subscribes to topic until the test ends.
func MustSubscribe(tb testing.TB, s *sqlite.Store, topic string) <-chan struct{} {
	tb.Helper()
	ch, unsubscribe := s.Subscribe(topic)
	tb.Cleanup(unsubscribe)
	return ch
}

// assertSignalled checks, without waiting, whether ch holds a signal. Signals are sent by
// the committing call before it returns, so there is nothing to wait for.
func assertSignalled(tb testing.TB, what string, ch <-chan struct{}, want bool) {
	tb.Helper()
	got := false
	select {
	case _, ok := <-ch:
		if !ok {
			tb.Fatalf("%s: channel closed", what)
		}
		got = true
	default:
	}
	if got != want {
		tb.Fatalf("%s: signalled %v, want %v", what, got, want)
	}
}

// execRaw runs one statement on its own connection, outside the Store.
func execRaw(tb testing.TB, path, query string, args ...any) {
	tb.Helper()
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)")
	if err != nil {
		tb.Fatalf("open %s: %v", path, err)
	}
	defer db.Close()
	if _, err := db.Exec(query, args...); err != nil {
		tb.Fatalf("%s: %v", query, err)
	}
}
