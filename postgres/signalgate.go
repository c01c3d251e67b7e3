package postgres

import (
	"sync"
	"time"
)

// inboxSignalWindow is the least time between two inbox signals of one store that a batch
// carries or the gate sends.
const inboxSignalWindow = 20 * time.Millisecond

// signalGate coalesces the signals of a store's write batches on one topic. Under a busy
// intake every batch signalled the inbox processors, hundreds of times a second, each a
// NOTIFY in a transaction of its own and a wake-up of every replica's processor, which
// paces its passes anyway (docs/operations.md, "The inbox under load"). A batch asks the gate
// before it is sent: the first in a window carries its own signal, behind its commit, as
// before; the others are held back and, when they have ended, owe a signal if they stored
// something (or may have). The gate sends one for all that owe it, in a round trip of its
// own, at the end of the window. So the signal a stored event is owed always follows its
// commit: a batch owes only once it has ended, and a batch that ends after a send owes the
// next one.
type signalGate struct {
	window time.Duration
	send   func() // sends one signal
	now    func() time.Time
	after  func(time.Duration, func()) func() bool // time.AfterFunc's, returning its Stop

	mu      sync.Mutex
	last    time.Time      // when the last signal was let through or sent
	owed    bool           // a batch held back or whose own signal failed ended since the last send
	armed   bool           // a send is scheduled
	stopped bool           // the store is closing: nothing more is scheduled
	stop    func() bool    // the scheduled send's Stop, while armed
	sending sync.WaitGroup // sends under way, which close waits for
}

func newSignalGate(window time.Duration, send func()) *signalGate {
	return &signalGate{window: window, send: send, now: time.Now,
		after: func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }}
}

// pass reports whether a batch about to be sent carries its own signal. When it does not,
// the batch must call done when it has ended.
func (g *signalGate) pass() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if now := g.now(); now.Sub(g.last) >= g.window {
		g.last = now
		return true
	}
	return false
}

// done ends a held batch; stored says whether it committed an event that a signal must
// follow (or may have: when in doubt, true). A batch that passed but whose own signal failed,
// or whose commit's outcome is unknown, calls done(true) too.
func (g *signalGate) done(stored bool) {
	if !stored {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.owed = true
	g.schedule()
}

// schedule arranges the owed signal for the window's end. g.mu is held.
func (g *signalGate) schedule() {
	if !g.owed || g.armed || g.stopped {
		return
	}
	g.armed = true
	g.stop = g.after(max(0, g.last.Add(g.window).Sub(g.now())), g.fire)
}

// fire sends the owed signal, or waits out the window again if a batch carried one meanwhile.
func (g *signalGate) fire() {
	g.mu.Lock()
	g.armed = false
	if !g.owed || g.stopped {
		g.mu.Unlock()
		return
	}
	now := g.now()
	if now.Sub(g.last) < g.window {
		g.schedule()
		g.mu.Unlock()
		return
	}
	g.owed, g.last = false, now
	g.sending.Add(1)
	g.mu.Unlock()
	defer g.sending.Done()
	g.send()
}

// close cancels the scheduled send, waits for one under way, and sends what is still owed at
// once: the store is closing, and the processors of other replicas would otherwise find the
// last held batches' events only when they next poll. Nothing is sent after it returns.
func (g *signalGate) close() {
	g.mu.Lock()
	g.stopped = true
	if g.armed {
		g.stop()
		g.armed = false
	}
	owed := g.owed
	g.owed = false
	g.mu.Unlock()
	g.sending.Wait()
	if owed {
		g.send()
	}
}
