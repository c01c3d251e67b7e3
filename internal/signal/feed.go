package signal

import (
	"context"
	"sync"
	"time"
)

// The backoff between a Feed's attempts to run its session again.
const (
	feedBackoffMin = 100 * time.Millisecond
	feedBackoffMax = 5 * time.Second
)

// Feed is a Hub fed from outside the process, by a session on a connection of its own (on
// PostgreSQL, the LISTEN connection that hears every replica's NOTIFY). The first Subscribe
// starts one goroutine that runs the session, and runs it again, after a backoff that
// doubles up to a few seconds, whenever it fails; Close stops it and waits for it, and closes
// every subscription as Hub.Close does.
type Feed struct {
	*Hub
	session func(ctx context.Context, connected func()) error
	lost    func(err error, backoff time.Duration)

	mu      sync.Mutex
	started bool
	closed  bool
	cancel  context.CancelFunc
	done    chan struct{} // closed when the goroutine has returned
}

// NewFeed returns a feed whose session connects, calls connected once it hears signals (which
// resets the backoff), and signals the hub with what it hears until it fails or ctx ends. lost
// is told of each failure, and of the wait before the next attempt.
func NewFeed(session func(ctx context.Context, connected func()) error, lost func(err error, backoff time.Duration)) *Feed {
	return &Feed{Hub: NewHub(), session: session, lost: lost}
}

// Subscribe is Hub.Subscribe, and starts the session on the first call before Close.
func (f *Feed) Subscribe(topic string) (<-chan struct{}, func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.started && !f.closed {
		f.started = true
		ctx, cancel := context.WithCancel(context.Background())
		f.cancel, f.done = cancel, make(chan struct{})
		go f.run(ctx)
	}
	return f.Hub.Subscribe(topic)
}

// Close ends every subscription, stops the session, if one was started, and waits for its
// goroutine to return. Closing again does nothing.
func (f *Feed) Close() {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	started := f.started
	f.mu.Unlock()
	f.Hub.Close()
	if started {
		f.cancel()
		<-f.done
	}
}

// run keeps a session going until ctx ends.
func (f *Feed) run(ctx context.Context) {
	defer close(f.done)
	backoff := feedBackoffMin
	for {
		err := f.session(ctx, func() { backoff = feedBackoffMin })
		if ctx.Err() != nil {
			return
		}
		f.lost(err, backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, feedBackoffMax)
	}
}
