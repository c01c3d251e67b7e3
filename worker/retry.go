package worker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Policy says how the execution runner retries one action's downstream call. It is filled
// from the action's configuration (max_attempts, backoff, idempotent, lookup_url).
type Policy struct {
	// MaxAttempts is the number of calls made at most, the first included.
	MaxAttempts int
	Backoff     Backoff
	// Idempotent says the target honours the Idempotency-Key: a repeated call with the same
	// key returns the first result and has no second effect, so an uncertain call may be sent
	// again.
	Idempotent bool
	// HasLookup says the target has a lookup URL that answers whether the operation happened,
	// so an uncertain call can be reconciled without sending it again.
	HasLookup bool
}

// Backoff is an exponential backoff with jitter: the wait before attempt n+1 is
// Initial * Multiplier^(n-1), capped at Max, then scaled by a random factor in
// [1-Jitter, 1+Jitter].
type Backoff struct {
	Initial    time.Duration
	Max        time.Duration
	Multiplier float64
	// Jitter is a fraction: 0.2 spreads each wait over +/-20%, so that executions that
	// failed together do not all come back at the same moment.
	Jitter float64
}

// DefaultPolicy is used for an action whose configuration leaves the policy out.
var DefaultPolicy = Policy{
	MaxAttempts: 10,
	Backoff:     Backoff{Initial: time.Second, Max: 10 * time.Minute, Multiplier: 2, Jitter: 0.2},
}

// Validate reports the first field of p that cannot work, for the configuration to reject
// at start-up rather than have Delay make the best of it at run time.
func (p Policy) Validate() error {
	switch b := p.Backoff; {
	case p.MaxAttempts < 1:
		return fmt.Errorf("max_attempts %d: must be at least 1", p.MaxAttempts)
	case b.Initial <= 0:
		return fmt.Errorf("backoff initial %v: must be positive", b.Initial)
	case b.Max < b.Initial:
		return fmt.Errorf("backoff max %v: must be at least initial %v", b.Max, b.Initial)
	case b.Multiplier < 1 || math.IsInf(b.Multiplier, 0) || math.IsNaN(b.Multiplier):
		return fmt.Errorf("backoff multiplier %v: must be a number of at least 1", b.Multiplier)
	case b.Jitter < 0 || b.Jitter > 1 || math.IsNaN(b.Jitter):
		return fmt.Errorf("backoff jitter %v: must be between 0 and 1", b.Jitter)
	}
	return nil
}

// Delay returns the wait before attempt n+1, after attempt n (n >= 1) failed in a retryable
// way. rnd returns a number in [0, 1) and picks the jitter (nil uses math/rand/v2); tests pass
// a constant. The result is never negative and never above Max*(1+Jitter).
//
// A Retry-After hint from the target (0 for none) replaces the backoff when it is longer, but
// is capped at Max: Max is the operator's promise of the longest pause between two attempts,
// and a target asking for an hour (or, by mistake, a year) must not park the execution beyond
// it. The hint is not jittered; the target asked for that time.
//
// Out-of-range fields, which Validate rejects, are clamped rather than trusted: a Multiplier
// below 1 is taken as 1 and a Jitter outside [0, 1] is clamped into it.
func (p Policy) Delay(attempt int, retryAfter time.Duration, rnd func() float64) time.Duration {
	b := p.Backoff
	multiplier := b.Multiplier
	if !(multiplier >= 1) { // also catches NaN
		multiplier = 1
	}
	jitter := min(max(b.Jitter, 0), 1)
	if math.IsNaN(jitter) {
		jitter = 0
	}
	if rnd == nil {
		rnd = rand.Float64
	}

	// Float arithmetic saturates instead of overflowing; the cap is applied before
	// converting back to a Duration.
	base := float64(b.Initial) * math.Pow(multiplier, float64(max(attempt, 1)-1))
	base = min(max(base, 0), float64(b.Max))
	r := min(max(rnd(), 0), 1) // a source out of range must not break the bounds
	d := time.Duration(base * (1 + jitter*(2*r-1)))
	d = max(d, 0)

	if hint := min(retryAfter, b.Max); hint > d {
		d = hint
	}
	return d
}

// Next is what the runner does after an attempt.
type Next int

// The steps after an attempt.
const (
	NextSucceed Next = iota + 1 // record the execution succeeded
	NextRetry                   // schedule another attempt after Delay
	NextLookup                  // ask the lookup URL whether the operation happened
	NextFail                    // record the execution failed: it did not happen
	NextReview                  // record needs_review: no one can tell whether it happened
)

func (n Next) String() string {
	switch n {
	case NextSucceed:
		return "succeed"
	case NextRetry:
		return "retry"
	case NextLookup:
		return "lookup"
	case NextFail:
		return "fail"
	case NextReview:
		return "review"
	}
	return "Next(" + strconv.Itoa(int(n)) + ")"
}

// Decide returns the step after attempt number attempt (1 for the first) ended with o.
// uncertainBefore says an earlier attempt of this execution was Uncertain.
//
//   - Succeeded: succeed. Failed: fail; the target answered and refused, and when an earlier
//     attempt was uncertain only an idempotent target was called again, whose answer covers
//     the earlier call.
//   - Retryable: retry while attempts remain. When they are exhausted, fail, unless an
//     earlier attempt may have taken effect: then look up if the target can be asked, else
//     review, because "failed" would claim it did not happen.
//   - Uncertain: retry if the target is idempotent and attempts remain; otherwise look up if
//     it can be asked; otherwise review. Never fail: the call may have had its effect.
func (p Policy) Decide(o Outcome, attempt int, uncertainBefore bool) Next {
	remaining := attempt < p.MaxAttempts
	switch o {
	case Succeeded:
		return NextSucceed
	case Failed:
		return NextFail
	case Retryable:
		switch {
		case remaining:
			return NextRetry
		case !uncertainBefore:
			return NextFail
		}
	case Uncertain:
		if p.Idempotent && remaining {
			return NextRetry
		}
	}
	// Retryable or Uncertain, with a call that may have taken effect and no attempt left to
	// settle it by resending.
	if p.HasLookup {
		return NextLookup
	}
	return NextReview
}

// Outcome classifies one attempt of a downstream call.
type Outcome int

// The outcomes of an attempt.
const (
	Succeeded Outcome = iota + 1 // the target answered 2xx: the effect happened
	Retryable                    // it did not happen and may work later
	Failed                       // it did not happen and will not: the target refused
	Uncertain                    // no answer, and the request may have reached the target
)

func (o Outcome) String() string {
	switch o {
	case Succeeded:
		return "succeeded"
	case Retryable:
		return "retryable"
	case Failed:
		return "failed"
	case Uncertain:
		return "uncertain"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Classify maps one attempt's result to an Outcome and a reason for the execution's
// last_error and its event. status is the HTTP status received (0 if none) and err the error
// of the call; mayHaveArrived says whether the request may have reached the target (see
// Trace.MayHaveArrived).
//
// A status, once received, decides alone: the target has answered, and an error beside it
// can only come from reading the body. 2xx succeeded; 408, 425, 429 and 5xx are retryable;
// any other status (other 4xx, and 1xx or 3xx, which the runner neither expects nor follows)
// failed. Without a status, the call is retryable if the request cannot have arrived (the
// connection was never made) and uncertain otherwise: a timeout, a reset or an EOF after the
// request was sent tells nothing about whether the target acted on it.
func Classify(status int, err error, mayHaveArrived bool) (Outcome, string) {
	if status != 0 {
		reason := "HTTP " + strconv.Itoa(status)
		if text := http.StatusText(status); text != "" {
			reason += " " + text
		}
		switch {
		case status >= 200 && status <= 299:
			return Succeeded, reason
		case status == http.StatusRequestTimeout, status == http.StatusTooEarly,
			status == http.StatusTooManyRequests, status >= 500 && status <= 599:
			return Retryable, reason
		}
		return Failed, reason
	}

	detail := "no response"
	if err != nil {
		detail = err.Error()
	}
	switch {
	case !mayHaveArrived:
		return Retryable, "not sent: " + detail
	case isTimeout(err):
		return Uncertain, "timed out after the request may have arrived: " + detail
	}
	return Uncertain, "no response after the request may have arrived: " + detail
}

// ParseRetryAfter parses a Retry-After header value: delta-seconds, or an HTTP-date taken
// relative to now. A date in the past gives 0. It reports false for an empty or malformed
// value.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		secs, err := strconv.ParseUint(v, 10, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return 0, false
		}
		// Saturate a value too large for a Duration instead of wrapping it negative.
		if secs > uint64(math.MaxInt64/int64(time.Second)) {
			return time.Duration(math.MaxInt64), true
		}
		return time.Duration(secs) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}

// Trace watches one HTTP call to tell afterwards whether the request may have reached the
// target. Attach it with WithContext to the request's context before sending it.
//
// The rule: a request may have arrived as soon as the transport holds a connection to the
// target. Before that (name resolution, dialling, TLS handshake, waiting for a pooled
// connection) nothing of the request has left the process, so a failure there is safe to
// retry on any target. After it, any failure may come after the target has read the request
// and acted on it, and only the target can say.
//
// The rule is conservative: a write that failed before its first byte is also counted as
// possibly arrived. net/http itself replays requests on a reused connection that broke
// before an answer when the request is "replayable", and a POST carrying an Idempotency-Key
// with a rewindable body (req.GetBody set, as http.NewRequest does for in-memory bodies)
// counts as replayable. For a target that does not honour the key that replay could be a
// second effect that no attempt records, so the runner clears req.GetBody for such targets
// and leaves every resend to Decide.
type Trace struct {
	connected atomic.Bool
}

// WithContext returns ctx carrying t's httptrace hooks, to be used as the request's context.
func (t *Trace) WithContext(ctx context.Context) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		// Sticky: when the transport replays a request by itself, a later try failing to
		// connect does not undo an earlier try that may have delivered the request.
		GotConn: func(httptrace.GotConnInfo) { t.connected.Store(true) },
	})
}

// MayHaveArrived reports whether the request may have reached the target, given the error
// the call returned. A call that returned a response (err nil) has arrived.
func (t *Trace) MayHaveArrived(err error) bool {
	return err == nil || t.connected.Load()
}

// isTimeout reports whether err is a deadline: the client's timeout, the context's deadline,
// or a network timeout.
func isTimeout(err error) bool {
	var netErr net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout())
}
