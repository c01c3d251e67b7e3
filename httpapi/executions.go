package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/approvald/approval"
)

// executionList is the answer of GET /v1/executions.
type executionList struct {
	Executions []*approval.ExecutionRecord `json:"executions"`
	NextCursor string                      `json:"next_cursor"`
}

// handleListExecutions is GET /v1/executions?status=&limit=&cursor=, newest first. Operators
// and admins only; status=needs_review is the operator's work list.
func (s *Server) handleListExecutions(w http.ResponseWriter, r *http.Request) {
	p, err := s.authenticate(r.Context(), r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	q := r.URL.Query()
	f := approval.ExecutionFilter{Status: approval.ExecutionStatus(q.Get("status")), Cursor: q.Get("cursor")}
	if f.Status != "" && !f.Status.Valid() {
		s.writeError(w, r, approval.Errorf(approval.EINVALID, "status %q is not one of queued, running, succeeded, failed, needs_review, cancelled, not_configured", f.Status))
		return
	}
	if f.Limit, err = parseLimit(q.Get("limit")); err != nil {
		s.writeError(w, r, err)
		return
	}
	list, next, err := s.svc.Executions(r.Context(), p, f)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := executionList{Executions: make([]*approval.ExecutionRecord, len(list)), NextCursor: next}
	for i, rec := range list {
		out.Executions[i] = presentExecution(rec)
	}
	s.writeJSON(w, r, http.StatusOK, out)
}

// handleGetExecution is GET /v1/executions/{id}. Operators and admins only.
func (s *Server) handleGetExecution(w http.ResponseWriter, r *http.Request) {
	p, err := s.authenticate(r.Context(), r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	rec, err := s.svc.Execution(r.Context(), p, r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, presentExecution(rec))
}

// handleRetryExecution is POST /v1/executions/{id}/retry: a failed, needs_review or cancelled
// execution, or an accepted async call whose report has not come, is queued again under the
// same operation key, without a new approval.
func (s *Server) handleRetryExecution(w http.ResponseWriter, r *http.Request) {
	s.operatorChange(w, r, func(ctx context.Context, p principal, id string, cause approval.Cause) (*approval.ExecutionRecord, error) {
		return s.svc.RetryExecution(ctx, p, id, cause)
	})
}

// handleCancelExecution is POST /v1/executions/{id}/cancel: a queued execution is not run.
func (s *Server) handleCancelExecution(w http.ResponseWriter, r *http.Request) {
	s.operatorChange(w, r, func(ctx context.Context, p principal, id string, cause approval.Cause) (*approval.ExecutionRecord, error) {
		return s.svc.CancelExecution(ctx, p, id, cause)
	})
}

// resolveRequest is the body of POST /v1/executions/{id}/resolve.
type resolveRequest struct {
	Outcome approval.ExecutionStatus `json:"outcome"`
	Note    string                   `json:"note"`
}

// handleResolveExecution is POST /v1/executions/{id}/resolve with {"outcome":
// "succeeded|failed", "note": "..."}: the operator records what really happened to an
// execution in needs_review or failed, or to an accepted async call whose report has not
// come. The note is required: it is the audit trail's only
// account of how the operator knows.
func (s *Server) handleResolveExecution(w http.ResponseWriter, r *http.Request) {
	s.operatorChange(w, r, func(ctx context.Context, p principal, id string, cause approval.Cause) (*approval.ExecutionRecord, error) {
		// A body that is not a JSON object of this shape is answered 400 (413 when too
		// large) before the Service is asked, whoever sends it. An empty body asks for no
		// outcome: the Service refuses a caller who may not operate (403), then a missing
		// or unknown outcome and the note (400), and changes nothing.
		var req resolveRequest
		body, err := readBody(w, r)
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(body)) > 0 {
			if err := decodeObject(body, &req); err != nil {
				return nil, err
			}
		}
		return s.svc.ResolveExecution(ctx, p, id, req.Outcome, req.Note, cause)
	})
}

// operatorChange runs one operator action on the execution {id}: it authenticates the
// caller, runs change for them with cause {kind: operator, operator, request_id}, and
// answers the execution. The Service refuses a caller who may not operate (EFORBIDDEN). When
// the execution's state does not allow the action (ECONFLICT) the 409 carries the execution
// as it is, under "execution".
func (s *Server) operatorChange(w http.ResponseWriter, r *http.Request,
	change func(ctx context.Context, p principal, id string, cause approval.Cause) (*approval.ExecutionRecord, error)) {
	p, err := s.authenticate(r.Context(), r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	id := r.PathValue("id")
	cause := s.cause(r)
	cause.Kind, cause.Operator = approval.CauseOperator, p.Subject
	rec, err := change(r.Context(), p, id, cause)
	if approval.ErrorCode(err) == approval.ECONFLICT {
		if cur, rerr := s.svc.Execution(r.Context(), p, id); rerr == nil {
			err = &executionConflict{err: err, execution: cur}
		}
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, presentExecution(rec))
}

// executionConflict is a conflict answered with the execution's current state, as a decision
// conflict is answered with the approval's.
type executionConflict struct {
	err       error
	execution *approval.ExecutionRecord
}

func (e *executionConflict) Error() string { return e.err.Error() }
func (e *executionConflict) Unwrap() error { return e.err }

// conflictExecution returns the execution err carries, or nil.
func conflictExecution(err error) *approval.ExecutionRecord {
	var ec *executionConflict
	if errors.As(err, &ec) {
		return presentExecution(ec.execution)
	}
	return nil
}

// reportRequest is the body of POST /v1/approvals/{id}/execution.
type reportRequest struct {
	Status  approval.ExecutionStatus `json:"status"`
	Version *int64                   `json:"version"`
	Result  json.RawMessage          `json:"result"`
}

// reportAnswer is the answer of POST /v1/approvals/{id}/execution. The approval keeps the
// contract's shape; whether the report was applied is said beside it.
type reportAnswer struct {
	Applied  bool               `json:"applied"`
	Approval *approval.Approval `json:"approval"`
}

// handleReportExecution is POST /v1/approvals/{id}/execution with {"status":
// "succeeded|failed", "version": N, "result": {...}}: the outcome of an approved action,
// reported by whoever executed it (its requester when the action has no target, an operator or
// an admin). A report is applied only when its version is newer than the last one applied
// (docs/invariants.md, invariant 4); an older one answers "applied": false and changes nothing
// but the audit trail. 409 with the approval when it is not approved, or when approvald records
// the execution's outcome from its own call to the target
// (approval.ExecutionRecord.Reportable).
func (s *Server) handleReportExecution(w http.ResponseWriter, r *http.Request) {
	p, err := s.authenticate(r.Context(), r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	id := r.PathValue("id")
	body, err := readBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var req reportRequest
	if err := decodeObject(body, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.Status != approval.ExecutionSucceeded && req.Status != approval.ExecutionFailed {
		s.writeError(w, r, approval.Errorf(approval.EINVALID, "status %q must be succeeded or failed", req.Status))
		return
	}
	if req.Version == nil || *req.Version < 1 {
		s.writeError(w, r, approval.Errorf(approval.EINVALID, "version is required: a positive integer that grows with each report of this execution"))
		return
	}
	if bytes.Equal(bytes.TrimSpace(req.Result), []byte("null")) {
		req.Result = nil
	}

	// The Service refuses an approval p may not see (404) or report on (403), and answers a
	// refusal about its execution with the approval as it is (409).
	applied, _, err := s.svc.ReportExecution(r.Context(), p, approval.ExecutionReport{
		ApprovalID: id,
		Status:     req.Status,
		Version:    *req.Version,
		Result:     req.Result,
		Cause:      s.cause(r),
	})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// The approval as it is after the report: its execution shows the applied outcome, or,
	// for a stale report, the newer one that stays.
	a, err := s.svc.Approval(r.Context(), p, id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, reportAnswer{Applied: applied, Approval: s.present(r.Context(), a)})
}

// presentExecution returns a copy of rec in the shape of the API: times in UTC and a result
// that is always valid JSON.
func presentExecution(rec *approval.ExecutionRecord) *approval.ExecutionRecord {
	c := *rec
	c.Result = jsonResult(rec.Result)
	c.NextAttemptAt = utcPtr(rec.NextAttemptAt)
	c.LeaseExpiresAt = utcPtr(rec.LeaseExpiresAt)
	c.CreatedAt = rec.CreatedAt.UTC()
	c.UpdatedAt = rec.UpdatedAt.UTC()
	return &c
}
