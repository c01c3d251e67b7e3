package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The verdict is the script's point: an acknowledged approval missing from the new primary, or
// replaced by another, a vote not applied or applied twice, each fails the run.
func TestReport_CountsLossAndDuplication(t *testing.T) {
	t.Parallel()
	d := newDriver(options{settle: time.Second}, "", "")
	d.acked = map[string]string{"k1": "apr_1", "k2": "apr_2", "k3": "apr_3", "k4": "apr_4"}
	d.votes = map[string]bool{"apr_1": true, "apr_2": true, "apr_4": true}
	d.firstOnNew.Store(time.Now().UnixNano())
	v := verification{
		rows: map[string][]string{
			"k1": {"apr_1"},
			"k2": {"apr_other"}, // acknowledged as apr_2, which is gone: lost, and a second approval
			// k3 is not there at all: lost
			"k4": {"apr_4"},
		},
		statuses:   map[string]string{"apr_1": "approved", "apr_other": "pending", "apr_4": "approved"},
		voteEvents: map[string]int{"apr_1": 1, "apr_4": 2}, // apr_4's vote recorded twice
	}
	r := d.report(v)
	if r.lost != 2 || r.votesLost != 1 || r.duplicated != 2 {
		t.Errorf("got lost %d, votes lost %d, duplicated %d; want 2, 1, 2\n%s", r.lost, r.votesLost, r.duplicated, strings.Join(r.details, "\n"))
	}
	if r.ok() {
		t.Error("got ok, want a failed run")
	}

	clean := verification{
		rows:       map[string][]string{"k1": {"apr_1"}, "k2": {"apr_2"}, "k3": {"apr_3"}, "k4": {"apr_4"}},
		statuses:   map[string]string{"apr_1": "approved", "apr_2": "approved", "apr_3": "pending", "apr_4": "approved"},
		voteEvents: map[string]int{"apr_1": 1, "apr_2": 1, "apr_4": 1},
	}
	if r := d.report(clean); !r.ok() {
		t.Errorf("got a failed run on a clean verification, want ok\n%s", strings.Join(r.details, "\n"))
	}
	clean.replayMismatch = []string{"k1: replay answered 201"}
	if r := d.report(clean); r.ok() {
		t.Error("got ok with a replay that did not name the acknowledged approval, want a failed run")
	}
	d.firstOnNew.Store(0)
	clean.replayMismatch = nil
	if r := d.report(clean); r.ok() {
		t.Error("got ok without a create acknowledged by the new primary, want a failed run")
	}
}

// A create is sent again, with the same key and body, through every answer that is not
// definite, and the replay that settles it counts as found done.
func TestCreate_SendsAgainUntilDefinite(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get("Idempotency-Key") != "key-7" || string(body) != string(createBody(7)) {
			t.Errorf("got key %q body %s, want key-7 and the same body every time", r.Header.Get("Idempotency-Key"), body)
		}
		switch calls.Add(1) {
		case 1:
			w.WriteHeader(http.StatusServiceUnavailable)
		case 2:
			w.WriteHeader(http.StatusConflict)
		case 3:
			w.WriteHeader(http.StatusInternalServerError)
		default:
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprint(w, `{"id": "apr_7"}`)
		}
	}))
	defer srv.Close()
	d := newDriver(options{server: srv.URL, settle: time.Minute, backoff: time.Millisecond, clients: 1}, "tok", "")
	id, ok := d.create(t.Context(), "key-7", createBody(7))
	if !ok || id != "apr_7" {
		t.Fatalf("got %q %v, want apr_7 true (unsettled: %v)", id, ok, d.unsettled)
	}
	if got := calls.Load(); got != 4 {
		t.Errorf("got %d requests, want 4", got)
	}
	if d.retries.Load() != 3 || d.replayedLate.Load() != 1 {
		t.Errorf("got %d sent again, %d found done; want 3, 1", d.retries.Load(), d.replayedLate.Load())
	}
}

func TestParseFlags(t *testing.T) {
	t.Parallel()
	required := []string{"-check-url", "postgres://x", "-kill", "true", "-promote", "true"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{append([]string{"-server", "http://127.0.0.1:1"}, required...), ""},
		{append([]string{"-server", "http://example.com:1"}, required...), "not a loopback address"},
		{[]string{"-server", "http://127.0.0.1:1"}, "is required"},
	} {
		_, err := parseFlags(tc.args, io.Discard)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("parseFlags(%q): got %v, want %q", tc.args, err, tc.want)
		}
	}
}
