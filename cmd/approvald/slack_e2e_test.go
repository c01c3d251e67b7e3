package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/approvald/approval/failpoint"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/internal/wait"
	"github.com/approvald/approval/notify"
)

// slackSecret is the signing secret of the Slack app in these tests.
const slackSecret = "8f742231b10e8888abcd99yyyzzz85a5"

// fakeSlack is Slack's Web API as approvald calls it, on loopback: it keeps the messages
// posted (with their metadata), their updates, the forms opened and the answers to
// response_url, finds users by address and shows their addresses (users.info).
type fakeSlack struct {
	srv *httptest.Server
	// held, when set before the first call, holds every users.lookupByEmail until it is
	// closed (release): a direct message that has not reached its person yet.
	held     chan struct{}
	released sync.Once

	mu       sync.Mutex
	messages []*fakeMessage
	forms    []string       // the JSON body of each views.open
	answers  []string       // the text of each answer to a response_url
	calls    map[string]int // by method, and users.info also by "users.info:" and the user
	limit    map[string]int // method -> how many next calls answer 429
	fail     map[string]int // method -> how many next calls answer 500
}

// slackUsers are the users of the fake workspace and their addresses, as users.info shows
// them (dave's in capitals where approvald's configuration has it in lower case).
var slackUsers = map[string]string{"U0ALICE": "alice@example.com", "U0BOB": "bob@example.com", "U0CAROL": "carol@example.com", "U0DAVE": "Dave@Example.com",
	"U0MALLORY": "dave@example.com", "U0GONE": "dave@example.com", "U0BOT": "dave@example.com", "U0HIDDEN": ""}

// slackTeam is the fake workspace's team, the app's own (auth.test). otherUsers are not of
// it: mallory clicks through a channel shared with another organisation (Slack Connect),
// whose profile shows dave's address. U0GONE is deleted and U0BOT is a bot, both in the team.
const slackTeam = "T0APPROVALD"

var otherUsers = map[string]string{"U0MALLORY": "T0ELSEWHERE"}

// fakeMessage is one posted message.
type fakeMessage struct {
	Channel, TS, Text string
	Blocks            string
	NotificationID    string
	Updates           []string // the blocks of each chat.update, in order
}

func newFakeSlack(t *testing.T) *fakeSlack {
	f := &fakeSlack{calls: map[string]int{}, limit: map[string]int{}, fail: map[string]int{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// hold makes users.lookupByEmail wait until release (or the test's end).
func (f *fakeSlack) hold(t *testing.T) {
	f.held = make(chan struct{})
	t.Cleanup(f.release) // before the server's Close, which waits for the held calls
}

// release lets the held users.lookupByEmail calls answer.
func (f *fakeSlack) release() { f.released.Do(func() { close(f.held) }) }

// called returns how many times method (or "users.info:" and a user) was called.
func (f *fakeSlack) called(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[method]
}

func (f *fakeSlack) serve(w http.ResponseWriter, r *http.Request) {
	r.ParseForm()
	method := strings.TrimPrefix(r.URL.Path, "/api/")
	if method == "users.lookupByEmail" && f.held != nil {
		<-f.held
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[method]++
	if method == "users.info" {
		f.calls[method+":"+r.FormValue("user")]++
	}
	if f.limit[method] > 0 {
		f.limit[method]--
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	if f.fail[method] > 0 {
		f.fail[method]--
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	if strings.HasPrefix(r.URL.Path, "/response/") {
		var body struct {
			Text         string `json:"text"`
			ResponseType string `json:"response_type"`
		}
		json.NewDecoder(r.Body).Decode(&body)
		f.answers = append(f.answers, body.Text)
		return
	}
	answer := map[string]any{"ok": true}
	switch method {
	case "conversations.open":
		answer["channel"] = map[string]any{"id": "D" + strings.TrimPrefix(r.FormValue("users"), "U")}
	case "users.lookupByEmail":
		users := map[string]string{"bob@example.com": "U0BOB", "dave@example.com": "U0DAVE"}
		if id, ok := users[r.FormValue("email")]; ok {
			answer["user"] = map[string]any{"id": id, "team_id": slackTeam}
		} else {
			answer = map[string]any{"ok": false, "error": "users_not_found"}
		}
	case "auth.test":
		answer["team_id"], answer["user_id"] = slackTeam, "U0APPROVALD"
	case "users.info":
		if email, ok := slackUsers[r.FormValue("user")]; ok {
			user := r.FormValue("user")
			team := slackTeam
			if other, ok := otherUsers[user]; ok {
				team = other
			}
			profile := map[string]any{}
			if email != "" {
				profile["email"] = email
			}
			answer["user"] = map[string]any{"id": user, "team_id": team, "deleted": user == "U0GONE", "is_bot": user == "U0BOT", "profile": profile}
		} else {
			answer = map[string]any{"ok": false, "error": "user_not_found"}
		}
	case "chat.postMessage":
		var md struct {
			EventPayload map[string]any `json:"event_payload"`
		}
		json.Unmarshal([]byte(r.FormValue("metadata")), &md)
		id, _ := md.EventPayload["notification_id"].(string)
		m := &fakeMessage{Channel: r.FormValue("channel"), TS: fmt.Sprintf("1700000000.%06d", len(f.messages)+1),
			Text: r.FormValue("text"), Blocks: r.FormValue("blocks"), NotificationID: id}
		f.messages = append(f.messages, m)
		answer["channel"], answer["ts"] = m.Channel, m.TS
	case "chat.update":
		for _, m := range f.messages {
			if m.Channel == r.FormValue("channel") && m.TS == r.FormValue("ts") {
				m.Updates = append(m.Updates, r.FormValue("blocks"))
				answer["channel"], answer["ts"] = m.Channel, m.TS
			}
		}
		if answer["ts"] == nil {
			answer = map[string]any{"ok": false, "error": "message_not_found"}
		}
	case "conversations.history":
		var msgs []any
		for _, m := range f.messages {
			if m.Channel == r.FormValue("channel") {
				msgs = append(msgs, map[string]any{"type": "message", "ts": m.TS, "text": m.Text,
					"metadata": map[string]any{"event_type": "approvald_notification", "event_payload": map[string]any{"notification_id": m.NotificationID}}})
			}
		}
		answer["messages"], answer["has_more"] = msgs, false
	case "views.open":
		body, _ := io.ReadAll(r.Body)
		f.forms = append(f.forms, string(body))
		answer["view"] = map[string]any{"id": "V1"}
	default:
		answer = map[string]any{"ok": false, "error": "unknown_method"}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(answer)
}

// snapshot returns copies of what the fake holds.
func (f *fakeSlack) snapshot() (msgs []fakeMessage, forms []string, answers []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range f.messages {
		c := *m
		c.Updates = append([]string(nil), m.Updates...)
		msgs = append(msgs, c)
	}
	return msgs, append([]string(nil), f.forms...), append([]string(nil), f.answers...)
}

// in returns the messages posted in channel.
func in(msgs []fakeMessage, channel string) []fakeMessage {
	var out []fakeMessage
	for _, m := range msgs {
		if m.Channel == channel {
			out = append(out, m)
		}
	}
	return out
}

// slackConfig is the configuration of a server that talks to fake.
func slackConfig(fake *fakeSlack) string {
	return fmt.Sprintf(`
workers: {lease: 2s, poll: 100ms}
web: {public_url: "https://approvals.example.com"}
slack:
  bot_token: xoxb-test
  signing_secret: %q
  api_url: %q
  channel: C0DEPLOYS
people:
  - {name: alice, slack: U0ALICE}
  - {name: bob, email: bob@example.com}
  - {name: carol, slack: U0CAROL}
  - {name: dave, email: dave@example.com}
`, slackSecret, fake.srv.URL+"/api/")
}

// click is the body of a click of button action on approval id by user, as Slack posts it.
func click(fake *fakeSlack, user, action, id, trigger string) string {
	payload, _ := json.Marshal(map[string]any{
		"type": "block_actions", "trigger_id": trigger, "user": map[string]any{"id": user},
		"response_url": fake.srv.URL + "/response/" + trigger,
		"actions":      []any{map[string]any{"type": "button", "block_id": "approvald_vote", "action_id": action, "value": id, "action_ts": "1700000001.000100"}},
	})
	return url.Values{"payload": {string(payload)}}.Encode()
}

// submission is the body of the reject form's submission.
func submission(user, id, responseURL, comment, trigger string) string {
	md, _ := json.Marshal(map[string]string{"approval_id": id, "response_url": responseURL})
	payload, _ := json.Marshal(map[string]any{
		"type": "view_submission", "trigger_id": trigger, "user": map[string]any{"id": user},
		"view": map[string]any{"id": "V1", "callback_id": "approvald_reject", "private_metadata": string(md),
			"state": map[string]any{"values": map[string]any{"comment": map[string]any{"comment": map[string]any{"type": "plain_text_input", "value": comment}}}}},
	})
	return url.Values{"payload": {string(payload)}}.Encode()
}

// signSlack signs body the way Slack signs its requests, at ts.
func signSlack(secret, body string, ts time.Time) http.Header {
	stamp := strconv.FormatInt(ts.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte("v0:" + stamp + ":" + body))
	h := http.Header{}
	h.Set("Content-Type", "application/x-www-form-urlencoded")
	h.Set("X-Slack-Request-Timestamp", stamp)
	h.Set("X-Slack-Signature", "v0="+hex.EncodeToString(mac.Sum(nil)))
	return h
}

// interact posts a signed interaction and wants 200.
func interact(t *testing.T, srv *server, body string) {
	t.Helper()
	r, err := srv.try("POST", "/v1/slack/interactions", "", "", body, signSlack(slackSecret, body, time.Now()))
	if err != nil || r.status != http.StatusOK {
		t.Fatalf("interaction: got %d %s, %v; want 200", r.status, r.body, err)
	}
}

// interactAtOnce posts every body as Slack would, signed, all released at once by a barrier,
// and fails the test unless each is answered 200.
func interactAtOnce(t *testing.T, srv *server, bodies []string) {
	t.Helper()
	headers := make([]http.Header, len(bodies))
	for i, b := range bodies {
		headers[i] = signSlack(slackSecret, b, time.Now())
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make([]error, len(bodies))
	for i := range bodies {
		wg.Go(func() {
			<-start
			r, err := srv.try("POST", "/v1/slack/interactions", "", "", bodies[i], headers[i])
			if err == nil && r.status != http.StatusOK {
				err = fmt.Errorf("got %d %s", r.status, r.body)
			}
			errs[i] = err
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("click %d: %v", i, err)
		}
	}
}

// slackEvents returns how many interactions the inbox holds.
func slackEvents(t *testing.T, srv *server, operator string) int {
	var list struct {
		Events []json.RawMessage `json:"events"`
	}
	srv.do(t, "GET", "/v1/inbox?source=slack&limit=200", operator, "", "").decode(t, &list)
	return len(list.Events)
}

// Requests that are not Slack's interactions are refused before anything is stored: a bad
// signature, a timestamp six minutes old, a body over the limit (refused before it is read),
// a signed payload that is not an interaction approvald asked for.
func TestSlack_RefusedInteractions(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		dsn := testdb.DSN(t, kind)
		operator := createToken(t, dsn, "ops", "operator")
		fake := newFakeSlack(t)
		srv := startServeWith(t, dsn, serveOptions{config: slackConfig(fake)})

		good := click(fake, "U0ALICE", "approvald_approve", "apr_x", "T1")
		slash := url.Values{"command": {"/deploy"}, "text": {"prod"}}.Encode()
		other, _ := json.Marshal(map[string]any{"type": "shortcut", "trigger_id": "T2", "user": map[string]any{"id": "U0ALICE"}})
		for _, tt := range []struct {
			name   string
			body   string
			header http.Header
			want   int
		}{
			{"bad signature", good, signSlack("not the secret", good, time.Now()), http.StatusUnauthorized},
			{"old timestamp", good, signSlack(slackSecret, good, time.Now().Add(-6*time.Minute)), http.StatusUnauthorized},
			{"no signature", good, http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, http.StatusBadRequest},
			{"oversized body", good + "&pad=" + strings.Repeat("x", 64<<10), nil, http.StatusRequestEntityTooLarge},
			{"a slash command", slash, signSlack(slackSecret, slash, time.Now()), http.StatusBadRequest},
			{"another interaction", "payload=" + url.QueryEscape(string(other)), nil, http.StatusBadRequest},
			{"another button", click(fake, "U0ALICE", "someone_elses", "apr_x", "T3"), nil, http.StatusBadRequest},
		} {
			h := tt.header
			if h == nil {
				h = signSlack(slackSecret, tt.body, time.Now())
			}
			r, err := srv.try("POST", "/v1/slack/interactions", "", "", tt.body, h)
			if err != nil || r.status != tt.want {
				t.Errorf("%s: got %d %s, %v; want %d", tt.name, r.status, r.body, err, tt.want)
			}
		}
		if n := slackEvents(t, srv, operator); n != 0 {
			t.Fatalf("got %d interactions stored, want none", n)
		}
	})
}

// A create DMs each approver (bob found by his address) and posts in the channel, each post
// with buttons and its notification's id in the metadata. A click by someone who may not
// vote, or whom approvald does not know, changes nothing and is answered why. alice's Reject
// opens the form; its submission rejects with her comment, every message is updated without
// buttons, and a late click is answered truthfully.
func TestSlack_ClickDecides(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		dsn := testdb.DSN(t, kind)
		requester := createToken(t, dsn, "ci-bot", "requester")
		operator := createToken(t, dsn, "ops", "operator")
		fake := newFakeSlack(t)
		srv := startServeWith(t, dsn, serveOptions{config: slackConfig(fake)})

		created := srv.do(t, "POST", "/v1/approvals", requester, "deploy-1",
			`{"action": "deploy", "title": "Deploy api v1.42", "approvers": ["alice", "bob"], "context": {"commit": "9f2c1e"}}`)
		created.wantStatus(t, http.StatusCreated)
		var a approvalView
		created.decode(t, &a)

		wait.Until(t, "three posts", func() bool { msgs, _, _ := fake.snapshot(); return len(msgs) == 3 })
		msgs, _, _ := fake.snapshot()
		for _, ch := range []string{"D0ALICE", "D0BOB", "C0DEPLOYS"} {
			got := in(msgs, ch)
			if len(got) != 1 {
				t.Fatalf("%s: got %d posts, want 1", ch, len(got))
			}
			m := got[0]
			if !strings.HasPrefix(m.NotificationID, "ntf_") || !strings.Contains(m.Blocks, "approvald_approve") ||
				!strings.Contains(m.Blocks, "commit: 9f2c1e") || !strings.Contains(m.Blocks, "/ui/approvals/"+a.ID) {
				t.Errorf("%s: got %+v, want the notification id, the buttons, the context and the link", ch, m)
			}
		}

		// Operators see each post with its attempts and Slack's ts.
		for _, m := range waitOutboxSent(t, srv, operator, "notification", 3) {
			var detail struct {
				AttemptLog    []json.RawMessage `json:"attempt_log"`
				SlackMessages []struct {
					Channel string `json:"channel"`
					TS      string `json:"ts"`
				} `json:"slack_messages"`
			}
			srv.do(t, "GET", "/v1/outbox/"+m.ID, operator, "", "").decode(t, &detail)
			if len(detail.AttemptLog) != 1 || len(detail.SlackMessages) != 1 || detail.SlackMessages[0].TS == "" {
				t.Errorf("outbox %s to %s: got %+v, want its attempt and its Slack message with ts", m.ID, m.Recipient, detail)
			}
		}

		// carol is known but not an approver; U0NOBODY is nobody approvald knows.
		interact(t, srv, click(fake, "U0CAROL", "approvald_approve", a.ID, "T-carol"))
		interact(t, srv, click(fake, "U0NOBODY", "approvald_approve", a.ID, "T-nobody"))
		wait.Until(t, "two answers", func() bool { _, _, ans := fake.snapshot(); return len(ans) == 2 })
		_, _, answers := fake.snapshot()
		joined := strings.Join(answers, "\n")
		if !strings.Contains(joined, "carol is not an approver") || !strings.Contains(joined, "does not know your Slack account") {
			t.Errorf("answers: got %q, want carol told she is not an approver and the unknown user told so", answers)
		}
		if got := waitApproval(t, srv, requester, a.ID, func(approvalView) bool { return true }); got.Status != "pending" || len(got.Decisions) != 0 {
			t.Fatalf("after refused clicks: got %+v, want pending without votes", got)
		}

		interact(t, srv, click(fake, "U0ALICE", "approvald_reject", a.ID, "T-reject"))
		wait.Until(t, "the reject form", func() bool { _, forms, _ := fake.snapshot(); return len(forms) == 1 })
		_, forms, _ := fake.snapshot()
		if !strings.Contains(forms[0], `"trigger_id":"T-reject"`) || !strings.Contains(forms[0], a.ID) {
			t.Fatalf("form: got %v, want the form for %s opened with the click's trigger", forms[0], a.ID)
		}
		interact(t, srv, submission("U0ALICE", a.ID, fake.srv.URL+"/response/T-reject", "not on a Friday", "T-submit"))
		a = waitApproval(t, srv, requester, a.ID, func(a approvalView) bool { return a.Status == "rejected" })
		if len(a.Decisions) != 1 || a.Decisions[0].Approver != "alice" || a.Decisions[0].Comment != "not on a Friday" {
			t.Errorf("decisions: got %+v, want alice's reject with her comment", a.Decisions)
		}
		wait.Until(t, "every message updated", func() bool {
			msgs, _, _ := fake.snapshot()
			for _, m := range msgs {
				if len(m.Updates) == 0 {
					return false
				}
			}
			return true
		})
		msgs, _, _ = fake.snapshot()
		for _, m := range msgs {
			last := m.Updates[len(m.Updates)-1]
			if strings.Contains(last, "approvald_approve") || !strings.Contains(last, "Rejected by alice") {
				t.Errorf("%s: updated to %s, want the outcome and no buttons", m.Channel, last)
			}
		}

		// bob clicks the old message: nothing changes, and he is told what happened.
		interact(t, srv, click(fake, "U0BOB", "approvald_approve", a.ID, "T-late"))
		wait.Until(t, "the late answer", func() bool { _, _, ans := fake.snapshot(); return len(ans) == 4 })
		_, _, answers = fake.snapshot()
		if late := answers[3]; !strings.Contains(late, "already rejected by alice at ") {
			t.Errorf("late click: got %q, want it to say alice already rejected it, and when", late)
		}
		var trail struct {
			Events []struct {
				Type  string `json:"type"`
				Actor string `json:"actor"`
				Cause struct {
					Kind    string `json:"kind"`
					Source  string `json:"source"`
					EventID string `json:"event_id"`
				} `json:"cause"`
			} `json:"events"`
		}
		srv.do(t, "GET", "/v1/approvals/"+a.ID+"/events", requester, "", "").decode(t, &trail)
		voted := 0
		for _, e := range trail.Events {
			if e.Type == "approval.voted" {
				voted++
				if e.Actor != "alice" || e.Cause.Kind != "inbox" || e.Cause.Source != "slack" || e.Cause.EventID != "view_submission:T-submit" {
					t.Errorf("vote event: got %+v, want alice's caused by the slack interaction", e)
				}
			}
		}
		if voted != 1 {
			t.Errorf("got %d votes in the trail, want 1", voted)
		}
		if n := slackEvents(t, srv, operator); n != 5 {
			t.Errorf("got %d interactions in the inbox, want 5: two refused clicks, the reject, its form, the late click", n)
		}
	})
}

// Fifty deliveries of one click and fifty distinct clicks of alice and bob, at once, while
// Slack rate-limits the first posts: the approval is approved once, each person's vote is
// recorded once, the one click is stored once.
func TestSlack_ConcurrentClicks(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		dsn := testdb.DSN(t, kind)
		requester := createToken(t, dsn, "ci-bot", "requester")
		operator := createToken(t, dsn, "ops", "operator")
		fake := newFakeSlack(t)
		fake.limit["chat.postMessage"] = 1 // one 429 with Retry-After: 1
		srv := startServeWith(t, dsn, serveOptions{config: slackConfig(fake)})

		created := srv.do(t, "POST", "/v1/approvals", requester, "deploy-2",
			`{"action": "deploy", "title": "Deploy api v1.43", "approvers": ["alice", "bob"], "required_approvals": 2}`)
		created.wantStatus(t, http.StatusCreated)
		var a approvalView
		created.decode(t, &a)
		wait.Until(t, "three posts", func() bool { msgs, _, _ := fake.snapshot(); return len(msgs) == 3 })

		same := click(fake, "U0ALICE", "approvald_approve", a.ID, "T-same")
		bodies := make([]string, 0, 100)
		for range 50 {
			bodies = append(bodies, same)
		}
		for i := range 50 {
			user := []string{"U0ALICE", "U0BOB"}[i%2]
			bodies = append(bodies, click(fake, user, "approvald_approve", a.ID, fmt.Sprintf("T-%d", i)))
		}
		interactAtOnce(t, srv, bodies)
		a = waitApproval(t, srv, requester, a.ID, func(a approvalView) bool { return a.Status == "approved" })
		if len(a.Decisions) != 2 {
			t.Fatalf("decisions: got %+v, want alice's and bob's, once each", a.Decisions)
		}
		if n := slackEvents(t, srv, operator); n != 51 {
			t.Errorf("got %d interactions stored, want 51 (the repeated one once)", n)
		}
		wait.Until(t, "an answer to every stored click", func() bool { _, _, ans := fake.snapshot(); return len(ans) == 51 })
		fake.mu.Lock()
		posts := fake.calls["chat.postMessage"]
		fake.mu.Unlock()
		if posts != 4 {
			t.Errorf("chat.postMessage called %d times, want 4: three posts and the one answered 429", posts)
		}
		wait.Until(t, "three updates", func() bool {
			msgs, _, _ := fake.snapshot()
			n := 0
			for _, m := range msgs {
				n += min(len(m.Updates), 1)
			}
			return n == 3
		})
	})
}

// A click in Slack racing a reject on the API: one of them decides, the other changes
// nothing, and alice's answer says which.
func TestSlack_ClickRacesWebDecision(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		dsn := testdb.DSN(t, kind)
		requester := createToken(t, dsn, "ci-bot", "requester")
		bob := createToken(t, dsn, "bob", "approver")
		fake := newFakeSlack(t)
		srv := startServeWith(t, dsn, serveOptions{config: slackConfig(fake)})

		for round := range 3 {
			created := srv.do(t, "POST", "/v1/approvals", requester, fmt.Sprintf("race-%d", round),
				`{"action": "deploy", "title": "Deploy api v1.44", "approvers": ["alice", "bob"]}`)
			created.wantStatus(t, http.StatusCreated)
			var a approvalView
			created.decode(t, &a)
			body := click(fake, "U0ALICE", "approvald_approve", a.ID, fmt.Sprintf("T-race-%d", round))
			start := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() { <-start; interact(t, srv, body) })
			wg.Go(func() {
				<-start
				r, err := srv.try("POST", "/v1/approvals/"+a.ID+"/reject", bob, "", `{"comment": "from the page"}`, nil)
				if err != nil || (r.status != http.StatusOK && r.status != http.StatusConflict) {
					t.Errorf("web reject: got %d %s, %v; want 200 or 409", r.status, r.body, err)
				}
			})
			close(start)
			wg.Wait()
			a = waitApproval(t, srv, requester, a.ID, func(a approvalView) bool { return a.Status != "pending" })
			wait.Until(t, "alice's answer", func() bool { _, _, ans := fake.snapshot(); return len(ans) == round+1 })
			_, _, answers := fake.snapshot()
			answer := answers[round]
			switch {
			case len(a.Decisions) != 1:
				t.Fatalf("round %d: decisions %+v, want the winner's only", round, a.Decisions)
			case a.Status == "approved" && (a.Decisions[0].Approver != "alice" || !strings.Contains(answer, "You approved")):
				t.Errorf("round %d: approved with %+v, answer %q; want alice's vote and her told so", round, a.Decisions, answer)
			case a.Status == "rejected" && (a.Decisions[0].Approver != "bob" || !strings.Contains(answer, "already rejected by bob at ")):
				t.Errorf("round %d: rejected with %+v, answer %q; want bob's vote and alice told so", round, a.Decisions, answer)
			}
		}
	})
}

// TestCrash_SlackPostsOnce: chat.postMessage has no idempotency key, so a process killed
// (SIGKILL, through the failpoint slack.after-post) after Slack accepted a post and before
// it recorded the post's ts must not post it again. Each round starts a process armed with
// slack.after-post=crash and creates an approval asked of alice and bob (and posted in the
// channel); the first post Slack accepts kills the process. A healthy process on the same
// database takes the posts over once their lease ends, finds the one the crash cut off in
// the conversation's history by the notification id in its metadata, and records it. Then
// the fake holds exactly one message per notification, every notification is sent, and
// after alice approves every message is updated.
func TestCrash_SlackPostsOnce(t *testing.T) {
	crashParallel(t)
	rounds := outboxRounds(t)
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		dsn := testdb.DSN(t, kind)
		fake := newFakeSlack(t)
		config := strings.Replace(slackConfig(fake), "workers: {lease: 2s, poll: 100ms}",
			fmt.Sprintf("workers: {lease: %s, poll: %s}", crashLease, crashPoll), 1)
		armed := serveOptions{config: config, env: []string{failpoint.EnvVar + "=" + notify.FailpointSlackAfterPost + "=crash"}}
		healthy := serveOptions{config: config}
		requester := createToken(t, dsn, "ci-bot", "requester")
		operator := createToken(t, dsn, "ops", "operator")
		alice := createToken(t, dsn, "alice", "approver")

		for i := range rounds {
			key := fmt.Sprintf("slack-crash-%d", i)
			body := fmt.Sprintf(`{"action": "deploy", "title": "Deploy build %d", "approvers": ["alice", "bob"]}`, i)
			doomed := startServeWith(t, dsn, armed)
			resp, err := doomed.try("POST", "/v1/approvals", requester, key, body, nil)
			doomed.waitKilled(t)
			healer := startServeWith(t, dsn, healthy)
			if err != nil {
				resp = healer.do(t, "POST", "/v1/approvals", requester, key, body)
			}
			id, ok := createdID(t, key, resp)
			if !ok {
				t.FailNow()
			}
			sent := waitOutboxSent(t, healer, operator, "notification", 3*(i+1)+i) // and one update per earlier round
			msgs, _, _ := fake.snapshot()
			byNotification := map[string]int{}
			for _, m := range msgs {
				byNotification[m.NotificationID]++
			}
			for _, m := range sent {
				if m.Recipient != "*" && byNotification[m.ID] != 1 {
					t.Errorf("round %d: notification %s to %s posted %d times, want once", i, m.ID, m.Recipient, byNotification[m.ID])
				}
			}
			resent := 0
			for _, m := range sent {
				if m.Recipient != "*" && m.Attempts > 1 {
					resent++
				}
			}
			fake.mu.Lock()
			looked := fake.calls["conversations.history"]
			fake.mu.Unlock()
			if resent == 0 || looked < i+1 {
				t.Errorf("round %d: %d notifications took a second attempt and conversations.history was called %d times; want the post the crash cut off looked up", i, resent, looked)
			}
			if len(msgs) != 3*(i+1) {
				t.Fatalf("round %d: the fake holds %d messages, want %d: one per person and approval, and the channel's", i, len(msgs), 3*(i+1))
			}

			healer.do(t, "POST", "/v1/approvals/"+id+"/approve", alice, "", `{}`).wantStatus(t, http.StatusOK)
			wait.Until(t, "the round's messages updated", func() bool {
				msgs, _, _ := fake.snapshot()
				updated := 0
				for _, m := range msgs[3*i:] {
					if len(m.Updates) > 0 && strings.Contains(m.Updates[len(m.Updates)-1], "Approved by alice") {
						updated++
					}
				}
				return updated == 3
			})
			healer.stop(t)
			if t.Failed() {
				t.FailNow()
			}
		}
	})
}

// Under a policy with chat_decisions: false the messages carry the link and no buttons, and
// a click (from an older message, or forged by another app) is refused: the approval is
// decided on its page.
func TestSlack_LinkOnlyPolicy(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		dsn := testdb.DSN(t, kind)
		requester := createToken(t, dsn, "ci-bot", "requester")
		fake := newFakeSlack(t)
		srv := startServeWith(t, dsn, serveOptions{config: slackConfig(fake) + `
groups:
  dba: [alice, bob]
policies:
  - name: prod-db
    match: {action: migrate-prod-db}
    rules: [{group: dba, approvals: 1}]
    chat_decisions: false
  - name: the-rest
    match: {action: "*"}
    approvers: from_request
`})
		created := srv.do(t, "POST", "/v1/approvals", requester, "migrate-1", `{"action": "migrate-prod-db", "title": "Migrate orders"}`)
		created.wantStatus(t, http.StatusCreated)
		var a approvalView
		created.decode(t, &a)
		wait.Until(t, "three posts", func() bool { msgs, _, _ := fake.snapshot(); return len(msgs) == 3 })
		msgs, _, _ := fake.snapshot()
		for _, m := range msgs {
			if strings.Contains(m.Blocks, "approvald_approve") || !strings.Contains(m.Blocks, "/ui/approvals/"+a.ID) {
				t.Errorf("%s: got %s, want the link and no buttons", m.Channel, m.Blocks)
			}
		}
		interact(t, srv, click(fake, "U0ALICE", "approvald_approve", a.ID, "T-link"))
		wait.Until(t, "the answer", func() bool { _, _, ans := fake.snapshot(); return len(ans) == 1 })
		if _, _, ans := fake.snapshot(); !strings.Contains(ans[0], "decided on its page") {
			t.Errorf("answer: got %q, want it to say the approval is decided on its page", ans[0])
		}
		if got := waitApproval(t, srv, requester, a.ID, func(approvalView) bool { return true }); got.Status != "pending" || len(got.Decisions) != 0 {
			t.Errorf("after the refused click: got %+v, want pending without votes", got)
		}
	})
}

// Under a policy of two stages the first stage's person gets the first message; their vote
// in Slack meets the stage, which DMs the next stage's person; the last vote approves, and
// every message of the approval is updated.
func TestSlack_NextStage(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		dsn := testdb.DSN(t, kind)
		requester := createToken(t, dsn, "ci-bot", "requester")
		fake := newFakeSlack(t)
		srv := startServeWith(t, dsn, serveOptions{config: slackConfig(fake) + `
policies:
  - name: two-stages
    match: {action: deploy}
    stages:
      - rules: [{people: [alice], approvals: 1}]
      - rules: [{people: [bob], approvals: 1}]
`})
		created := srv.do(t, "POST", "/v1/approvals", requester, "staged-1", `{"action": "deploy", "title": "Deploy in stages"}`)
		created.wantStatus(t, http.StatusCreated)
		var a approvalView
		created.decode(t, &a)
		wait.Until(t, "alice's and the channel's posts", func() bool { msgs, _, _ := fake.snapshot(); return len(msgs) == 2 })
		msgs, _, _ := fake.snapshot()
		if len(in(msgs, "D0ALICE")) != 1 || len(in(msgs, "D0BOB")) != 0 {
			t.Fatalf("posts: got %+v, want alice's (stage 1) and none for bob yet", msgs)
		}
		if !strings.Contains(in(msgs, "D0ALICE")[0].Blocks, "stage 1 of 2") {
			t.Errorf("alice's post: got %s, want the stage and its progress", in(msgs, "D0ALICE")[0].Blocks)
		}

		interact(t, srv, click(fake, "U0ALICE", "approvald_approve", a.ID, "T-stage1"))
		wait.Until(t, "bob's post", func() bool { msgs, _, _ := fake.snapshot(); return len(in(msgs, "D0BOB")) == 1 })
		interact(t, srv, click(fake, "U0BOB", "approvald_approve", a.ID, "T-stage2"))
		a = waitApproval(t, srv, requester, a.ID, func(a approvalView) bool { return a.Status == "approved" })
		wait.Until(t, "every message updated", func() bool {
			msgs, _, _ := fake.snapshot()
			for _, m := range msgs {
				if len(m.Updates) == 0 || !strings.Contains(m.Updates[len(m.Updates)-1], "Approved by bob") {
					return false
				}
			}
			return len(msgs) == 3
		})
	})
}

// inboxView is an inbox event as the operators' list shows it.
type inboxView struct {
	EventID   string `json:"event_id"`
	Status    string `json:"status"`
	Attempts  int    `json:"attempts"`
	LastError string `json:"last_error"`
	Outcome   string `json:"outcome"`
}

// waitSlackProcessed waits until the inbox holds want interactions, all processed, and returns
// them.
func waitSlackProcessed(t *testing.T, srv *server, operator string, want int) []inboxView {
	t.Helper()
	var list struct {
		Events []inboxView `json:"events"`
	}
	wait.For(t, "the interactions processed", func() error {
		list.Events = nil
		srv.do(t, "GET", "/v1/inbox?source=slack&limit=200", operator, "", "").decode(t, &list)
		done := 0
		for _, e := range list.Events {
			if e.Status == "processed" {
				done++
			}
		}
		if len(list.Events) != want || done != want {
			return fmt.Errorf("got %d of %d processed: %+v\nstderr:\n%s", done, want, list.Events, srv.stderr)
		}
		return nil
	})
	return list.Events
}

// daveNotYetKnown starts serve on a new database of kind with the fake Slack, whose lookups
// by address are held (dave's direct message has not reached him: no Slack user is known as
// dave yet), prepare setting the fake's other answers first (nil: none), and creates an
// approval asking alice and dave for required votes. It returns once alice's direct message
// and the channel's post are out.
func daveNotYetKnown(t *testing.T, kind string, required int, prepare func(*fakeSlack)) (srv *server, fake *fakeSlack, requester, operator string, a approvalView) {
	t.Helper()
	dsn := testdb.DSN(t, kind)
	requester = createToken(t, dsn, "ci-bot", "requester")
	operator = createToken(t, dsn, "ops", "operator")
	fake = newFakeSlack(t)
	fake.hold(t)
	if prepare != nil {
		prepare(fake)
	}
	srv = startServeWith(t, dsn, serveOptions{config: slackConfig(fake)})
	created := srv.do(t, "POST", "/v1/approvals", requester, "dave-1",
		fmt.Sprintf(`{"action": "deploy", "title": "Deploy api v1.50", "approvers": ["alice", "dave"], "required_approvals": %d}`, required))
	created.wantStatus(t, http.StatusCreated)
	created.decode(t, &a)
	wait.Until(t, "alice's and the channel's posts", func() bool { msgs, _, _ := fake.snapshot(); return len(msgs) == 2 })
	return srv, fake, requester, operator, a
}

// dave has no people[].slack, and his direct message has not reached him (users.lookupByEmail
// is held): his click in the channel is applied by finding his Slack user's address
// (users.info, "Dave@Example.com" against the configured "dave@example.com") and his vote
// counts. A Slack user with no person's address is answered as unknown, and the answer is
// remembered: a second click of theirs does not ask Slack again.
func TestSlack_ClickerFoundByEmail(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		srv, fake, requester, operator, a := daveNotYetKnown(t, kind, 2, nil)

		interact(t, srv, click(fake, "U0DAVE", "approvald_approve", a.ID, "T-dave"))
		a = waitApproval(t, srv, requester, a.ID, func(a approvalView) bool { return len(a.Decisions) == 1 })
		if a.Decisions[0].Approver != "dave" || a.Status != "pending" {
			t.Fatalf("after dave's click: got %+v, want dave's vote, still pending", a)
		}
		if n := fake.called("users.info:U0DAVE"); n != 1 {
			t.Errorf("users.info for U0DAVE: called %d times, want 1", n)
		}
		fake.release()
		wait.Until(t, "dave's direct message and his answer", func() bool {
			msgs, _, ans := fake.snapshot()
			return len(in(msgs, "D0DAVE")) == 1 && len(ans) == 1
		})
		if _, _, ans := fake.snapshot(); !strings.Contains(ans[0], "You approved") {
			t.Errorf("dave's answer: got %q, want his vote counted", ans[0])
		}

		for i := range 2 {
			interact(t, srv, click(fake, "U0NOBODY", "approvald_approve", a.ID, fmt.Sprintf("T-nobody-%d", i)))
			wait.Until(t, "the answer to nobody", func() bool { _, _, ans := fake.snapshot(); return len(ans) == 2+i })
			if _, _, ans := fake.snapshot(); !strings.Contains(ans[1+i], "does not know your Slack account") {
				t.Errorf("click %d of U0NOBODY: got %q, want them told approvald does not know them", i, ans[1+i])
			}
		}
		if n := fake.called("users.info:U0NOBODY"); n != 1 {
			t.Errorf("users.info for U0NOBODY: called %d times, want 1 (the answer remembered)", n)
		}
		if got := waitApproval(t, srv, requester, a.ID, func(approvalView) bool { return true }); len(got.Decisions) != 1 {
			t.Errorf("after the unknown clicks: got %+v, want dave's vote only", got.Decisions)
		}
		for _, e := range waitSlackProcessed(t, srv, operator, 3) {
			if strings.Contains(e.EventID, "nobody") != strings.HasPrefix(e.Outcome, "refused: Slack user U0NOBODY is not a known person") {
				t.Errorf("interaction %s: outcome %q", e.EventID, e.Outcome)
			}
		}
	})
}

// A click from a user of another workspace (a channel shared through Slack Connect), from a
// deleted user or from a bot, whose profile shows dave's address, is not dave's: it is
// answered as unknown and counts nothing, and dave's own click still does. A user of the
// team whose address Slack does not show (the app lacks users:read.email) is not answered
// as unknown: the click fails for an operator, saying what is missing.
func TestSlack_ClickerOfAnotherTeamIsNobody(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		srv, fake, requester, operator, a := daveNotYetKnown(t, kind, 1, nil)

		for i, user := range []string{"U0MALLORY", "U0GONE", "U0BOT"} {
			interact(t, srv, click(fake, user, "approvald_approve", a.ID, "T-"+user))
			wait.Until(t, "the answer to "+user, func() bool { _, _, ans := fake.snapshot(); return len(ans) == i+1 })
			if _, _, ans := fake.snapshot(); !strings.Contains(ans[i], "does not know your Slack account") {
				t.Errorf("%s's click: got %q, want them told approvald does not know them", user, ans[i])
			}
		}
		if got := waitApproval(t, srv, requester, a.ID, func(approvalView) bool { return true }); got.Status != "pending" || len(got.Decisions) != 0 {
			t.Fatalf("after the clicks of users who are not dave: got %s with %+v, want pending with no vote", got.Status, got.Decisions)
		}

		interact(t, srv, click(fake, "U0HIDDEN", "approvald_approve", a.ID, "T-hidden"))
		wait.For(t, "the hidden user's click failed", func() error {
			var list struct {
				Events []inboxView `json:"events"`
			}
			srv.do(t, "GET", "/v1/inbox?source=slack&limit=200", operator, "", "").decode(t, &list)
			for _, e := range list.Events {
				if strings.Contains(e.EventID, "hidden") {
					if e.Status == "failed" && strings.Contains(e.LastError, "users:read.email") {
						return nil
					}
					return fmt.Errorf("the hidden user's click: %+v", e)
				}
			}
			return fmt.Errorf("no event of the hidden user's click in %+v", list.Events)
		})

		interact(t, srv, click(fake, "U0DAVE", "approvald_approve", a.ID, "T-dave"))
		a = waitApproval(t, srv, requester, a.ID, func(a approvalView) bool { return len(a.Decisions) == 1 })
		if a.Decisions[0].Approver != "dave" || a.Status != "approved" {
			t.Fatalf("after dave's click: got %s with %+v, want approved by dave", a.Status, a.Decisions)
		}
	})
}

// Thirty clicks of dave, whom no person is known as yet, released at once by a barrier: his
// vote is recorded once, Slack is asked who he is once (the answer remembered for the other
// clicks), and every click is answered: the first that counted, the others that nothing
// changed.
func TestSlack_ConcurrentClicksFoundByEmail(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		srv, fake, requester, operator, a := daveNotYetKnown(t, kind, 2, nil)

		const clicks = 30
		bodies := make([]string, clicks)
		for i := range clicks {
			bodies[i] = click(fake, "U0DAVE", "approvald_approve", a.ID, fmt.Sprintf("T-dave-%d", i))
		}
		interactAtOnce(t, srv, bodies)
		waitSlackProcessed(t, srv, operator, clicks)
		a = waitApproval(t, srv, requester, a.ID, func(approvalView) bool { return true })
		if len(a.Decisions) != 1 || a.Decisions[0].Approver != "dave" || a.Status != "pending" {
			t.Fatalf("after %d clicks: got %+v, want dave's vote once, still pending", clicks, a)
		}
		// One inbox processor: the first click that needs him looks him up and remembers him
		// before the next is applied.
		if n := fake.called("users.info"); n != 1 {
			t.Errorf("users.info: called %d times, want 1", n)
		}
		fake.release()
		wait.Until(t, "an answer to every click", func() bool { _, _, ans := fake.snapshot(); return len(ans) == clicks })
		_, _, answers := fake.snapshot()
		counted, already := 0, 0
		for _, ans := range answers {
			switch {
			case strings.HasPrefix(ans, "You approved"):
				counted++
			case strings.HasPrefix(ans, "You already approved"):
				already++
			default:
				t.Errorf("answer %q: want the vote counted or already counted", ans)
			}
		}
		if counted != 1 || already != clicks-1 {
			t.Errorf("answers: %d counted and %d already, want 1 and %d", counted, already, clicks-1)
		}
	})
}

// Slack fails while approvald asks who dave is (a 500, then a 429 with Retry-After): the
// click is neither dropped nor answered as unknown; it is applied again later, and his vote
// counts once.
func TestSlack_LookupFailsThenCounts(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		srv, fake, requester, operator, a := daveNotYetKnown(t, kind, 2, func(fake *fakeSlack) {
			fake.fail["users.info"] = 1
			fake.limit["users.info"] = 1
		})

		interact(t, srv, click(fake, "U0DAVE", "approvald_approve", a.ID, "T-dave"))
		events := waitSlackProcessed(t, srv, operator, 1)
		if e := events[0]; e.Attempts != 3 || !strings.HasPrefix(e.Outcome, "approval "+a.ID+": dave voted approve") {
			t.Errorf("the click: got %+v, want it applied at its third attempt, dave's vote", e)
		}
		if n := fake.called("users.info"); n != 3 {
			t.Errorf("users.info: called %d times, want 3: the 429, the 500 and the answer", n)
		}
		a = waitApproval(t, srv, requester, a.ID, func(approvalView) bool { return true })
		if len(a.Decisions) != 1 || a.Decisions[0].Approver != "dave" {
			t.Fatalf("decisions: got %+v, want dave's once", a.Decisions)
		}
		fake.release()
		wait.Until(t, "dave's answer", func() bool { _, _, ans := fake.snapshot(); return len(ans) == 1 })
		if _, _, ans := fake.snapshot(); !strings.HasPrefix(ans[0], "You approved") {
			t.Errorf("dave's answer: got %q, want his vote counted", ans[0])
		}
	})
}

// Under a rule of two approvals of four people, every message shows the progress: after
// alice's vote each is updated to "1 of 2" and keeps its buttons; after bob's, the last
// update of each is the outcome without buttons, and no progress comes after it.
func TestSlack_MessagesFollowProgress(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		dsn := testdb.DSN(t, kind)
		requester := createToken(t, dsn, "ci-bot", "requester")
		fake := newFakeSlack(t)
		srv := startServeWith(t, dsn, serveOptions{config: slackConfig(fake)})

		created := srv.do(t, "POST", "/v1/approvals", requester, "progress-1",
			`{"action": "deploy", "title": "Deploy api v1.53", "approvers": ["alice", "bob", "carol", "dave"], "required_approvals": 2}`)
		created.wantStatus(t, http.StatusCreated)
		var a approvalView
		created.decode(t, &a)
		wait.Until(t, "five posts", func() bool { msgs, _, _ := fake.snapshot(); return len(msgs) == 5 })
		msgs, _, _ := fake.snapshot()
		for _, m := range msgs {
			if !strings.Contains(m.Blocks, "0 of 2 approvals") {
				t.Errorf("%s: posted %s, want the progress 0 of 2", m.Channel, m.Blocks)
			}
		}

		interact(t, srv, click(fake, "U0ALICE", "approvald_approve", a.ID, "T-alice"))
		wait.Until(t, "every message showing 1 of 2", func() bool {
			msgs, _, _ := fake.snapshot()
			for _, m := range msgs {
				if len(m.Updates) == 0 || !strings.Contains(m.Updates[len(m.Updates)-1], "1 of 2 approvals (alice)") {
					return false
				}
			}
			return true
		})
		msgs, _, _ = fake.snapshot()
		for _, m := range msgs {
			if last := m.Updates[len(m.Updates)-1]; !strings.Contains(last, "approvald_approve") {
				t.Errorf("%s: updated to %s, want the buttons kept while it waits", m.Channel, last)
			}
		}

		interact(t, srv, click(fake, "U0BOB", "approvald_approve", a.ID, "T-bob"))
		waitApproval(t, srv, requester, a.ID, func(a approvalView) bool { return a.Status == "approved" })
		wait.Until(t, "every message showing the outcome", func() bool {
			msgs, _, _ := fake.snapshot()
			for _, m := range msgs {
				if !strings.Contains(m.Updates[len(m.Updates)-1], "Approved by bob") {
					return false
				}
			}
			return true
		})
		msgs, _, _ = fake.snapshot()
		for _, m := range msgs {
			final := false
			for i, u := range m.Updates {
				switch {
				case strings.Contains(u, "Approved by bob"):
					final = true
					if strings.Contains(u, "approvald_approve") {
						t.Errorf("%s: update %d is the outcome with buttons: %s", m.Channel, i, u)
					}
				case final:
					t.Errorf("%s: update %d shows %s after the outcome", m.Channel, i, u)
				}
			}
		}
	})
}
