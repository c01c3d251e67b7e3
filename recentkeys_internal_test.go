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
		if k, ok := r.get("ci-bot", fmt.Sprint("key-", i), ""); ok {
			t.Fatalf("key-%d: got %q, want it forgotten (among the oldest)", i, k.id)
		}
	}
	if k, _ := r.get("ci-bot", fmt.Sprint("key-", maxRecentKeys+9), ""); k.id != fmt.Sprint("apr-", maxRecentKeys+9) {
		t.Fatalf("newest key: got %q", k.id)
	}
	if k, ok := r.get("cd-bot", "key-10", ""); ok {
		t.Fatalf("another requester's key: got %q, want nothing", k.id)
	}
	r.put("ci-bot", "key-10", recentKey{id: "apr-new"})
	if k, _ := r.get("ci-bot", "key-10", ""); k.id != "apr-new" || len(r.ids) != maxRecentKeys {
		t.Fatalf("put again: got %q among %d keys, want apr-new among %d", k.id, len(r.ids), maxRecentKeys)
	}
	r.forget("ci-bot", "key-10")
	if k, ok := r.get("ci-bot", "key-10", ""); ok {
		t.Fatalf("forgotten key: got %q", k.id)
	}
}

// TestRecentAnswers checks the bounds of the answers kept: the newest maxRecentAnswers, none
// larger than maxRecentAnswer, each copied without the renderer's spare capacity; a key
// whose answer is dropped is still remembered, and a key put again keeps its new answer
// however old its first one.
func TestRecentAnswers(t *testing.T) {
	var r recentKeys
	answer := func(i int) *StoredResponse {
		body := make([]byte, 100, 1000)
		copy(body, fmt.Sprint("answer-", i))
		return &StoredResponse{StatusCode: 201, Location: fmt.Sprint("/v1/approvals/apr-", i), Body: body}
	}
	r.put("ci-bot", "key-0", recentKey{id: "apr-0", answer: answer(0)})
	for i := 1; i < maxRecentAnswers+10; i++ {
		r.put("ci-bot", fmt.Sprint("key-", i), recentKey{id: fmt.Sprint("apr-", i), answer: answer(i)})
		if i == 100 {
			r.put("ci-bot", "key-0", recentKey{id: "apr-0", answer: answer(0)}) // put again
		}
	}
	if len(r.answers) != maxRecentAnswers {
		t.Fatalf("ring of answers: got %d places, want %d", len(r.answers), maxRecentAnswers)
	}
	kept := 0
	for _, k := range r.ids {
		if k.answer != nil {
			kept++
		}
	}
	if kept != maxRecentAnswers {
		t.Fatalf("answers kept: got %d, want %d", kept, maxRecentAnswers)
	}
	if k, ok := r.get("ci-bot", "key-1", ""); !ok || k.id != "apr-1" || k.answer != nil {
		t.Fatalf("key-1: got %+v (remembered %v), want apr-1 without its answer", k, ok)
	}
	if k, _ := r.get("ci-bot", "key-0", ""); k.answer == nil || string(k.answer.Body[:8]) != "answer-0" {
		t.Fatalf("key-0, put again: got %+v, want its answer", k.answer)
	}
	k, _ := r.get("ci-bot", fmt.Sprint("key-", maxRecentAnswers+9), "")
	if k.answer == nil || len(k.answer.Body) != 100 || cap(k.answer.Body) >= 1000 {
		t.Fatalf("newest answer: got %+v, want a copy of its 100 bytes", k.answer)
	}

	big := &StoredResponse{StatusCode: 201, Body: make([]byte, maxRecentAnswer+1)}
	r.put("ci-bot", "key-big", recentKey{id: "apr-big", answer: big})
	if k, ok := r.get("ci-bot", "key-big", ""); !ok || k.answer != nil {
		t.Fatalf("answer over maxRecentAnswer: got %+v (remembered %v), want the key without it", k, ok)
	}
}

// TestRecentKeysIncarnation checks that the memory holds the keys of one incarnation of the
// store's server only: each key remembers the incarnation it was put at, a key is found only
// at that incarnation, and the whole memory is dropped when another one is seen.
func TestRecentKeysIncarnation(t *testing.T) {
	var r recentKeys
	answer := &StoredResponse{StatusCode: 201, Location: "/v1/approvals/apr-1", Body: []byte(`{}`)}
	r.put("ci-bot", "key-1", recentKey{id: "apr-1", incarnation: "A", answer: answer})
	r.put("ci-bot", "key-2", recentKey{id: "apr-2", incarnation: "A"})
	if k, ok := r.get("ci-bot", "key-1", "A"); !ok || k.id != "apr-1" || k.incarnation != "A" || k.answer == nil {
		t.Fatalf("key-1 at A: got %+v (remembered %v), want apr-1 with its answer, at A", k, ok)
	}
	if k, ok := r.get("ci-bot", "key-1", "B"); ok {
		t.Fatalf("key-1 at B: got %+v, want nothing (put at A)", k)
	}
	// B was seen: A's keys are gone, also for a reader still at A.
	if k, ok := r.get("ci-bot", "key-2", "A"); ok {
		t.Fatalf("key-2 at A after B was seen: got %+v, want nothing", k)
	}
	if len(r.ids) != 0 || len(r.ring) != 0 || len(r.answers) != 0 {
		t.Fatalf("memory after the incarnation changed: got %d keys, %d in the ring, %d answers; want none", len(r.ids), len(r.ring), len(r.answers))
	}

	r.put("ci-bot", "key-3", recentKey{id: "apr-3", incarnation: "B", answer: answer})
	if k, ok := r.get("ci-bot", "key-3", "B"); !ok || k.id != "apr-3" {
		t.Fatalf("key-3 at B: got %+v (remembered %v), want apr-3", k, ok)
	}
	// A put at another incarnation than the memory's drops what it holds too.
	r.put("ci-bot", "key-4", recentKey{id: "apr-4", incarnation: "C"})
	if k, ok := r.get("ci-bot", "key-3", "C"); ok {
		t.Fatalf("key-3 after a put at C: got %+v, want nothing", k)
	}
	if k, ok := r.get("ci-bot", "key-4", "C"); !ok || k.id != "apr-4" {
		t.Fatalf("key-4 at C: got %+v (remembered %v), want apr-4", k, ok)
	}

	// The bounds still hold after a drop: the ring starts again.
	for i := range maxRecentKeys + 10 {
		r.put("ci-bot", fmt.Sprint("key-", i), recentKey{id: fmt.Sprint("apr-", i), incarnation: "C", answer: answer})
	}
	if len(r.ids) != maxRecentKeys || len(r.ring) != maxRecentKeys || len(r.answers) != maxRecentAnswers {
		t.Fatalf("size: got %d keys, %d in the ring, %d answers; want %d, %d, %d", len(r.ids), len(r.ring), len(r.answers), maxRecentKeys, maxRecentKeys, maxRecentAnswers)
	}
}
