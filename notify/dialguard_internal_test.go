package notify

import (
	"errors"
	"net/netip"
	"testing"
)

// TestGuardAddress: the addresses callbacks may not reach, in every spelling a resolver may
// give them (IPv4 in IPv6, NAT64), and public ones that pass.
func TestGuardAddress(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:80":             "loopback",
		"[::1]:80":                 "loopback",
		"[::ffff:127.0.0.1]:80":    "loopback",
		"[64:ff9b::7f00:1]:80":     "loopback",
		"0.0.0.0:80":               "unspecified",
		"[::]:80":                  "unspecified",
		"10.1.2.3:443":             "private",
		"172.16.0.1:443":           "private",
		"192.168.1.1:443":          "private",
		"[::ffff:192.168.1.1]:443": "private",
		"[fd00:ec2::254]:80":       "private",
		"169.254.169.254:80":       "link-local",
		"[fe80::1]:80":             "link-local",
		"224.0.0.1:80":             "link-local",
		"239.1.2.3:80":             "multicast",
		"[ff0e::1]:80":             "multicast",
		"100.100.100.200:80":       "reserved",
		"0.1.2.3:80":               "reserved",
		"255.255.255.255:80":       "reserved",
		"93.184.215.14:443":        "",
		"[2606:4700::1111]:443":    "",
		"[::ffff:93.184.215.14]:1": "",
	} {
		err := guardAddress("tcp", addr, nil)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: got %v, want it allowed", addr, err)
		case want != "" && !errors.Is(err, ErrAddressRefused):
			t.Errorf("%s: got %v, want ErrAddressRefused", addr, err)
		case want != "" && refusedRange(netip.MustParseAddrPort(addr).Addr()) != want:
			t.Errorf("%s: got %q, want %q", addr, refusedRange(netip.MustParseAddrPort(addr).Addr()), want)
		}
	}
}
