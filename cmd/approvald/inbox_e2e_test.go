package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/internal/wait"
	"github.com/approvald/approval/webhook"
)

// chatSecret is the Standard Webhooks secret of the "chat" source in the inbox tests.
const chatSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// A chat button's signed approval.decision webhook approves an approval through the real
// binary. The same event delivered 50 times concurrently gives one row, one effect and 50
// answers of 200: one acknowledges it as stored and 49 as duplicates of that row, the inbox
// processor applies it once (one vote, one approval.voted event), and the audit trail names
// the event.
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
		type ack struct {
			ID        string `json:"id"`
			Duplicate bool   `json:"duplicate"`
		}
		// The same event delivered 50 times at once, as a provider retrying in a hurry or
		// several of its senders might: each delivery is signed afresh, as providers do, before
		// the barrier, so that the racers only send. The store keeps one row: one answer
		// stores it, the other 49 are acknowledged as duplicates naming that row.
		const deliveries = 50
		headers := make([]http.Header, deliveries)
		for i := range headers {
			h, err := webhook.SignStandard(chatSecret, "msg_2mQ7kTqY", time.Now(), body)
			if err != nil {
				t.Fatalf("sign: %v", err)
			}
			headers[i] = h
		}
		answers := make([]response, deliveries)
		errs := make([]error, deliveries)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range deliveries {
			wg.Go(func() {
				<-start
				answers[i], errs[i] = srv.try("POST", "/v1/inbox/chat", "", "", string(body), headers[i])
			})
		}
		close(start)
		wg.Wait()
		var stored ack
		var originals int
		acks := make([]ack, 0, deliveries)
		for i, r := range answers {
			if errs[i] != nil {
				t.Fatalf("delivery %d: %v", i, errs[i])
			}
			var got ack
			if r.status != http.StatusOK || json.Unmarshal(r.body, &got) != nil || got.ID == "" {
				t.Fatalf("delivery %d: got %d %s, want 200 with the event's id", i, r.status, r.body)
			}
			if !got.Duplicate {
				originals++
				stored = got
			}
			acks = append(acks, got)
		}
		if originals != 1 {
			t.Fatalf("got %d deliveries acknowledged as stored (duplicate false), want 1 of %d", originals, deliveries)
		}
		for i, got := range acks {
			if got.ID != stored.ID {
				t.Errorf("delivery %d: acknowledged as %s, want the stored event %s", i, got.ID, stored.ID)
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
				ID        string `json:"id"`
				Source    string `json:"source"`
				EventID   string `json:"event_id"`
				Type      string `json:"type"`
				Status    string `json:"status"`
				Conflicts int    `json:"conflicts"`
			} `json:"events"`
		}
		list := srv.do(t, "GET", "/v1/inbox", operator, "", "")
		list.wantStatus(t, http.StatusOK)
		list.decode(t, &inbox)
		if len(inbox.Events) != 1 {
			t.Fatalf("GET /v1/inbox: got %d events, want 1: %s", len(inbox.Events), list.body)
		}
		if e := inbox.Events[0]; e.ID != stored.ID || e.Source != "chat" || e.EventID != "msg_2mQ7kTqY" ||
			e.Type != "approval.decision" || e.Status != "processed" || e.Conflicts != 0 {
			t.Errorf("inbox event: got %+v, want %s from chat, msg_2mQ7kTqY, approval.decision, processed, no conflicts", e, stored.ID)
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

// waitApproval reads the approval until done accepts it, and returns it. It polls (wait.For):
// the workers' progress is not announced to a client.
func waitApproval(t *testing.T, srv *server, token, id string, done func(approvalView) bool) approvalView {
	t.Helper()
	var a approvalView
	wait.For(t, "approval "+id, func() error {
		a = approvalView{}
		srv.do(t, "GET", "/v1/approvals/"+id, token, "", "").decode(t, &a)
		if !done(a) {
			return fmt.Errorf("still %+v (execution %+v)\nstderr:\n%s", a, a.Execution, srv.stderr)
		}
		return nil
	})
	return a
}
