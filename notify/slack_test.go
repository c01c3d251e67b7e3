package notify_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/notify"
	"github.com/approvald/approval/worker"
)

// slackToAlice is a harness of kind whose approvals tell alice (U0ALICE) in Slack, its rules,
// and an outbox that sends through the Slack Web API at api (an httptest server's URL).
func slackToAlice(t *testing.T, kind, api string) (*harness, *approval.Service, outboxT) {
	t.Helper()
	h := newHarness(t, kind, approval.Routing{
		Channels: map[string][]string{"alice": {approval.ChannelSlack}},
		Slack:    &approval.SlackRouting{Users: map[string]string{"alice": "U0ALICE"}},
	})
	rules := h.service()
	o := outboxT{&worker.Outbox{
		Store: h.store, Mailbox: rules, Lease: lease, Now: h.clock.Now, Rand: func() float64 { return 0.5 },
		Senders: map[string]worker.Sender{approval.ChannelSlack: &notify.Slack{
			Client: slack.New("xoxb-test", slack.OptionAPIURL(api+"/api/")), Rules: rules,
			PublicURL: "https://approvals.example.com", Now: h.clock.Now,
		}},
	}}
	return h, rules, o
}

// A 429 with Retry-After holds chat.postMessage back until then, and only that method: the
// message is due again at the time Slack named (not after the backoff), a round before it
// claims nothing, and the round after it posts.
func TestSlack_RetryAfterPerMethod(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		var mu sync.Mutex
		calls := map[string]int{}
		limited := true
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			method := strings.TrimPrefix(r.URL.Path, "/api/")
			mu.Lock()
			defer mu.Unlock()
			calls[method]++
			w.Header().Set("Content-Type", "application/json")
			switch {
			case method == "chat.postMessage" && limited:
				limited = false
				w.Header().Set("Retry-After", "30")
				w.WriteHeader(http.StatusTooManyRequests)
			case method == "conversations.open":
				w.Write([]byte(`{"ok": true, "channel": {"id": "D0ALICE"}}`))
			case method == "conversations.history":
				w.Write([]byte(`{"ok": true, "messages": [], "has_more": false}`))
			case method == "chat.postMessage":
				w.Write([]byte(`{"ok": true, "channel": "D0ALICE", "ts": "1.000001"}`))
			default:
				w.Write([]byte(`{"ok": false, "error": "unknown_method"}`))
			}
		}))
		h, _, o := slackToAlice(t, kind, srv.URL)
		h.create(t, "k", 1)
		if n := o.RunOnceT(t); n != 1 {
			t.Fatalf("first round: claimed %d, want alice's message", n)
		}
		msgs := h.list(t, approval.OutboxNotification)
		want := h.clock.Now().Add(30 * time.Second).Truncate(time.Millisecond)
		if len(msgs) != 1 || msgs[0].Status != approval.OutboxPending || msgs[0].NextAttemptAt == nil ||
			!msgs[0].NextAttemptAt.Equal(want) || !strings.Contains(msgs[0].LastError, "chat.postMessage") {
			t.Fatalf("after the 429: got %+v, want pending until %v, Retry-After's time, with chat.postMessage's error", msgs, want)
		}
		h.clock.Advance(29 * time.Second)
		if n := o.RunOnceT(t); n != 0 {
			t.Fatalf("before Retry-After: claimed %d, want none", n)
		}
		h.clock.Advance(2 * time.Second)
		if n := o.RunOnceT(t); n != 1 {
			t.Fatalf("after Retry-After: claimed %d, want 1", n)
		}
		if msgs := h.list(t, approval.OutboxNotification); msgs[0].Status != approval.OutboxSent {
			t.Fatalf("after Retry-After: got %+v, want sent", msgs[0])
		}
		mu.Lock()
		defer mu.Unlock()
		// The second attempt looks in the history first: it cannot know that the 429 was the
		// whole of the first attempt's outcome.
		if calls["chat.postMessage"] != 2 || calls["conversations.open"] != 2 || calls["conversations.history"] != 1 {
			t.Errorf("calls: got %v, want two posts (the 429 and the post), one look in the history, and conversations.open unhindered by the post's limit", calls)
		}
	})
}

// A message deleted in Slack has nothing left to update: the update that finds it gone
// (chat.update's message_not_found) is sent, not failed for an operator.
func TestSlack_UpdateOfDeletedMessage(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			switch strings.TrimPrefix(r.URL.Path, "/api/") {
			case "conversations.open":
				w.Write([]byte(`{"ok": true, "channel": {"id": "D0ALICE"}}`))
			case "chat.postMessage":
				w.Write([]byte(`{"ok": true, "channel": "D0ALICE", "ts": "1.000001"}`))
			case "chat.update":
				w.Write([]byte(`{"ok": false, "error": "message_not_found"}`))
			default:
				w.Write([]byte(`{"ok": false, "error": "unknown_method"}`))
			}
		}))
		h, rules, o := slackToAlice(t, kind, srv.URL)
		id := h.create(t, "k", 1)
		if n := o.RunOnceT(t); n != 1 {
			t.Fatalf("first round: claimed %d, want alice's message", n)
		}
		if _, err := rules.Cancel(t.Context(), approval.Principal{Subject: "ci-bot", Role: approval.RoleRequester}, id, approval.HTTPCause("cancel")); err != nil {
			t.Fatal(err)
		}
		if n := o.RunOnceT(t); n != 1 {
			t.Fatalf("second round: claimed %d, want the update", n)
		}
		for _, m := range h.list(t, approval.OutboxNotification) {
			if m.Status != approval.OutboxSent {
				t.Errorf("%s to %s: got %s (%s), want sent", m.Event, m.Recipient, m.Status, m.LastError)
			}
		}
	})
}
