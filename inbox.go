package approval

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// InboxStatus is the processing state of a stored inbound webhook event.
type InboxStatus string

// The inbox statuses. Pending events wait for a worker; the others are final until an
// operator retries a failed one.
const (
	InboxPending   InboxStatus = "pending"   // stored and acknowledged, not yet applied
	InboxProcessed InboxStatus = "processed" // the handler ran; Outcome says what it changed
	InboxIgnored   InboxStatus = "ignored"   // unknown type, or a handler the source may not use
	InboxStale     InboxStatus = "stale"     // an execution.result older than the one applied
	InboxFailed    InboxStatus = "failed"    // attempts exhausted; LastError says why
)

// Valid reports whether s is a known inbox status.
func (s InboxStatus) Valid() bool { return slices.Contains(InboxStatuses, s) }

// The built-in event types.
const (
	TypeApprovalDecision = "approval.decision"
	TypeExecutionResult  = "execution.result"
)

// InboxEvent is one verified inbound webhook delivery, stored before it is acknowledged.
// (Source, EventID) is unique for as long as the id is retained.
type InboxEvent struct {
	ID         string            `json:"id"`
	Source     string            `json:"source"`
	EventID    string            `json:"event_id"`
	Type       string            `json:"type"`
	Headers    map[string]string `json:"headers"` // the ones that matter: signature, id, timestamp, event
	Body       []byte            `json:"-"`       // raw, byte for byte; nil once purged
	ReceivedAt time.Time         `json:"received_at"`

	Status        InboxStatus `json:"status"`
	Attempts      int         `json:"attempts"`
	LastError     string      `json:"last_error"`
	NextAttemptAt *time.Time  `json:"next_attempt_at"`
	ProcessedAt   *time.Time  `json:"processed_at"`
	// Outcome says in words what processing changed ("approval apr_... approved; alice voted
	// approve", "refused: alice is not an approver", "stale: version 3 <= applied 5").
	Outcome    string `json:"outcome"`
	ApprovalID string `json:"approval_id,omitempty"` // the approval it touched, if any

	// Conflicts counts redeliveries of this id that carried a different body; the first body
	// is kept and LastConflictAt says when the last differing one came.
	Conflicts      int        `json:"conflicts"`
	LastConflictAt *time.Time `json:"last_conflict_at"`

	// BodyHash, when set (the github scheme, which signs only the body), is the SHA-256 of
	// Body and a second key: (Source, BodyHash) is unique for as long as the event is kept,
	// purged body or not, so a captured body replayed under a new id is a duplicate too.
	BodyHash []byte `json:"-"`

	// LeaseToken fences a worker's claim (ClaimInbox); it is empty outside a claim.
	LeaseToken string `json:"-"`
}

// InboxMark is how a claimed event ends, as Tx.InboxMarkDoneMany writes it: its status
// (processed, ignored or stale), its outcome and the approval it touched, if any.
type InboxMark struct {
	ID         string
	Status     InboxStatus
	Outcome    string
	ApprovalID string
	// Attempted counts the attempt that ends here (attempts + 1): an event locked by
	// Tx.InboxLockDue rather than claimed, whose claim would have counted it.
	Attempted bool
}

// InboxAction is what a handler decided to do with a claimed event, computed from the body
// without touching the store, then applied by Service.ApplyInbox in one transaction with marking the
// event done, so a crash between the two cannot apply an event twice.
type InboxAction struct {
	Kind   InboxActionKind
	Decide *DecideRequest    // KindDecide; ApprovalID or OperationKey names the approval
	Report *ExecutionReport  // KindExecutionResult
	Reason string            // KindIgnore: why (unknown type, handler not allowed, bad data)
	Slack  *SlackInteraction // ActionSlack
}

// DecisionOutcome is the Outcome of an inbox event whose decision the rules accepted: a is
// the approval after the vote, and repeat says the approver had already voted so, which
// changed nothing. Both stores write it, so an operator reads one text whatever the store.
func DecisionOutcome(a *Approval, d DecideRequest, repeat bool) string {
	switch {
	case repeat:
		if prev, _ := a.DecisionBy(d.Approver); prev.Comment != d.Comment {
			return fmt.Sprintf("approval %s: %s already voted %s; no change, the first vote's comment stands", a.ID, d.Approver, d.Verdict)
		}
		return fmt.Sprintf("approval %s: %s already voted %s; no change", a.ID, d.Approver, d.Verdict)
	case a.Status.Terminal():
		return fmt.Sprintf("approval %s %s; %s voted %s", a.ID, a.Status, d.Approver, d.Verdict)
	}
	return fmt.Sprintf("approval %s: %s voted %s (%d of %d approvals)", a.ID, d.Approver, d.Verdict, a.Approvals(), a.RequiredApprovals)
}

// ReportOutcome is the Outcome of an inbox event whose execution.result r was applied to the
// execution rec.
func ReportOutcome(rec *ExecutionRecord, r ExecutionReport) string {
	return fmt.Sprintf("execution %s of approval %s reported %s (version %d)", rec.ID, rec.ApprovalID, r.Status, r.Version)
}

// InboxActionKind names a handler's action.
type InboxActionKind int

// The kinds of InboxAction.
const (
	ActionIgnore InboxActionKind = iota + 1
	ActionDecide
	ActionExecutionResult
	ActionSlack // a Slack interaction: the clicker's person votes, and is answered
)

// InboxFilter selects events for InboxEvents.
type InboxFilter struct {
	Status InboxStatus // "" for any
	Source string      // "" for any
	Limit  int         // 0 = DefaultPageSize, at most MaxPageSize
	Cursor string
}

// InboxStore is the durable half of the webhook inbox (docs/invariants.md, invariant 3). Both
// stores implement it as part of Store.
type InboxStore interface {
	// RecordInbox stores e (ID, Source, EventID, Type, Headers, Body, BodyHash, ReceivedAt
	// set by the caller; status pending, next attempt now) under the unique (source,
	// event_id), and the unique (source, body_hash) when BodyHash is set, in one transaction,
	// and sets e's stored state (Status, NextAttemptAt). If the pair exists it stores nothing
	// new and reports duplicate; when the body differs from the stored one it increments
	// Conflicts and sets LastConflictAt. If only the body hash exists (a replay: the same body
	// under another event id) it stores nothing and reports duplicate, the stored event's
	// EventID telling the caller which it was; an event id match wins over a hash match. On a
	// duplicate *e becomes the stored event
	// as InboxEvent returns it (its ID, ReceivedAt, Status, the first Body, nil once purged,
	// and so on) without a LeaseToken, so the intake can name the event that was kept.
	RecordInbox(ctx context.Context, e *InboxEvent) (duplicate bool, err error)

	// InboxEvent returns one event with its body, or ENOTFOUND.
	InboxEvent(ctx context.Context, id string) (*InboxEvent, error)
	// InboxEvents lists events newest first without bodies.
	InboxEvents(ctx context.Context, f InboxFilter) ([]*InboxEvent, string, error)
	// InboxCounts returns how many events are in each status (for /metrics).
	InboxCounts(ctx context.Context) (map[InboxStatus]int, error)
}

// ExecutionReport is a downstream outcome reported asynchronously: by an execution.result
// inbox event or by a caller through POST /v1/approvals/{id}/execution. It is applied only when
// its Version is newer than the execution's applied version (invariant 4).
type ExecutionReport struct {
	ApprovalID   string // one of ApprovalID or OperationKey
	OperationKey string
	Status       ExecutionStatus // succeeded or failed
	Version      int64           // > 0
	Result       json.RawMessage
	Actor        string
	Cause        Cause
}
