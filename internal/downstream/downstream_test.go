package downstream_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/approvald/approval/internal/downstream"
	"github.com/approvald/approval/internal/fakeclock"
	"github.com/approvald/approval/internal/wait"
	"github.com/approvald/approval/webhook"
)

func TestHonourKeys(t *testing.T) {
	t.Parallel()
	s := MustNew(t, downstream.Options{HonourKeys: true})

	first := MustPost(t, s, "op-a", nil)
	again := MustPost(t, s, "op-a", nil)
	MustPost(t, s, "op-b", nil)

	if first.status != 200 || again.status != 200 {
		t.Fatalf("statuses: got %d, %d, want 200, 200", first.status, again.status)
	}
	if !bytes.Equal(first.body, again.body) {
		t.Errorf("replayed result: got %s, want %s", again.body, first.body)
	}
	assertCounts(t, s, map[string]int{"op-a": 1, "op-b": 1})
	if got := s.Requests(); got != 3 {
		t.Errorf("Requests: got %d, want 3", got)
	}
}

func TestIgnoreKeys(t *testing.T) {
	t.Parallel()
	s := MustNew(t, downstream.Options{})

	first := MustPost(t, s, "op-a", []byte(`{"n":1}`))
	again := MustPost(t, s, "op-a", []byte(`{"n":2}`))
	if bytes.Equal(first.body, again.body) {
		t.Errorf("second effect returned the first result %s", first.body)
	}
	assertCounts(t, s, map[string]int{"op-a": 2})

	// The lookup and Body keep describing the first effect.
	if got := MustLookup(t, s, "op-a"); got.status != 200 || !bytes.Equal(got.body, first.body) {
		t.Errorf("lookup: got %d %s, want 200 %s", got.status, got.body, first.body)
	}
	if got := s.Body("op-a"); string(got) != `{"n":1}` {
		t.Errorf("Body: got %s, want {\"n\":1}", got)
	}

	// Switched at run time.
	s.SetHonourKeys(true)
	MustPost(t, s, "op-a", nil)
	assertCounts(t, s, map[string]int{"op-a": 2})
}

func TestMissingKey(t *testing.T) {
	t.Parallel()
	s := MustNew(t, downstream.Options{HonourKeys: true})
	if got := MustPost(t, s, "", nil); got.status != http.StatusBadRequest {
		t.Errorf("status: got %d, want 400", got.status)
	}
	assertCounts(t, s, map[string]int{})
}

func TestFailWith(t *testing.T) {
	t.Parallel()
	s := MustNew(t, downstream.Options{HonourKeys: true})
	s.FailWithRetryAfter(3*time.Second, 503, 429)
	s.FailWith(500)

	for _, want := range []struct {
		status     int
		retryAfter string
	}{{503, "3"}, {429, "3"}, {500, ""}, {200, ""}, {200, ""}} {
		got := MustPost(t, s, "op-a", nil)
		if got.status != want.status || got.header.Get("Retry-After") != want.retryAfter {
			t.Errorf("got %d Retry-After %q, want %d Retry-After %q",
				got.status, got.header.Get("Retry-After"), want.status, want.retryAfter)
		}
	}
	assertCounts(t, s, map[string]int{"op-a": 1})
	if got := s.Requests(); got != 5 {
		t.Errorf("Requests: got %d, want 5", got)
	}
}

func TestDropAfterEffect(t *testing.T) {
	t.Parallel()
	s := MustNew(t, downstream.Options{HonourKeys: true})
	s.DropAfterEffect(1)

	if _, err := post(t.Context(), s, "op-a", nil); err == nil {
		t.Fatal("dropped request: got an answer, want a transport error")
	}
	assertCounts(t, s, map[string]int{"op-a": 1})
	if got := MustLookup(t, s, "op-a"); got.status != 200 {
		t.Errorf("lookup after a dropped answer: got %d, want 200", got.status)
	}

	// The retry is answered, replaying the effect that happened.
	if got := MustPost(t, s, "op-a", nil); got.status != 200 {
		t.Errorf("retry: got %d, want 200", got.status)
	}
	assertCounts(t, s, map[string]int{"op-a": 1})
}

func TestLookup(t *testing.T) {
	t.Parallel()
	s := MustNew(t, downstream.Options{HonourKeys: true})

	if got := MustLookup(t, s, "op-a"); got.status != http.StatusNotFound {
		t.Errorf("lookup before the effect: got %d, want 404", got.status)
	}
	s.FailWith(503)
	MustPost(t, s, "op-a", nil)
	if got := MustLookup(t, s, "op-a"); got.status != http.StatusNotFound {
		t.Errorf("lookup after a failure: got %d, want 404", got.status)
	}
	sent := MustPost(t, s, "op-a", nil)
	got := MustLookup(t, s, "op-a")
	if got.status != 200 || !bytes.Equal(got.body, sent.body) {
		t.Errorf("lookup after the effect: got %d %s, want 200 %s", got.status, got.body, sent.body)
	}
	if got := MustLookup(t, s, ""); got.status != http.StatusBadRequest {
		t.Errorf("lookup without a key: got %d, want 400", got.status)
	}
	if got := s.Lookups(); got != 4 {
		t.Errorf("Lookups: got %d, want 4", got)
	}
}

// TestDelayAbandoned checks a delayed answer ends when the client goes away: the handler
// returns (nothing is left waiting, so no goroutine is held for the hour) and the effect,
// applied on arrival, stays.
func TestDelayAbandoned(t *testing.T) {
	t.Parallel()
	s := MustNew(t, downstream.Options{HonourKeys: true, Delay: time.Hour})

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := post(ctx, s, "op-a", nil)
		done <- err
	}()
	wait.Until(t, "the request to be held", func() bool { return s.Waiting() == 1 })
	cancel()
	if err := <-done; err == nil {
		t.Error("cancelled request: got an answer, want an error")
	}
	wait.Until(t, "the held answer to be abandoned", func() bool { return s.Waiting() == 0 })
	assertCounts(t, s, map[string]int{"op-a": 1})

	// A delay changed at run time applies to the next request.
	s.SetDelay(0)
	if got := MustPost(t, s, "op-a", nil); got.status != 200 {
		t.Errorf("after SetDelay(0): got %d, want 200", got.status)
	}
}

// TestCloseWhileDelayed checks Close does not wait out a delayed answer.
func TestCloseWhileDelayed(t *testing.T) {
	t.Parallel()
	s := downstream.New(downstream.Options{Delay: time.Hour})
	done := make(chan error, 1)
	go func() {
		_, err := post(context.Background(), s, "op-a", nil)
		done <- err
	}()
	wait.Until(t, "the request to be held", func() bool { return s.Waiting() == 1 })
	s.Close()
	if err := <-done; err == nil {
		t.Error("request held across Close: got an answer, want an error")
	}
	s.Close() // a second Close is harmless
}

func TestSignature(t *testing.T) {
	t.Parallel()
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("downstream-test-secret-32-bytes!"))
	other := "whsec_" + base64.StdEncoding.EncodeToString([]byte("some-other-secret-of-32-bytes!!!"))
	signedAt := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

	clock := fakeclock.New(signedAt.Add(time.Minute))
	s := MustNew(t, downstream.Options{HonourKeys: true, Secrets: []string{secret}, Now: clock.Now})

	body := []byte(`{"approval":{"id":"a1"}}`)
	sign := func(secret string) http.Header {
		h, err := webhook.SignStandard(secret, "msg_1", signedAt, body)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	tests := []struct {
		name   string
		header http.Header
		want   int
	}{
		{"unsigned", nil, http.StatusUnauthorized},
		{"other secret", sign(other), http.StatusUnauthorized},
		{"signed", sign(secret), http.StatusOK},
	}
	for _, tt := range tests {
		resp, err := postHeader(t.Context(), s, "op-a", body, tt.header)
		if err != nil {
			t.Fatal(err)
		}
		if resp.status != tt.want {
			t.Errorf("%s: got %d %s, want %d", tt.name, resp.status, resp.body, tt.want)
		}
	}
	assertCounts(t, s, map[string]int{"op-a": 1})

	// Outside the timestamp window by the server's clock.
	clock.Set(signedAt.Add(10 * time.Minute))
	resp, err := postHeader(t.Context(), s, "op-b", body, sign(secret))
	if err != nil {
		t.Fatal(err)
	}
	if resp.status != http.StatusUnauthorized {
		t.Errorf("stale signature: got %d, want 401", resp.status)
	}
	assertCounts(t, s, map[string]int{"op-a": 1})
}

// TestConcurrent races many requests at once: with keys honoured one key makes one effect
// and every caller sees the same result; queued failures are each taken exactly once.
func TestConcurrent(t *testing.T) {
	t.Parallel()
	const n = 32
	for _, honour := range []bool{true, false} {
		s := MustNew(t, downstream.Options{HonourKeys: honour})
		s.FailWith(503, 503, 503, 503, 503)

		start := make(chan struct{})
		var wg sync.WaitGroup
		results := make([]response, n)
		for i := range n {
			wg.Go(func() {
				<-start
				r, err := post(context.Background(), s, "op-a", nil)
				if err != nil {
					t.Error(err)
				}
				results[i] = r
			})
		}
		close(start)
		wg.Wait()

		failed, bodies := 0, map[string]bool{}
		for _, r := range results {
			switch r.status {
			case 503:
				failed++
			case 200:
				bodies[string(r.body)] = true
			default:
				t.Errorf("honour=%v: got status %d", honour, r.status)
			}
		}
		if failed != 5 {
			t.Errorf("honour=%v: got %d failures, want 5", honour, failed)
		}
		wantEffects := n - 5
		if honour {
			wantEffects = 1
		}
		if len(bodies) != wantEffects {
			t.Errorf("honour=%v: got %d distinct results, want %d", honour, len(bodies), wantEffects)
		}
		assertCounts(t, s, map[string]int{"op-a": wantEffects})
	}
}

// response is one answer, read in full.
type response struct {
	status int
	header http.Header
	body   []byte
}

// client makes every request on a fresh connection, so that net/http never resends a
// request on its own after a dropped connection and the server's counts are exact.
var client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

func post(ctx context.Context, s *downstream.Server, key string, body []byte) (response, error) {
	return postHeader(ctx, s, key, body, nil)
}

func postHeader(ctx context.Context, s *downstream.Server, key string, body []byte, h http.Header) (response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL(), bytes.NewReader(body))
	if err != nil {
		return response{}, err
	}
	for name, values := range h {
		req.Header[name] = values
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	return do(req)
}

func do(req *http.Request) (response, error) {
	resp, err := client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, err
	}
	return response{status: resp.StatusCode, header: resp.Header, body: body}, nil
}

// MustNew starts a server that is closed when the test ends.
func MustNew(tb testing.TB, opts downstream.Options) *downstream.Server {
	tb.Helper()
	s := downstream.New(opts)
	tb.Cleanup(s.Close)
	return s
}

// MustPost posts an action under key and returns the answer, failing on a transport error.
func MustPost(tb testing.TB, s *downstream.Server, key string, body []byte) response {
	tb.Helper()
	r, err := post(context.Background(), s, key, body)
	if err != nil {
		tb.Fatalf("post %q: %v", key, err)
	}
	return r
}

// MustLookup asks the lookup endpoint about key.
func MustLookup(tb testing.TB, s *downstream.Server, key string) response {
	tb.Helper()
	req, err := http.NewRequest(http.MethodGet, s.LookupURL()+"?key="+key, nil)
	if err != nil {
		tb.Fatal(err)
	}
	r, err := do(req)
	if err != nil {
		tb.Fatalf("lookup %q: %v", key, err)
	}
	return r
}

// assertCounts checks the effects per key, their total and the key list.
func assertCounts(tb testing.TB, s *downstream.Server, want map[string]int) {
	tb.Helper()
	total := 0
	for key, n := range want {
		total += n
		if got := s.Effects(key); got != n {
			tb.Errorf("Effects(%q): got %d, want %d", key, got, n)
		}
	}
	if got := s.TotalEffects(); got != total {
		tb.Errorf("TotalEffects: got %d, want %d", got, total)
	}
	var keys []string
	for key := range want {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	if got := s.Keys(); !slices.Equal(got, keys) {
		tb.Errorf("Keys: got %q, want %q", got, keys)
	}
}
