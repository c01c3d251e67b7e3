package web

import (
	"container/list"
	"net/netip"
	"sync"
	"time"
)

// SigninFailures is how many wrong tokens one client address may paste into the sign-in form
// per SigninFailureWindow; past it the address is answered 429, with Retry-After, until the
// window ends, a right token included. Tokens are 256-bit random values, so this only slows
// a guesser and keeps the log readable. It is counted in memory by each process, so behind N
// replicas an address gets up to N times as many; a restart forgets the counts.
const (
	SigninFailures      = 10
	SigninFailureWindow = time.Minute
	// maxFailingAddresses bounds the memory of the counts: past it the oldest count is
	// forgotten for the new one, so that a flood of addresses slows itself, never everyone.
	maxFailingAddresses = 10_000
)

// failureLimiter counts failures per client address (an IPv6 address by its /64) in fixed
// windows, in a map bounded by evicting the count whose window started first.
type failureLimiter struct {
	limit  int
	window time.Duration
	max    int

	mu     sync.Mutex
	counts map[netip.Prefix]*list.Element // of *failureCount
	order  *list.List                     // oldest window first
}

type failureCount struct {
	key   netip.Prefix
	n     int
	start time.Time
}

func newFailureLimiter(limit int, window time.Duration, max int) *failureLimiter {
	return &failureLimiter{limit: limit, window: window, max: max,
		counts: make(map[netip.Prefix]*list.Element), order: list.New()}
}

// blocked reports whether addr has failed limit times in its current window at now, and if
// so, when it may try again.
func (l *failureLimiter) blocked(addr netip.Addr, now time.Time) (bool, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.counts[addrKey(addr)]
	if e == nil {
		return false, time.Time{}
	}
	c := e.Value.(*failureCount)
	if end := c.start.Add(l.window); now.Before(end) && c.n >= l.limit {
		return true, end
	}
	return false, time.Time{}
}

// fail counts one failure of addr at now.
func (l *failureLimiter) fail(addr netip.Addr, now time.Time) {
	key := addrKey(addr)
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.counts[key]; e != nil {
		c := e.Value.(*failureCount)
		if now.Before(c.start.Add(l.window)) {
			c.n++
			return
		}
		// A new window: the count moves to the back of the order.
		c.n, c.start = 1, now
		l.order.MoveToBack(e)
		return
	}
	for l.order.Len() > 0 && l.order.Len() >= l.max {
		oldest := l.order.Front()
		delete(l.counts, oldest.Value.(*failureCount).key)
		l.order.Remove(oldest)
	}
	l.counts[key] = l.order.PushBack(&failureCount{key: key, n: 1, start: now})
}

// len returns how many addresses are counted.
func (l *failureLimiter) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.counts)
}
