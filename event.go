package approval

import "time"

// Event is one entry of an approval's audit trail. Every change of an approval (and later of
// its execution) appends one, in the same transaction as the change, naming its cause.
type Event struct {
	Seq        int64     `json:"seq"` // 1, 2, 3 ... per approval
	ApprovalID string    `json:"-"`
	Type       string    `json:"type"`
	At         time.Time `json:"at"`
	Actor      string    `json:"actor"`
	Cause      Cause     `json:"cause"`
	// Detail carries what the transition changed, e.g. the verdict and comment of a vote.
	Detail map[string]any `json:"detail,omitempty"`
}

// The event types of the approval lifecycle.
const (
	EventCreated   = "approval.created"
	EventVoted     = "approval.voted"
	EventApproved  = "approval.approved"
	EventRejected  = "approval.rejected"
	EventExpired   = "approval.expired"
	EventCancelled = "approval.cancelled"
)

// CauseKind names what made a transition happen.
type CauseKind string

// The cause kinds (docs/invariants.md, invariant 7).
const (
	CauseHTTP     CauseKind = "http"
	CauseInbox    CauseKind = "inbox"
	CauseWorker   CauseKind = "worker"
	CauseOperator CauseKind = "operator"
	CauseSweeper  CauseKind = "sweeper"
)

// Cause explains a transition: the HTTP request id, the inbox event, the operator, the
// worker attempt. Fields that do not apply are empty.
type Cause struct {
	Kind      CauseKind `json:"kind"`
	RequestID string    `json:"request_id,omitempty"` // the server's own id of the request
	// ClientRequestID is the X-Request-Id the client sent, kept beside the server's id: the
	// client chose it, so it names the request for the client and proves nothing.
	ClientRequestID string `json:"client_request_id,omitempty"`
	Source          string `json:"source,omitempty"`   // inbox source name
	EventID         string `json:"event_id,omitempty"` // provider's event id
	Operator        string `json:"operator,omitempty"`
	Attempt         int    `json:"attempt,omitempty"`
	Note            string `json:"note,omitempty"`
}

// The Source of an http or operator cause says which door the change came through. A cause
// without one was recorded before the doors were told apart, and names neither.
const (
	SourceAPI = "api" // the JSON API
	SourceWeb = "web" // the approver's pages
)

// HTTPCause is the cause of a change made by an API request.
func HTTPCause(requestID string) Cause { return Cause{Kind: CauseHTTP, RequestID: requestID} }

// SweeperCause is the cause of a change made by the sweeper.
func SweeperCause() Cause { return Cause{Kind: CauseSweeper} }

// The event types of the execution ledger and the inbox, appended to the approval's trail.
const (
	EventExecutionQueued      = "execution.queued"  // created by the approving transaction
	EventExecutionAttempt     = "execution.attempt" // claimed; recorded before the call
	EventExecutionRetry       = "execution.retry_scheduled"
	EventExecutionSucceeded   = "execution.succeeded"
	EventExecutionFailed      = "execution.failed"
	EventExecutionNeedsReview = "execution.needs_review"
	EventExecutionReleased    = "execution.released" // given back on graceful shutdown
	EventExecutionRetried     = "execution.retried"  // an operator re-queued it
	EventExecutionResolved    = "execution.resolved" // an operator recorded the truth
	EventExecutionCancelled   = "execution.cancelled"
	EventExecutionReported    = "execution.reported"     // an async outcome applied
	EventExecutionReportStale = "execution.report_stale" // an older async outcome, not applied
	EventExecutionAccepted    = "execution.accepted"     // an async target accepted the call
)
