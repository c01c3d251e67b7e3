package web

import (
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
	// maxTrackedAddresses bounds the memory of the counts: when that many addresses have
	// asked within the window, further new addresses are refused until the window moves on.
	maxTrackedAddresses = 100_000
)

// addrLimiter counts requests per client address in fixed windows. IPv6 addresses are counted
// by their /64, which one client usually holds whole.
type addrLimiter struct {
	limit  int
	window time.Duration

	mu     sync.Mutex
	counts map[netip.Prefix]*addrCount
}

type addrCount struct {
	n     int
	start time.Time
}

func newAddrLimiter(limit int, window time.Duration) *addrLimiter {
	return &addrLimiter{limit: limit, window: window, counts: make(map[netip.Prefix]*addrCount)}
}

// allow counts one request from addr at now and reports whether it is within the limit, and
// if not, when the address may ask again.
func (l *addrLimiter) allow(addr netip.Addr, now time.Time) (bool, time.Time) {
	key := addrKey(addr)
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.counts[key]
	if c == nil || !now.Before(c.start.Add(l.window)) {
		if c == nil && len(l.counts) >= maxTrackedAddresses {
			l.forget(now)
			if len(l.counts) >= maxTrackedAddresses {
				return false, now.Add(l.window)
			}
		}
		c = &addrCount{start: now}
		l.counts[key] = c
	}
	if c.n >= l.limit {
		return false, c.start.Add(l.window)
	}
	c.n++
	return true, time.Time{}
}

// forget drops the counts whose window has ended.
func (l *addrLimiter) forget(now time.Time) {
	for k, c := range l.counts {
		if !now.Before(c.start.Add(l.window)) {
			delete(l.counts, k)
		}
	}
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
