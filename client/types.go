package client

import (
	"encoding/json"
	"time"
)

// The approval statuses (docs/http-api.md, "The approval"). Only StatusPending ever changes.
const (
	StatusPending   = "pending"
	StatusApproved  = "approved"
	StatusRejected  = "rejected"
	StatusExpired   = "expired"
	StatusCancelled = "cancelled"
)

// Approval is a request for a human decision, as the API shows it.
type Approval struct {
	ID                string          `json:"id"`
	OperationKey      string          `json:"operation_key"`
	Action            string          `json:"action"`
	Title             string          `json:"title"`
	Context           json.RawMessage `json:"context"`
	Requester         string          `json:"requester"`
	Approvers         []string        `json:"approvers"`
	RequiredApprovals int             `json:"required_approvals"`
	Status            string          `json:"status"`
	Decisions         []Decision      `json:"decisions"`
	DecidedAt         *time.Time      `json:"decided_at"`
	ExpiresAt         time.Time       `json:"expires_at"`
	CreatedAt         time.Time       `json:"created_at"`
	Version           int64           `json:"version"`
	CallbackURL       string          `json:"callback_url,omitempty"`
	// Policy is the approval's policy and its progress, nil for an approval whose request
	// named its approvers.
	Policy *PolicyStatus `json:"policy,omitempty"`
	// Execution is nil until the approval is approved; then it has Status "not_configured"
	// (the caller carries the action out) or the state of approvald's calls to the target.
	Execution *Execution `json:"execution"`
}

// PolicyStatus is how far an approval created under a policy has come: its stages, each
// rule's approvals so far, and the stage now asked (docs/http-api.md, "The approval").
type PolicyStatus struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	// CurrentStage is the number (from 1) of the stage now asked, 0 once every stage is met.
	CurrentStage int           `json:"current_stage"`
	Stages       []StageStatus `json:"stages"`
}

// StageStatus is one stage of a PolicyStatus.
type StageStatus struct {
	Met   bool         `json:"met"`
	Rules []RuleStatus `json:"rules"`
}

// RuleStatus is one rule of a stage: what it asks and who counted toward it.
type RuleStatus struct {
	Label     string   `json:"label"`
	Group     string   `json:"group,omitempty"`
	People    []string `json:"people,omitempty"`
	Approvals int      `json:"approvals"`
	Counted   []string `json:"counted"`
}

// Decided reports whether the approval has left StatusPending, for good.
func (a *Approval) Decided() bool { return a.Status != StatusPending }

// Decision is one approver's vote.
type Decision struct {
	Approver string    `json:"approver"`
	Verdict  string    `json:"verdict"` // "approve" or "reject"
	Comment  string    `json:"comment"`
	At       time.Time `json:"at"`
}

// Execution is an approved action's execution as an approval shows it.
type Execution struct {
	ID        string          `json:"id,omitempty"`
	Status    string          `json:"status"`
	Attempts  int             `json:"attempts"`
	LastError string          `json:"last_error"`
	Result    json.RawMessage `json:"result"`
	UpdatedAt *time.Time      `json:"updated_at"`
}

// CreateRequest is the body of a create (docs/http-api.md, "Idempotent create"). Action,
// Title and Approvers are required; zero values of the others take the server's defaults.
type CreateRequest struct {
	Action            string          `json:"action"`
	Title             string          `json:"title"`
	Approvers         []string        `json:"approvers"`
	RequiredApprovals int             `json:"required_approvals,omitempty"`
	Context           json.RawMessage `json:"context,omitempty"`
	// ExpiresIn is sent as a Go duration string; 0 is the server's default (24h).
	ExpiresIn time.Duration `json:"-"`
	// CallbackURL, when set, receives the decision, expiry or cancellation as a signed POST.
	// Its scheme, host and port must equal an entry of the server's callbacks.allowed_origins.
	CallbackURL string `json:"callback_url,omitempty"`
}

// CreateResult is the answer to CreateApproval.
type CreateResult struct {
	Approval *Approval
	// Replayed is true when the server answered with the response it stored for an earlier
	// request under the same key (Idempotent-Replayed: true): this call made nothing new,
	// whether the earlier request was this call's own lost attempt or an earlier run.
	Replayed bool
	// Attempts is how many requests this call sent, the first included.
	Attempts int
}

// Event is one entry of an approval's audit trail.
type Event struct {
	Seq    int64          `json:"seq"`
	Type   string         `json:"type"`
	At     time.Time      `json:"at"`
	Actor  string         `json:"actor"`
	Cause  Cause          `json:"cause"`
	Detail map[string]any `json:"detail,omitempty"`
}

// Cause says why an event happened: kind is http, inbox, worker, operator or sweeper.
type Cause struct {
	Kind      string `json:"kind"`
	RequestID string `json:"request_id,omitempty"`
	Source    string `json:"source,omitempty"`
	EventID   string `json:"event_id,omitempty"`
	Operator  string `json:"operator,omitempty"`
	Attempt   int    `json:"attempt,omitempty"`
	Note      string `json:"note,omitempty"`
}

// Report is an execution outcome reported by the caller (POST /v1/approvals/{id}/execution).
type Report struct {
	Status  string          `json:"status"`  // "succeeded" or "failed"
	Version int64           `json:"version"` // grows with each report of one execution
	Result  json.RawMessage `json:"result,omitempty"`
}

// ReportResult is the answer to a report.
type ReportResult struct {
	// Applied is false when the report was not newer than the last one applied; it is then
	// only recorded in the audit trail.
	Applied  bool      `json:"applied"`
	Approval *Approval `json:"approval"`
}

// ExecutionRecord is an execution as the operator routes show it.
type ExecutionRecord struct {
	ID             string          `json:"id"`
	ApprovalID     string          `json:"approval_id"`
	OperationKey   string          `json:"operation_key"`
	Action         string          `json:"action"`
	Targeted       bool            `json:"targeted"`
	Status         string          `json:"status"`
	Attempts       int             `json:"attempts"`
	LastError      string          `json:"last_error"`
	Result         json.RawMessage `json:"result"`
	NextAttemptAt  *time.Time      `json:"next_attempt_at"`
	LeaseExpiresAt *time.Time      `json:"lease_expires_at"`
	AppliedVersion int64           `json:"applied_version"`
	Uncertain      bool            `json:"uncertain"`
	AttemptBase    int             `json:"attempt_base"`
	CreatedAt      time.Time       `json:"created_at"`
	UpdatedAt      time.Time       `json:"updated_at"`
}

// InboxEvent is a stored webhook delivery as the operator routes show it. Body and
// BodyBase64 are filled only by GetInboxEvent, and are nil once retention cleared the body.
type InboxEvent struct {
	ID             string            `json:"id"`
	Source         string            `json:"source"`
	EventID        string            `json:"event_id"`
	Type           string            `json:"type"`
	Headers        map[string]string `json:"headers"`
	ReceivedAt     time.Time         `json:"received_at"`
	Status         string            `json:"status"`
	Attempts       int               `json:"attempts"`
	LastError      string            `json:"last_error"`
	NextAttemptAt  *time.Time        `json:"next_attempt_at"`
	ProcessedAt    *time.Time        `json:"processed_at"`
	Outcome        string            `json:"outcome"`
	ApprovalID     string            `json:"approval_id,omitempty"`
	Conflicts      int               `json:"conflicts"`
	LastConflictAt *time.Time        `json:"last_conflict_at"`
	Body           *string           `json:"body,omitempty"`
	BodyBase64     *string           `json:"body_base64,omitempty"`
}

// ListOptions filters GET /v1/approvals. Zero values do not filter; Limit is the page size
// (server default 50).
type ListOptions struct {
	Status   string
	Approver string
	// Waiting lists only what waits for the token's subject now: the pending approvals it may
	// vote on and has not, through a group too (docs/policies.md, "Waiting for me"). Not with
	// Status or Approver.
	Waiting bool
	Limit   int
}

// ExecutionListOptions filters GET /v1/executions.
type ExecutionListOptions struct {
	Status string
	Limit  int
}

// InboxListOptions filters GET /v1/inbox.
type InboxListOptions struct {
	Status string
	Source string
	Limit  int
}
