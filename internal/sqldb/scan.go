package sqldb

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/approvald/approval"
)

// The columns each scanner reads, in order, from the alias every statement gives the table
// (a for approvals, x for executions, i for inbox_events).
const (
	ApprovalColumns = `a.id, a.operation_key, a.action, a.title, a.context, a.requester,
	a.required_approvals, a.status, a.decided_at, a.expires_at, a.created_at, a.version,
	a.fingerprint, COALESCE(a.callback_url, ''), a.policy`
	ExecutionColumns = `x.id, x.approval_id, x.operation_key, x.action, x.targeted, x.status,
	x.attempts, x.last_error, x.result, x.next_attempt_at, x.lease_expires_at,
	x.applied_version, x.uncertain, x.attempt_base, x.created_at, x.updated_at, x.downstream_key`
	// InboxColumns are followed in every statement by the body, or NULL for listings.
	InboxColumns = `i.id, i.source, i.event_id, i.type, i.headers, i.received_at, i.status,
	i.attempts, i.last_error, i.next_attempt_at, i.processed_at, i.outcome, i.approval_id,
	i.conflicts, i.last_conflict_at, i.lease_token`
	// ApprovalDetailColumns follow ApprovalColumns in a Dialect's ApprovalDetail: the
	// approvers in listed order as a JSON array of strings, the decisions oldest first as a
	// JSON array of approval.Decision, and the public fields of the execution (all NULL when
	// there is none) from executions x.
	ApprovalDetailColumns = `x.id, x.status, x.attempts, x.last_error, x.result, x.updated_at`
)

// approvalDest are the destinations of ApprovalColumns; status is the approval's and policy
// its Resolved as JSON (nil for none), to convert.
func approvalDest(a *approval.Approval, status *string, policy *[]byte) []any {
	return []any{&a.ID, &a.OperationKey, &a.Action, &a.Title, Bytes((*[]byte)(&a.Context)), &a.Requester,
		&a.RequiredApprovals, status, NullTime(&a.DecidedAt), Time(&a.ExpiresAt), Time(&a.CreatedAt),
		&a.Version, &a.Fingerprint, &a.CallbackURL, Bytes(policy)}
}

// ScanApprovalDetail reads a row of a Dialect's ApprovalDetail.
func ScanApprovalDetail(row Row) (*approval.Approval, error) { return ScanApprovalDetailAfter(row) }

// ScanApprovalDetailAfter reads a row that selects columns of its own, read into lead, and
// then a Dialect's ApprovalDetail: as a batch of reads answers, each row led by the number of
// the read it answers.
func ScanApprovalDetailAfter(row Row, lead ...any) (*approval.Approval, error) {
	var d ApprovalDetail
	if err := row.Scan(append(lead, d.Dest()...)...); err != nil {
		return nil, fmt.Errorf("scan approval: %w", err)
	}
	return d.Approval()
}

// ApprovalDetail is the destination of the columns of a Dialect's ApprovalDetail within a
// longer row: a statement that returns an approval's detail after columns of its own (the
// claim of an execution, which returns it with the execution) scans Dest among its own
// destinations, then takes the Approval.
type ApprovalDetail struct {
	a                    approval.Approval
	status               string
	approvers, decisions []byte
	policy               []byte
	x                    approval.Execution
	xID, xStatus         *string
	xAttempts            *int
	xError               *string
}

// Dest are the destinations of ApprovalColumns and ApprovalDetailColumns, in order.
func (d *ApprovalDetail) Dest() []any {
	return append(approvalDest(&d.a, &d.status, &d.policy), Bytes(&d.approvers), Bytes(&d.decisions),
		&d.xID, &d.xStatus, &d.xAttempts, &d.xError, Bytes((*[]byte)(&d.x.Result)), NullTime(&d.x.UpdatedAt))
}

// Approval is the approval scanned into Dest.
func (d *ApprovalDetail) Approval() (*approval.Approval, error) {
	a := d.a
	a.Status = approval.Status(d.status)
	a.Approvers, a.Decisions = []string{}, []approval.Decision{}
	if err := decodeJSON(d.approvers, &a.Approvers); err != nil {
		return nil, fmt.Errorf("decode approvers of %s: %w", a.ID, err)
	}
	if err := decodeJSON(d.decisions, &a.Decisions); err != nil {
		return nil, fmt.Errorf("decode decisions of %s: %w", a.ID, err)
	}
	for i := range a.Decisions {
		a.Decisions[i].At = a.Decisions[i].At.UTC()
	}
	if d.policy != nil {
		a.Resolved = new(approval.Resolved)
		if err := json.Unmarshal(d.policy, a.Resolved); err != nil {
			return nil, fmt.Errorf("decode policy of %s: %w", a.ID, err)
		}
	}
	if d.xID != nil {
		x := d.x
		x.ID, x.Status, x.Attempts, x.LastError = *d.xID, approval.ExecutionStatus(*d.xStatus), *d.xAttempts, *d.xError
		if len(x.Result) == 0 {
			x.Result = nil
		}
		a.Execution = &x
	}
	return &a, nil
}

// ScanExecution reads ExecutionColumns, then any extra destinations the query selects after
// them.
func ScanExecution(row Row, extra ...any) (*approval.ExecutionRecord, error) {
	var r approval.ExecutionRecord
	var status string
	dest := append([]any{&r.ID, &r.ApprovalID, &r.OperationKey, &r.Action, &r.Targeted, &status,
		&r.Attempts, &r.LastError, Bytes((*[]byte)(&r.Result)), NullTime(&r.NextAttemptAt),
		NullTime(&r.LeaseExpiresAt), &r.AppliedVersion, &r.Uncertain, &r.AttemptBase,
		Time(&r.CreatedAt), Time(&r.UpdatedAt), &r.DownstreamKey}, extra...)
	if err := row.Scan(dest...); err != nil {
		return nil, fmt.Errorf("scan execution: %w", err)
	}
	r.Status = approval.ExecutionStatus(status)
	if len(r.Result) == 0 {
		r.Result = nil
	}
	return &r, nil
}

// ScanInbox reads InboxColumns and the body (nil when NULL: purged, or not selected).
func ScanInbox(row Row) (*approval.InboxEvent, error) {
	var e approval.InboxEvent
	var headers []byte
	var status string
	var approvalID *string
	if err := row.Scan(&e.ID, &e.Source, &e.EventID, &e.Type, Bytes(&headers), Time(&e.ReceivedAt),
		&status, &e.Attempts, &e.LastError, NullTime(&e.NextAttemptAt), NullTime(&e.ProcessedAt),
		&e.Outcome, &approvalID, &e.Conflicts, NullTime(&e.LastConflictAt), &e.LeaseToken,
		Bytes(&e.Body)); err != nil {
		return nil, fmt.Errorf("scan inbox event: %w", err)
	}
	if err := json.Unmarshal(headers, &e.Headers); err != nil {
		return nil, fmt.Errorf("decode headers of inbox event %s: %w", e.ID, err)
	}
	e.Status = approval.InboxStatus(status)
	if approvalID != nil {
		e.ApprovalID = *approvalID
	}
	return &e, nil
}

// EventJSON encodes an event's cause and detail (nil when there is none) as both dialects
// store them.
func EventJSON(cause approval.Cause, detail map[string]any) (causeJSON, detailJSON []byte, err error) {
	if causeJSON, err = json.Marshal(cause); err != nil {
		return nil, nil, fmt.Errorf("encode event cause: %w", err)
	}
	if detail != nil {
		if detailJSON, err = json.Marshal(detail); err != nil {
			return nil, nil, fmt.Errorf("encode event detail: %w", err)
		}
	}
	return causeJSON, detailJSON, nil
}

// decodeJSON decodes doc into v, leaving v as it is when doc is NULL.
func decodeJSON(doc []byte, v any) error {
	if doc == nil {
		return nil
	}
	return json.Unmarshal(doc, v)
}

// Time scans a non-NULL time: Unix microseconds (SQLite) or a timestamp (PostgreSQL), in UTC.
func Time(t *time.Time) any { return timeDest{t} }

// NullTime scans a time that may be NULL into a pointer, nil for NULL.
func NullTime(t **time.Time) any { return nullTimeDest{t} }

// Bytes scans bytes, text or JSON that may be NULL: nil for NULL, a non-nil slice (empty
// included) otherwise, so that an empty stored body stays told apart from a purged one.
func Bytes(b *[]byte) any { return bytesDest{b} }

type timeDest struct{ t *time.Time }

func (d timeDest) Scan(src any) error {
	switch v := src.(type) {
	case int64:
		*d.t = time.UnixMicro(v).UTC()
	case time.Time:
		*d.t = v.UTC()
	default:
		return fmt.Errorf("cannot scan %T into a time", src)
	}
	return nil
}

type nullTimeDest struct{ t **time.Time }

func (d nullTimeDest) Scan(src any) error {
	if src == nil {
		*d.t = nil
		return nil
	}
	var t time.Time
	if err := (timeDest{&t}).Scan(src); err != nil {
		return err
	}
	*d.t = &t
	return nil
}

type bytesDest struct{ b *[]byte }

func (d bytesDest) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*d.b = nil
	case []byte:
		*d.b = append([]byte{}, v...)
	case string:
		*d.b = []byte(v)
	default:
		return fmt.Errorf("cannot scan %T into bytes", src)
	}
	return nil
}

// PolicyJSON encodes what an approval keeps of its policy as both dialects store it: nil (NULL)
// for an approval that keeps none.
func PolicyJSON(a *approval.Approval) ([]byte, error) {
	if a.Resolved == nil {
		return nil, nil
	}
	b, err := json.Marshal(a.Resolved)
	if err != nil {
		return nil, fmt.Errorf("encode policy of %s: %w", a.ID, err)
	}
	return b, nil
}
