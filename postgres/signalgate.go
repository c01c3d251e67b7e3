package postgres

import (
	"sync"
	"time"
)

// inboxSignalWindow is the least time between two inbox signals of one store (at most one
// more goes out at the end of a window, for the batches it held back).
const inboxSignalWindow = 20 * time.Millisecond

// signalGate coalesces the signals of a store's write batches on one topic. Under a busy
// intake every batch signalled the inbox processors, hundreds of times a second, each a
// NOTIFY in a transaction of its own and a wake-up of every replica's processor, which
// paces its passes anyway (docs/operations.md, "The inbox under load"). A batch asks the gate
// before it is sent: the first in a window carries its own signal, behind its commit, as
// before; the others are held back, and once every held batch has ended, one signal goes
// out for those that stored something, no sooner than the window's end. So the signal a
// stored event is owed always follows its commit: the one that goes out for a held batch
// waits until no held batch is still running.
type signalGate struct {
	window time.Duration
	send   func() // sends one signal; run in a goroutine of its own
	now    func() time.Time
	after  func(time.Duration, func()) func() bool // time.AfterFunc's, returning its Stop

	mu      sync.Mutex
	last    time.Time   // when the last signal was let through or sent
	held    int         // batches held back and not yet ended
	owed    bool        // a held batch that stored something has ended since the last signal sent for held ones
	armed   bool        // a send is scheduled
	stopped bool        // the store is closing: nothing more is sent
	stop    func() bool // the scheduled send's Stop
}

func newSignalGate(window time.Duration, send func()) *signalGate {
	return &signalGate{window: window, send: send, now: time.Now,
		after: func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }}
}

// pass reports whether a batch about to be sent carries its own signal. When it does not,
// the batch is held and must call done when it has ended.
func (g *signalGate) pass() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if now := g.now(); now.Sub(g.last) >= g.window {
		g.last = now
		return true
	}
	g.held++
	return false
}

// done ends a held batch; stored says whether it committed an event that a signal must
// follow (or may have: when in doubt, true).
func (g *signalGate) done(stored bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.held--
	g.owed = g.owed || stored
	g.schedule()
}

// schedule arranges the owed signal for the window's end, once no held batch is running.
// g.mu is held.
func (g *signalGate) schedule() {
	if !g.owed || g.held > 0 || g.armed || g.stopped {
		return
	}
	g.armed = true
	g.stop = g.after(max(0, g.last.Add(g.window).Sub(g.now())), g.fire)
}

// fire sends the owed signal, unless a batch was held meanwhile: its done schedules it again.
func (g *signalGate) fire() {
	g.mu.Lock()
	g.armed = false
	if !g.owed || g.held > 0 || g.stopped {
		g.mu.Unlock()
		return
	}
	g.owed, g.last = false, g.now()
	g.mu.Unlock()
	g.send()
}

// close cancels a scheduled signal and sends no more: the store is closing.
func (g *signalGate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopped = true
	if g.armed && g.stop != nil {
		g.stop()
		g.armed = false
	}
}
