package approval

import (
	"context"
	"encoding/json"
	"strings"
	"time"
)

// ExecutionRecord is the full stored state of an execution: the public Execution plus what the
// runner and operators need. One exists per approved approval, created in the same transaction
// that approves it (the transactional outbox): queued when the action has a target,
// not_configured when it has none.
type ExecutionRecord struct {
	ID           string `json:"id"`
	ApprovalID   string `json:"approval_id"`
	OperationKey string `json:"operation_key"`
	// DownstreamKey is the target's Idempotency-Key (DownstreamKey), fixed when the execution
	// is created so that every attempt, and every lookup, names the operation the same way;
	// "" on a row the target may know by the bare operation key (see IdempotencyKey).
	DownstreamKey string `json:"downstream_key"`
	Action        string `json:"action"`
	// Targeted says the action had a downstream target when the execution was created, so
	// approvald calls it and records the outcome itself; false for one created
	// not_configured, whose outcome only reports give. It never changes.
	Targeted       bool            `json:"targeted"`
	Status         ExecutionStatus `json:"status"`
	Attempts       int             `json:"attempts"`
	LastError      string          `json:"last_error"`
	Result         json.RawMessage `json:"result"`
	NextAttemptAt  *time.Time      `json:"next_attempt_at"`
	LeaseExpiresAt *time.Time      `json:"lease_expires_at"`
	// AppliedVersion is the highest report version applied (invariant 4); 0 before any.
	AppliedVersion int64 `json:"applied_version"`
	// Uncertain says that some attempt since the last operator retry may have reached the
	// target without a known outcome: one recorded with AttemptOutcome.Uncertain, or one whose
	// lease expired after its call was started (a Recovered claim). The runner then neither
	// resends to a target that does not honour keys nor reports the execution failed without
	// asking the target. It is sticky: only Service.RetryExecution and Service.ResolveExecution clear it.
	Uncertain bool `json:"uncertain"`
	// AttemptBase is Attempts as it was at the last operator retry (0 before any): the retry
	// policy counts the attempts of the current run, Attempts - AttemptBase.
	AttemptBase int       `json:"attempt_base"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// IdempotencyKey is the key the target is called and looked up under: DownstreamKey, or the
// bare operation key for a row without one, which an attempt may have sent under that key
// (migration 0017 leaves rows already called so; a replica not yet upgraded inserts rows so).
func (r *ExecutionRecord) IdempotencyKey() string {
	if r.DownstreamKey != "" {
		return r.DownstreamKey
	}
	return r.OperationKey
}

// DownstreamKey is the Idempotency-Key of the operation that requester asked for under
// operationKey (docs/http-api.md, "The call"): the requester with every byte outside
// A-Z a-z 0-9 - . _ ~ written as %XX (upper-case hex), a "/", then the operation key as it is.
// Operation keys are unique per requester only; the escaped requester holds no "/", so the
// first "/" splits the pair back and two requesters never share a key.
func DownstreamKey(requester, operationKey string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(requester) + 1 + len(operationKey))
	for i := 0; i < len(requester); i++ {
		switch c := requester[i]; {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '.', c == '_', c == '~':
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		}
	}
	b.WriteByte('/')
	b.WriteString(operationKey)
	return b.String()
}

// Public returns the execution as it is shown inside an approval.
func (r *ExecutionRecord) Public() *Execution {
	at := r.UpdatedAt
	return &Execution{ID: r.ID, Status: r.Status, Attempts: r.Attempts, LastError: r.LastError, Result: r.Result, UpdatedAt: &at}
}

// Reportable reports whether Service.ReportExecution may set the execution's outcome: only when the
// outcome comes from reports. That is an execution created not_configured (its caller
// executes it); a targeted one that is running (an async target that accepted the call, or
// one whose call is in flight, whose report may overtake our record of the 2xx); or one a
// report was already applied to, so that newer reports keep their order (invariant 4).
// Otherwise approvald's own call decides, and a report could undo a success it recorded and
// let an operator's retry call the target a second time.
func (r *ExecutionRecord) Reportable() bool {
	return !r.Targeted || r.Status == ExecutionRunning || r.AppliedVersion > 0
}

// AwaitingReport reports whether the execution is an asynchronous call its target accepted:
// running with no lease, so no attempt holds it and only a report (or an operator) ends it.
func (r *ExecutionRecord) AwaitingReport() bool {
	return r.Status == ExecutionRunning && r.LeaseExpiresAt == nil
}

// ExecutionClaim is a runner's hold on one execution for one attempt. Attempt is the fencing
// token: every write of the attempt's outcome is conditional on it still being current.
type ExecutionClaim struct {
	Record   *ExecutionRecord
	Approval *Approval
	Attempt  int
	// Recovered is true when the previous attempt's lease expired after its call was
	// started (Service.RecordAttempts marked it sending): it may or may not have reached the
	// target, so its outcome is uncertain.
	Recovered bool
	// Abandoned is true when the previous attempt's lease expired before its call was
	// started: a runner that claimed it died or lost it while the claim waited. That attempt
	// sent nothing, and this claim is an ordinary attempt.
	Abandoned bool
}

// AttemptOutcome is what a runner records at the end of an attempt.
type AttemptOutcome struct {
	Status  ExecutionStatus // succeeded, failed, needs_review, or queued to retry at RetryAt
	RetryAt *time.Time
	Result  []byte // the target's response body on success
	Error   string // last_error
	Reason  string // why this status, for the audit trail ("503 from target, retry 2 of 10 in 4s")
	// Uncertain says the attempt may have reached the target without a known outcome (a
	// timeout or a reset after the request may have arrived). It sets the record's Uncertain.
	Uncertain bool
}

// ExecutionFilter selects executions for Executions.
type ExecutionFilter struct {
	Status ExecutionStatus // "" for any
	Limit  int
	Cursor string
}

// ExecutionStore is the read side of the execution ledger (docs/invariants.md, invariant 5):
// one execution, the listing and the counts. The rules of what a claim, a lease's renewal, an
// attempt's outcome, a call's start, a release, an operator's action and a report do are the
// Service's (ClaimExecutions, RenewExecution, FinishAttempt, FinishAttempts, FinishAndClaim,
// RecordAttempts, ReleaseExecution, RetryExecution, ResolveExecution, CancelExecution,
// ReportExecution), written once over the statements of Tx. Every change but a renewal and a
// call's start appends an event to the approval's audit trail with its cause (the worker
// attempt, the operator, the report).
//
// The outbox: when Service.Decide (or ApplyInbox deciding) makes an approval approved, the
// same transaction inserts its execution: queued and due now when Service.Targeted
// reports that the action has a downstream target, not_configured otherwise (the caller
// executes it and may report the outcome with Service.ReportExecution). Approval and
// Approvals fill Approval.Execution from that row (nil before approval).
//
// Operation keys are unique per requester only, so the target is called under
// DownstreamKey, which names the requester too: two requesters' approvals under one
// operation key are two operations to the target, and each execution is queued.
type ExecutionStore interface {
	// Execution returns one execution, or ENOTFOUND.
	Execution(ctx context.Context, id string) (*ExecutionRecord, error)
	// Executions lists executions newest first.
	Executions(ctx context.Context, f ExecutionFilter) ([]*ExecutionRecord, string, error)
	// ExecutionCounts returns executions per status and how many are running past their lease.
	ExecutionCounts(ctx context.Context) (counts map[ExecutionStatus]int, stuck int, err error)
}
