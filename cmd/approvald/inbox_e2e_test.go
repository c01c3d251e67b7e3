package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/webhook"
)

// chatSecret is the Standard Webhooks secret of the "chat" source in the inbox tests.
const chatSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// A chat button's signed approval.decision webhook approves an approval through the real
// binary: the delivery is acknowledged once stored, its 20 redeliveries are acknowledged as
// duplicates, the inbox processor applies it once, and the audit trail names the event.
func TestInbox_DecisionWebhook(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		dsn := testdb.DSN(t, kind)
		requester := createToken(t, dsn, "ci-bot", "requester")
		operator := createToken(t, dsn, "ops", "operator")
		srv := startServeWith(t, dsn, serveOptions{config: fmt.Sprintf(`
workers: {lease: 2s, poll: 100ms}
sources:
  - name: chat
    scheme: standard-webhooks
    secrets: [%q]
    handlers: [approval.decision]
`, chatSecret)})

		created := srv.do(t, "POST", "/v1/approvals", requester, "deploy-prod-1042",
			`{"action": "deploy", "title": "Deploy api v1.42 to prod", "approvers": ["alice", "bob"]}`)
		created.wantStatus(t, http.StatusCreated)
		var a approvalView
		created.decode(t, &a)

		body := fmt.Appendf(nil, `{"type": "approval.decision", "timestamp": %q, "data": {"approval_id": %q, "approver": "alice", "verdict": "approve", "comment": "from chat"}}`,
			time.Now().UTC().Format(time.RFC3339), a.ID)
		deliver := func() (response, error) {
			// Each redelivery is signed afresh, as providers do.
			h, err := webhook.SignStandard(chatSecret, "msg_2mQ7kTqY", time.Now(), body)
			if err != nil {
				return response{}, err
			}
			return srv.try("POST", "/v1/inbox/chat", "", "", string(body), h)
		}
		type ack struct {
			ID        string `json:"id"`
			Duplicate bool   `json:"duplicate"`
		}
		first, err := deliver()
		if err != nil {
			t.Fatalf("deliver: %v", err)
		}
		first.wantStatus(t, http.StatusOK)
		var firstAck ack
		first.decode(t, &firstAck)
		if firstAck.Duplicate {
			t.Fatalf("first delivery: got duplicate, want stored")
		}

		// 20 redeliveries at once, released together.
		const redeliveries = 20
		start := make(chan struct{})
		answers := make(chan response, redeliveries)
		errs := make(chan error, redeliveries)
		var wg sync.WaitGroup
		for range redeliveries {
			wg.Go(func() {
				<-start
				r, err := deliver()
				if err != nil {
					errs <- err
					return
				}
				answers <- r
			})
		}
		close(start)
		wg.Wait()
		close(answers)
		close(errs)
		for err := range errs {
			t.Errorf("redelivery: %v", err)
		}
		for r := range answers {
			var got ack
			if r.status != http.StatusOK || json.Unmarshal(r.body, &got) != nil || !got.Duplicate {
				t.Errorf("redelivery: got %d %s, want 200 with duplicate true", r.status, r.body)
			}
		}

		a = waitApproval(t, srv, requester, a.ID, func(a approvalView) bool { return a.Status == "approved" })
		if len(a.Decisions) != 1 || a.Decisions[0].Approver != "alice" || a.Decisions[0].Comment != "from chat" {
			t.Errorf("decisions: got %+v, want alice's one vote from chat", a.Decisions)
		}
		if a.Execution == nil || a.Execution.Status != "not_configured" {
			t.Errorf("execution: got %+v, want not_configured (deploy has no target)", a.Execution)
		}

		var trail struct {
			Events []struct {
				Type  string `json:"type"`
				Actor string `json:"actor"`
				Cause struct {
					Kind    string `json:"kind"`
					Source  string `json:"source"`
					EventID string `json:"event_id"`
				} `json:"cause"`
			} `json:"events"`
		}
		srv.do(t, "GET", "/v1/approvals/"+a.ID+"/events", requester, "", "").decode(t, &trail)
		votes := 0
		for _, e := range trail.Events {
			if e.Type != "approval.voted" {
				continue
			}
			votes++
			if e.Actor != "alice" || e.Cause.Kind != "inbox" || e.Cause.Source != "chat" || e.Cause.EventID != "msg_2mQ7kTqY" {
				t.Errorf("vote event: got %+v, want alice with cause inbox chat msg_2mQ7kTqY", e)
			}
		}
		if votes != 1 {
			t.Errorf("got %d approval.voted events, want 1", votes)
		}

		var inbox struct {
			Events []struct {
				ID      string `json:"id"`
				Source  string `json:"source"`
				EventID string `json:"event_id"`
				Type    string `json:"type"`
				Status  string `json:"status"`
			} `json:"events"`
		}
		list := srv.do(t, "GET", "/v1/inbox", operator, "", "")
		list.wantStatus(t, http.StatusOK)
		list.decode(t, &inbox)
		if len(inbox.Events) != 1 {
			t.Fatalf("GET /v1/inbox: got %d events, want 1: %s", len(inbox.Events), list.body)
		}
		if e := inbox.Events[0]; e.ID != firstAck.ID || e.Source != "chat" || e.EventID != "msg_2mQ7kTqY" ||
			e.Type != "approval.decision" || e.Status != "processed" {
			t.Errorf("inbox event: got %+v, want %s from chat, msg_2mQ7kTqY, approval.decision, processed", e, firstAck.ID)
		}
		srv.do(t, "GET", "/v1/inbox", requester, "", "").wantStatus(t, http.StatusForbidden)

		srv.stop(t)
	})
}

// approvalView is the part of the approval JSON the end-to-end tests read.
type approvalView struct {
	ID           string `json:"id"`
	OperationKey string `json:"operation_key"`
	Status       string `json:"status"`
	Version      int64  `json:"version"`
	Decisions    []struct {
		Approver string `json:"approver"`
		Verdict  string `json:"verdict"`
		Comment  string `json:"comment"`
	} `json:"decisions"`
	Execution *executionView `json:"execution"`
}

// executionView is the execution as the approval shows it, or as /v1/executions lists it.
type executionView struct {
	ID        string          `json:"id"`
	Status    string          `json:"status"`
	Attempts  int             `json:"attempts"`
	LastError string          `json:"last_error"`
	Result    json.RawMessage `json:"result"`
}

// waitTimeout bounds a wait for the workers to reach a state; a passing test waits only as
// long as the work takes.
const waitTimeout = 30 * time.Second

// waitApproval reads the approval until done accepts it, and returns it; it fails the test at
// waitTimeout. It polls: the workers' progress is not announced to a client.
func waitApproval(t *testing.T, srv *server, token, id string, done func(approvalView) bool) approvalView {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		var a approvalView
		srv.do(t, "GET", "/v1/approvals/"+id, token, "", "").decode(t, &a)
		if done(a) {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("approval %s: still %+v (execution %+v) after %s\nstderr:\n%s", id, a, a.Execution, waitTimeout, srv.stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
