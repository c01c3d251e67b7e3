package client_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/approvald/approval/client"
	"github.com/approvald/approval/internal/testdb"
)

const createRoute = "POST /v1/approvals"

// A create whose answer is lost after the server acted is sent again under the same key, and
// the retry is answered with the replay of the first: one approval.
func TestCreateAnswerLost(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		f := setup(t, kind)
		f.proxy.plan(createRoute, forwardThenDrop)

		res, err := f.client("ci-bot").CreateApproval(context.Background(), "deploy-prod-1042", deployRequest("Deploy api v1.42"))
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		if got := f.proxy.count(createRoute); got != 2 {
			t.Errorf("got %d create requests at the proxy, want 2", got)
		}
		if !res.Replayed {
			t.Errorf("got Replayed false, want true: the retry must be answered with the first request's response")
		}
		got := f.approvalsWithKey("deploy-prod-1042")
		if len(got) != 1 {
			t.Fatalf("got %d approvals with the key, want 1", len(got))
		}
		if got[0].ID != res.Approval.ID {
			t.Errorf("got approval %s listed, want %s", got[0].ID, res.Approval.ID)
		}
		a, err := f.client("ci-bot").Get(context.Background(), res.Approval.ID)
		if err != nil {
			t.Fatalf("get: %v", err)
		}
		if a.Status != client.StatusPending || a.Title != "Deploy api v1.42" || string(a.Context) != `{"commit":"9f2c1e"}` {
			t.Errorf("got %+v, want the pending approval as created", a)
		}

		// A later run of the pipeline finds the same approval, as a replay.
		again, err := f.client("ci-bot").CreateApproval(context.Background(), "deploy-prod-1042", deployRequest("Deploy api v1.42"))
		if err != nil {
			t.Fatalf("create again: %v", err)
		}
		if !again.Replayed || again.Approval.ID != res.Approval.ID || again.Attempts != 1 {
			t.Errorf("got %+v, want a replay of %s in one attempt", again, res.Approval.ID)
		}
	})
}

// 429 and 503 answers are waited out for as long as their Retry-After says, whole seconds or
// an HTTP-date.
func TestCreateWaitsOutRetryAfter(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		f := setup(t, kind)
		f.proxy.plan(createRoute, answer429, answer503Date)

		start := time.Now()
		res, err := f.client("ci-bot").CreateApproval(context.Background(), "refund-9281", deployRequest("Refund order 9281"))
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		elapsed := time.Since(start)
		// 1 s for the 429; the HTTP-date is 2 s ahead at whole-second resolution, so at
		// least 1 s more.
		if elapsed < 2*time.Second {
			t.Errorf("got the answer after %s, want at least 2s: the Retry-After waits were not honoured", elapsed)
		}
		if res.Attempts != 3 || f.proxy.count(createRoute) != 3 {
			t.Errorf("got %d attempts, %d requests at the proxy, want 3 and 3", res.Attempts, f.proxy.count(createRoute))
		}
		if res.Replayed {
			t.Errorf("got Replayed true, want false: the server saw the request once")
		}
		if n := len(f.approvalsWithKey("refund-9281")); n != 1 {
			t.Errorf("got %d approvals, want 1", n)
		}
	})
}

// A Retry-After that would end after the context's deadline is not waited for.
func TestRetryAfterBeyondDeadline(t *testing.T) {
	f := setup(t, testdb.SQLite)
	f.proxy.plan(createRoute, answer503Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	start := time.Now()
	_, err := f.client("ci-bot").CreateApproval(ctx, "k-1", deployRequest("t"))
	var e *client.Error
	if !errors.As(err, &e) || e.Status != http.StatusServiceUnavailable {
		t.Fatalf("got %v, want the 503 as *client.Error", err)
	}
	if e.RetryAfter != time.Hour {
		t.Errorf("got RetryAfter %s, want 1h", e.RetryAfter)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("returned after %s, want at once", d)
	}
	if n := f.proxy.count(createRoute); n != 1 {
		t.Errorf("got %d requests, want 1", n)
	}
}

// A different request under a used key is a 422 problem, returned at once as *client.Error.
func TestCreateMismatchIsFinal(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		f := setup(t, kind)
		f.mustCreate("deploy-prod-1042", "Deploy api v1.42")
		before := f.proxy.count(createRoute)

		_, err := f.client("ci-bot").CreateApproval(context.Background(), "deploy-prod-1042", deployRequest("Deploy api v1.43"))
		var e *client.Error
		if !errors.As(err, &e) {
			t.Fatalf("got %v, want *client.Error", err)
		}
		if e.Status != http.StatusUnprocessableEntity || e.Code() != client.CodeMismatch ||
			e.Type != "https://approvald.dev/problems/mismatch" || e.Title != "Idempotency key reused" || e.Detail == "" {
			t.Errorf("got %+v, want the 422 mismatch problem", e)
		}
		if e.RequestID == "" || e.Extensions["request_id"] == nil {
			t.Errorf("got request id %q, extensions %v, want the request_id member", e.RequestID, e.Extensions)
		}
		if n := f.proxy.count(createRoute) - before; n != 1 {
			t.Errorf("got %d requests for the mismatched create, want 1 (no retry)", n)
		}
		if n := len(f.approvalsWithKey("deploy-prod-1042")); n != 1 {
			t.Errorf("got %d approvals, want 1", n)
		}
	})
}

// Final statuses are not retried; a 500 on an operator POST is not retried either, since the
// server may have acted.
func TestFinalAnswersAreNotRetried(t *testing.T) {
	f := setup(t, testdb.SQLite)
	ctx := context.Background()

	_, err := f.client("alice").CreateApproval(ctx, "k", deployRequest("t")) // approvers may not create
	var e *client.Error
	if !errors.As(err, &e) || e.Status != http.StatusForbidden || e.Code() != client.CodeForbidden {
		t.Errorf("got %v, want 403 forbidden", err)
	}
	bad, err := client.New(f.proxy.URL(), "apv_unknown")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.Get(ctx, "apr_x"); !errors.As(err, &e) || e.Status != http.StatusUnauthorized {
		t.Errorf("got %v, want 401", err)
	}
	if _, err := f.client("ci-bot").Get(ctx, "apr_missing"); !errors.As(err, &e) || e.Status != http.StatusNotFound {
		t.Errorf("got %v, want 404", err)
	}
	if _, err := f.client("ci-bot").CreateApproval(ctx, "k", client.CreateRequest{Action: "deploy"}); !errors.As(err, &e) || e.Status != http.StatusBadRequest {
		t.Errorf("got %v, want 400", err)
	}
	if n := f.proxy.count(createRoute); n != 2 {
		t.Errorf("got %d creates at the proxy, want 2", n)
	}
	if n := f.proxy.count("GET /v1/approvals/apr_missing"); n != 1 {
		t.Errorf("got %d gets of the missing approval, want 1", n)
	}

	f.proxy.plan("POST /v1/executions/exe_x/retry", answer500)
	if _, err := f.client("ops").RetryExecution(ctx, "exe_x"); !errors.As(err, &e) || e.Status != http.StatusInternalServerError {
		t.Errorf("got %v, want the 500", err)
	}
	if n := f.proxy.count("POST /v1/executions/exe_x/retry"); n != 1 {
		t.Errorf("got %d execution retries at the proxy, want 1", n)
	}
	// A read is retried after a 500.
	a := f.mustCreate("k2", "t2")
	f.proxy.plan("GET /v1/approvals/"+a.ID, answer500, answer500)
	if _, err := f.client("ci-bot").Get(ctx, a.ID); err != nil {
		t.Errorf("get after two 500s: %v", err)
	}
	if n := f.proxy.count("GET /v1/approvals/" + a.ID); n != 3 {
		t.Errorf("got %d gets, want 3", n)
	}
}
