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
type recentKeys struct {
	mu   sync.Mutex
	ids  map[operationKey]recentKey
	ring []operationKey // the keys in ids, the oldest at next once the ring is full
	next int

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
	// answer is the answer to the create, replayed as it is until expires (the create's
	// time plus the Service's Retention); nil when not kept.
	answer  *StoredResponse
	expires time.Time
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

// forget drops the key, when what it named no longer holds it.
func (r *recentKeys) forget(requester, key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.ids, operationKey{requester, key})
}
