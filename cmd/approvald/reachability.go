package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// reachability is the gate's transport: it passes every request on and tells the user on
// stderr when the server cannot be reached (no connection, or a 502, 503 or 504 from it or
// from a proxy before it), that the client is retrying and since when, and when the server
// answers again. The client's own retries do the retrying; this only makes them visible.
type reachability struct {
	next   http.RoundTripper
	w      io.Writer
	server string

	mu    sync.Mutex
	since time.Time // the first failure of the current outage; zero while reachable
	told  time.Time // when the user was last told of it
}

// retellEvery spaces the lines that say an outage goes on.
const retellEvery = 10 * time.Second

func newReachability(next http.RoundTripper, w io.Writer, server string) *reachability {
	return &reachability{next: next, w: w, server: server}
}

// RoundTrip sends req and notes whether the server answered.
func (t *reachability) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	switch {
	case err != nil:
		if req.Context().Err() == nil { // the gate's own deadline is no outage
			t.failed("cannot reach " + terminalText(t.server) + " (" + terminalText(err.Error()) + ")")
		}
	case resp.StatusCode == http.StatusBadGateway || resp.StatusCode == http.StatusServiceUnavailable ||
		resp.StatusCode == http.StatusGatewayTimeout:
		t.failed(terminalText(t.server) + " answers " + terminalText(resp.Status))
	default:
		t.answered()
	}
	return resp, err
}

// failed notes a failed attempt; what says what failed, for the user.
func (t *reachability) failed(what string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now().UTC()
	if t.since.IsZero() {
		t.since, t.told = now, now
		fmt.Fprintf(t.w, "%s; retrying since %s\n", what, t.since.Format(time.RFC3339))
		return
	}
	if now.Sub(t.told) < retellEvery {
		return
	}
	t.told = now
	fmt.Fprintf(t.w, "%s; still retrying, since %s (%s)\n", what, t.since.Format(time.RFC3339), now.Sub(t.since).Round(time.Second))
}

func (t *reachability) answered() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.since.IsZero() {
		return
	}
	fmt.Fprintf(t.w, "%s answers again, after %s\n", terminalText(t.server), time.Since(t.since).Round(time.Second))
	t.since = time.Time{}
}

// downSince returns the start of the current outage, if the server is unreachable.
func (t *reachability) downSince() (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.since, !t.since.IsZero()
}

// explain adds to err, when the server is unreachable, since when the client retried and
// why it stopped.
func (t *reachability) explain(ctx context.Context, err error) error {
	since, down := t.downSince()
	switch {
	case !down:
		return err
	case ctx.Err() != nil:
		return fmt.Errorf("%w (unreachable since %s; interrupted)", err, since.Format(time.RFC3339))
	default:
		return fmt.Errorf("%w (unreachable since %s; gave up retrying)", err, since.Format(time.RFC3339))
	}
}
