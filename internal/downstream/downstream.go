// Package downstream is the reference downstream target for tests: a real HTTP server on
// loopback that stands for the system an approved action calls (a deployer, a payment
// provider). It counts effects per Idempotency-Key, so a test can assert invariant 5, one
// effect per approved action, on what actually arrived rather than on what the runner
// believes it sent.
//
// A POST to URL() is an action. In order, the server:
//
//  1. counts the request and reads its body;
//  2. when secrets are configured, verifies the Standard Webhooks signature and answers 401
//     without an effect when it does not match;
//  3. answers 400 without an effect when the Idempotency-Key header is missing;
//  4. answers the next queued FailWith status, if any, without an effect;
//  5. applies the effect, or, when it honours keys and the key already had one, replays the
//     first result without a new effect;
//  6. drops the connection without answering when DropAfterEffect is armed;
//  7. waits Delay, then answers 200 with the result {"key": K, "effect": N}, where N numbers
//     the effects of the whole server from 1.
//
// The effect happens before the delay: a client that gives up waiting leaves the effect in
// place and loses only the answer, as with a real target that commits whatever the caller
// does. GET LookupURL()?key=K answers 200 with the stored result when K had an effect and 404
// otherwise, for reconciling uncertain calls.
package downstream

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/approvald/approval/webhook"
)

// MaxBody bounds the request body the server reads.
const MaxBody = 1 << 20

// Options configure a Server at construction. HonourKeys and Delay can be changed later.
type Options struct {
	// HonourKeys makes a repeated Idempotency-Key return the first result without a new
	// effect. When false every request is a new effect, as with a target that ignores keys.
	HonourKeys bool
	// Delay is how long the server waits before answering. It ends early, without an answer,
	// when the client goes away or the server closes.
	Delay time.Duration
	// Secrets, when not empty, are the Standard Webhooks secrets ("whsec_...") of which one
	// must have signed each action request.
	Secrets []string
	// Now is the clock for the signature's timestamp window; nil means time.Now.
	Now func() time.Time
}

// Server is a running reference target. It is safe for concurrent use.
type Server struct {
	srv      *httptest.Server
	verifier *webhook.Verifier // nil: signatures are not checked
	now      func() time.Time

	closing   chan struct{} // closed by Close, so delayed answers give up at once
	closeOnce sync.Once

	mu         sync.Mutex
	honourKeys bool
	delay      time.Duration
	failures   []failure
	drops      int
	requests   int
	lookups    int
	waiting    int
	total      int
	effects    map[string]int
	records    map[string]record // the first effect of each key
}

// failure is one queued FailWith answer.
type failure struct {
	status     int
	retryAfter time.Duration // 0: no Retry-After header
}

// record is what the first effect under a key left behind.
type record struct {
	result []byte
	body   []byte
}

// New starts a Server on a loopback port. Close it when done.
func New(opts Options) *Server {
	s := &Server{
		now:        opts.Now,
		closing:    make(chan struct{}),
		honourKeys: opts.HonourKeys,
		delay:      opts.Delay,
		effects:    make(map[string]int),
		records:    make(map[string]record),
	}
	if s.now == nil {
		s.now = time.Now
	}
	if len(opts.Secrets) > 0 {
		s.verifier = &webhook.Verifier{Scheme: webhook.SchemeStandard, Secrets: opts.Secrets}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /{$}", s.handleAction)
	mux.HandleFunc("GET /lookup", s.handleLookup)
	s.srv = httptest.NewServer(mux)
	return s
}

// URL is where actions are POSTed.
func (s *Server) URL() string { return s.srv.URL + "/" }

// LookupURL is the lookup endpoint, to be called with ?key=K.
func (s *Server) LookupURL() string { return s.srv.URL + "/lookup" }

// Close stops the server. Answers waiting out a Delay are abandoned, so Close does not wait
// for them.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		close(s.closing)
		s.srv.Close()
	})
}

// SetHonourKeys changes whether repeated keys are honoured, from the next request on.
func (s *Server) SetHonourKeys(honour bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.honourKeys = honour
}

// SetDelay changes the delay before answering, from the next request on.
func (s *Server) SetDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay = d
}

// FailWith queues statuses: each of the next len(statuses) action requests is answered with
// the next one, without an effect. Calls add to the queue.
func (s *Server) FailWith(statuses ...int) {
	s.FailWithRetryAfter(0, statuses...)
}

// FailWithRetryAfter is FailWith with a Retry-After header of retryAfter, in whole seconds,
// on each of these answers.
func (s *Server) FailWithRetryAfter(retryAfter time.Duration, statuses ...int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, status := range statuses {
		s.failures = append(s.failures, failure{status: status, retryAfter: retryAfter})
	}
}

// DropAfterEffect makes the next n action requests that get as far as the effect apply it
// (or replay it, when keys are honoured) and then close the connection without answering:
// the request arrived, but the caller cannot know. Calls add up.
//
// A client that reuses connections may see net/http resend a request dropped this way on
// its own (it does so for a POST carrying an Idempotency-Key with a rewindable body), which
// shows up here as a second request; tests that count requests use fresh connections.
func (s *Server) DropAfterEffect(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drops += n
}

// Effects returns the number of effects under key.
func (s *Server) Effects(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.effects[key]
}

// TotalEffects returns the number of effects under all keys.
func (s *Server) TotalEffects() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

// Keys returns the keys that had an effect, sorted.
func (s *Server) Keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, len(s.effects))
	for key := range s.effects {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	return keys
}

// Body returns the request body of the first effect under key, or nil, so a test can check
// what the caller sent.
func (s *Server) Body(key string) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.records[key].body)
}

// Requests returns the number of action requests received, whatever their answer.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// Waiting returns the number of answers being held back by Delay right now, so a test can
// act (cancel, crash, close) while a request is known to be inside the target.
func (s *Server) Waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiting
}

// Lookups returns the number of lookup requests received.
func (s *Server) Lookups() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lookups
}

func (s *Server) handleAction(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.requests++
	s.mu.Unlock()

	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		http.Error(w, fmt.Sprintf("read body: %v", err), http.StatusBadRequest)
		return
	}
	if s.verifier != nil {
		if _, err := s.verifier.Verify(r.Header, body, s.now()); err != nil {
			http.Error(w, fmt.Sprintf("verify signature: %v", err), http.StatusUnauthorized)
			return
		}
	}
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		http.Error(w, "missing Idempotency-Key header", http.StatusBadRequest)
		return
	}

	a := s.apply(key, body)
	if a.drop {
		s.drop(w)
		return
	}
	if !s.wait(r, a.delay) {
		// Returning would send an empty 200; abort so the connection closes unanswered.
		panic(http.ErrAbortHandler)
	}
	if a.status != http.StatusOK {
		if a.retryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int(a.retryAfter/time.Second)))
		}
		http.Error(w, http.StatusText(a.status), a.status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(a.result)
}

// answer is what apply decided for one action request.
type answer struct {
	status     int           // 200 with result, or a queued failure
	retryAfter time.Duration // of a queued failure
	result     []byte
	drop       bool // close the connection instead of answering
	delay      time.Duration
}

// apply decides one action request under the lock, so that a queued failure, an effect and
// a drop are each taken by exactly one of several concurrent requests.
func (s *Server) apply(key string, body []byte) answer {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.failures) > 0 {
		f := s.failures[0]
		s.failures = s.failures[1:]
		return answer{status: f.status, retryAfter: f.retryAfter, delay: s.delay}
	}

	a := answer{status: http.StatusOK, delay: s.delay}
	rec, seen := s.records[key]
	switch {
	case seen && s.honourKeys:
		a.result = rec.result
	case seen:
		// Not honouring the key: a new effect with its own result, though lookups keep
		// reporting the first.
		s.total++
		s.effects[key]++
		a.result = resultJSON(key, s.total)
	default:
		s.total++
		s.effects[key]++
		a.result = resultJSON(key, s.total)
		s.records[key] = record{result: a.result, body: body}
	}
	if s.drops > 0 {
		s.drops--
		a.drop = true
	}
	return a
}

// drop closes the connection under the request without writing a byte of the answer.
func (s *Server) drop(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// HTTP/1 on httptest always supports hijacking; if it ever does not, failing loudly
		// beats answering, which would turn a "may have arrived" test into a plain success.
		panic(fmt.Sprintf("downstream: hijack to drop the connection: %v", err))
	}
	_ = conn.Close()
}

// wait sleeps for d and reports whether to answer: false when the client went away or the
// server is closing first.
func (s *Server) wait(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	s.mu.Lock()
	s.waiting++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.waiting--
		s.mu.Unlock()
	}()

	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-r.Context().Done():
		return false
	case <-s.closing:
		return false
	}
}

func (s *Server) handleLookup(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("key")
	s.mu.Lock()
	s.lookups++
	rec, ok := s.records[key]
	s.mu.Unlock()

	if key == "" {
		http.Error(w, "missing key parameter", http.StatusBadRequest)
		return
	}
	if !ok {
		http.Error(w, "no effect under this key", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(rec.result)
}

// Result is the body of a 200 answer and of a found lookup.
type Result struct {
	Key    string `json:"key"`
	Effect int    `json:"effect"` // numbers the server's effects from 1
}

func resultJSON(key string, effect int) []byte {
	b, err := json.Marshal(Result{Key: key, Effect: effect})
	if err != nil {
		panic(fmt.Sprintf("downstream: marshal result: %v", err)) // a string and an int always marshal
	}
	return b
}
