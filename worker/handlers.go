package worker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/approvald/approval"
	"github.com/approvald/approval/webhook"
)

// Handle decides what a claimed inbox event asks for, from its stored type and body alone,
// without touching the store: allowed is the list of handlers the event's source may
// trigger. An unknown type, a handler the source may not use, and data that does not parse
// or lacks a field all give ActionIgnore with the reason: retrying cannot fix any of them.
//
// The body shapes differ by scheme, but each carries the type at the top level (or in a
// header, for GitHub, which the intake stored as the type) and the handler's data in one
// place: "data.object" (Stripe), else "data" (Standard Webhooks), else the whole body
// (GitHub).
//
// A Slack interaction (source slack, which no webhook source may be named) is read as the
// intake read it before storing it (webhook.ParseSlackInteraction).
func Handle(e *approval.InboxEvent, allowed []string) approval.InboxAction {
	if e.Source == approval.SourceSlack {
		_, _, in, err := webhook.ParseSlackInteraction(e.Body)
		if err != nil {
			return ignore(fmt.Sprintf("bad Slack interaction: %s", approval.ErrorMessage(err)))
		}
		return approval.InboxAction{Kind: approval.ActionSlack, Slack: &in}
	}
	var handle func(*approval.InboxEvent, json.RawMessage) (approval.InboxAction, error)
	switch e.Type {
	case approval.TypeApprovalDecision:
		handle = handleDecision
	case approval.TypeExecutionResult:
		handle = handleResult
	case "":
		return ignore("the event has no type")
	default:
		return ignore(fmt.Sprintf("unknown event type %q", e.Type))
	}
	if !slices.Contains(allowed, e.Type) {
		return ignore(fmt.Sprintf("source %q may not trigger the %s handler", e.Source, e.Type))
	}
	data, err := eventData(e.Body)
	if err != nil {
		return ignore(fmt.Sprintf("bad %s event: %v", e.Type, err))
	}
	a, err := handle(e, data)
	if err != nil {
		return ignore(fmt.Sprintf("bad %s data: %v", e.Type, err))
	}
	return a
}

// decisionData is the data of an approval.decision event.
type decisionData struct {
	ApprovalID   string `json:"approval_id"`
	OperationKey string `json:"operation_key"`
	Approver     string `json:"approver"`
	Verdict      string `json:"verdict"`
	Comment      string `json:"comment"`
}

// handleDecision turns an approval.decision into a vote decided by the same rules as the
// API's, caused by the inbox event.
func handleDecision(e *approval.InboxEvent, data json.RawMessage) (approval.InboxAction, error) {
	var d decisionData
	if err := json.Unmarshal(data, &d); err != nil {
		return approval.InboxAction{}, fmt.Errorf("decode: %w", err)
	}
	switch {
	case d.ApprovalID == "" && d.OperationKey == "":
		return approval.InboxAction{}, errors.New("approval_id or operation_key is required")
	case d.ApprovalID != "" && d.OperationKey != "":
		// The store would take the id and silently ignore the key; a sender naming two
		// things should be told rather than have one of them guessed.
		return approval.InboxAction{}, errors.New("approval_id and operation_key are both set; name the approval once")
	case d.Approver == "":
		return approval.InboxAction{}, errors.New("approver is required")
	case !approval.Verdict(d.Verdict).Valid():
		return approval.InboxAction{}, fmt.Errorf("verdict %q: want approve or reject", d.Verdict)
	}
	// What no store can keep is refused here, as the API refuses it, rather than stored by
	// one store and failed on by the other.
	for _, f := range []struct{ name, value string }{
		{"approval_id", d.ApprovalID}, {"operation_key", d.OperationKey}, {"approver", d.Approver}, {"comment", d.Comment},
	} {
		if err := approval.CheckText(f.name, f.value); err != nil {
			return approval.InboxAction{}, errors.New(approval.ErrorMessage(err))
		}
	}
	return approval.InboxAction{
		Kind: approval.ActionDecide,
		Decide: &approval.DecideRequest{
			ApprovalID:   d.ApprovalID,
			OperationKey: d.OperationKey,
			Approver:     d.Approver,
			Verdict:      approval.Verdict(d.Verdict),
			Comment:      d.Comment,
			Cause:        inboxCause(e),
		},
	}, nil
}

// resultData is the data of an execution.result event.
type resultData struct {
	OperationKey string          `json:"operation_key"`
	Status       string          `json:"status"`
	Version      int64           `json:"version"`
	Result       json.RawMessage `json:"result"`
}

// handleResult turns an execution.result into an asynchronous outcome report, which the
// store applies only if its version is newer than the one applied (invariant 4).
func handleResult(e *approval.InboxEvent, data json.RawMessage) (approval.InboxAction, error) {
	var d resultData
	if err := json.Unmarshal(data, &d); err != nil {
		return approval.InboxAction{}, fmt.Errorf("decode: %w", err)
	}
	status := approval.ExecutionStatus(d.Status)
	switch {
	case d.OperationKey == "":
		return approval.InboxAction{}, errors.New("operation_key is required")
	case status != approval.ExecutionSucceeded && status != approval.ExecutionFailed:
		return approval.InboxAction{}, fmt.Errorf("status %q: want succeeded or failed", d.Status)
	case d.Version < 1:
		return approval.InboxAction{}, fmt.Errorf("version %d: want a whole number of at least 1", d.Version)
	}
	if err := approval.CheckText("operation_key", d.OperationKey); err != nil {
		return approval.InboxAction{}, errors.New(approval.ErrorMessage(err))
	}
	var result json.RawMessage
	if len(d.Result) > 0 && !bytes.Equal(d.Result, []byte("null")) {
		result = d.Result
	}
	return approval.InboxAction{
		Kind: approval.ActionExecutionResult,
		Report: &approval.ExecutionReport{
			OperationKey: d.OperationKey,
			Status:       status,
			Version:      d.Version,
			Result:       result,
			Actor:        "source:" + e.Source,
			Cause:        inboxCause(e),
		},
	}, nil
}

// eventData returns the part of a body that holds the handler's data: "data.object" when
// present (Stripe), else "data" (Standard Webhooks), else the whole body (GitHub).
func eventData(body []byte) (json.RawMessage, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, errors.New("the body is empty")
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, fmt.Errorf("the body is not a JSON object: %w", err)
	}
	data, ok := top["data"]
	if !ok {
		return body, nil
	}
	var inner map[string]json.RawMessage
	if err := json.Unmarshal(data, &inner); err != nil {
		return nil, fmt.Errorf(`"data" is not a JSON object: %w`, err)
	}
	if object, ok := inner["object"]; ok {
		return object, nil
	}
	return data, nil
}

func inboxCause(e *approval.InboxEvent) approval.Cause {
	return approval.Cause{Kind: approval.CauseInbox, Source: e.Source, EventID: e.EventID}
}

func ignore(reason string) approval.InboxAction {
	return approval.InboxAction{Kind: approval.ActionIgnore, Reason: reason}
}
