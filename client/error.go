package client

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// The error codes of the API: the last segment of a problem's type
// (https://approvald.dev/problems/<code>), the field to branch on.
const (
	CodeInvalid          = "invalid"
	CodeUnauthorized     = "unauthorized"
	CodeForbidden        = "forbidden"
	CodeNotFound         = "not_found"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeConflict         = "conflict"
	CodeTooLarge         = "too_large"
	CodeMismatch         = "mismatch"
	CodeUnavailable      = "unavailable"
	CodeInternal         = "internal"
)

const problemTypeBase = "https://approvald.dev/problems/"

// Error is an answer of the server that is not a success: the RFC 9457 problem it carried
// (docs/http-api.md, "Errors"). Test for it with errors.As. An answer that was not
// problem+json (a proxy's error page) is an Error too, with Status and a Title made from it.
type Error struct {
	Type      string `json:"type"`
	Title     string `json:"title"`
	Status    int    `json:"status"`
	Detail    string `json:"detail"`
	RequestID string `json:"request_id"`
	// Approval is, on a 409 about an approval, the approval as it now is: the outcome the
	// request lost against.
	Approval *Approval `json:"approval,omitempty"`
	// Execution is, on a 409 from an execution route, the execution as it now is.
	Execution *ExecutionRecord `json:"execution,omitempty"`
	// Extensions holds every member of the problem besides type, title, status and detail,
	// raw, request_id, approval and execution included, so that members added to the
	// contract later are not lost.
	Extensions map[string]json.RawMessage `json:"-"`
	// RetryAfter is the answer's Retry-After, 0 when it had none.
	RetryAfter time.Duration `json:"-"`

	// retried is set when the call sent more than one request: an earlier one may have
	// acted, which is what this answer is about (see Cancel).
	retried bool
}

// Code returns the problem's error code (CodeMismatch, ...), or "" when the answer was not
// one of approvald's problems.
func (e *Error) Code() string {
	code, ok := strings.CutPrefix(e.Type, problemTypeBase)
	if !ok {
		return ""
	}
	return code
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "approvald: %d %s", e.Status, e.Title)
	if e.Detail != "" {
		fmt.Fprintf(&b, ": %s", e.Detail)
	}
	if e.RequestID != "" {
		fmt.Fprintf(&b, " (request %s)", e.RequestID)
	}
	return b.String()
}

// errorFrom builds the Error of a non-2xx answer whose body is body.
func errorFrom(resp *http.Response, body []byte, now time.Time) *Error {
	e := &Error{}
	ct := resp.Header.Get("Content-Type")
	if strings.HasPrefix(ct, "application/problem+json") || strings.HasPrefix(ct, "application/json") {
		if json.Unmarshal(body, e) == nil {
			var members map[string]json.RawMessage
			if json.Unmarshal(body, &members) == nil {
				for _, k := range []string{"type", "title", "status", "detail"} {
					delete(members, k)
				}
				if len(members) > 0 {
					e.Extensions = members
				}
			}
		}
	}
	e.Status = resp.StatusCode // the status line wins over a body that says otherwise
	if e.Title == "" {
		e.Title = http.StatusText(resp.StatusCode)
		if e.Detail == "" && len(body) > 0 {
			e.Detail = strings.TrimSpace(string(body[:min(len(body), 200)]))
		}
	}
	if e.RequestID == "" {
		e.RequestID = resp.Header.Get("X-Request-Id")
	}
	e.RetryAfter = retryAfter(resp.Header.Get("Retry-After"), now)
	return e
}
