package web

import (
	"container/list"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// LinksPerAddress is how many sign-in links one client address may ask for per
// LinksAddressWindow, whoever they are for, on top of the per-person limit of the rules
// (approval.SigninLimit): without it, one client could make the server send a mail to every
// person in turn. It is counted in memory by each process, so behind N replicas an address
// gets up to N times as many; a restart forgets the counts.
const (
	LinksPerAddress    = 20
	LinksAddressWindow = time.Hour
	// DefaultTrackedAddresses is LinksConfig.TrackedAddresses when it is 0.
	DefaultTrackedAddresses = 100_000
)

// addrLimiter counts requests per client address in fixed windows. IPv6 addresses are counted
// by their /64, which one client usually holds whole. It remembers at most size addresses:
// when full, it forgets the address whose window began first, so that a new address is
// always counted and never refused only because others filled the table. The price is that
// an address forgotten early may ask again sooner; the per-person rules (approval.
// RequestSignin) bound what reaches any one person whatever this table forgets.
type addrLimiter struct {
	limit  int
	window time.Duration
	size   int

	mu     sync.Mutex
	counts map[netip.Prefix]*list.Element // of *addrCount, in order
	// order holds the counts by the start of their window, the earliest first.
	order *list.List
}

type addrCount struct {
	key   netip.Prefix
	n     int
	start time.Time
}

func newAddrLimiter(limit int, window time.Duration, size int) *addrLimiter {
	return &addrLimiter{limit: limit, window: window, size: max(size, 1),
		counts: make(map[netip.Prefix]*list.Element), order: list.New()}
}

// allow counts one request from addr at now and reports whether it is within the limit, and
// if not, when the address may ask again.
func (l *addrLimiter) allow(addr netip.Addr, now time.Time) (bool, time.Time) {
	key := addrKey(addr)
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.counts[key]
	switch {
	case e == nil:
		for l.order.Len() >= l.size {
			delete(l.counts, l.order.Remove(l.order.Front()).(*addrCount).key)
		}
		e = l.order.PushBack(&addrCount{key: key, start: now})
		l.counts[key] = e
	case !now.Before(e.Value.(*addrCount).start.Add(l.window)):
		// A new window: the count starts again and goes to the back of the order.
		*e.Value.(*addrCount) = addrCount{key: key, start: now}
		l.order.MoveToBack(e)
	}
	c := e.Value.(*addrCount)
	if c.n >= l.limit {
		return false, c.start.Add(l.window)
	}
	c.n++
	return true, time.Time{}
}

// addrKey is the address counted: an IPv4 address itself, an IPv6 address's /64.
func addrKey(a netip.Addr) netip.Prefix {
	a = a.Unmap()
	if a.Is4() {
		return netip.PrefixFrom(a, 32)
	}
	p, _ := a.Prefix(64)
	return p
}

// clientAddr is the address of the client that sent r: the connection's peer, unless that
// peer is one of trusted (a proxy in front of approvald), in which case X-Forwarded-For is
// read from the right, past the trusted proxies, to the first address no trusted proxy
// holds. Without trusted proxies the header is ignored: any client can write it.
func clientAddr(r *http.Request, trusted []netip.Prefix) (netip.Addr, bool) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	peer = peer.Unmap().WithZone("")
	if !isTrusted(peer, trusted) {
		return peer, true
	}
	var hops []string
	for _, v := range r.Header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(v, ",")...)
	}
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			break // not written by a proxy we trust: stop at the last good hop
		}
		client = a.Unmap().WithZone("")
		if !isTrusted(client, trusted) {
			break
		}
	}
	return client, true
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
