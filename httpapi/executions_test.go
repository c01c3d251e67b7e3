package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/failpoint"
	"github.com/approvald/approval/httpapi"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/internal/wait"
)

// approved creates an approval of action requested by token and approved by alice (whose
// token is aliceToken), and returns it with its execution.
func (f *fixture) approved(token, aliceToken, key, action string) *approval.Approval {
	f.tb.Helper()
	a := f.mustCreate(token, key, actionBody(action, "Approved "+key, "alice"))
	resp := f.do("POST", "/v1/approvals/"+a.ID+"/approve", aliceToken, "")
	if resp.status != http.StatusOK {
		f.tb.Fatalf("approve: got %d %s", resp.status, resp.body)
	}
	return resp.approval(f.tb)
}

// finishAttempt claims the execution id as a runner does and ends the attempt with status.
func (f *fixture) finishAttempt(id string, status approval.ExecutionStatus) {
	f.tb.Helper()
	ctx := context.Background()
	claims, err := f.service().ClaimExecutions(ctx, time.Minute, 10)
	if err != nil {
		f.tb.Fatalf("claim executions: %v", err)
	}
	for _, c := range claims {
		if c.Record.ID != id {
			if err := f.service().ReleaseExecution(ctx, c.Record.ID, c.Attempt); err != nil {
				f.tb.Fatalf("release execution: %v", err)
			}
			continue
		}
		if _, err := f.service().FinishAttempt(ctx, id, c.Attempt, approval.AttemptOutcome{
			Status: status, Error: "target answered 500", Reason: "test",
		}); err != nil {
			f.tb.Fatalf("finish attempt: %v", err)
		}
		return
	}
	f.tb.Fatalf("execution %s was not claimed", id)
}

// execution reads an answer holding an execution record.
func (r *response) execution(tb testing.TB) *approval.ExecutionRecord {
	tb.Helper()
	if r.status != http.StatusOK {
		tb.Fatalf("got %d %s, want 200", r.status, r.body)
	}
	var rec approval.ExecutionRecord
	r.decode(tb, &rec)
	return &rec
}

// conflictWith checks that r is a 409 carrying the execution in status.
func (r *response) conflictWith(tb testing.TB, id string, status approval.ExecutionStatus) {
	tb.Helper()
	r.problem(tb, http.StatusConflict)
	var p struct {
		Execution *approval.ExecutionRecord `json:"execution"`
	}
	r.decode(tb, &p)
	if p.Execution == nil || p.Execution.ID != id || p.Execution.Status != status {
		tb.Fatalf("409 without the execution %s in %s: %s", id, status, r.body)
	}
}

// TestExecutionOperatorActions walks executions through the operator's actions and checks the
// state rules (409 with the execution when the state does not allow the action), the roles
// and the audit trail's cause.
func TestExecutionOperatorActions(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		ci := f.token("ci-bot", approval.RoleRequester)
		alice := f.token("alice", approval.RoleApprover)
		olga := f.token("olga", approval.RoleOperator)
		root := f.token("root", approval.RoleAdmin)

		a := f.approved(ci, alice, "payout-1", targetedAction)
		if a.Execution == nil || a.Execution.Status != approval.ExecutionQueued || a.Execution.ID == "" {
			t.Fatalf("approved payout: execution %+v, want queued", a.Execution)
		}
		id := a.Execution.ID
		path := "/v1/executions/" + id

		for _, tc := range []struct {
			method, path string
		}{
			{"GET", "/v1/executions"}, {"GET", path}, {"POST", path + "/retry"},
			{"POST", path + "/resolve"}, {"POST", path + "/cancel"},
		} {
			f.do(tc.method, tc.path, "", "").problem(t, http.StatusUnauthorized)
			f.do(tc.method, tc.path, ci, "").problem(t, http.StatusForbidden)
			f.do(tc.method, tc.path, alice, "").problem(t, http.StatusForbidden)
		}
		if rec := f.do("GET", path, olga, "").execution(t); rec.Status != approval.ExecutionQueued || rec.ApprovalID != a.ID || rec.Action != targetedAction {
			t.Fatalf("GET: got %+v", rec)
		}
		f.do("GET", "/v1/executions/exe_nope", olga, "").problem(t, http.StatusNotFound)
		f.do("POST", "/v1/executions/exe_nope/cancel", olga, "").problem(t, http.StatusNotFound)

		// Queued: it can be cancelled, not retried or resolved.
		f.do("POST", path+"/retry", olga, "").conflictWith(t, id, approval.ExecutionQueued)
		f.do("POST", path+"/resolve", olga, `{"outcome": "succeeded", "note": "done by hand"}`).conflictWith(t, id, approval.ExecutionQueued)
		if rec := f.do("POST", path+"/cancel", olga, "", "X-Request-Id", "req-cancel-1").execution(t); rec.Status != approval.ExecutionCancelled {
			t.Fatalf("cancel: got %s", rec.Status)
		}
		f.do("POST", path+"/cancel", olga, "").conflictWith(t, id, approval.ExecutionCancelled)

		// Cancelled: retried under the same operation key, no new approval.
		if rec := f.do("POST", path+"/retry", root, "").execution(t); rec.Status != approval.ExecutionQueued || rec.ID != id {
			t.Fatalf("retry: got %+v", rec)
		}
		if n := f.count(); n != 1 {
			t.Fatalf("approvals: got %d, want 1", n)
		}

		// Failed: resolved by an operator with a note.
		f.finishAttempt(id, approval.ExecutionFailed)
		for _, body := range []string{
			``,
			`{"outcome": "succeeded"}`,
			`{"outcome": "succeeded", "note": "  "}`,
			`{"outcome": "running", "note": "x"}`,
			`{"outcome": "succeeded", "note": "x", "extra": 1}`,
			`{"outcome": "succeeded", "note": ` + strings.Repeat(`"`, 1),
		} {
			f.do("POST", path+"/resolve", olga, body).problem(t, http.StatusBadRequest)
		}
		rec := f.do("POST", path+"/resolve", olga, `{"outcome": "succeeded", "note": "the payout is in the bank statement"}`, "X-Request-Id", "req-resolve-1").execution(t)
		if rec.Status != approval.ExecutionSucceeded {
			t.Fatalf("resolve: got %s", rec.Status)
		}
		f.do("POST", path+"/resolve", olga, `{"outcome": "failed", "note": "no"}`).conflictWith(t, id, approval.ExecutionSucceeded)
		f.do("POST", path+"/retry", olga, "").conflictWith(t, id, approval.ExecutionSucceeded)
		f.do("POST", path+"/cancel", olga, "").conflictWith(t, id, approval.ExecutionSucceeded)

		// Needs review: retried by an admin.
		b := f.approved(ci, alice, "payout-2", targetedAction)
		f.finishAttempt(b.Execution.ID, approval.ExecutionNeedsReview)
		if rec := f.do("POST", "/v1/executions/"+b.Execution.ID+"/retry", root, "").execution(t); rec.Status != approval.ExecutionQueued {
			t.Fatalf("retry needs_review: got %s", rec.Status)
		}

		// Every operator action is in the approval's trail, naming the operator and the request.
		var trail struct{ Events []approval.Event }
		f.do("GET", "/v1/approvals/"+a.ID+"/events", olga, "").decode(t, &trail)
		var cancelled, resolved bool
		for _, e := range trail.Events {
			switch e.Type {
			case approval.EventExecutionCancelled:
				cancelled = e.Cause.Kind == approval.CauseOperator && e.Cause.Operator == "olga" && strings.HasPrefix(e.Cause.RequestID, "req_") &&
					e.Cause.ClientRequestID == "req-cancel-1" && e.Actor == "olga"
			case approval.EventExecutionResolved:
				resolved = e.Cause.Kind == approval.CauseOperator && e.Cause.Operator == "olga" && e.Cause.ClientRequestID == "req-resolve-1"
			}
		}
		if !cancelled || !resolved {
			t.Fatalf("trail lacks the operator's cancel or resolve with its cause: %+v", trail.Events)
		}
	})
}

// TestListExecutions: newest first, filtered by status, paged by cursor.
func TestListExecutions(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		ci := f.token("ci-bot", approval.RoleRequester)
		alice := f.token("alice", approval.RoleApprover)
		olga := f.token("olga", approval.RoleOperator)
		var ids []string
		for _, key := range []string{"list-1", "list-2", "list-3"} {
			ids = append(ids, f.approved(ci, alice, key, targetedAction).Execution.ID)
		}
		f.approved(ci, alice, "list-untargeted", "deploy")
		f.finishAttempt(ids[0], approval.ExecutionNeedsReview)

		type page struct {
			Executions []approval.ExecutionRecord `json:"executions"`
			NextCursor string                     `json:"next_cursor"`
		}
		list := func(query string) page {
			t.Helper()
			resp := f.do("GET", "/v1/executions"+query, olga, "")
			if resp.status != http.StatusOK {
				t.Fatalf("GET /v1/executions%s: got %d %s", query, resp.status, resp.body)
			}
			var p page
			resp.decode(t, &p)
			return p
		}
		if p := list("?status=needs_review"); len(p.Executions) != 1 || p.Executions[0].ID != ids[0] {
			t.Fatalf("needs_review: got %+v", p.Executions)
		}
		if p := list("?status=not_configured"); len(p.Executions) != 1 || p.Executions[0].Action != "deploy" {
			t.Fatalf("not_configured: got %+v", p.Executions)
		}
		var seen []string
		for cursor, n := "", 0; n == 0 || cursor != ""; n++ {
			p := list("?limit=3&cursor=" + cursor)
			for _, rec := range p.Executions {
				seen = append(seen, rec.ID)
			}
			cursor = p.NextCursor
		}
		if len(seen) != 4 || !slices.Contains(seen, ids[2]) {
			t.Fatalf("paged: got %v, want all 4", seen)
		}
		f.do("GET", "/v1/executions?status=done", olga, "").problem(t, http.StatusBadRequest)
		f.do("GET", "/v1/executions?limit=500", olga, "").problem(t, http.StatusBadRequest)
	})
}

// reportAnswer is the answer of POST /v1/approvals/{id}/execution.
type reportAnswer struct {
	Applied  bool               `json:"applied"`
	Approval *approval.Approval `json:"approval"`
}

// TestReportExecution: the caller that executes an action without a target reports the
// outcome; versions only move forward (invariant 4); roles, states and bodies are checked.
func TestReportExecution(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		ci := f.token("ci-bot", approval.RoleRequester)
		alice := f.token("alice", approval.RoleApprover)
		olga := f.token("olga", approval.RoleOperator)
		a := f.approved(ci, alice, "report-1", "deploy")
		if a.Execution == nil || a.Execution.Status != approval.ExecutionNotConfigured {
			t.Fatalf("approved deploy: execution %+v, want not_configured", a.Execution)
		}
		path := "/v1/approvals/" + a.ID + "/execution"
		report := func(token, body string) reportAnswer {
			t.Helper()
			resp := f.do("POST", path, token, body, "X-Request-Id", "req-report")
			if resp.status != http.StatusOK {
				t.Fatalf("report %s: got %d %s", body, resp.status, resp.body)
			}
			var got reportAnswer
			resp.decode(t, &got)
			var raw map[string]json.RawMessage
			resp.decode(t, &raw)
			if len(raw) != 2 {
				t.Fatalf("answer has other fields than applied and approval: %s", resp.body)
			}
			return got
		}

		got := report(ci, `{"status": "succeeded", "version": 2, "result": {"deployed": "v2"}}`)
		if !got.Applied || got.Approval.ID != a.ID || got.Approval.Execution.Status != approval.ExecutionSucceeded ||
			string(got.Approval.Execution.Result) != `{"deployed":"v2"}` {
			t.Fatalf("version 2: got applied %v, execution %+v", got.Applied, got.Approval.Execution)
		}
		// An older report arrives late: recorded, not applied; version 2 stays.
		got = report(ci, `{"status": "failed", "version": 1, "result": {"deployed": "v1"}}`)
		if got.Applied || got.Approval.Execution.Status != approval.ExecutionSucceeded || string(got.Approval.Execution.Result) != `{"deployed":"v2"}` {
			t.Fatalf("version 1 after 2: got applied %v, execution %+v", got.Applied, got.Approval.Execution)
		}
		if got = report(ci, `{"status": "failed", "version": 2}`); got.Applied {
			t.Fatal("the same version again was applied")
		}
		if got = report(olga, `{"status": "failed", "version": 3}`); !got.Applied || got.Approval.Execution.Status != approval.ExecutionFailed {
			t.Fatalf("operator's version 3: got applied %v, execution %+v", got.Applied, got.Approval.Execution)
		}

		var trail struct{ Events []approval.Event }
		f.do("GET", "/v1/approvals/"+a.ID+"/events", ci, "").decode(t, &trail)
		var applied, stale int
		for _, e := range trail.Events {
			switch e.Type {
			case approval.EventExecutionReported:
				applied++
			case approval.EventExecutionReportStale:
				stale++
				if e.Cause.Kind != approval.CauseHTTP || e.Cause.ClientRequestID != "req-report" || !strings.HasPrefix(e.Cause.RequestID, "req_") {
					t.Errorf("stale report's cause: got %+v", e.Cause)
				}
			}
		}
		if applied != 2 || stale != 2 {
			t.Fatalf("trail: %d applied and %d stale reports, want 2 and 2", applied, stale)
		}

		// Who may report: the requester, operators and admins; a listed approver may not,
		// and others cannot see the approval at all.
		body := `{"status": "succeeded", "version": 9}`
		f.do("POST", path, alice, body).problem(t, http.StatusForbidden)
		f.do("POST", path, f.token("other-bot", approval.RoleRequester), body).problem(t, http.StatusNotFound)
		f.do("POST", path, "", body).problem(t, http.StatusUnauthorized)
		f.do("POST", "/v1/approvals/apr_nope/execution", olga, body).problem(t, http.StatusNotFound)

		// Only an approved approval has an execution to report on.
		pending := f.mustCreate(ci, "report-pending", createBody("Pending", "alice"))
		p := f.do("POST", "/v1/approvals/"+pending.ID+"/execution", ci, body).problem(t, http.StatusConflict)
		if p.Approval == nil || p.Approval.ID != pending.ID || p.Approval.Status != approval.StatusPending {
			t.Fatalf("409 without the approval: %+v", p)
		}

		for _, bad := range []string{
			``,
			`[]`,
			`{"status": "running", "version": 10}`,
			`{"status": "succeeded"}`,
			`{"status": "succeeded", "version": 0}`,
			`{"status": "succeeded", "version": -1}`,
			`{"status": "succeeded", "version": "10"}`,
			`{"status": "succeeded", "version": 10, "extra": true}`,
			`{"status": "succeeded", "version": 10, "result": {`,
		} {
			f.do("POST", path, ci, bad).problem(t, http.StatusBadRequest)
		}
	})
}

// TestReportExecutionOfATargetedCall: approvald records the outcome of a call it made itself;
// a report cannot overwrite it (409 with the approval), so no operator retry calls the target
// again on the strength of a report.
func TestReportExecutionOfATargetedCall(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		ci := f.token("ci-bot", approval.RoleRequester)
		alice := f.token("alice", approval.RoleApprover)
		a := f.approved(ci, alice, "report-targeted", targetedAction)
		claims, err := f.service().ClaimExecutions(context.Background(), time.Minute, 10)
		if err != nil || len(claims) != 1 {
			t.Fatalf("claim: got %d claims, %v; want 1", len(claims), err)
		}
		if _, err := f.service().FinishAttempt(context.Background(), claims[0].Record.ID, claims[0].Attempt, approval.AttemptOutcome{
			Status: approval.ExecutionSucceeded, Result: []byte(`{"payout": "po_1"}`), Reason: "200 from target",
		}); err != nil {
			t.Fatalf("finish attempt: %v", err)
		}

		p := f.do("POST", "/v1/approvals/"+a.ID+"/execution", ci, `{"status": "failed", "version": 1}`).problem(t, http.StatusConflict)
		if p.Approval == nil || p.Approval.ID != a.ID || p.Approval.Execution == nil ||
			p.Approval.Execution.Status != approval.ExecutionSucceeded || string(p.Approval.Execution.Result) != `{"payout":"po_1"}` {
			t.Fatalf("409: got %+v, want the approval with its execution succeeded and its result kept", p)
		}
		if got := f.do("GET", "/v1/approvals/"+a.ID, ci, "").approval(t); got.Execution.Status != approval.ExecutionSucceeded {
			t.Fatalf("after the refused report: got execution %s, want succeeded", got.Execution.Status)
		}
	})
}

// TestDecideFailpointAfterCommit: approval.after-commit fires after the decision committed
// and before the answer: the client gets an error, the decision stands, and the client's
// retry is answered with it.
func TestDecideFailpointAfterCommit(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		fp, err := failpoint.Parse("approval.after-commit=error@1")
		if err != nil {
			t.Fatal(err)
		}
		f := setup(t, kind, func(c *httpapi.Config) { c.Failpoints = fp })
		ci := f.token("ci-bot", approval.RoleRequester)
		alice := f.token("alice", approval.RoleApprover)
		a := f.mustCreate(ci, "fp-1", createBody("Failpoint", "alice"))

		f.do("POST", "/v1/approvals/"+a.ID+"/approve", alice, "").problem(t, http.StatusInternalServerError)
		if got := f.do("GET", "/v1/approvals/"+a.ID, ci, "").approval(t); got.Status != approval.StatusApproved {
			t.Fatalf("after the failpoint: got %s, want approved (the decision committed)", got.Status)
		}
		resp := f.do("POST", "/v1/approvals/"+a.ID+"/approve", alice, "")
		if resp.status != http.StatusOK || resp.approval(t).Version != 2 {
			t.Fatalf("retry: got %d %s, want 200 with the same decision", resp.status, resp.body)
		}
		if fp.Hits("approval.after-commit") != 2 {
			t.Fatalf("failpoint hits: got %d, want 2", fp.Hits("approval.after-commit"))
		}
		// A refused decision commits nothing and does not reach the point.
		f.do("POST", "/v1/approvals/"+a.ID+"/reject", alice, "").problem(t, http.StatusConflict)
		if fp.Hits("approval.after-commit") != 2 {
			t.Fatalf("failpoint hits after a conflict: got %d, want 2", fp.Hits("approval.after-commit"))
		}
	})
}

// TestStoreGauges: the inbox and execution gauges are read from the store on each scrape.
func TestStoreGauges(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := intakeSetup(t, kind)
		ci := f.token("ci-bot", approval.RoleRequester)
		alice := f.token("alice", approval.RoleApprover)
		f.approved(ci, alice, "gauge-1", targetedAction)
		f.approved(ci, alice, "gauge-2", "deploy")
		// One whose attempt ended in needs_review (the outcome of a call to a target that is
		// not idempotent is unknown): it waits for an operator, held by no lease.
		review := f.approved(ci, alice, "gauge-3", targetedAction)
		f.finishAttempt(review.Execution.ID, approval.ExecutionNeedsReview)
		f.deliver("chat", signStandard(t, chatNewSecret, "msg_gauge", f.clock.Now(), decisionBody), decisionBody).accepted(t)

		scrape := func(want ...string) {
			t.Helper()
			metrics := string(f.do("GET", "/metrics", "", "").body)
			for _, w := range want {
				if !strings.Contains(metrics, w+"\n") {
					t.Errorf("/metrics lacks %s", w)
				}
			}
		}
		scrape(
			`approvald_executions{status="queued"} 1`,
			`approvald_executions{status="not_configured"} 1`,
			`approvald_executions{status="needs_review"} 1`,
			`approvald_executions_stuck 0`,
			`approvald_inbox_events{status="pending"} 1`,
			`approvald_inbox_events{status="failed"} 0`,
			`approvald_approvals{status="approved"} 3`,
			`approvald_http_long_polls 0`,
		)
		// A runner claims the execution and dies: past its lease it is stuck.
		if _, err := f.service().ClaimExecutions(context.Background(), time.Minute, 10); err != nil {
			t.Fatal(err)
		}
		f.clock.Advance(2 * time.Minute)
		// needs_review is not stuck: no lease runs on it, it waits for a person.
		scrape(
			`approvald_executions{status="running"} 1`,
			`approvald_executions{status="queued"} 0`,
			`approvald_executions{status="needs_review"} 1`,
			`approvald_executions_stuck 1`,
		)
	})
}

// TestStoreGaugesRunCounts: with RunCounts running, a scrape reads the backlog (pending
// approvals, queued executions, the stuck) at once and serves the other statuses from
// RunCounts' last read, whose age it reports; each new read, and a scrape without RunCounts,
// brings them to the database's counts.
func TestStoreGaugesRunCounts(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		// An interval no test outlasts: the reads seen are RunCounts' first, at its start.
		f := setup(t, kind, func(c *httpapi.Config) { c.CountsInterval = time.Hour })
		ci := f.token("ci-bot", approval.RoleRequester)
		alice := f.token("alice", approval.RoleApprover)
		f.approved(ci, alice, "run-1", targetedAction)
		f.mustCreate(ci, "run-2", createBody("Waiting", "alice"))

		scrape := func(want ...string) string {
			t.Helper()
			metrics := string(f.do("GET", "/metrics", "", "").body)
			for _, w := range want {
				if !strings.Contains(metrics, w+"\n") {
					t.Errorf("/metrics lacks %s", w)
				}
			}
			return metrics
		}
		// runCounts starts RunCounts and waits for its first read: the scrapes report an age.
		runCounts := func() (stop func()) {
			t.Helper()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- f.api.RunCounts(ctx) }()
			stop = func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("RunCounts: %v", err)
				}
			}
			wait.Until(t, "the first count", func() bool { return !strings.Contains(scrape(), "approvald_counts_age_seconds 0\n") })
			return stop
		}
		stop := runCounts()
		scrape(
			`approvald_approvals{status="pending"} 1`,
			`approvald_approvals{status="approved"} 1`,
			`approvald_executions{status="queued"} 1`,
			`approvald_executions{status="not_configured"} 0`,
		)

		// Two more approved (one targeted, one not) and two more waiting: the backlog moves at
		// once, the totals stay those of RunCounts' read until its next.
		f.approved(ci, alice, "run-3", targetedAction)
		f.approved(ci, alice, "run-4", "deploy")
		f.mustCreate(ci, "run-5", createBody("Waiting too", "alice"))
		f.mustCreate(ci, "run-6", createBody("Waiting three", "alice"))
		scrape(
			`approvald_approvals{status="pending"} 3`,
			`approvald_approvals{status="approved"} 1`,
			`approvald_executions{status="queued"} 2`,
			`approvald_executions{status="not_configured"} 0`,
		)
		stop()

		// Without RunCounts a scrape reads everything itself.
		scrape(
			`approvald_approvals{status="pending"} 3`,
			`approvald_approvals{status="approved"} 3`,
			`approvald_executions{status="not_configured"} 1`,
			`approvald_counts_age_seconds 0`,
		)
		// A new RunCounts' read has them too.
		stop = runCounts()
		defer stop()
		scrape(
			`approvald_approvals{status="pending"} 3`,
			`approvald_approvals{status="approved"} 3`,
			`approvald_executions{status="queued"} 2`,
			`approvald_executions{status="not_configured"} 1`,
		)
	})
}
