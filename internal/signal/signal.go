// Package signal is the in-process half of approval.Notifier that both drivers share: it fans
// a topic's signals out to this process's subscribers. SQLite signals it after each commit;
// PostgreSQL signals it with what its LISTEN connection hears from every replica.
package signal

import (
	"strings"
	"sync"
)

// Hub broadcasts signals to subscribers by topic. It runs no goroutine: a signal is a
// non-blocking send on each subscriber's channel, made by the signalling goroutine.
//
// A topic "T/K" names the key K within the topic T (approval.TopicApproval): a signal on
// "T/K" wakes the subscribers of "T/K" and of "T", and a signal on "T" (a change whose key
// is not known) wakes the subscribers of "T" and of every "T/K". So a thousand long-polls,
// each on its own approval, cost a change of one approval one wake-up, not a thousand.
//
// Close closes every subscription's channel, and a subscription made after Close gets a closed
// channel at once: a receive that reports the channel closed means the store is gone, so a
// receiver stops waiting on it (approval.Notifier). Ending a subscription never closes its
// channel: a receiver selecting on it with other cases would read a closed channel as an
// endless stream of signals.
type Hub struct {
	mu     sync.Mutex
	subs   map[string]map[string]set // by topic, then key ("" for the whole topic)
	closed bool
}

// set is a set of subscription channels.
type set map[chan struct{}]struct{}

// NewHub returns an open hub without subscribers.
func NewHub() *Hub {
	return &Hub{subs: make(map[string]map[string]set)}
}

// Subscribe returns a channel that receives a value (coalesced, buffered 1) after each signal
// of topic (see Hub for keys), and a function that ends the subscription; it may be called
// any number of times, before or after Close.
func (h *Hub) Subscribe(topic string) (<-chan struct{}, func()) {
	name, key := split(topic)
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		close(ch)
		return ch, func() {}
	}
	keys := h.subs[name]
	if keys == nil {
		keys = make(map[string]set)
		h.subs[name] = keys
	}
	if keys[key] == nil {
		keys[key] = make(set)
	}
	keys[key][ch] = struct{}{}
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		// After Close the channel is already closed and gone from the map; deleting again
		// is harmless.
		keys := h.subs[name]
		delete(keys[key], ch)
		if len(keys[key]) == 0 {
			delete(keys, key)
		}
		if len(keys) == 0 {
			delete(h.subs, name)
		}
	}
}

// Signal wakes the subscribers of each topic (see Hub for keys). A subscriber that has not
// yet taken the last value keeps just that one: signals are hints to look again, so
// coalescing loses nothing. After Close it does nothing.
func (h *Hub) Signal(topics ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, topic := range topics {
		name, key := split(topic)
		keys := h.subs[name]
		if key == "" {
			for _, chans := range keys {
				wake(chans)
			}
			continue
		}
		wake(keys[key])
		wake(keys[""])
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
	for _, keys := range h.subs {
		for _, chans := range keys {
			for ch := range chans {
				close(ch)
			}
		}
	}
	h.subs = nil
}

func wake(chans set) {
	for ch := range chans {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// split returns the topic and the key of "T/K", or topic and "" when it names no key.
func split(topic string) (name, key string) {
	name, key, _ = strings.Cut(topic, "/")
	return name, key
}
