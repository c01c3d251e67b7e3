package httpapi

import "sync"

// changes wakes long-polls (GET /v1/approvals/{id}?wait=) at once when this process changes an
// approval. It is only a shortcut: changes made by other replicas or workers are seen by the
// long-poll's periodic re-read of the store, so nothing depends on it being told.
type changes struct {
	mu      sync.Mutex
	waiting map[string]*waiters
}

// waiters is one approval's wake-up channel, closed on its next change, and how many
// long-polls hold it.
type waiters struct {
	ch chan struct{}
	n  int
}

// watch returns a channel closed at the next change of the approval id, and a release func the
// caller must call when it stops waiting. Watch before reading the approval, so that a change
// landing between the read and the wait is not missed.
func (c *changes) watch(id string) (<-chan struct{}, func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.waiting[id]
	if w == nil {
		w = &waiters{ch: make(chan struct{})}
		c.waiting[id] = w
	}
	w.n++
	var once sync.Once
	return w.ch, func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			w.n--
			// Drop the entry with its last watcher, unless notify already replaced it.
			if w.n == 0 && c.waiting[id] == w {
				delete(c.waiting, id)
			}
		})
	}
}

// notify wakes every long-poll watching the approval id.
func (c *changes) notify(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w := c.waiting[id]; w != nil {
		close(w.ch)
		delete(c.waiting, id)
	}
}
