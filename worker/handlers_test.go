package worker_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/approvald/approval"
	"github.com/approvald/approval/worker"
)

var allHandlers = []string{approval.TypeApprovalDecision, approval.TypeExecutionResult}

func TestHandle_Decision(t *testing.T) {
	t.Parallel()
	want := &approval.DecideRequest{
		ApprovalID: "apr_1",
		Approver:   "alice",
		Verdict:    approval.VerdictApprove,
		Comment:    "ship it",
		Cause:      approval.Cause{Kind: approval.CauseInbox, Source: "chat", EventID: "msg_1"},
	}
	data := `{"approval_id": "apr_1", "approver": "alice", "verdict": "approve", "comment": "ship it"}`
	// The same data in each scheme's place: under "data" (Standard Webhooks), under
	// "data.object" (Stripe), and as the whole body (GitHub, whose type is a header).
	for name, body := range map[string]string{
		"standard-webhooks": `{"type": "approval.decision", "timestamp": "2030-01-02T03:04:05Z", "data": ` + data + `}`,
		"stripe":            `{"id": "evt_1", "object": "event", "type": "approval.decision", "data": {"object": ` + data + `}}`,
		"github":            data,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := worker.Handle(inboxEvent(approval.TypeApprovalDecision, body), allHandlers)
			if got.Kind != approval.ActionDecide {
				t.Fatalf("got kind %d (reason %q), want ActionDecide", got.Kind, got.Reason)
			}
			if !reflect.DeepEqual(got.Decide, want) {
				t.Errorf("got decide request %+v, want %+v", got.Decide, want)
			}
		})
	}

	t.Run("by operation key", func(t *testing.T) {
		t.Parallel()
		got := worker.Handle(inboxEvent(approval.TypeApprovalDecision,
			`{"data": {"operation_key": "deploy-prod-1042", "approver": "bob", "verdict": "reject"}}`), allHandlers)
		if got.Kind != approval.ActionDecide {
			t.Fatalf("got kind %d (reason %q), want ActionDecide", got.Kind, got.Reason)
		}
		if got.Decide.OperationKey != "deploy-prod-1042" || got.Decide.ApprovalID != "" || got.Decide.Verdict != approval.VerdictReject {
			t.Errorf("got decide request %+v, want operation key deploy-prod-1042, no approval id, verdict reject", got.Decide)
		}
	})
}

func TestHandle_ExecutionResult(t *testing.T) {
	t.Parallel()
	body := `{"type": "execution.result", "data": {"operation_key": "refund-9281", "status": "succeeded", "version": 3, "result": {"refund": "re_1"}}}`
	got := worker.Handle(inboxEvent(approval.TypeExecutionResult, body), allHandlers)
	if got.Kind != approval.ActionExecutionResult {
		t.Fatalf("got kind %d (reason %q), want ActionExecutionResult", got.Kind, got.Reason)
	}
	want := &approval.ExecutionReport{
		OperationKey: "refund-9281",
		Status:       approval.ExecutionSucceeded,
		Version:      3,
		Result:       json.RawMessage(`{"refund": "re_1"}`),
		Actor:        "source:chat",
		Cause:        approval.Cause{Kind: approval.CauseInbox, Source: "chat", EventID: "msg_1"},
	}
	if !reflect.DeepEqual(got.Report, want) {
		t.Errorf("got report %+v, want %+v", got.Report, want)
	}
}

// Whatever cannot be acted on is ignored with a reason, never retried: a second try of the
// same bytes would fail the same way.
func TestHandle_Ignored(t *testing.T) {
	t.Parallel()
	decision := func(data string) string { return `{"type": "approval.decision", "data": ` + data + `}` }
	result := func(data string) string { return `{"type": "execution.result", "data": ` + data + `}` }
	tests := []struct {
		name       string
		typ        string
		body       string
		allowed    []string
		wantReason string
	}{
		{"unknown type", "invoice.paid", `{"data": {}}`, allHandlers, `unknown event type "invoice.paid"`},
		{"no type", "", `{"data": {}}`, allHandlers, "no type"},
		{"handler not allowed", approval.TypeApprovalDecision,
			decision(`{"approval_id": "apr_1", "approver": "alice", "verdict": "approve"}`),
			[]string{approval.TypeExecutionResult}, `may not trigger the approval.decision handler`},
		{"source without handlers", approval.TypeExecutionResult,
			result(`{"operation_key": "k", "status": "succeeded", "version": 1}`), nil, "may not trigger"},
		{"empty body", approval.TypeApprovalDecision, ``, allHandlers, "empty"},
		{"body not JSON", approval.TypeApprovalDecision, `approve please`, allHandlers, "not a JSON object"},
		{"data not an object", approval.TypeApprovalDecision, `{"data": "approve"}`, allHandlers, `"data" is not a JSON object`},
		{"decision without approval", approval.TypeApprovalDecision,
			decision(`{"approver": "alice", "verdict": "approve"}`), allHandlers, "approval_id or operation_key is required"},
		{"decision naming the approval twice", approval.TypeApprovalDecision,
			decision(`{"approval_id": "apr_1", "operation_key": "k", "approver": "alice", "verdict": "approve"}`), allHandlers, "both set"},
		{"decision without approver", approval.TypeApprovalDecision,
			decision(`{"approval_id": "apr_1", "verdict": "approve"}`), allHandlers, "approver is required"},
		{"decision with a bad verdict", approval.TypeApprovalDecision,
			decision(`{"approval_id": "apr_1", "approver": "alice", "verdict": "maybe"}`), allHandlers, `verdict "maybe"`},
		{"decision field of the wrong type", approval.TypeApprovalDecision,
			decision(`{"approval_id": 7, "approver": "alice", "verdict": "approve"}`), allHandlers, "decode"},
		{"decision with a NUL in its comment", approval.TypeApprovalDecision,
			decision(`{"approval_id": "apr_1", "approver": "alice", "verdict": "approve", "comment": "a\u0000b"}`), allHandlers, "comment contains a NUL character"},
		{"decision with a NUL in its approver", approval.TypeApprovalDecision,
			decision(`{"operation_key": "k", "approver": "alice\u0000", "verdict": "approve"}`), allHandlers, "approver contains a NUL character"},
		{"result with a NUL in its key", approval.TypeExecutionResult,
			result(`{"operation_key": "k\u0000", "status": "succeeded", "version": 1}`), allHandlers, "operation_key contains a NUL character"},
		{"result without key", approval.TypeExecutionResult,
			result(`{"status": "succeeded", "version": 1}`), allHandlers, "operation_key is required"},
		{"result with a bad status", approval.TypeExecutionResult,
			result(`{"operation_key": "k", "status": "running", "version": 1}`), allHandlers, `status "running"`},
		{"result without version", approval.TypeExecutionResult,
			result(`{"operation_key": "k", "status": "failed"}`), allHandlers, "version 0"},
		{"result with a fractional version", approval.TypeExecutionResult,
			result(`{"operation_key": "k", "status": "failed", "version": 1.5}`), allHandlers, "decode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := worker.Handle(inboxEvent(tt.typ, tt.body), tt.allowed)
			if got.Kind != approval.ActionIgnore {
				t.Fatalf("got kind %d, want ActionIgnore", got.Kind)
			}
			if !strings.Contains(got.Reason, tt.wantReason) {
				t.Errorf("got reason %q, want it to contain %q", got.Reason, tt.wantReason)
			}
		})
	}
}

func inboxEvent(typ, body string) *approval.InboxEvent {
	return &approval.InboxEvent{ID: "inb_1", Source: "chat", EventID: "msg_1", Type: typ, Body: []byte(body)}
}
