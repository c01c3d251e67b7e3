package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/mail"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/approvald/approval/failpoint"
	"github.com/approvald/approval/internal/mailtest"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/internal/wait"
	"github.com/approvald/approval/webhook"
)

// The crash proofs of the outbox (docs/invariants.md, invariant 8; docs/notifications.md,
// "At most one resend, with the same identity") on the real binary: a serve process armed
// with outbox.after-send=crash kills itself with SIGKILL right after a channel accepted a
// message (the SMTP server answered 250 to its DATA, the callback receiver answered 2xx) and
// before the outbox recorded it; a process without the failpoint is started on the same
// database and finishes the work. The window is the failpoint's, so no timing decides it.

// outboxRounds is how many crashes each store's outbox proof goes through:
// APPROVALD_CRASH_OUTBOX_ROUNDS, 3 by default (a soak sets more).
func outboxRounds(t *testing.T) int {
	return roundsFromEnv(t, "APPROVALD_CRASH_OUTBOX_ROUNDS", 3)
}

// outboxCrashPublicURL is web.public_url in the outbox proofs: its host ends every Message-ID.
const outboxCrashPublicURL = "https://approvals.example.com"

// callbackSecret signs the callbacks of the callback proof; the receiver checks every one.
const callbackSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// mailApprovers are the approvers of every approval in the mail proof, each with an address,
// so that a create queues one mail per approver and the worker sends them at once.
var mailApprovers = []string{"alice", "bob", "carol"}

// TestCrash_MailResendsOnce: a notifier killed after the SMTP server accepted a mail and
// before recording it resends at most once, with the same Message-ID (issue #9).
//
// Each round starts a process armed with outbox.after-send=crash and creates an approval
// asked of three approvers with e-mail addresses; the create's commit wakes the outbox
// worker, which sends the three mails at once to a real SMTP server in the test, and the
// first send to be accepted kills the process. A healthy process is started on the same
// database (and the create retried if its answer was lost). Then, for every round so far:
//
//   - every queued notification is sent, and the outbox lists no other state;
//   - each arrived once or twice, every copy byte for byte the same message (one
//     Message-ID, <outbox id@host of web.public_url>), to the approver's address;
//   - in each round at least one mail arrived twice (the one whose acceptance the crash cut
//     off), and a mail that arrived twice has two attempts on record, the first unfinished.
func TestCrash_MailResendsOnce(t *testing.T) {
	crashParallel(t)
	rounds := outboxRounds(t)
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		begun := time.Now()
		dsn := testdb.DSN(t, kind)
		sink := mailtest.Start(t)
		var people strings.Builder
		for _, p := range mailApprovers {
			fmt.Fprintf(&people, "  - {name: %s, email: %s@example.com}\n", p, p)
		}
		config := fmt.Sprintf(`
workers: {lease: %s, poll: %s}
web: {public_url: %s}
smtp: {host: 127.0.0.1, port: %d, starttls: none, from: "approvald <approvals@example.com>"}
people:
%s`, crashLease, crashPoll, outboxCrashPublicURL, sink.Port, people.String())
		armed := serveOptions{config: config, env: []string{failpoint.EnvVar + "=outbox.after-send=crash"}}
		healthy := serveOptions{config: config}
		requester := createToken(t, dsn, "ci-bot", "requester")
		operator := createToken(t, dsn, "ops", "operator")
		approvers, _ := json.Marshal(mailApprovers)

		var ids []string // approval id per round
		for i := range rounds {
			key := fmt.Sprintf("deploy-%d", i)
			body := fmt.Sprintf(`{"action": "deploy", "title": "Deploy build %d", "approvers": %s}`, i, approvers)
			doomed := startServeWith(t, dsn, armed)
			// The answer may not come: the worker, woken by the commit, may kill the process
			// before the handler writes it.
			resp, err := doomed.try("POST", "/v1/approvals", requester, key, body, nil)
			doomed.waitKilled(t)
			healer := startServeWith(t, dsn, healthy)
			if err != nil {
				// The create committed (the process died sending its mail): the retry is a replay.
				resp = healer.do(t, "POST", "/v1/approvals", requester, key, body)
				if resp.header.Get("Idempotent-Replayed") != "true" {
					t.Fatalf("round %d: the retried create got status %d without Idempotent-Replayed, want a replay; body %s", i, resp.status, resp.body)
				}
			}
			id, ok := createdID(t, key, resp)
			if !ok {
				t.FailNow()
			}
			ids = append(ids, id)
			msgs := waitOutboxSent(t, healer, operator, "notification", len(mailApprovers)*(i+1))
			checkMails(t, healer, operator, sink, msgs, ids)
			healer.stop(t)
			if t.Failed() {
				t.FailNow()
			}
		}
		t.Logf("%s: %d rounds, %d mails for %d notifications, in %s", kind, rounds, len(sink.Mails()), len(mailApprovers)*rounds, time.Since(begun).Round(time.Millisecond))
	})
}

// checkMails holds what the SMTP server received to the outbox's messages, all sent: one or
// two identical copies of each, and at least one resent per round (ids: the rounds' approvals).
func checkMails(t *testing.T, srv *server, token string, sink *mailtest.Server, msgs []outboxView, ids []string) {
	t.Helper()
	byMessageID := make(map[string][]mailtest.Mail)
	for _, m := range sink.Mails() {
		parsed, err := mail.ReadMessage(bytes.NewReader(m.Data))
		if err != nil {
			t.Fatalf("parse mail to %s: %v", m.To, err)
		}
		mid := parsed.Header.Get("Message-ID")
		byMessageID[mid] = append(byMessageID[mid], m)
	}
	host := strings.TrimPrefix(outboxCrashPublicURL, "https://")
	resent := make(map[string]int) // approval id -> its mails that arrived twice
	known := make(map[string]bool)
	for _, m := range msgs {
		mid := "<" + m.ID + "@" + host + ">"
		known[mid] = true
		copies := byMessageID[mid]
		switch {
		case len(copies) == 0:
			t.Errorf("notification %s to %s is sent, but no mail with Message-ID %s arrived", m.ID, m.Recipient, mid)
			continue
		case len(copies) > 2:
			t.Errorf("notification %s to %s: got %d copies of %s, want at most 2 (one resend)", m.ID, m.Recipient, len(copies), mid)
		}
		for _, c := range copies {
			if c.To != m.Recipient+"@example.com" {
				t.Errorf("notification %s for %s: a copy went to %s", m.ID, m.Recipient, c.To)
			}
			if !bytes.Equal(c.Data, copies[0].Data) {
				t.Errorf("notification %s: the resend differs from the first mail\nfirst:\n%s\nresend:\n%s", m.ID, copies[0].Data, c.Data)
			}
		}
		if len(copies) == 2 {
			resent[m.ApprovalID]++
			attempts := outboxAttempts(t, srv, token, m.ID)
			if len(attempts) != 2 || attempts[0].FinishedAt != nil || attempts[1].Outcome != "sent" {
				t.Errorf("notification %s arrived twice, attempts %+v: want two, the first unfinished (its process died) and the second sent", m.ID, attempts)
			}
		}
	}
	for mid := range byMessageID {
		if !known[mid] {
			t.Errorf("a mail with Message-ID %s arrived that no notification has", mid)
		}
	}
	for i, id := range ids {
		if resent[id] == 0 {
			t.Errorf("round %d (approval %s): no mail arrived twice, want the one the crash cut off resent", i, id)
		}
	}
}

// TestCrash_CallbackOncePerEvent: a callback receiver sees each decision once per event id,
// also when the server is killed after the receiver answered and before the delivery was
// recorded; the resend carries the same event id (issue #10).
//
// Each round starts a process armed with outbox.after-send=crash, creates an approval whose
// callback_url is a receiver on loopback, and decides it: approved, rejected or cancelled in
// turn. The decision queues the callback in its transaction; the worker POSTs it, the
// receiver verifies the signature and answers 204, and the process kills itself. A healthy
// process is started on the same database. Then:
//
//   - the decision stands (read back when its answer was lost to the crash);
//   - the receiver got the round's event exactly twice under one webhook-id (the event's id)
//     with the same body, naming the approval and its decision; deduplicated by webhook-id,
//     it saw each decision once;
//   - the callback is sent, with two attempts on record, the first unfinished.
func TestCrash_CallbackOncePerEvent(t *testing.T) {
	crashParallel(t)
	rounds := outboxRounds(t)
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		begun := time.Now()
		dsn := testdb.DSN(t, kind)
		recv := newCallbackReceiver(t)
		config := fmt.Sprintf(`
workers: {lease: %s, poll: %s}
callbacks: {secret: %q, allowed_origins: [%q], allow_http_loopback: true, allow_private: true}
`, crashLease, crashPoll, callbackSecret, recv.srv.URL)
		armed := serveOptions{config: config, env: []string{failpoint.EnvVar + "=outbox.after-send=crash"}}
		healthy := serveOptions{config: config}
		requester := createToken(t, dsn, "ci-bot", "requester")
		alice := createToken(t, dsn, "alice", "approver")
		operator := createToken(t, dsn, "ops", "operator")

		decisions := []struct{ path, status string }{{"approve", "approved"}, {"reject", "rejected"}, {"cancel", "cancelled"}}
		want := make(map[string]string) // approval id -> its decided status
		for i := range rounds {
			decision := decisions[i%len(decisions)]
			key := fmt.Sprintf("release-%d", i)
			body := fmt.Sprintf(`{"action": "release", "title": "Release %d", "approvers": ["alice"], "callback_url": %q}`, i, recv.srv.URL+"/hook")
			doomed := startServeWith(t, dsn, armed)
			created := doomed.do(t, "POST", "/v1/approvals", requester, key, body)
			id, ok := createdID(t, key, created)
			if !ok {
				t.FailNow()
			}
			want[id] = decision.status
			// The answer may not come: the worker, woken by the commit, may kill the process
			// before the handler writes it.
			token, reqBody := alice, "{}"
			if decision.path == "cancel" {
				token, reqBody = requester, ""
			}
			resp, err := doomed.try("POST", "/v1/approvals/"+id+"/"+decision.path, token, "", reqBody, nil)
			if err == nil {
				resp.wantStatus(t, http.StatusOK)
			}
			doomed.waitKilled(t)

			healer := startServeWith(t, dsn, healthy)
			var a approvalView
			healer.do(t, "GET", "/v1/approvals/"+id, requester, "", "").decode(t, &a)
			if a.Status != decision.status {
				t.Fatalf("round %d: approval %s is %s after the restart, want %s", i, id, a.Status, decision.status)
			}
			msgs := waitOutboxSent(t, healer, operator, "callback", i+1)
			for _, m := range msgs {
				if m.ApprovalID != id {
					continue
				}
				attempts := outboxAttempts(t, healer, operator, m.ID)
				if len(attempts) != 2 || attempts[0].FinishedAt != nil || attempts[1].Outcome != "sent" {
					t.Errorf("round %d: callback %s, attempts %+v: want two, the first unfinished (its process died) and the second sent", i, m.ID, attempts)
				}
			}
			healer.stop(t)
			checkCallbacks(t, recv.deliveries(), want, id)
			if t.Failed() {
				t.FailNow()
			}
		}
		t.Logf("%s: %d rounds, %d deliveries of %d events, in %s", kind, rounds, len(recv.deliveries()), rounds, time.Since(begun).Round(time.Millisecond))
	})
}

// checkCallbacks holds the receiver's deliveries to the decisions (approval id -> status):
// per webhook-id one approval's one decision, every copy the same body, at most two copies,
// and exactly two of the event the crash cut off (the callback of approval crashed).
func checkCallbacks(t *testing.T, got []callbackDelivery, want map[string]string, crashed string) {
	t.Helper()
	byEvent := make(map[string][]callbackDelivery)
	for _, d := range got {
		byEvent[d.id] = append(byEvent[d.id], d)
	}
	seen := make(map[string]string) // approval id -> event id
	for id, copies := range byEvent {
		first := copies[0]
		approvalID := first.body.Data.ApprovalID
		if prev, ok := seen[approvalID]; ok {
			t.Errorf("approval %s: callbacks under two event ids, %s and %s, want one", approvalID, prev, id)
		}
		seen[approvalID] = id
		status, ok := want[approvalID]
		switch {
		case !ok:
			t.Errorf("event %s: a callback for approval %s, which no round decided", id, approvalID)
		case first.body.Type != "approval."+status || first.body.Data.Status != status || first.body.Data.EventID != id:
			t.Errorf("event %s: got type %s, status %s, event_id %s; want approval.%s, %s, %s", id, first.body.Type, first.body.Data.Status, first.body.Data.EventID, status, status, id)
		}
		if len(copies) > 2 {
			t.Errorf("event %s: delivered %d times, want at most twice (one resend)", id, len(copies))
		}
		if approvalID == crashed && len(copies) != 2 {
			t.Errorf("event %s (approval %s): delivered %d times, want twice: the receiver answered and the process died before recording it", id, approvalID, len(copies))
		}
		for _, c := range copies {
			if !bytes.Equal(c.raw, first.raw) {
				t.Errorf("event %s: the resend differs from the first delivery\nfirst:  %s\nresend: %s", id, first.raw, c.raw)
			}
		}
	}
	for approvalID := range want {
		if _, ok := seen[approvalID]; !ok {
			t.Errorf("approval %s: the receiver got no callback of its decision", approvalID)
		}
	}
}

// createdID checks the answer to a create under key, new (201) or a replay, and returns the
// approval's id.
func createdID(t *testing.T, key string, resp response) (string, bool) {
	t.Helper()
	replayed := resp.header.Get("Idempotent-Replayed") == "true"
	if resp.status != http.StatusCreated && !(resp.status == http.StatusOK && replayed) {
		t.Errorf("create %s: got status %d, want 201 or a replay; body %s", key, resp.status, resp.body)
		return "", false
	}
	var a approvalView
	if err := json.Unmarshal(resp.body, &a); err != nil || a.ID == "" || a.OperationKey != key {
		t.Errorf("create %s: got %s (%v), want an approval under key %s", key, resp.body, err, key)
		return "", false
	}
	return a.ID, true
}

// outboxView is an outbox message as GET /v1/outbox lists it.
type outboxView struct {
	ID         string `json:"id"`
	Kind       string `json:"kind"`
	ApprovalID string `json:"approval_id"`
	Recipient  string `json:"recipient"`
	Status     string `json:"status"`
	Attempts   int    `json:"attempts"`
	LastError  string `json:"last_error"`
}

// outboxAttemptView is one attempt of GET /v1/outbox/{id}'s attempt_log.
type outboxAttemptView struct {
	Attempt    int        `json:"attempt"`
	FinishedAt *time.Time `json:"finished_at"`
	Outcome    string     `json:"outcome"`
	Error      string     `json:"error"`
}

// waitOutboxSent waits until the outbox holds want messages of kind, all sent, and returns
// them. A failed message fails the test at once.
func waitOutboxSent(t *testing.T, srv *server, token, kind string, want int) []outboxView {
	t.Helper()
	var msgs []outboxView
	wait.For(t, "the outbox's "+kind+" messages to be sent", func() error {
		msgs = listOutbox(t, srv, token, kind)
		sent := 0
		for _, m := range msgs {
			switch m.Status {
			case "sent":
				sent++
			case "failed":
				t.Fatalf("outbox message %s to %s failed after %d attempts: %s\nstderr:\n%s", m.ID, m.Recipient, m.Attempts, m.LastError, srv.stderr)
			}
		}
		if len(msgs) > want {
			t.Fatalf("got %d %s messages in the outbox, want %d", len(msgs), kind, want)
		}
		if sent != want {
			return fmt.Errorf("%d of %d %s messages sent: %+v\nstderr:\n%s", sent, want, kind, msgs, srv.stderr)
		}
		return nil
	})
	return msgs
}

// listOutbox returns every outbox message of kind, following the pages.
func listOutbox(t *testing.T, srv *server, token, kind string) []outboxView {
	t.Helper()
	var all []outboxView
	cursor := ""
	for {
		var page struct {
			Messages   []outboxView `json:"messages"`
			NextCursor string       `json:"next_cursor"`
		}
		resp := srv.do(t, "GET", "/v1/outbox?limit=200&kind="+kind+"&cursor="+url.QueryEscape(cursor), token, "", "")
		resp.wantStatus(t, http.StatusOK)
		resp.decode(t, &page)
		all = append(all, page.Messages...)
		if page.NextCursor == "" {
			return all
		}
		cursor = page.NextCursor
	}
}

// outboxAttempts returns the attempt log of outbox message id, oldest first.
func outboxAttempts(t *testing.T, srv *server, token, id string) []outboxAttemptView {
	t.Helper()
	var m struct {
		AttemptLog []outboxAttemptView `json:"attempt_log"`
	}
	resp := srv.do(t, "GET", "/v1/outbox/"+url.PathEscape(id), token, "", "")
	resp.wantStatus(t, http.StatusOK)
	resp.decode(t, &m)
	return m.AttemptLog
}

// callbackReceiver is a caller's callback endpoint on loopback: it verifies each delivery's
// Standard Webhooks signature and keeps it.
type callbackReceiver struct {
	srv *httptest.Server

	mu  sync.Mutex
	got []callbackDelivery
}

type callbackDelivery struct {
	id   string // webhook-id
	raw  []byte
	body struct {
		Type string `json:"type"`
		Data struct {
			EventID    string `json:"event_id"`
			ApprovalID string `json:"approval_id"`
			Status     string `json:"status"`
		} `json:"data"`
	}
}

func newCallbackReceiver(t *testing.T) *callbackReceiver {
	t.Helper()
	r := &callbackReceiver{}
	verifier := &webhook.Verifier{Scheme: webhook.SchemeStandard, Secrets: []string{callbackSecret}}
	if err := verifier.Validate(); err != nil {
		t.Fatal(err)
	}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		raw, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if _, err := verifier.Verify(req.Header, raw, time.Now()); err != nil {
			t.Errorf("callback %s: %v", req.Header.Get("webhook-id"), err)
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		d := callbackDelivery{id: req.Header.Get("webhook-id"), raw: raw}
		if err := json.Unmarshal(raw, &d.body); err != nil {
			t.Errorf("callback %s: decode %s: %v", d.id, raw, err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.got = append(r.got, d)
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *callbackReceiver) deliveries() []callbackDelivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}
