package approval

import (
	"crypto/sha256"
	"sync"
)

// maxRecentKeys bounds the memory of recent creates' keys (see recentKeys): at about two
// hundred bytes an entry, two megabytes.
const maxRecentKeys = 10_000

// recentKeys remembers, for the last maxRecentKeys creates this process answered, which
// approval holds each (requester, key), and the request that the answer was for. It is a hint
// and never the truth: Service.Create reads the approval it names by id, in one read, and
// replays from that read only when the approval found holds that very key under that very
// fingerprint; anything else (the approval purged, another request under the key) takes the
// create's write path, which decides as if nothing were remembered. So a retry that reaches
// the process that answered the original costs a read instead of a write, and one that
// reaches another replica, or this one after a restart, costs what a create costs
// (docs/architecture.md, "Replays"). A retry of the very bytes accepted (the usual retry) is
// not even decoded: its fingerprint is the one remembered.
//
// A key forgotten and then remembered again may be forgotten early, when its first place
// in the ring comes round: a hint lost, nothing more.
type recentKeys struct {
	mu   sync.Mutex
	ids  map[operationKey]recentKey
	ring []operationKey // the keys in ids, the oldest at next once the ring is full
	next int
}

// operationKey is an idempotency key in its requester's namespace.
type operationKey struct{ requester, key string }

// recentKey is what is remembered of a key: the approval holding it, the fingerprint of the
// request that made it, and the SHA-256 of a body of that request this process accepted.
type recentKey struct {
	id, fingerprint string
	body            [sha256.Size]byte
}

// get returns what is remembered of the key, if anything.
func (r *recentKeys) get(requester, key string) (recentKey, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k, ok := r.ids[operationKey{requester, key}]
	return k, ok
}

// put remembers k for the key, forgetting the oldest key remembered when the memory is full.
func (r *recentKeys) put(requester, key string, known recentKey) {
	k := operationKey{requester, key}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ids == nil {
		r.ids = make(map[operationKey]recentKey)
	}
	if _, ok := r.ids[k]; ok {
		r.ids[k] = known
		return
	}
	if len(r.ring) < maxRecentKeys {
		r.ring = append(r.ring, k)
	} else {
		delete(r.ids, r.ring[r.next])
		r.ring[r.next] = k
		r.next = (r.next + 1) % maxRecentKeys
	}
	r.ids[k] = known
}

// forget drops the key, when what it named no longer holds it.
func (r *recentKeys) forget(requester, key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.ids, operationKey{requester, key})
}
