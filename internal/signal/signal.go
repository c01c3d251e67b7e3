// Package signal is the in-process half of approval.Notifier that both drivers share: it fans
// a topic's signals out to this process's subscribers. SQLite signals it after each commit;
// PostgreSQL signals it with what its LISTEN connection hears from every replica.
package signal

import "sync"

// Hub broadcasts signals to subscribers by topic. It runs no goroutine: a signal is a
// non-blocking send on each subscriber's channel, made by the signalling goroutine.
//
// Close closes every subscription's channel, and a subscription made after Close gets a closed
// channel at once: a receive that reports the channel closed means the store is gone, so a
// receiver stops waiting on it (approval.Notifier). Ending a subscription never closes its
// channel: a receiver selecting on it with other cases would read a closed channel as an
// endless stream of signals.
type Hub struct {
	mu     sync.Mutex
	subs   map[string]map[chan struct{}]struct{} // by topic
	closed bool
}

// NewHub returns an open hub without subscribers.
func NewHub() *Hub {
	return &Hub{subs: make(map[string]map[chan struct{}]struct{})}
}

// Subscribe returns a channel that receives a value (coalesced, buffered 1) after each signal
// of topic, and a function that ends the subscription; it may be called any number of times,
// before or after Close.
func (h *Hub) Subscribe(topic string) (<-chan struct{}, func()) {
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
		// After Close the channel is already closed and gone from the map; deleting again
		// is harmless.
		delete(h.subs[topic], ch)
		if len(h.subs[topic]) == 0 {
			delete(h.subs, topic)
		}
	}
}

// Signal wakes every subscriber of each topic. A subscriber that has not yet taken the last
// value keeps just that one: signals are hints to look again, so coalescing loses nothing.
// After Close it does nothing.
func (h *Hub) Signal(topics ...string) {
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

// Close ends every subscription by closing its channel; closing again does nothing. Sends
// and closes both happen under mu, so no signal can reach a closed channel.
func (h *Hub) Close() {
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
