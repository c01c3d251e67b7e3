package approval

import (
	"errors"
	"fmt"
	"time"
)

// Error codes. httpapi maps each to one HTTP status in a single table.
const (
	EINVALID      = "invalid"      // 400: the request is malformed
	EUNAUTHORIZED = "unauthorized" // 401: no or unknown credentials, bad signature
	EFORBIDDEN    = "forbidden"    // 403: authenticated but not allowed
	ENOTFOUND     = "not_found"    // 404
	ECONFLICT     = "conflict"     // 409: the state does not allow it, or work is in flight
	ETOOLARGE     = "too_large"    // 413
	EMISMATCH     = "mismatch"     // 422: an idempotency key reused for a different request
	// EUNPROCESSABLE is a well-formed request that the policies refuse (422): no policy
	// applies to its action, it names approvers a policy does not take, or the policy could
	// only be met with the requester's own vote (docs/policies.md).
	EUNPROCESSABLE = "unprocessable"
	EUNAVAILABLE   = "unavailable" // 503: a dependency (the database) is down
	EINTERNAL      = "internal"    // 500
)

// Error is the application error. Message is safe to show to the caller; internal details
// are logged by whoever wraps the underlying error, never put here.
type Error struct {
	Code    string
	Message string

	// Approval, when set on a conflict, is the current state the caller lost against.
	Approval *Approval
	// RetryAfter, when set on a conflict or an unavailable, tells the caller when to try
	// again.
	RetryAfter time.Duration

	// clockOffset marks the refusal of a claim by ClockWatch (IsClockOffset).
	clockOffset bool
}

// Error implements the error interface.
func (e *Error) Error() string {
	return fmt.Sprintf("approval error: code=%s message=%s", e.Code, e.Message)
}

// Errorf returns an *Error with the code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of the first *Error in err's chain, EINTERNAL for any other
// non-nil error, and "" for nil.
func ErrorCode(err error) string {
	var e *Error
	if err == nil {
		return ""
	} else if errors.As(err, &e) {
		return e.Code
	}
	return EINTERNAL
}

// ErrorMessage returns the caller-safe message of err.
func ErrorMessage(err error) string {
	var e *Error
	if err == nil {
		return ""
	} else if errors.As(err, &e) {
		return e.Message
	}
	return "internal error"
}

// AsError returns the *Error in err's chain, or nil.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}
