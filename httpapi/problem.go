package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"strconv"

	"github.com/approvald/approval"
)

// errMethod is the code of a 405. It is an HTTP matter, so it is not one of approval's codes.
const errMethod = "method_not_allowed"

// problemTypeBase prefixes every problem type; the error code completes it.
const problemTypeBase = "https://approvald.dev/problems/"

// errorStatus is the one table from error codes to HTTP statuses and problem titles.
var errorStatus = map[string]struct {
	status int
	title  string
}{
	approval.EINVALID:       {http.StatusBadRequest, "Invalid request"},
	approval.EUNAUTHORIZED:  {http.StatusUnauthorized, "Unauthorized"},
	approval.EFORBIDDEN:     {http.StatusForbidden, "Forbidden"},
	approval.ENOTFOUND:      {http.StatusNotFound, "Not found"},
	errMethod:               {http.StatusMethodNotAllowed, "Method not allowed"},
	errMediaType:            {http.StatusUnsupportedMediaType, "Unsupported media type"},
	approval.ECONFLICT:      {http.StatusConflict, "Conflict"},
	approval.ETOOLARGE:      {http.StatusRequestEntityTooLarge, "Request too large"},
	approval.EMISMATCH:      {http.StatusUnprocessableEntity, "Idempotency key reused"},
	approval.EUNPROCESSABLE: {http.StatusUnprocessableEntity, "Policy refused"},
	approval.EUNAVAILABLE:   {http.StatusServiceUnavailable, "Service unavailable"},
	approval.EINTERNAL:      {http.StatusInternalServerError, "Internal error"},
}

// problem is an RFC 9457 problem detail, with extensions: the request id, to quote when
// reporting a problem, and on a conflict the current approval or execution the caller lost
// against.
type problem struct {
	Type      string                    `json:"type"`
	Title     string                    `json:"title"`
	Status    int                       `json:"status"`
	Detail    string                    `json:"detail"`
	RequestID string                    `json:"request_id"`
	Approval  *approval.Approval        `json:"approval,omitempty"`
	Execution *approval.ExecutionRecord `json:"execution,omitempty"`
}

// writeError answers err as problem+json. Only *approval.Error messages reach the client;
// anything else is logged with the request id and answered with a generic 500.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	if cerr := s.settle(r); cerr != nil {
		err = cerr // a refused token is answered 401 before anything else
	}
	err = approval.Unfinished(r.Context(), err)
	info := s.info(r)
	code := approval.ErrorCode(err)
	entry, ok := errorStatus[code]
	if !ok {
		code, entry = approval.EINTERNAL, errorStatus[approval.EINTERNAL]
	}
	p := problem{
		Type:      problemTypeBase + code,
		Title:     entry.title,
		Status:    entry.status,
		Detail:    approval.ErrorMessage(err),
		RequestID: info.id,
	}

	switch code {
	case approval.EINTERNAL:
		if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
			// The client went away; nobody reads this answer and nothing is wrong here.
			info.log.Info("request cancelled by the client", slog.Any("error", err))
		} else {
			info.log.Error("internal error", slog.Any("error", err))
		}
		p.Detail = "internal error; quote request id " + info.id + " when reporting it"
	case approval.EUNAVAILABLE:
		info.log.Warn("dependency unavailable", slog.Any("error", err))
	case approval.EUNAUTHORIZED:
		w.Header().Set("WWW-Authenticate", `Bearer realm="approvald"`)
	}

	if code == approval.ECONFLICT {
		p.Execution = conflictExecution(err)
	}
	if e := approval.AsError(err); e != nil {
		if e.Approval != nil && code == approval.ECONFLICT {
			p.Approval = s.present(r.Context(), e.Approval)
		}
		if e.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(e.RetryAfter.Seconds()))))
		}
	}
	if code == approval.EUNAVAILABLE && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", "1") // a dependency that is down: come back soon
	}

	body, err := json.Marshal(p)
	if err != nil { // a problem holds strings, ints and an approval: it always encodes
		info.log.Error("encode problem", slog.Any("error", err))
		body = []byte(`{"title":"Internal error","status":500}`)
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	w.Write(append(body, '\n'))
}
