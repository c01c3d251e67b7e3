package approval

import (
	"bytes"
	"crypto/sha256"
	"sync"
	"time"
)

// maxRecentKeys bounds the memory of recent creates' keys (see recentKeys): at about three
// hundred and fifty bytes an entry, three and a half megabytes.
const maxRecentKeys = 10_000

// maxRecentAnswers and maxRecentAnswer bound the answers kept with the newest keys (see
// recentKeys): at most two thousand answers of at most two kilobytes, four megabytes at
// worst, about two for answers of the usual size (a kilobyte).
const (
	maxRecentAnswers = 2_048
	maxRecentAnswer  = 2 << 10
)

// recentKeys remembers, for the last maxRecentKeys creates this process answered, which
// approval holds each (requester, key), and the request that the answer was for; and for the
// newest maxRecentAnswers of them, the answer itself while it is replayed as it was given
// (docs/architecture.md, "Replays").
//
// The key's holder is a hint: Service.Create reads the approval it names by id, in one read,
// and replays from that read only when the approval found holds that very key under that
// very fingerprint; anything else takes the create's write path, which decides as if nothing
// were remembered. The answer is not a hint but the answer: an approval row is never deleted
// and never changes its key or fingerprint, and the answer to its create is rendered from its
// fields as created, which never change either, so until the retention ends a retry of the
// same request gets these very bytes from any replica. Such a retry costs only the check of
// its token; one that reaches another replica, or this one after a restart, costs a create's
// round trip. A retry of the very bytes accepted (the usual retry) is not even decoded: its
// fingerprint is the one remembered.
//
// A key forgotten and then remembered again may be forgotten early, when its first place
// in the ring comes round, and so may its answer: a hint lost, nothing more.
//
// All of it holds only while the store talks to the server the approvals were written to: a
// failover to a server that lacks acknowledged commits (an asynchronous standby, a restore)
// would have it replay approvals that database does not hold. So every key is remembered
// with the incarnation of the store's server it was put at (Store.Incarnation), the memory
// holds one incarnation's keys only, and it is dropped whole as soon as get or put sees
// another.
type recentKeys struct {
	mu          sync.Mutex
	incarnation string // the incarnation every key in ids was put at
	ids         map[operationKey]recentKey
	ring        []operationKey // the keys in ids, the oldest at next once the ring is full
	next        int

	// answers are the keys put with an answer, the oldest at answerNext once full, each
	// with the answer it was put with: the oldest answer is dropped from ids when the ring
	// comes round to it, unless the key was put again since.
	answers    []recentAnswer
	answerNext int
}

// recentAnswer is a place in recentKeys' ring of answers.
type recentAnswer struct {
	key    operationKey
	answer *StoredResponse
}

// operationKey is an idempotency key in its requester's namespace.
type operationKey struct{ requester, key string }

// recentKey is what is remembered of a key: the approval holding it, the fingerprint of the
// request that made it, and the SHA-256 of a body of that request this process accepted.
type recentKey struct {
	id, fingerprint string
	body            [sha256.Size]byte
	// incarnation is the store's incarnation (Store.Incarnation) before the round trip that
	// wrote or found the approval.
	incarnation string
	// answer is the answer to the create, replayed as it is until expires (the create's
	// time plus the Service's Retention); nil when not kept.
	answer  *StoredResponse
	expires time.Time
}

// get returns what is remembered of the key at the store's incarnation, if anything; the
// memory is dropped when the incarnation is not the memory's.
func (r *recentKeys) get(requester, key, incarnation string) (recentKey, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if incarnation != r.incarnation {
		r.drop(incarnation)
		return recentKey{}, false
	}
	k, ok := r.ids[operationKey{requester, key}]
	return k, ok
}

// put remembers k for the key, forgetting the oldest key remembered when the memory is full,
// and everything remembered when k's incarnation is not the memory's.
func (r *recentKeys) put(requester, key string, known recentKey) {
	k := operationKey{requester, key}
	r.mu.Lock()
	defer r.mu.Unlock()
	if known.incarnation != r.incarnation {
		r.drop(known.incarnation)
	}
	if r.ids == nil {
		r.ids = make(map[operationKey]recentKey)
	}
	if known.answer != nil {
		if len(known.answer.Body) > maxRecentAnswer {
			known.answer = nil
		} else {
			kept := *known.answer
			kept.Body = bytes.Clone(kept.Body) // not the renderer's spare capacity
			known.answer = &kept
			r.keepAnswer(k, known.answer)
		}
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

// keepAnswer takes a place in the ring of answers for k's answer, dropping the oldest answer
// kept when the ring is full. r.mu is held.
func (r *recentKeys) keepAnswer(k operationKey, answer *StoredResponse) {
	place := recentAnswer{k, answer}
	if len(r.answers) < maxRecentAnswers {
		r.answers = append(r.answers, place)
		return
	}
	old := r.answers[r.answerNext]
	if known, ok := r.ids[old.key]; ok && known.answer == old.answer {
		known.answer = nil
		r.ids[old.key] = known
	}
	r.answers[r.answerNext] = place
	r.answerNext = (r.answerNext + 1) % maxRecentAnswers
}

// drop forgets every key and answer, and holds the keys of incarnation from now on. r.mu is
// held.
func (r *recentKeys) drop(incarnation string) {
	r.incarnation = incarnation
	clear(r.ids)
	clear(r.ring)
	r.ring, r.next = r.ring[:0], 0
	clear(r.answers)
	r.answers, r.answerNext = r.answers[:0], 0
}

// forget drops the key, when what it named no longer holds it.
func (r *recentKeys) forget(requester, key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.ids, operationKey{requester, key})
}
