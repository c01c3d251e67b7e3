package worker_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/approvald/approval/internal/downstream"
	"github.com/approvald/approval/worker"
)

func TestClassifyStatus(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
		if status >= 300 && status <= 399 {
			w.Header().Set("Location", "/200")
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	// The runner does not follow redirects: a redirected POST is not the call that was
	// approved.
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	tests := []struct {
		status int
		want   worker.Outcome
	}{
		{200, worker.Succeeded}, {201, worker.Succeeded}, {202, worker.Succeeded}, {204, worker.Succeeded},
		{299, worker.Succeeded},
		{301, worker.Failed}, {307, worker.Failed}, {308, worker.Failed},
		{400, worker.Failed}, {401, worker.Failed}, {403, worker.Failed}, {404, worker.Failed},
		{405, worker.Failed}, {409, worker.Failed}, {410, worker.Failed}, {413, worker.Failed},
		{422, worker.Failed}, {499, worker.Failed},
		{408, worker.Retryable}, {425, worker.Retryable}, {429, worker.Retryable},
		{500, worker.Retryable}, {501, worker.Retryable}, {502, worker.Retryable},
		{503, worker.Retryable}, {504, worker.Retryable}, {599, worker.Retryable},
	}
	for _, tt := range tests {
		a := call(t.Context(), client, srv.URL+"/"+strconv.Itoa(tt.status), nil)
		if a.err != nil {
			t.Fatalf("status %d: %v", tt.status, a.err)
		}
		got, reason := worker.Classify(a.status, a.err, a.arrived)
		if got != tt.want {
			t.Errorf("Classify(%d): got %v (%s), want %v", tt.status, got, reason, tt.want)
		}
		if !strings.Contains(reason, strconv.Itoa(tt.status)) {
			t.Errorf("Classify(%d): reason %q does not name the status", tt.status, reason)
		}
	}
}

// TestClassifyTransport makes calls fail in each way a real network call fails, and checks
// that a failure before the connection is retryable and any failure after it uncertain.
func TestClassifyTransport(t *testing.T) {
	t.Parallel()
	fresh := func() *http.Client {
		return &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	}

	tests := []struct {
		name       string
		url        func(t *testing.T) string
		client     *http.Client
		cancelled  bool
		want       worker.Outcome
		wantReason string
	}{
		{
			name:   "connection refused",
			url:    func(t *testing.T) string { return "http://" + closedAddr(t) + "/" },
			client: fresh(),
			want:   worker.Retryable, wantReason: "not sent",
		},
		{
			name:   "cancelled before sending",
			url:    func(t *testing.T) string { return httpServer(t, http.NotFoundHandler()) },
			client: fresh(), cancelled: true,
			want: worker.Retryable, wantReason: "not sent",
		},
		{
			name: "tls handshake fails",
			url: func(t *testing.T) string {
				srv := httptest.NewUnstartedServer(http.NotFoundHandler())
				srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is expected
				srv.StartTLS()                                   // with a certificate the client does not trust
				t.Cleanup(srv.Close)
				return srv.URL
			},
			client: fresh(),
			want:   worker.Retryable, wantReason: "not sent",
		},
		{
			name: "closed before reading the request",
			url: func(t *testing.T) string {
				return rawServer(t, func(conn net.Conn) {})
			},
			client: fresh(),
			want:   worker.Uncertain, wantReason: "may have arrived",
		},
		{
			name: "closed after reading the request",
			url: func(t *testing.T) string {
				return rawServer(t, func(conn net.Conn) { readRequest(t, conn) })
			},
			client: fresh(),
			want:   worker.Uncertain, wantReason: "may have arrived",
		},
		{
			name: "reset after reading the request",
			url: func(t *testing.T) string {
				return rawServer(t, func(conn net.Conn) {
					readRequest(t, conn)
					// Linger 0 makes Close send RST instead of FIN.
					if err := conn.(*net.TCPConn).SetLinger(0); err != nil {
						t.Error(err)
					}
				})
			},
			client: fresh(),
			want:   worker.Uncertain, wantReason: "may have arrived",
		},
		{
			name: "timeout waiting for the answer",
			url: func(t *testing.T) string {
				return rawServer(t, func(conn net.Conn) {
					readRequest(t, conn)
					// Never answer; return when the client gives up and closes.
					_, _ = io.Copy(io.Discard, conn)
				})
			},
			// The server never answers, so the timeout fires whatever its length; it is
			// short only to keep the test quick.
			client: &http.Client{Timeout: 50 * time.Millisecond, Transport: &http.Transport{DisableKeepAlives: true}},
			want:   worker.Uncertain, wantReason: "timed out",
		},
		{
			name: "dropped after the effect",
			url: func(t *testing.T) string {
				target := downstream.New(downstream.Options{HonourKeys: true})
				t.Cleanup(target.Close)
				target.DropAfterEffect(1)
				return target.URL()
			},
			client: fresh(),
			want:   worker.Uncertain, wantReason: "may have arrived",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			url := tt.url(t)
			ctx := t.Context()
			if tt.cancelled {
				c, cancel := context.WithCancel(ctx)
				cancel()
				ctx = c
			}
			a := call(ctx, tt.client, url, nil)
			if a.err == nil {
				t.Fatalf("got status %d, want a transport error", a.status)
			}
			got, reason := worker.Classify(a.status, a.err, a.arrived)
			if got != tt.want || !strings.Contains(reason, tt.wantReason) {
				t.Errorf("got %v (%s), want %v (%s...); error: %v", got, reason, tt.want, tt.wantReason, a.err)
			}
		})
	}
}

func TestClassifyNoStatusNoError(t *testing.T) {
	t.Parallel()
	if got, _ := worker.Classify(0, nil, true); got != worker.Uncertain {
		t.Errorf("arrived: got %v, want uncertain", got)
	}
	if got, _ := worker.Classify(0, nil, false); got != worker.Retryable {
		t.Errorf("not arrived: got %v, want retryable", got)
	}
	// A status decides even when reading the body failed afterwards.
	if got, _ := worker.Classify(200, io.ErrUnexpectedEOF, true); got != worker.Succeeded {
		t.Errorf("200 with a body error: got %v, want succeeded", got)
	}
}

// TestTransportReplay pins the reason for the rule on worker.Trace: on a reused connection
// that breaks after the request was sent, net/http resends a POST that carries an
// Idempotency-Key and a rewindable body, an extra effect on a target that ignores keys.
// Clearing req.GetBody stops that, leaving one effect and an uncertain outcome.
func TestTransportReplay(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		keepGetBody bool
		wantEffects int
	}{
		{name: "GetBody cleared", keepGetBody: false, wantEffects: 1},
		{name: "GetBody kept", keepGetBody: true, wantEffects: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			target := downstream.New(downstream.Options{HonourKeys: false})
			t.Cleanup(target.Close)
			client := &http.Client{Transport: &http.Transport{}}
			t.Cleanup(client.CloseIdleConnections)

			// The first call leaves an idle connection for the second to reuse.
			warmUp := func(req *http.Request) { req.Header.Set("Idempotency-Key", "warm-up") }
			if a := call(t.Context(), client, target.URL(), warmUp); a.status != 200 {
				t.Fatalf("warm-up: got %d %v, want 200", a.status, a.err)
			}
			target.DropAfterEffect(1)
			var reused bool
			ctx := httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{
				GotConn: func(info httptrace.GotConnInfo) { reused = reused || info.Reused },
			})
			a := call(ctx, client, target.URL(), func(req *http.Request) {
				if !tt.keepGetBody {
					req.GetBody = nil
				}
			})
			if !reused {
				t.Fatal("the call did not reuse the connection; the test shows nothing")
			}
			if got := target.Effects("op-1"); got != tt.wantEffects {
				t.Errorf("effects: got %d, want %d", got, tt.wantEffects)
			}
			if tt.keepGetBody {
				return
			}
			if got, reason := worker.Classify(a.status, a.err, a.arrived); got != worker.Uncertain {
				t.Errorf("got %v (%s), want uncertain", got, reason)
			}
		})
	}
}

func TestDelayGrowth(t *testing.T) {
	t.Parallel()
	p := worker.Policy{MaxAttempts: 10, Backoff: worker.Backoff{Initial: time.Second, Max: 10 * time.Second, Multiplier: 2}}
	want := []time.Duration{1, 2, 4, 8, 10, 10, 10}
	for i, w := range want {
		if got := p.Delay(i+1, 0, half); got != w*time.Second {
			t.Errorf("Delay(%d): got %v, want %v", i+1, got, w*time.Second)
		}
	}
	// Far beyond any float64 Duration: saturates at Max.
	if got := p.Delay(100000, 0, half); got != 10*time.Second {
		t.Errorf("Delay(100000): got %v, want 10s", got)
	}
	// An out-of-range multiplier is taken as 1: a constant backoff.
	p.Backoff.Multiplier = 0
	if got := p.Delay(5, 0, half); got != time.Second {
		t.Errorf("multiplier 0, Delay(5): got %v, want 1s", got)
	}
}

func TestDelayJitter(t *testing.T) {
	t.Parallel()
	p := worker.Policy{MaxAttempts: 10, Backoff: worker.Backoff{Initial: time.Second, Max: 10 * time.Second, Multiplier: 2, Jitter: 0.2}}
	tests := []struct {
		attempt int
		rnd     float64
		want    time.Duration
	}{
		{1, 0, 800 * time.Millisecond},
		{1, 0.5, time.Second},
		{1, 1, 1200 * time.Millisecond},
		{3, 0, 3200 * time.Millisecond},
		{3, 1, 4800 * time.Millisecond},
		{9, 0, 8 * time.Second},  // capped at Max, then jittered down
		{9, 1, 12 * time.Second}, // the most it can ever be: Max*(1+Jitter)
	}
	for _, tt := range tests {
		if got := p.Delay(tt.attempt, 0, constant(tt.rnd)); got != tt.want {
			t.Errorf("Delay(%d) at rnd=%v: got %v, want %v", tt.attempt, tt.rnd, got, tt.want)
		}
	}
}

// TestDelayBounds sweeps attempts, random draws and jitters, including clamped out-of-range
// ones and a random source out of [0, 1], for the two promises: never negative, never above
// Max*(1+Jitter).
func TestDelayBounds(t *testing.T) {
	t.Parallel()
	for _, jitter := range []float64{0, 0.2, 1, 3, -1} {
		p := worker.Policy{MaxAttempts: 10, Backoff: worker.Backoff{Initial: 250 * time.Millisecond, Max: time.Minute, Multiplier: 3, Jitter: jitter}}
		limit := time.Duration(float64(time.Minute) * (1 + min(max(jitter, 0), 1)))
		for attempt := 1; attempt <= 80; attempt++ {
			for _, rnd := range []float64{-1, 0, 0.1, 0.5, 0.9, 0.999999, 1, 2} {
				if got := p.Delay(attempt, 0, constant(rnd)); got < 0 || got > limit {
					t.Fatalf("jitter %v, Delay(%d) at rnd=%v: got %v, want within [0, %v]", jitter, attempt, rnd, got, limit)
				}
			}
		}
	}
	// A nil rnd draws its own and keeps the same bounds.
	p := worker.Policy{MaxAttempts: 3, Backoff: worker.Backoff{Initial: time.Second, Max: time.Second, Multiplier: 2, Jitter: 0.5}}
	for range 100 {
		if got := p.Delay(1, 0, nil); got < 500*time.Millisecond || got > 1500*time.Millisecond {
			t.Fatalf("Delay with nil rnd: got %v, want within [0.5s, 1.5s]", got)
		}
	}
}

// TestRetryAfter reads a Retry-After from a real answer with a fixed clock and checks Delay
// honours it.
func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	p := worker.Policy{MaxAttempts: 10, Backoff: worker.Backoff{Initial: time.Second, Max: 5 * time.Minute, Multiplier: 2, Jitter: 0.2}}

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", r.URL.Query().Get("v"))
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)

	tests := []struct {
		header string
		want   time.Duration
	}{
		{"90", 90 * time.Second}, // longer than the backoff: wins
		{now.Add(2 * time.Minute).Format(http.TimeFormat), 2 * time.Minute}, // an HTTP-date
		{"0", 800 * time.Millisecond},                                       // shorter: the backoff wins
		{now.Add(-time.Hour).Format(http.TimeFormat), 800 * time.Millisecond},
		{"3600", 5 * time.Minute}, // capped at Max
		{"soon", 800 * time.Millisecond},
	}
	for _, tt := range tests {
		resp, err := http.Get(srv.URL + "/?v=" + url.QueryEscape(tt.header))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got, _ := worker.Classify(resp.StatusCode, nil, true); got != worker.Retryable {
			t.Fatalf("503: got %v, want retryable", got)
		}
		hint, _ := worker.ParseRetryAfter(resp.Header.Get("Retry-After"), now)
		if got := p.Delay(1, hint, constant(0)); got != tt.want {
			t.Errorf("Retry-After %q: got %v, want %v", tt.header, got, tt.want)
		}
	}

	// The reference target's own Retry-After.
	target := downstream.New(downstream.Options{})
	t.Cleanup(target.Close)
	target.FailWithRetryAfter(30*time.Second, http.StatusTooManyRequests)
	a := call(t.Context(), http.DefaultClient, target.URL(), nil)
	if got, _ := worker.Classify(a.status, a.err, a.arrived); got != worker.Retryable {
		t.Fatalf("429: got %v, want retryable", got)
	}
	hint, ok := worker.ParseRetryAfter(a.header.Get("Retry-After"), now)
	if !ok || p.Delay(1, hint, constant(0)) != 30*time.Second {
		t.Errorf("429 Retry-After %q: got %v (ok %v), want 30s", a.header.Get("Retry-After"), hint, ok)
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		v      string
		want   time.Duration
		wantOK bool
	}{
		{"120", 2 * time.Minute, true},
		{"0", 0, true},
		{" 5 ", 5 * time.Second, true},
		{"Sun, 01 Mar 2026 12:01:30 GMT", 90 * time.Second, true},   // IMF-fixdate
		{"Sunday, 01-Mar-26 12:00:10 GMT", 10 * time.Second, true},  // RFC 850
		{"Sun Mar  1 12:00:20 2026", 20 * time.Second, true},        // asctime
		{"Sun, 01 Mar 2026 11:00:00 GMT", 0, true},                  // in the past
		{"99999999999999999999999", time.Duration(1<<63 - 1), true}, // saturates
		{"", 0, false},
		{"-1", 0, false},
		{"1.5", 0, false},
		{"5s", 0, false},
		{"soon", 0, false},
		{"2026-03-01T12:01:00Z", 0, false},
	}
	for _, tt := range tests {
		got, ok := worker.ParseRetryAfter(tt.v, now)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("ParseRetryAfter(%q): got (%v, %v), want (%v, %v)", tt.v, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestDecide(t *testing.T) {
	t.Parallel()
	plain := worker.Policy{MaxAttempts: 3}
	idempotent := worker.Policy{MaxAttempts: 3, Idempotent: true}
	lookup := worker.Policy{MaxAttempts: 3, HasLookup: true}
	both := worker.Policy{MaxAttempts: 3, Idempotent: true, HasLookup: true}

	tests := []struct {
		policy          worker.Policy
		outcome         worker.Outcome
		attempt         int
		uncertainBefore bool
		want            worker.Next
	}{
		{plain, worker.Succeeded, 1, false, worker.NextSucceed},
		{plain, worker.Succeeded, 3, true, worker.NextSucceed},
		{plain, worker.Failed, 1, false, worker.NextFail},
		{idempotent, worker.Failed, 2, true, worker.NextFail},

		{plain, worker.Retryable, 1, false, worker.NextRetry},
		{plain, worker.Retryable, 2, false, worker.NextRetry},
		{plain, worker.Retryable, 3, false, worker.NextFail}, // MaxAttempts reached
		{idempotent, worker.Retryable, 3, true, worker.NextReview},
		{both, worker.Retryable, 3, true, worker.NextLookup},

		{plain, worker.Uncertain, 1, false, worker.NextReview},
		{lookup, worker.Uncertain, 1, false, worker.NextLookup},
		{idempotent, worker.Uncertain, 1, false, worker.NextRetry},
		{both, worker.Uncertain, 1, false, worker.NextRetry},
		{idempotent, worker.Uncertain, 3, true, worker.NextReview},
		{both, worker.Uncertain, 3, true, worker.NextLookup},
	}
	for _, tt := range tests {
		got := tt.policy.Decide(tt.outcome, tt.attempt, tt.uncertainBefore)
		if got != tt.want {
			t.Errorf("%+v.Decide(%v, %d, %v): got %v, want %v",
				tt.policy, tt.outcome, tt.attempt, tt.uncertainBefore, got, tt.want)
		}
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	if err := worker.DefaultPolicy.Validate(); err != nil {
		t.Errorf("DefaultPolicy: %v", err)
	}
	bad := []func(p *worker.Policy){
		func(p *worker.Policy) { p.MaxAttempts = 0 },
		func(p *worker.Policy) { p.Backoff.Initial = 0 },
		func(p *worker.Policy) { p.Backoff.Max = p.Backoff.Initial / 2 },
		func(p *worker.Policy) { p.Backoff.Multiplier = 0.5 },
		func(p *worker.Policy) { p.Backoff.Jitter = -0.1 },
		func(p *worker.Policy) { p.Backoff.Jitter = 1.5 },
	}
	for i, mutate := range bad {
		p := worker.DefaultPolicy
		mutate(&p)
		if err := p.Validate(); err == nil {
			t.Errorf("case %d: %+v: got nil, want an error", i, p)
		}
	}
}

// attempt is the result of one call as the runner sees it.
type attempt struct {
	status  int
	header  http.Header
	err     error
	arrived bool
}

// call POSTs a small body with an Idempotency-Key the way the runner does, watched by a
// worker.Trace; prepare, if not nil, adjusts the request before it is sent.
func call(ctx context.Context, client *http.Client, url string, prepare func(*http.Request)) attempt {
	var trace worker.Trace
	req, err := http.NewRequestWithContext(trace.WithContext(ctx), http.MethodPost, url, bytes.NewReader([]byte(`{"approval":{}}`)))
	if err != nil {
		return attempt{err: err}
	}
	req.Header.Set("Idempotency-Key", "op-1")
	if prepare != nil {
		prepare(req)
	}
	resp, err := client.Do(req)
	if err != nil {
		return attempt{err: err, arrived: trace.MayHaveArrived(err)}
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return attempt{status: resp.StatusCode, header: resp.Header, err: err, arrived: true}
}

// rawServer serves each connection with handle, then closes it, and returns the URL. It
// speaks no HTTP by itself, so a test controls exactly when the connection breaks.
func rawServer(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return // the listener was closed by the cleanup
			}
			wg.Go(func() {
				defer conn.Close()
				handle(conn)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return "http://" + ln.Addr().String() + "/"
}

// readRequest reads one whole HTTP request from conn.
func readRequest(t *testing.T, conn net.Conn) {
	req, err := http.ReadRequest(bufio.NewReader(conn))
	if err != nil {
		t.Errorf("read request: %v", err)
		return
	}
	if _, err := io.Copy(io.Discard, req.Body); err != nil {
		t.Errorf("read request body: %v", err)
	}
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// httpServer starts a plain HTTP server and returns its URL.
func httpServer(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func constant(v float64) func() float64 { return func() float64 { return v } }

var half = constant(0.5)
