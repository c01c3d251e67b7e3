package web

import (
	"net/netip"
	"testing"
	"time"
)

// TestFailureLimiter_Bounded: the counts never hold more than their bound; a new address when
// full forgets the oldest count instead of being refused, and a blocked address stays blocked
// until its window ends.
func TestFailureLimiter_Bounded(t *testing.T) {
	t.Parallel()
	const bound = 100
	l := newFailureLimiter(3, time.Minute, bound)
	now := time.Unix(1_700_000_000, 0)
	attacker := netip.MustParseAddr("192.0.2.1")
	for range 3 {
		l.fail(attacker, now)
	}
	if blocked, until := l.blocked(attacker, now); !blocked || !until.Equal(now.Add(time.Minute)) {
		t.Fatalf("after 3 failures: blocked %v until %v, want blocked until %v", blocked, until, now.Add(time.Minute))
	}
	for i := range 10 * bound {
		l.fail(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), now.Add(time.Second))
		if n := l.len(); n > bound {
			t.Fatalf("after %d addresses: %d counted, want at most %d", i+1, n, bound)
		}
	}
	newcomer := netip.MustParseAddr("198.51.100.7")
	if blocked, _ := l.blocked(newcomer, now.Add(time.Second)); blocked {
		t.Fatalf("a new address is blocked when the counts are full")
	}
	l.fail(newcomer, now.Add(time.Second))
	if blocked, _ := l.blocked(newcomer, now.Add(time.Second)); blocked {
		t.Fatalf("one failure blocks")
	}
	// IPv6 by the /64: one client's addresses share one count.
	v6 := newFailureLimiter(2, time.Minute, bound)
	v6.fail(netip.MustParseAddr("2001:db8::1"), now)
	v6.fail(netip.MustParseAddr("2001:db8::2"), now)
	if blocked, _ := v6.blocked(netip.MustParseAddr("2001:db8::3"), now); !blocked {
		t.Fatalf("an IPv6 /64 is not counted as one client")
	}
	if blocked, _ := v6.blocked(netip.MustParseAddr("2001:db8::3"), now.Add(time.Minute)); blocked {
		t.Fatalf("still blocked after the window")
	}
}
