// Package approval holds approvald's domain vocabulary: approvals, decisions, executions, the
// audit trail, tokens, the idempotency records that make creates safe to retry, and the one
// error type every layer speaks. It imports neither database/sql nor net/http; the stores
// (sqlite, postgres), the HTTP layer (httpapi) and the workers build on it, and cmd/approvald
// wires them together.
package approval

import (
	"encoding/json"
	"slices"
	"time"
)

// Status is the lifecycle state of an approval. Pending is the only non-terminal state.
type Status string

// The approval statuses. An approval leaves StatusPending exactly once.
const (
	StatusPending   Status = "pending"
	StatusApproved  Status = "approved"
	StatusRejected  Status = "rejected"
	StatusExpired   Status = "expired"
	StatusCancelled Status = "cancelled"
)

// Terminal reports whether s is a final status.
func (s Status) Terminal() bool { return s != StatusPending }

// Valid reports whether s is one of the known statuses.
func (s Status) Valid() bool { return slices.Contains(Statuses, s) }

// Verdict is one approver's vote.
type Verdict string

// The two verdicts. Any single rejection is final.
const (
	VerdictApprove Verdict = "approve"
	VerdictReject  Verdict = "reject"
)

// Valid reports whether v is a known verdict.
func (v Verdict) Valid() bool { return v == VerdictApprove || v == VerdictReject }

// Approval is a request for a human decision in front of one business operation.
type Approval struct {
	ID                string          `json:"id"`
	OperationKey      string          `json:"operation_key"`
	Action            string          `json:"action"`
	Title             string          `json:"title"`
	Context           json.RawMessage `json:"context"`
	Requester         string          `json:"requester"`
	Approvers         []string        `json:"approvers"`
	RequiredApprovals int             `json:"required_approvals"`
	Status            Status          `json:"status"`
	Decisions         []Decision      `json:"decisions"`
	DecidedAt         *time.Time      `json:"decided_at"`
	ExpiresAt         time.Time       `json:"expires_at"`
	CreatedAt         time.Time       `json:"created_at"`
	Version           int64           `json:"version"`
	Execution         *Execution      `json:"execution"`
	// CallbackURL is where the approval's outcome is POSTed, when its create named one
	// (otherwise the requester's configured callback, if any, is used).
	CallbackURL string `json:"callback_url,omitempty"`
	// Resolved is the policy the approval was created under and the rules it resolved to
	// (docs/policies.md), nil for an approval whose request named its approvers. Its votes
	// are counted by those rules, whatever the policy says now.
	Resolved *Resolved `json:"-"`
	// Policy is Resolved with its progress, as the API shows it; the HTTP layer fills it in
	// (Approval.PolicyStatus).
	Policy *PolicyStatus `json:"policy,omitempty"`

	// Fingerprint identifies the create request that made the approval (see Fingerprint).
	// It is kept for ever, with the approval, so that a retry under the same key is told
	// apart from a different request under it however late it comes: within the Service's
	// Retention a retry is answered as the create was, after it with the approval as it is.
	Fingerprint string `json:"-"`
}

// AsCreated returns a copy of a as its create made it, the state its create answered with:
// pending, no decisions, version 1, no execution. Everything else an approval shows is
// fixed at its create. A replayed create is rendered from it (Service.Create).
func (a *Approval) AsCreated() *Approval {
	c := *a
	c.Status, c.Decisions, c.DecidedAt, c.Version, c.Execution = StatusPending, []Decision{}, nil, 1, nil
	return &c
}

// IsApprover reports whether subject is listed as an approver: under a name that normalises
// as subject does (SameName).
func (a *Approval) IsApprover(subject string) bool {
	return slices.ContainsFunc(a.Approvers, func(name string) bool { return SameName(name, subject) })
}

// IsRequester reports whether subject made a (SameName).
func (a *Approval) IsRequester(subject string) bool { return SameName(a.Requester, subject) }

// VisibleTo reports whether a requester- or approver-role subject may read a.
func (a *Approval) VisibleTo(subject string) bool {
	return a.IsRequester(subject) || a.IsApprover(subject)
}

// DecisionBy returns the decision subject made, if any (SameName).
func (a *Approval) DecisionBy(subject string) (Decision, bool) {
	for _, d := range a.Decisions {
		if SameName(d.Approver, subject) {
			return d, true
		}
	}
	return Decision{}, false
}

// Approvals counts the distinct approvers who voted approve.
func (a *Approval) Approvals() int {
	n := 0
	for _, d := range a.Decisions {
		if d.Verdict == VerdictApprove {
			n++
		}
	}
	return n
}

// Decision is one approver's recorded vote. An approver votes at most once per approval.
type Decision struct {
	Approver string    `json:"approver"`
	Verdict  Verdict   `json:"verdict"`
	Comment  string    `json:"comment"`
	At       time.Time `json:"at"`
}

// ExecutionStatus is the state of carrying out an approved action.
type ExecutionStatus string

// The execution statuses. NotConfigured is shown for actions that have no target.
const (
	ExecutionQueued        ExecutionStatus = "queued"
	ExecutionRunning       ExecutionStatus = "running"
	ExecutionSucceeded     ExecutionStatus = "succeeded"
	ExecutionFailed        ExecutionStatus = "failed"
	ExecutionNeedsReview   ExecutionStatus = "needs_review"
	ExecutionCancelled     ExecutionStatus = "cancelled"
	ExecutionNotConfigured ExecutionStatus = "not_configured"
)

// Valid reports whether s is one of the known execution statuses.
func (s ExecutionStatus) Valid() bool { return slices.Contains(ExecutionStatuses, s) }

// Execution is the record of carrying out an approved action, separate from the approval.
type Execution struct {
	ID        string          `json:"id,omitempty"`
	Status    ExecutionStatus `json:"status"`
	Attempts  int             `json:"attempts"`
	LastError string          `json:"last_error"`
	Result    json.RawMessage `json:"result"`
	UpdatedAt *time.Time      `json:"updated_at"`
}

// Precision is the precision timestamps are kept to: both stores hold microseconds, so a
// value read back equals the value written.
const Precision = time.Microsecond

// Now returns the current time at store precision, in UTC.
func Now() time.Time { return time.Now().UTC().Truncate(Precision) }

// MarshalJSON shows an execution as the API does (docs/http-api.md, "The approval"): only
// {"status": "not_configured"} while an action without a target has had no outcome reported,
// the full record otherwise.
func (e Execution) MarshalJSON() ([]byte, error) {
	type plain Execution
	if e.Status == ExecutionNotConfigured {
		return json.Marshal(struct {
			Status ExecutionStatus `json:"status"`
		}{e.Status})
	}
	return json.Marshal(plain(e))
}
