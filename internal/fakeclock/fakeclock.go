// Package fakeclock is the one fake clock of approvald's tests. A test hands Clock.Now to a
// store, the Service, a server or a worker and moves time with Advance or Set, instead of
// waiting for real time to pass. Code that waits on timers of its own (a ticker, a backoff, a
// coalescing window) is tested under testing/synctest instead (docs/testing.md, "Time").
package fakeclock

import (
	"sync"
	"time"
)

// Clock is a clock that stands still until Advance or Set moves it. It is safe for concurrent
// use, so that a race can move time while the code under test reads it.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// New returns a clock that reads start until it is moved.
func New(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's current time. Its method value is what a Now field takes.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d (back when d is negative).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}
