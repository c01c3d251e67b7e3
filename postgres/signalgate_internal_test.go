package postgres

import (
	"sync"
	"testing"
	"time"

	"github.com/approvald/approval/internal/fakeclock"
)

// gateClock drives a signalGate by hand: its clock (a fakeclock.Clock), its scheduled send
// (run by fire) and the signals sent. The timer is driven by hand rather than under
// testing/synctest because a case needs it to fire late, after a batch already opened the next
// window, an order of simultaneous events that synctest does not let a test choose.
type gateClock struct {
	*fakeclock.Clock
	mu        sync.Mutex
	scheduled func()        // the send scheduled, nil when none
	delay     time.Duration // its delay
	sent      int
}

func newTestGate(window time.Duration) (*signalGate, *gateClock) {
	c := &gateClock{Clock: fakeclock.New(time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC))}
	g := newSignalGate(window, func() { c.mu.Lock(); c.sent++; c.mu.Unlock() })
	g.now = c.Now
	g.after = func(d time.Duration, f func()) func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.scheduled, c.delay = f, d
		return func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			stopped := c.scheduled != nil
			c.scheduled = nil
			return stopped
		}
	}
	return g, c
}

// fire runs the scheduled send, as its timer would, and reports whether there was one.
func (c *gateClock) fire() bool {
	c.mu.Lock()
	f := c.scheduled
	c.scheduled = nil
	c.mu.Unlock()
	if f != nil {
		f()
	}
	return f != nil
}

func (c *gateClock) signals() int { c.mu.Lock(); defer c.mu.Unlock(); return c.sent }

// wantSent checks how many signals the gate has sent so far.
func (c *gateClock) wantSent(t *testing.T, want int) {
	t.Helper()
	if got := c.signals(); got != want {
		t.Errorf("signals sent: got %d, want %d", got, want)
	}
}

func TestSignalGate(t *testing.T) {
	const window = 20 * time.Millisecond

	t.Run("first in a window passes", func(t *testing.T) {
		g, c := newTestGate(window)
		if !g.pass() {
			t.Fatal("first batch: held, want passed")
		}
		c.Advance(window)
		if !g.pass() {
			t.Fatal("batch a window later: held, want passed")
		}
		if c.scheduled != nil {
			t.Error("a send was scheduled with nothing held")
		}
	})

	t.Run("held batches that stored get one signal, at the window's end", func(t *testing.T) {
		g, c := newTestGate(window)
		g.pass()
		c.Advance(5 * time.Millisecond)
		if first, second := g.pass(), g.pass(); first || second {
			t.Fatal("batches within the window: passed, want held")
		}
		g.done(false)
		if c.scheduled != nil {
			t.Fatal("a send was scheduled for a held batch that stored nothing")
		}
		g.done(true)
		if c.scheduled == nil {
			t.Fatal("no send scheduled for a held batch that stored")
		}
		if c.delay != 15*time.Millisecond {
			t.Errorf("send scheduled in %s, want at the window's end, 15ms", c.delay)
		}
		c.Advance(15 * time.Millisecond)
		c.fire()
		c.wantSent(t, 1)
		// The send opened a new window.
		if g.pass() {
			t.Error("batch right after the gate's signal: passed, want held")
		}
	})

	t.Run("a batch that ends after a send owes the next", func(t *testing.T) {
		g, c := newTestGate(window)
		g.pass()
		g.pass() // held: A
		g.pass() // held: B, still running when the send goes out
		g.done(true)
		c.Advance(window)
		c.fire()
		g.done(true) // B ended after the send: that send may have preceded its commit
		if c.scheduled == nil {
			t.Fatal("no send scheduled for a batch that ended after the last one")
		}
		c.Advance(window)
		c.fire()
		c.wantSent(t, 2)
	})

	t.Run("a send waits out a window a batch opened meanwhile", func(t *testing.T) {
		g, c := newTestGate(window)
		g.pass()
		g.pass()
		g.done(true) // scheduled for the window's end
		c.Advance(window)
		if !g.pass() { // a new window, opened by a batch carrying its own signal
			t.Fatal("batch a window later: held, want passed")
		}
		c.Advance(5 * time.Millisecond)
		c.fire()
		if got := c.signals(); got != 0 {
			t.Fatalf("signals sent within the new window: got %d, want 0", got)
		}
		if c.scheduled == nil || c.delay != 15*time.Millisecond {
			t.Fatalf("send scheduled in %s (scheduled: %t), want again at the new window's end, 15ms", c.delay, c.scheduled != nil)
		}
		c.Advance(15 * time.Millisecond)
		c.fire()
		c.wantSent(t, 1)
	})

	t.Run("nothing stored, nothing sent", func(t *testing.T) {
		g, c := newTestGate(window)
		g.pass()
		g.pass()
		g.done(false)
		if c.scheduled != nil || c.signals() != 0 {
			t.Error("a signal for held batches that stored nothing")
		}
	})

	t.Run("close sends what is owed, then nothing more", func(t *testing.T) {
		g, c := newTestGate(window)
		g.pass()
		g.pass()
		g.done(true)
		g.close()
		if c.scheduled != nil {
			t.Error("the scheduled send survived close")
		}
		if got := c.signals(); got != 1 {
			t.Errorf("signals sent by close: got %d, want the 1 owed", got)
		}
		g.pass()
		g.done(true)
		if c.fire() || c.signals() != 1 {
			t.Error("a signal scheduled or sent after close")
		}
	})
}
