package notify_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"net/mail"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/approvald/approval"
	"github.com/approvald/approval/failpoint"
	"github.com/approvald/approval/internal/fakeclock"
	"github.com/approvald/approval/internal/mailtest"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/internal/workerhook"
	"github.com/approvald/approval/notify"
	"github.com/approvald/approval/web"
	"github.com/approvald/approval/webhook"
	"github.com/approvald/approval/worker"
)

const publicURL = "https://approvals.example.com"

// TestMail_CreateRetriedSendsOnePerApprover: a create retried ten times under one key makes
// one notification per approver, and the outbox worker sends each once, to a real SMTP
// server in the test process.
func TestMail_CreateRetriedSendsOnePerApprover(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		h := newHarness(t, kind, approvers)
		id := h.create(t, "deploy-1042", 10)
		for h.outbox(nil).RunOnceT(t) > 0 {
		}
		got := h.smtp.Mails()
		if len(got) != 2 {
			t.Fatalf("mails: got %d, want 2 (one per approver)", len(got))
		}
		rcpts := map[string]bool{}
		for _, m := range got {
			rcpts[m.To] = true
			msg := parseMail(t, m.Data)
			if !strings.HasPrefix(msg.messageID, "<ntf_") || !strings.HasSuffix(msg.messageID, "@approvals.example.com>") {
				t.Errorf("Message-ID: got %q, want <ntf_...@approvals.example.com>", msg.messageID)
			}
			link := publicURL + web.ApprovalPath(id)
			if !strings.Contains(msg.text, link) || !strings.Contains(msg.html, `href="`+link+`"`) {
				t.Errorf("mail to %s: want the page link %s in both parts\ntext: %s\nhtml: %s", m.To, link, msg.text, msg.html)
			}
			if !strings.Contains(msg.text, "Deploy api v1.42 to prod") || !strings.Contains(msg.html, "Deploy api v1.42 to prod") {
				t.Errorf("mail to %s: want the title in both parts", m.To)
			}
			for _, part := range []string{msg.text, msg.html} {
				if strings.Contains(part, "/approve") || strings.Contains(part, "/reject") {
					t.Errorf("mail to %s carries a link that decides: %s", m.To, part)
				}
			}
		}
		if !rcpts["alice@example.com"] || !rcpts["bob@example.com"] {
			t.Fatalf("recipients: got %v, want alice and bob", rcpts)
		}
		// Nothing is left to send, and each message says it was sent once.
		for _, m := range h.list(t, approval.OutboxNotification) {
			if m.Status != approval.OutboxSent || m.Attempts != 1 {
				t.Fatalf("message %s: got %s after %d attempts, want sent after 1", m.ID, m.Status, m.Attempts)
			}
		}
	})
}

// TestMail_KilledAfterAcceptResendsOnce: a worker stopped at outbox.after-send (the server
// accepted the mail, the outcome not recorded) leaves the message sending; a new worker takes
// it over once the lease ends and sends it once more, with the same Message-ID, and then
// never again.
func TestMail_KilledAfterAcceptResendsOnce(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		h := newHarness(t, kind, approval.Routing{Channels: map[string][]string{"alice": {approval.ChannelEmail}}})
		h.create(t, "deploy-7", 1)
		fp, err := failpoint.Parse("outbox.after-send=error")
		if err != nil {
			t.Fatal(err)
		}
		if n := h.outbox(fp).RunOnceT(t); n != 1 {
			t.Fatalf("claimed %d, want 1", n)
		}
		if n := h.outbox(nil).RunOnceT(t); n != 0 {
			t.Fatalf("a second worker claimed %d while the lease runs, want 0", n)
		}
		h.clock.Advance(lease)
		if n := h.outbox(nil).RunOnceT(t); n != 1 {
			t.Fatalf("claimed %d after the lease, want 1", n)
		}
		h.clock.Advance(time.Hour)
		for h.outbox(nil).RunOnceT(t) > 0 {
			t.Fatal("a sent message was claimed again")
		}
		got := h.smtp.Mails()
		if len(got) != 2 {
			t.Fatalf("mails: got %d, want 2 (the first and one resend)", len(got))
		}
		first, second := parseMail(t, got[0].Data), parseMail(t, got[1].Data)
		if first.messageID != second.messageID || !bytes.Equal(got[0].Data, got[1].Data) {
			t.Fatalf("resend: got Message-ID %s then %s, want the same message", first.messageID, second.messageID)
		}
		m := h.list(t, approval.OutboxNotification)[0]
		_, attempts, err := h.store.OutboxMessage(t.Context(), m.ID)
		if err != nil {
			t.Fatal(err)
		}
		if m.Status != approval.OutboxSent || len(attempts) != 2 || attempts[0].FinishedAt != nil || attempts[1].Outcome != "sent" {
			t.Fatalf("message %s %s, attempts %+v: want sent, the first attempt unfinished and the second sent", m.ID, m.Status, attempts)
		}
	})
}

// TestMail_RefusedAndRetried: a 4xx answer is retried with backoff, a 5xx fails the message
// at once, and the attempts are on record with the server's words.
func TestMail_RefusedAndRetried(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		h := newHarness(t, kind, approvers)
		h.smtp.Refuse("bob@example.com", &smtp.SMTPError{Code: 550, Message: "no such user"})
		h.smtp.Refuse("alice@example.com", &smtp.SMTPError{Code: 451, Message: "try again later"})
		h.create(t, "deploy-9", 1)
		h.outbox(nil).RunOnceT(t)
		byTo := map[string]*approval.OutboxMessage{}
		for _, m := range h.list(t, approval.OutboxNotification) {
			byTo[m.Recipient] = m
		}
		if m := byTo["bob"]; m.Status != approval.OutboxFailed || !strings.Contains(m.LastError, "550") {
			t.Fatalf("bob's: got %s %q, want failed with the 550", m.Status, m.LastError)
		}
		if m := byTo["alice"]; m.Status != approval.OutboxPending || !strings.Contains(m.LastError, "451") || m.NextAttemptAt == nil || !m.NextAttemptAt.After(h.clock.Now()) {
			t.Fatalf("alice's: got %+v, want pending later with the 451", m)
		}
		h.smtp.Refuse("alice@example.com", nil)
		h.clock.Advance(time.Hour)
		h.outbox(nil).RunOnceT(t)
		if got := h.smtp.Mails(); len(got) != 1 || got[0].To != "alice@example.com" {
			t.Fatalf("mails: got %d, want alice's one", len(got))
		}
	})
}

// TestCallback_OncePerEvent: a receiver sees each decision once, signed, with the event's id
// as webhook-id; a worker stopped after the receiver answered and before recording makes the
// next worker resend the same webhook-id.
func TestCallback_OncePerEvent(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		clock := func() time.Time { return time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC) }
		recv := newReceiver(t, clock)
		h := newHarness(t, kind, approval.Routing{Callbacks: map[string]string{"ci-bot": recv.srv.URL + "/hook"}})
		svc := h.service()
		var ids []string
		for _, verdict := range []approval.Verdict{approval.VerdictApprove, approval.VerdictReject} {
			id := h.create(t, "op-"+string(verdict), 1)
			ids = append(ids, id)
			if _, err := svc.Decide(t.Context(), approval.Principal{Subject: "alice", Role: approval.RoleAdmin}, approval.DecideRequest{ApprovalID: id, Approver: "alice", Verdict: verdict, Cause: approval.HTTPCause("vote")}); err != nil {
				t.Fatal(err)
			}
		}
		fp, err := failpoint.Parse("outbox.after-send=error@1")
		if err != nil {
			t.Fatal(err)
		}
		h.outbox(fp).RunOnceT(t) // the first outcome is lost, the second recorded
		h.clock.Advance(lease)
		h.outbox(nil).RunOnceT(t)
		h.clock.Advance(time.Hour)
		if h.outbox(nil).RunOnceT(t) != 0 {
			t.Fatal("a delivered callback was claimed again")
		}
		got := recv.deliveries()
		byID := map[string]int{}
		for _, d := range got {
			byID[d.id]++
			if !strings.Contains(d.id, "_approved") && !strings.Contains(d.id, "_rejected") {
				t.Errorf("webhook-id %q: want the event's id", d.id)
			}
		}
		if len(byID) != 2 || len(got) != 3 {
			t.Fatalf("deliveries: got %d of %d events (%v), want 3 of 2: each event once, one resent", len(got), len(byID), byID)
		}
		for id, n := range byID {
			if n > 2 {
				t.Fatalf("event %s delivered %d times, want at most twice", id, n)
			}
		}
		for _, d := range got {
			if d.body.Data.ApprovalID != ids[0] && d.body.Data.ApprovalID != ids[1] {
				t.Fatalf("callback for %s, want one of %v", d.body.Data.ApprovalID, ids)
			}
			if want := "approval." + string(d.body.Data.Status); d.body.Type != want {
				t.Fatalf("callback type %s for status %s", d.body.Type, d.body.Data.Status)
			}
		}
	})
}

const (
	lease         = time.Minute
	callbackKey   = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	approvalTitle = "Deploy api v1.42 to prod"
)

// harness is one store with routing, a recording SMTP server and a fake clock.
type harness struct {
	store   approval.Store
	clock   *fakeclock.Clock
	routing approval.Routing
	smtp    *mailtest.Server
}

func newHarness(t *testing.T, kind string, routing approval.Routing) *harness {
	t.Helper()
	clock := fakeclock.New(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	h := &harness{clock: clock, smtp: mailtest.Start(t), routing: routing}
	h.store = testdb.OpenWith(t, kind, testdb.Options{Now: clock.Now})
	return h
}

// approvers is the routing of most tests: alice and bob on e-mail.
var approvers = approval.Routing{
	Channels: map[string][]string{"alice": {approval.ChannelEmail}, "bob": {approval.ChannelEmail}},
}

func (h *harness) service() *approval.Service {
	return &approval.Service{Store: h.store, Now: h.clock.Now, Routing: h.routing}
}

// create makes one approval asked of alice and bob by ci-bot under key, times times, and
// returns its id.
func (h *harness) create(t *testing.T, key string, times int) string {
	t.Helper()
	body := `{"action":"deploy","title":"` + approvalTitle + `","approvers":["alice","bob"]}`
	var req approval.CreateRequest
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		t.Fatal(err)
	}
	id := ""
	for range times {
		res, err := h.service().Create(t.Context(), approval.Principal{Subject: "ci-bot", Role: approval.RoleRequester}, approval.CreateCommand{
			Key: key, Body: []byte(body), Decode: func() (approval.CreateRequest, error) { return req, nil }, Cause: approval.HTTPCause("create"),
			Respond: func(a *approval.Approval) (approval.StoredResponse, error) {
				return approval.StoredResponse{StatusCode: 201, Body: []byte(`{"id":"` + a.ID + `"}`)}, nil
			},
		})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		var got struct{ ID string }
		if res.Response != nil {
			json.Unmarshal(res.Response.Body, &got)
		}
		if id == "" {
			id = got.ID
		} else if got.ID != id {
			t.Fatalf("retry made %s, want %s", got.ID, id)
		}
	}
	return id
}

// outboxT is a worker.Outbox with a helper for tests.
type outboxT struct{ *worker.Outbox }

func (o outboxT) RunOnceT(t *testing.T) int {
	t.Helper()
	n, err := workerhook.OutboxRunOnce(t.Context(), o.Outbox)
	if err != nil {
		t.Fatalf("outbox round: %v", err)
	}
	return n
}

func (h *harness) outbox(fp *failpoint.Set) outboxT {
	return outboxT{&worker.Outbox{
		Store: h.store, Mailbox: h.service(), Lease: lease, Failpoints: fp, Now: h.clock.Now,
		Rand: func() float64 { return 0.5 },
		Senders: map[string]worker.Sender{
			approval.ChannelEmail: &notify.Mail{
				Host: "127.0.0.1", Port: h.smtp.Port, StartTLS: notify.StartTLSNone,
				From: "approvald <approvals@example.com>", PublicURL: publicURL,
				Address: func(_ context.Context, p string) (string, error) { return p + "@example.com", nil },
			},
			// The receivers are on loopback: the tests opt in, as callbacks.allow_private does.
			approval.ChannelCallback: &notify.Callback{
				Secret: func(string) string { return callbackKey }, Now: h.clock.Now, AllowPrivate: true,
			},
		},
	}}
}

func (h *harness) list(t *testing.T, kind approval.OutboxKind) []*approval.OutboxMessage {
	t.Helper()
	msgs, _, err := h.store.OutboxMessages(t.Context(), approval.OutboxFilter{Kind: kind, Limit: approval.MaxPageSize})
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

// parsedMail is what the tests look at in a mail.
type parsedMail struct {
	messageID, text, html string
}

func parseMail(t *testing.T, data []byte) parsedMail {
	t.Helper()
	msg, err := mail.ReadMessage(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("parse mail: %v", err)
	}
	mt, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/alternative" {
		t.Fatalf("content type %q: want multipart/alternative", msg.Header.Get("Content-Type"))
	}
	p := parsedMail{messageID: msg.Header.Get("Message-ID")}
	mr := multipart.NewReader(msg.Body, params["boundary"])
	for {
		part, err := mr.NextPart() // decodes quoted-printable
		if err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("read part: %v", err)
		}
		b, _ := io.ReadAll(part)
		switch ct := part.Header.Get("Content-Type"); {
		case strings.HasPrefix(ct, "text/plain"):
			p.text = string(b)
		case strings.HasPrefix(ct, "text/html"):
			p.html = string(b)
		}
	}
	if p.text == "" || p.html == "" {
		t.Fatalf("mail: want a text and an HTML part")
	}
	return p
}

// receiver is a callback endpoint that verifies and records deliveries.
type receiver struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []delivery
}

type delivery struct {
	id   string
	body notify.CallbackBody
}

func newReceiver(t *testing.T, now func() time.Time) *receiver {
	t.Helper()
	r := &receiver{}
	verifier := &webhook.Verifier{Scheme: webhook.SchemeStandard, Secrets: []string{callbackKey}}
	if err := verifier.Validate(); err != nil {
		t.Fatal(err)
	}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		if _, err := verifier.Verify(req.Header, body, now()); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		var d delivery
		d.id = req.Header.Get("webhook-id")
		if err := json.Unmarshal(body, &d.body); err != nil {
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

func (r *receiver) deliveries() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.got...)
}

// TestCallback_URLOnCreate: a create's callback_url receives the decision (and a cancel), in
// place of the requester's configured callback; a callback_url whose host is not allowed is
// refused and stores nothing.
func TestCallback_URLOnCreate(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		clock := func() time.Time { return time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC) }
		own, configured := newReceiver(t, clock), newReceiver(t, clock)
		h := newHarness(t, kind, approval.Routing{
			Callbacks:       map[string]string{"ci-bot": configured.srv.URL + "/hook"},
			CallbackOrigins: []string{mustOrigin(t, own.srv.URL)}, CallbackHTTPLoopback: true,
		})
		svc := h.service()
		createWith := func(key, callback string) (string, error) {
			body, _ := json.Marshal(map[string]any{"action": "deploy", "title": approvalTitle,
				"approvers": []string{"alice", "bob"}, "callback_url": callback})
			var req approval.CreateRequest
			if err := json.Unmarshal(body, &req); err != nil {
				t.Fatal(err)
			}
			res, err := svc.Create(t.Context(), approval.Principal{Subject: "ci-bot", Role: approval.RoleRequester}, approval.CreateCommand{
				Key: key, Body: body, Decode: func() (approval.CreateRequest, error) { return req, nil }, Cause: approval.HTTPCause("create"),
				Respond: func(a *approval.Approval) (approval.StoredResponse, error) {
					return approval.StoredResponse{StatusCode: 201}, nil
				},
			})
			if err != nil {
				return "", err
			}
			return res.Approval.ID, nil
		}

		// Refused: a host not in the allow-list, and plain http to it.
		for _, bad := range []string{"https://internal.example.net/hook", "http://10.0.0.1/hook", "ftp://127.0.0.1/x", "https://user:pw@127.0.0.1/x"} {
			if _, err := createWith("bad", bad); approval.ErrorCode(err) != approval.EINVALID {
				t.Fatalf("create with callback_url %s: got %v, want EINVALID", bad, err)
			}
		}
		if list, _, err := h.store.Approvals(t.Context(), approval.ApprovalFilter{}); err != nil || len(list) != 0 {
			t.Fatalf("after refused creates: got %d approvals (%v), want none", len(list), err)
		}

		approved, err := createWith("op-approve", own.srv.URL+"/mine")
		if err != nil {
			t.Fatal(err)
		}
		a, err := h.store.Approval(t.Context(), approved)
		if err != nil || a.CallbackURL != own.srv.URL+"/mine" {
			t.Fatalf("stored callback_url: got %q (%v), want %q", a.CallbackURL, err, own.srv.URL+"/mine")
		}
		cancelled, err := createWith("op-cancel", own.srv.URL+"/mine")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Decide(t.Context(), approval.Principal{Subject: "alice", Role: approval.RoleAdmin}, approval.DecideRequest{ApprovalID: approved, Approver: "alice", Verdict: approval.VerdictApprove, Cause: approval.HTTPCause("vote")}); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Cancel(t.Context(), approval.Principal{Subject: "ci-bot", Role: approval.RoleAdmin}, cancelled, approval.HTTPCause("cancel")); err != nil {
			t.Fatal(err)
		}
		h.outbox(nil).RunOnceT(t)

		got := map[string]string{}
		for _, d := range own.deliveries() {
			got[d.body.Data.ApprovalID] = d.body.Type
		}
		want := map[string]string{approved: "approval.approved", cancelled: "approval.cancelled"}
		if len(got) != 2 || got[approved] != want[approved] || got[cancelled] != want[cancelled] || len(own.deliveries()) != 2 {
			t.Fatalf("the create's callback_url received %v, want %v once each", got, want)
		}
		if n := len(configured.deliveries()); n != 0 {
			t.Fatalf("the requester's configured callback received %d deliveries, want 0: callback_url overrides it", n)
		}
	})
}

// createCallback creates an approval of ci-bot under key whose create names callback as its
// callback_url, and returns its id.
func (h *harness) createCallback(t *testing.T, key, callback string) (string, error) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"action": "deploy", "title": approvalTitle,
		"approvers": []string{"alice", "bob"}, "callback_url": callback})
	var req approval.CreateRequest
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatal(err)
	}
	res, err := h.service().Create(t.Context(), approval.Principal{Subject: "ci-bot", Role: approval.RoleRequester}, approval.CreateCommand{
		Key: key, Body: body, Decode: func() (approval.CreateRequest, error) { return req, nil }, Cause: approval.HTTPCause("create"),
		Respond: func(a *approval.Approval) (approval.StoredResponse, error) {
			return approval.StoredResponse{StatusCode: 201}, nil
		},
	})
	if err != nil {
		return "", err
	}
	return res.Approval.ID, nil
}

// TestCallback_PortAndAddress: a callback_url must name an allowed origin, port included,
// and a valid port; a name allowed in the list that resolves to loopback (localhost) is
// refused when the callback is dialled, for good and with the reason in the outbox, and
// nothing reaches the local port.
func TestCallback_PortAndAddress(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		clock := func() time.Time { return time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC) }
		recv := newReceiver(t, clock)
		port := recv.srv.Listener.Addr().(*net.TCPAddr).Port
		h := newHarness(t, kind, approval.Routing{
			CallbackOrigins: []string{fmt.Sprintf("http://127.0.0.1:%d", port), fmt.Sprintf("http://localhost:%d", port)}, CallbackHTTPLoopback: true,
		})

		// Refused at create: ports that are none, and a loopback port the list does not name.
		other := port + 1
		if other > 65535 {
			other = port - 1
		}
		for _, bad := range []string{"http://127.0.0.1:0/hook", "http://127.0.0.1:99999/hook", "http://127.0.0.1:x/hook", "http://127.0.0.1:-1/hook",
			"http://127.0.0.1/hook", fmt.Sprintf("http://127.0.0.1:%d/hook", other), fmt.Sprintf("http://user@127.0.0.1:%d/hook", port)} {
			_, err := h.createCallback(t, "bad", bad)
			if approval.ErrorCode(err) != approval.EINVALID || !strings.Contains(err.Error(), "callback_url") {
				t.Errorf("create with callback_url %s: got %v, want EINVALID naming callback_url", bad, err)
			}
		}
		if list, _, err := h.store.Approvals(t.Context(), approval.ApprovalFilter{}); err != nil || len(list) != 0 {
			t.Fatalf("after refused creates: got %d approvals (%v), want none", len(list), err)
		}

		id, err := h.createCallback(t, "op-localhost", fmt.Sprintf("http://localhost:%d/hook", port))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.service().Decide(t.Context(), approval.Principal{Subject: "alice", Role: approval.RoleAdmin}, approval.DecideRequest{ApprovalID: id, Approver: "alice", Verdict: approval.VerdictApprove, Cause: approval.HTTPCause("vote")}); err != nil {
			t.Fatal(err)
		}
		// Sent without the opt-in, as callbacks are by default.
		guarded := outboxT{&worker.Outbox{
			Store: h.store, Mailbox: h.service(), Lease: lease, Now: h.clock.Now, Rand: func() float64 { return 0.5 },
			Senders: map[string]worker.Sender{approval.ChannelCallback: &notify.Callback{
				Secret: func(string) string { return callbackKey }, Now: h.clock.Now,
			}},
		}}
		guarded.RunOnceT(t)
		if n := len(recv.deliveries()); n != 0 {
			t.Fatalf("the loopback port received %d callbacks, want none", n)
		}
		msgs := h.list(t, approval.OutboxCallback)
		if len(msgs) != 1 || msgs[0].Status != approval.OutboxFailed || msgs[0].Attempts != 1 || !strings.Contains(msgs[0].LastError, "loopback") {
			t.Fatalf("callback messages: got %+v, want one failed after one attempt, its error naming the loopback address", msgs)
		}
		if n := guarded.RunOnceT(t); n != 0 {
			t.Fatalf("a refused callback was claimed again: %d messages", n)
		}

		// The same callback with the opt-in is delivered once an operator retries it.
		svc := h.service()
		if _, err := svc.RetryOutbox(t.Context(), approval.Principal{Subject: "root", Role: approval.RoleAdmin}, msgs[0].ID); err != nil {
			t.Fatalf("retry the refused callback: %v", err)
		}
		h.outbox(nil).RunOnceT(t)
		if n := len(recv.deliveries()); n != 1 {
			t.Fatalf("with allow_private: the receiver got %d callbacks, want 1", n)
		}
	})
}

func mustOrigin(t *testing.T, raw string) string {
	t.Helper()
	o, err := approval.CallbackOrigin(raw)
	if err != nil {
		t.Fatalf("origin of %s: %v", raw, err)
	}
	return o
}

// TestMail_SigninLink: a sign-in link goes out by e-mail, text and HTML, holding the link to
// the confirmation page and nothing that decides; once sent, the outbox keeps no token.
func TestMail_SigninLink(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		h := newHarness(t, kind, approval.Routing{
			Channels: map[string][]string{"alice": {approval.ChannelEmail}},
			Emails:   map[string]string{"alice": "alice@example.com"},
		})
		res, err := h.service().RequestSignin(t.Context(), "alice@example.com", "", "")
		if err != nil || !res.Queued {
			t.Fatalf("request a link: got %+v, %v", res, err)
		}
		msgs := h.list(t, approval.OutboxSignin)
		if len(msgs) != 1 {
			t.Fatalf("sign-in messages: got %d, want 1", len(msgs))
		}
		var p approval.Signin
		if err := json.Unmarshal(msgs[0].Payload, &p); err != nil || !strings.HasPrefix(p.Token, approval.SigninTokenPrefix) {
			t.Fatalf("queued payload %s: %v", msgs[0].Payload, err)
		}
		if n := h.outbox(nil).RunOnceT(t); n != 1 {
			t.Fatalf("outbox round sent %d, want 1", n)
		}
		got := h.smtp.Mails()
		if len(got) != 1 || got[0].To != "alice@example.com" {
			t.Fatalf("mails: got %d (%v), want 1 to alice@example.com", len(got), got)
		}
		m := parseMail(t, got[0].Data)
		link := publicURL + web.SigninLinkPath(p.Token, "")
		if !strings.Contains(m.text, link) || !strings.Contains(m.html, `href="`+strings.ReplaceAll(link, "&", "&amp;")+`"`) {
			t.Fatalf("mail does not hold the link %s:\n%s\n%s", link, m.text, m.html)
		}
		if strings.Contains(m.text, "/approve") || strings.Contains(m.html, "/approve") {
			t.Fatal("a sign-in mail holds a link that decides")
		}
		if sent := h.list(t, approval.OutboxSignin)[0]; sent.Status != approval.OutboxSent || strings.Contains(string(sent.Payload), p.Token) {
			t.Fatalf("after sending: status %s, payload %s; want sent and no token", sent.Status, sent.Payload)
		}
		if _, err := h.service().UseSignin(t.Context(), p.Token); err != nil {
			t.Fatalf("the mailed link does not sign in: %v", err)
		}
	})
}
