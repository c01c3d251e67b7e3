package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Client calls one approvald server with one bearer token. It is safe for concurrent use.
type Client struct {
	base  *url.URL
	token string
	http  *http.Client
	retry Retry
	agent string
}

// Retry bounds the client's own retries. Every wait is also bounded by the call's context:
// a wait that would end after the context's deadline is not begun, and the call returns the
// last error at once.
type Retry struct {
	// MaxAttempts is how many requests one call sends at most, the first included; 1 turns
	// retries off.
	MaxAttempts int
	// Initial and Max shape the backoff: before retry n the client waits a random time
	// between 0 and min(Max, Initial×2^(n-1)) ("full jitter"), unless the answer said how
	// long in Retry-After, which is then waited out as given.
	Initial time.Duration
	Max     time.Duration
}

// DefaultRetry is the retry policy of a Client made without WithRetry.
var DefaultRetry = Retry{MaxAttempts: 10, Initial: 250 * time.Millisecond, Max: 15 * time.Second}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient makes the Client send its requests with hc (its transport, proxies, TLS).
// hc should have no overall Timeout shorter than a long-poll (60 s): bound calls with their
// context instead.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.http = hc } }

// WithRetry replaces DefaultRetry. Zero fields keep DefaultRetry's.
func WithRetry(r Retry) Option {
	return func(c *Client) {
		if r.MaxAttempts > 0 {
			c.retry.MaxAttempts = r.MaxAttempts
		}
		if r.Initial > 0 {
			c.retry.Initial = r.Initial
		}
		if r.Max > 0 {
			c.retry.Max = r.Max
		}
	}
}

// WithUserAgent sets the User-Agent of every request.
func WithUserAgent(ua string) Option { return func(c *Client) { c.agent = ua } }

// New returns a Client for the server at baseURL (http or https, e.g.
// "https://approvald.example.com") that authenticates with token.
func New(baseURL, token string, opts ...Option) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil {
		return nil, fmt.Errorf("approvald client: base url: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("approvald client: base url %q is not an http or https URL", baseURL)
	}
	c := &Client{base: u, token: token, http: http.DefaultClient, retry: DefaultRetry, agent: "approvald-client/1"}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// BaseURL returns the server's URL as given to New, without a trailing slash.
func (c *Client) BaseURL() string { return c.base.String() }

// retryMode says when a request may be sent again.
type retryMode int

const (
	// repeatable: sending it twice has the effect of sending it once (reads, creates under
	// their Idempotency-Key, votes, cancels). Retried on network errors, 429 and 5xx.
	repeatable retryMode = iota
	// unsentOnly: a repeat could act twice or turn a success into a 409. Retried only when
	// the first request cannot have been acted on: no connection was made, or the server
	// answered 429 or 503 (refused before doing anything).
	unsentOnly
)

// request is one call: what to send and how it may be retried.
type request struct {
	method string
	path   string
	query  url.Values
	body   []byte // nil: no body
	header http.Header
	mode   retryMode
	// retryConflict makes a 409 that carries Retry-After retryable: a create whose lock wait
	// the database cut short (docs/http-api.md, "Answers").
	retryConflict bool
}

// response is a 2xx answer read in full.
type response struct {
	status   int
	header   http.Header
	body     []byte
	attempts int
}

// do sends req until it succeeds, fails for good, runs out of attempts or its context ends.
// A non-2xx answer is returned as *Error.
func (c *Client) do(ctx context.Context, req request) (*response, error) {
	var lastErr error
	for attempt := 1; ; attempt++ {
		resp, wait, err := c.once(ctx, req)
		if err == nil {
			resp.attempts = attempt
			return resp, nil
		}
		lastErr = err
		var e *Error
		if errors.As(err, &e) {
			e.retried = attempt > 1
		}
		if wait < 0 || attempt >= c.retry.MaxAttempts || ctx.Err() != nil {
			return nil, lastErr
		}
		if wait == 0 {
			wait = c.backoff(attempt)
		}
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
			return nil, fmt.Errorf("%w (not retried: the next attempt would be after the context's deadline)", lastErr)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, lastErr
		case <-t.C:
		}
	}
}

// once sends req one time. On failure, wait says what may follow: -1 never retry, 0 retry
// after the backoff, >0 retry after that long (the answer's Retry-After).
func (c *Client) once(ctx context.Context, req request) (_ *response, _ time.Duration, err error) {
	u := *c.base
	// req.path is escaped (ids go through pathID), so it is kept as written.
	u.RawPath = c.base.EscapedPath() + req.path
	if u.Path, err = url.PathUnescape(u.RawPath); err != nil {
		return nil, -1, fmt.Errorf("approvald client: path %q: %w", req.path, err)
	}
	u.RawQuery = req.query.Encode()
	var body io.Reader
	if req.body != nil {
		body = bytes.NewReader(req.body)
	}
	hr, err := http.NewRequestWithContext(ctx, req.method, u.String(), body)
	if err != nil {
		return nil, -1, fmt.Errorf("approvald client: %w", err)
	}
	for k, vs := range req.header {
		hr.Header[k] = vs
	}
	if req.body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	hr.Header.Set("Accept", "application/json, application/problem+json")
	hr.Header.Set("Authorization", "Bearer "+c.token)
	hr.Header.Set("User-Agent", c.agent)

	hresp, err := c.http.Do(hr)
	if err != nil {
		return nil, c.networkWait(ctx, req, err, false), fmt.Errorf("approvald client: %s %s: %w", req.method, req.path, err)
	}
	defer hresp.Body.Close()
	b, err := io.ReadAll(hresp.Body)
	if err != nil {
		return nil, c.networkWait(ctx, req, err, true), fmt.Errorf("approvald client: %s %s: read answer: %w", req.method, req.path, err)
	}
	if hresp.StatusCode >= 200 && hresp.StatusCode < 300 {
		return &response{status: hresp.StatusCode, header: hresp.Header, body: b}, 0, nil
	}
	e := errorFrom(hresp, b, time.Now())
	return nil, statusWait(req, e), e
}

// networkWait classifies a failure to get an answer. A request that never left (no
// connection) may always be sent again; one that may have arrived only when repeatable.
func (c *Client) networkWait(ctx context.Context, req request, err error, answered bool) time.Duration {
	if ctx.Err() != nil {
		return -1
	}
	if req.mode == repeatable {
		return 0
	}
	var op *net.OpError
	if !answered && errors.As(err, &op) && op.Op == "dial" {
		return 0
	}
	return -1
}

// statusWait classifies an error answer (see retryMode). The statuses that are final
// (400, 401, 403, 404, 405, 409, 413, 415, 422 and any other 4xx but 408 and 429) describe
// the request or the state, and sending the request again cannot change them.
func statusWait(req request, e *Error) time.Duration {
	retryable := false
	switch s := e.Status; {
	case s == http.StatusTooManyRequests || s == http.StatusServiceUnavailable:
		retryable = true
	case s == http.StatusRequestTimeout || s >= 500:
		retryable = req.mode == repeatable
	case s == http.StatusConflict:
		retryable = req.retryConflict && e.RetryAfter > 0
	}
	if !retryable {
		return -1
	}
	return e.RetryAfter
}

// backoff is the full-jitter wait before retry n (n >= 1).
func (c *Client) backoff(n int) time.Duration {
	ceiling := c.retry.Max
	if n-1 < 32 {
		if d := c.retry.Initial << (n - 1); d > 0 && d < ceiling {
			ceiling = d
		}
	}
	return time.Duration(rand.Int64N(int64(ceiling) + 1))
}

// retryAfter parses a Retry-After value, whole seconds or an HTTP-date, into a wait from
// now; 0 when absent, malformed or in the past.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 || n > int64(365*24*time.Hour/time.Second) {
			return 0
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// call sends req and decodes the answer's body into out (unless out is nil).
func (c *Client) call(ctx context.Context, req request, out any) (*response, error) {
	resp, err := c.do(ctx, req)
	if err != nil {
		return nil, err
	}
	if out != nil {
		if err := json.Unmarshal(resp.body, out); err != nil {
			return nil, fmt.Errorf("approvald client: %s %s: decode answer: %w", req.method, req.path, err)
		}
	}
	return resp, nil
}

// jsonBody encodes v as a request body.
func jsonBody(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("approvald client: encode request: %w", err)
	}
	return b, nil
}

// pathID escapes an id for a path segment.
func pathID(id string) string { return url.PathEscape(id) }
