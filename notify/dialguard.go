package notify

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// ErrAddressRefused is returned, wrapped, when a callback's host resolves to an address that
// callbacks may not reach (see refusedRange). The callback fails for good: the same name
// would be refused again.
var ErrAddressRefused = errors.New("refused to connect")

// guardedClient is the HTTP client of callbacks: it follows no redirects, uses no proxy (a
// proxy would resolve the name where the guard cannot see it), and checks every address it
// dials, after the name is resolved, so that neither a listed name that resolves to a local
// address nor a name rebound between create and send reaches an internal service. With
// allowPrivate the check is off.
func guardedClient(allowPrivate bool) *http.Client {
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	if !allowPrivate {
		dialer.Control = guardAddress
	}
	transport := &http.Transport{
		Proxy:                 nil,
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	return &http.Client{
		Transport:     transport,
		Timeout:       30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// guardAddress is a net.Dialer Control hook: it runs for each address the dialer is about to
// connect to, after name resolution, and refuses those refusedRange names.
func guardAddress(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w to %s: not an IP address and port", ErrAddressRefused, address)
	}
	if why := refusedRange(ap.Addr()); why != "" {
		return fmt.Errorf("%w to %s: the address is %s; callbacks.allow_private lets callbacks reach such addresses", ErrAddressRefused, ap.Addr(), why)
	}
	return nil
}

// Prefixes that are not public besides those netip classifies itself.
var (
	sharedSpace = netip.MustParsePrefix("100.64.0.0/10")  // carrier-grade NAT, some cloud metadata services
	thisNetwork = netip.MustParsePrefix("0.0.0.0/8")      // "this network"; 0.0.0.0 reaches the host itself
	reserved    = netip.MustParsePrefix("240.0.0.0/4")    // reserved, and the broadcast address
	nat64       = netip.MustParsePrefix("64:ff9b::/96")   // NAT64: the IPv4 address in the last 32 bits
	ipv4Compat  = netip.MustParsePrefix("::/96")          // IPv4-compatible IPv6, long deprecated
	nat64Local  = netip.MustParsePrefix("64:ff9b:1::/48") // local-use NAT64
)

// refusedRange says what kind of non-public address a is ("loopback", "private", ...), or ""
// for an address callbacks may reach. An IPv4 address written in IPv6 (::ffff:a.b.c.d, or
// behind the NAT64 prefix) is judged as the IPv4 address it stands for.
func refusedRange(a netip.Addr) string {
	a = a.Unmap()
	if nat64.Contains(a) {
		b := a.As16()
		a = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	}
	switch {
	case !a.IsValid():
		return "invalid"
	case a.IsLoopback():
		return "loopback"
	case a.IsUnspecified():
		return "unspecified"
	case a.IsPrivate():
		return "private"
	case a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast():
		return "link-local"
	case a.IsMulticast(), a.IsInterfaceLocalMulticast():
		return "multicast"
	case sharedSpace.Contains(a), thisNetwork.Contains(a), reserved.Contains(a), ipv4Compat.Contains(a), nat64Local.Contains(a):
		return "reserved"
	}
	return ""
}
