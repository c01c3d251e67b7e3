package loadtest

import (
	"io"
	"net/http"
	"strings"
	"sync"
)

// Source is a webhook source of the server under load: intake delivers to it, signing with
// Secret under the Standard Webhooks scheme.
type Source struct {
	Name   string
	Secret string // whsec_...
}

// Target is the downstream system the execute scenario's action calls: it answers every
// call 200 at once and wakes whoever waits for the call's operation key, the part of its
// Idempotency-Key after the escaped requester (approval.DownstreamKey). It does not check signatures: the runner's tests do; here it only marks
// the moment the effect reached the target.
type Target struct {
	mu      sync.Mutex
	waiting map[string]chan struct{}
	early   map[string]bool // calls that came before anyone expected them
}

// NewTarget returns a Target that no one waits on yet.
func NewTarget() *Target {
	return &Target{waiting: make(map[string]chan struct{}), early: make(map[string]bool)}
}

// Expect returns a channel closed when the target is called with key (at once if it was
// called already since the last Expect), and a function that stops waiting.
func (t *Target) Expect(key string) (<-chan struct{}, func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ch := make(chan struct{})
	if t.early[key] {
		delete(t.early, key)
		close(ch)
		return ch, func() {}
	}
	t.waiting[key] = ch
	return ch, func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.waiting[key] == ch {
			delete(t.waiting, key)
		}
	}
}

// ServeHTTP answers a call of the runner.
func (t *Target) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	// The escaped requester holds no "/": the operation key is what follows the first one.
	_, key, _ := strings.Cut(r.Header.Get("Idempotency-Key"), "/")
	t.mu.Lock()
	if ch, ok := t.waiting[key]; ok {
		close(ch)
		delete(t.waiting, key)
	} else if key != "" {
		t.early[key] = true
	}
	t.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{"ok":true}`)
}
