package approval

import (
	"fmt"
	"testing"
)

// TestRecentKeys checks the memory's bounds: it keeps the last maxRecentKeys keys put,
// forgets the oldest first, keeps requesters' keys apart, and forgets on demand.
func TestRecentKeys(t *testing.T) {
	var r recentKeys
	for i := range maxRecentKeys + 10 {
		r.put("ci-bot", fmt.Sprint("key-", i), recentKey{id: fmt.Sprint("apr-", i)})
	}
	if len(r.ids) != maxRecentKeys || len(r.ring) != maxRecentKeys {
		t.Fatalf("size: got %d keys in a ring of %d, want %d", len(r.ids), len(r.ring), maxRecentKeys)
	}
	for i := range 10 {
		if k, ok := r.get("ci-bot", fmt.Sprint("key-", i)); ok {
			t.Fatalf("key-%d: got %q, want it forgotten (among the oldest)", i, k.id)
		}
	}
	if k, _ := r.get("ci-bot", fmt.Sprint("key-", maxRecentKeys+9)); k.id != fmt.Sprint("apr-", maxRecentKeys+9) {
		t.Fatalf("newest key: got %q", k.id)
	}
	if k, ok := r.get("cd-bot", "key-10"); ok {
		t.Fatalf("another requester's key: got %q, want nothing", k.id)
	}
	r.put("ci-bot", "key-10", recentKey{id: "apr-new"})
	if k, _ := r.get("ci-bot", "key-10"); k.id != "apr-new" || len(r.ids) != maxRecentKeys {
		t.Fatalf("put again: got %q among %d keys, want apr-new among %d", k.id, len(r.ids), maxRecentKeys)
	}
	r.forget("ci-bot", "key-10")
	if k, ok := r.get("ci-bot", "key-10"); ok {
		t.Fatalf("forgotten key: got %q", k.id)
	}
}
