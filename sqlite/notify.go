package sqlite

import "sync"

// Subscribe returns a channel that receives a value (coalesced, buffered 1) after each
// committed change on topic, and a function that ends the subscription; see
// approval.Notifier. A SQLite database has one writing process, so the signal never needs to
// leave it: it is sent in process, after the commit. Close closes every subscription's
// channel, so a receive that reports the channel closed means the store is gone; a
// subscription made after Close gets a closed channel at once.
func (s *Store) Subscribe(topic string) (<-chan struct{}, func()) {
	return s.hub.subscribe(topic)
}

// hub is the in-process broadcaster behind Subscribe. It runs no goroutine: a signal is a
// non-blocking send on each subscriber's channel, made by the committing goroutine.
type hub struct {
	mu     sync.Mutex
	subs   map[string]map[chan struct{}]struct{} // by topic
	closed bool
}

func newHub() *hub {
	return &hub{subs: make(map[string]map[chan struct{}]struct{})}
}

func (h *hub) subscribe(topic string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		close(ch)
		return ch, func() {}
	}
	if h.subs[topic] == nil {
		h.subs[topic] = make(map[chan struct{}]struct{})
	}
	h.subs[topic][ch] = struct{}{}
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		// After close the channel is already closed and gone from the map; deleting again
		// is harmless, so the function may be called any number of times.
		delete(h.subs[topic], ch)
		if len(h.subs[topic]) == 0 {
			delete(h.subs, topic)
		}
	}
}

// signal wakes every subscriber of each topic. A subscriber that has not yet taken the last
// value keeps just that one: signals are hints to look again, so coalescing loses nothing.
func (h *hub) signal(topics ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, topic := range topics {
		for ch := range h.subs[topic] {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

// close ends every subscription by closing its channel. Sends and closes both happen under
// mu, so no signal can reach a closed channel.
func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed = true
	for _, chans := range h.subs {
		for ch := range chans {
			close(ch)
		}
	}
	h.subs = nil
}
