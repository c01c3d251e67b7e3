package client_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/approvald/approval/client"
	"github.com/approvald/approval/internal/testdb"
)

// WaitForDecision returns when another caller's vote decides the approval, reporting every
// change on the way; the trail, the report of the outcome and a second cancel follow.
func TestWaitApproveReport(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		f := setup(t, kind)
		ctx := context.Background()
		req := deployRequest("Deploy api v1.42")
		req.RequiredApprovals = 2
		res, err := f.client("ci-bot").CreateApproval(ctx, "deploy-1", req)
		if err != nil {
			t.Fatal(err)
		}
		id := res.Approval.ID

		var mu sync.Mutex
		var seen []*client.Approval
		first := make(chan struct{})
		done := make(chan *client.Approval, 1)
		go func() {
			a, err := f.client("ci-bot").WaitForDecision(ctx, id, func(a *client.Approval) {
				mu.Lock()
				seen = append(seen, a)
				n := len(seen)
				mu.Unlock()
				if n == 1 {
					close(first)
				}
			})
			if err != nil {
				t.Errorf("wait: %v", err)
			}
			done <- a
		}()
		<-first
		if _, err := f.client("alice").Approve(ctx, id, "looks good"); err != nil {
			t.Fatal(err)
		}
		// A repeat of the same vote changes nothing and is not an error: why votes are retried.
		if a, err := f.client("alice").Approve(ctx, id, "looks good"); err != nil || a.Status != client.StatusPending {
			t.Fatalf("repeat vote: got %v, %v, want the pending approval", a, err)
		}
		if _, err := f.client("bob").Approve(ctx, id, ""); err != nil {
			t.Fatal(err)
		}
		a := <-done
		if a == nil || a.Status != client.StatusApproved || len(a.Decisions) != 2 || a.Execution == nil || a.Execution.Status != "not_configured" {
			t.Fatalf("got %+v, want approved by two with a not_configured execution", a)
		}
		mu.Lock()
		if len(seen) < 2 || seen[0].Version != 1 || seen[len(seen)-1].Status != client.StatusApproved {
			t.Errorf("got %d changes reported, want the first read and the decision at least", len(seen))
		}
		mu.Unlock()

		// The caller carries the action out and reports it; a repeat is stale.
		rep := client.Report{Status: "succeeded", Version: 1, Result: []byte(`{"deploy_id":"d-77"}`)}
		r, err := f.client("ci-bot").ReportExecution(ctx, id, rep)
		if err != nil || !r.Applied || r.Approval.Execution.Status != "succeeded" {
			t.Fatalf("report: got %+v, %v, want applied", r, err)
		}
		if r, err := f.client("ci-bot").ReportExecution(ctx, id, rep); err != nil || r.Applied {
			t.Fatalf("repeat report: got %+v, %v, want not applied", r, err)
		}

		events, err := f.client("ci-bot").Events(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var types []string
		for _, e := range events {
			types = append(types, e.Type)
		}
		want := []string{"approval.created", "approval.voted", "approval.voted", "approval.approved", "execution.reported", "execution.report_stale"}
		if len(types) != len(want) {
			t.Fatalf("got events %v, want %v", types, want)
		}
		for i := range want {
			if types[i] != want[i] {
				t.Fatalf("got events %v, want %v", types, want)
			}
		}

		// A decided approval cannot be cancelled: 409 with the approval as it is.
		_, err = f.client("ci-bot").Cancel(ctx, id)
		var e *client.Error
		if !errors.As(err, &e) || e.Status != http.StatusConflict || e.Approval == nil || e.Approval.Status != client.StatusApproved {
			t.Errorf("got %v, want 409 with the approved approval", err)
		}
	})
}

// A cancel whose answer is lost is sent again; the repeat finds the approval cancelled and
// Cancel reports the success the first attempt had.
func TestCancelAnswerLost(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		f := setup(t, kind)
		a := f.mustCreate("k", "t")
		route := "POST /v1/approvals/" + a.ID + "/cancel"
		f.proxy.plan(route, forwardThenDrop)
		got, err := f.client("ci-bot").Cancel(context.Background(), a.ID)
		if err != nil || got.Status != client.StatusCancelled {
			t.Fatalf("got %+v, %v, want the cancelled approval", got, err)
		}
		if n := f.proxy.count(route); n != 2 {
			t.Errorf("got %d cancels at the proxy, want 2", n)
		}
	})
}

// WaitForDecision ends with the context; List pages through every approval, newest first.
func TestWaitTimesOutAndListPages(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		f := setup(t, kind)
		var ids []string
		for _, key := range []string{"a", "b", "c", "d", "e"} {
			ids = append(ids, f.mustCreate(key, "title "+key).ID)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		if _, err := f.client("ci-bot").WaitForDecision(ctx, ids[0], nil); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("got %v, want context.DeadlineExceeded", err)
		}

		var got []string
		for a, err := range f.client("ci-bot").List(context.Background(), client.ListOptions{Status: client.StatusPending, Limit: 2}) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, a.ID)
		}
		if len(got) != 5 || got[0] != ids[4] || got[4] != ids[0] {
			t.Errorf("got %v, want %v newest first", got, ids)
		}
		if n := f.proxy.count("GET /v1/approvals"); n != 3 {
			t.Errorf("got %d pages, want 3", n)
		}
		// Stopping early fetches no more pages.
		for range f.client("ci-bot").List(context.Background(), client.ListOptions{Limit: 2}) {
			break
		}
		if n := f.proxy.count("GET /v1/approvals"); n != 4 {
			t.Errorf("got %d pages, want 4", n)
		}
	})
}

// The operator calls see the execution of an approved action; an action refused by the
// state is a 409 carrying the execution.
func TestOperatorCalls(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		f := setup(t, kind)
		ctx := context.Background()
		a := f.mustCreate("k", "t")
		if _, err := f.client("alice").Approve(ctx, a.ID, ""); err != nil {
			t.Fatal(err)
		}
		var execs []*client.ExecutionRecord
		for e, err := range f.client("ops").ListExecutions(ctx, client.ExecutionListOptions{Status: "not_configured"}) {
			if err != nil {
				t.Fatal(err)
			}
			execs = append(execs, e)
		}
		if len(execs) != 1 || execs[0].ApprovalID != a.ID || execs[0].OperationKey != "k" {
			t.Fatalf("got %+v, want the one execution of %s", execs, a.ID)
		}
		e, err := f.client("ops").GetExecution(ctx, execs[0].ID)
		if err != nil || e.ID != execs[0].ID {
			t.Fatalf("get execution: %+v, %v", e, err)
		}
		_, err = f.client("ops").CancelExecution(ctx, e.ID)
		var pe *client.Error
		if !errors.As(err, &pe) || pe.Status != http.StatusConflict || pe.Execution == nil || pe.Execution.ID != e.ID {
			t.Errorf("cancel a not_configured execution: got %v, want 409 with the execution", err)
		}
		if _, err := f.client("ops").ResolveExecution(ctx, e.ID, "succeeded", ""); !errors.As(err, &pe) || pe.Status != http.StatusBadRequest && pe.Status != http.StatusConflict {
			t.Errorf("resolve without a note: got %v, want a 4xx problem", err)
		}
		if _, err := f.client("ci-bot").GetExecution(ctx, e.ID); !errors.As(err, &pe) || pe.Status != http.StatusForbidden {
			t.Errorf("a requester reading executions: got %v, want 403", err)
		}
	})
}
