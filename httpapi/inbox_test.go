package httpapi_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	stripewebhook "github.com/stripe/stripe-go/v82/webhook"

	"github.com/approvald/approval"
	"github.com/approvald/approval/httpapi"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/webhook"
)

// The secrets of the test sources. Each source has a new and an old secret, as while rotating.
const (
	chatNewSecret   = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
	chatOldSecret   = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	chatOtherSecret = "whsec_dGhpcyBpcyBub3QgdGhlIHNlY3JldCBhdCBhbGw="

	stripeNewSecret   = "whsec_test_rotated_0123"
	stripeOldSecret   = "whsec_test_9f8e7d6c5b4a"
	stripeOtherSecret = "whsec_test_someone_else"

	githubSecret      = "It's a Secret to Everybody"
	githubOtherSecret = "not the secret"

	smallBody = 64 // MaxBody of the "small" source
)

// sources are the webhook sources of an intake fixture, one per scheme, and a standard one
// with a small body limit.
func sources() []httpapi.Source {
	return []httpapi.Source{
		{Name: "chat", Verifier: webhook.Verifier{Scheme: webhook.SchemeStandard, Secrets: []string{chatNewSecret, chatOldSecret}},
			Handlers: []string{approval.TypeApprovalDecision}},
		{Name: "stripe", Verifier: webhook.Verifier{Scheme: webhook.SchemeStripe, Secrets: []string{stripeNewSecret, stripeOldSecret}}},
		{Name: "github", Verifier: webhook.Verifier{Scheme: webhook.SchemeGitHub, Secrets: []string{githubSecret}}},
		{Name: "small", Verifier: webhook.Verifier{Scheme: webhook.SchemeStandard, Secrets: []string{chatNewSecret}, Tolerance: time.Minute},
			MaxBody: smallBody},
	}
}

// intakeSetup is setup with the test sources, and the clock on a whole second so that the
// window edges are exact (signed timestamps have whole seconds).
func intakeSetup(tb testing.TB, kind string, opts ...func(*httpapi.Config)) *fixture {
	tb.Helper()
	opts = append([]func(*httpapi.Config){func(c *httpapi.Config) { c.Sources = sources() }}, opts...)
	f := setup(tb, kind, opts...)
	f.clock.Set(f.clock.Now().Truncate(time.Second))
	return f
}

// signStandard signs with the Standard Webhooks reference library, not with our code.
func signStandard(tb testing.TB, secret, id string, ts time.Time, body []byte) http.Header {
	tb.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		tb.Fatalf("new webhook: %v", err)
	}
	sig, err := wh.Sign(id, ts, body)
	if err != nil {
		tb.Fatalf("sign: %v", err)
	}
	h := http.Header{}
	h.Set(standardwebhooks.HeaderWebhookID, id)
	h.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(standardwebhooks.HeaderWebhookSignature, sig)
	h.Set("Content-Type", "application/json")
	return h
}

// signStripe signs with stripe-go's own test helper; scheme "" is v1.
func signStripe(secret string, ts time.Time, body []byte, scheme string) http.Header {
	h := http.Header{}
	h.Set("Stripe-Signature", stripewebhook.GenerateTestSignedPayload(&stripewebhook.UnsignedPayload{
		Payload: body, Secret: secret, Timestamp: ts, Scheme: scheme,
	}).Header)
	return h
}

// signGitHub signs the way GitHub documents ("Validating webhook deliveries"): the hex
// HMAC of the body under the secret, in X-Hub-Signature-256 (sha256) or X-Hub-Signature (sha1).
func signGitHub(secret, delivery, event string, body []byte, newHash func() hash.Hash) http.Header {
	m := hmac.New(newHash, []byte(secret))
	m.Write(body)
	h := http.Header{}
	h.Set("X-GitHub-Delivery", delivery)
	h.Set("X-GitHub-Event", event)
	if newHash().Size() == sha256.Size {
		h.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(m.Sum(nil)))
	} else {
		h.Set("X-Hub-Signature", "sha1="+hex.EncodeToString(m.Sum(nil)))
	}
	return h
}

// deliver posts a delivery to /v1/inbox/{source}, with no bearer token.
func (f *fixture) deliver(source string, h http.Header, body []byte) *response {
	f.tb.Helper()
	resp, err := f.sendDelivery(source, h, body)
	if err != nil {
		f.tb.Fatalf("deliver to %s: %v", source, err)
	}
	return resp
}

// sendDelivery is deliver for use outside the test goroutine.
func (f *fixture) sendDelivery(source string, h http.Header, body []byte) (*response, error) {
	var pairs []string
	for name, values := range h {
		for _, v := range values {
			pairs = append(pairs, name, v)
		}
	}
	return f.send("POST", "/v1/inbox/"+source, "", string(body), pairs...)
}

// intake is the answer to an accepted delivery.
type intake struct {
	ID        string `json:"id"`
	Duplicate bool   `json:"duplicate"`
}

// accepted checks that r accepted a delivery and returns its answer.
func (r *response) accepted(tb testing.TB) intake {
	tb.Helper()
	if r.status != http.StatusOK {
		tb.Fatalf("delivery: got %d %s, want 200", r.status, r.body)
	}
	var in intake
	r.decode(tb, &in)
	return in
}

// inboxEvent is GET /v1/inbox/{id}.
type inboxEvent struct {
	approval.InboxEvent
	Body       *string `json:"body"`
	BodyBase64 *string `json:"body_base64"`
}

// inboxEvent reads one event through the API as an operator.
func (f *fixture) inboxEvent(token, id string) inboxEvent {
	f.tb.Helper()
	resp := f.do("GET", "/v1/inbox/"+id, token, "")
	if resp.status != http.StatusOK {
		f.tb.Fatalf("GET /v1/inbox/%s: got %d %s", id, resp.status, resp.body)
	}
	var e inboxEvent
	resp.decode(f.tb, &e)
	return e
}

// inboxTotal returns how many events the store holds.
func (f *fixture) inboxTotal() int {
	f.tb.Helper()
	counts, err := f.store.InboxCounts(context.Background())
	if err != nil {
		f.tb.Fatalf("inbox counts: %v", err)
	}
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}

var (
	decisionBody = []byte(`{"type":"approval.decision","data":{"approval_id":"apr_1","approver":"alice","verdict":"approve"}}`)
	stripeBody   = []byte(`{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","object":"event","type":"charge.refunded","data":{"object":{"id":"ch_1"}}}`)
	githubBody   = []byte(`{"zen":"Keep it logically awesome.","hook_id":1}`)
)

// stripeEvent is a Stripe event body with the id.
func stripeEvent(id string) []byte {
	return []byte(strings.Replace(string(stripeBody), "evt_1NG8Du2eZvKYlo2CUI79vXWy", id, 1))
}

// flipByte returns a copy of b with one bit of byte i changed.
func flipByte(b []byte, i int) []byte {
	c := append([]byte(nil), b...)
	c[i] ^= 0x01
	return c
}

// TestIntakeStatuses sends every case of docs/http-api.md, "Webhook intake", through HTTP,
// signed by the providers' own libraries: what is accepted is stored and answered 200, and
// every refusal (400, 401, 404, 413) stores nothing.
func TestIntakeStatuses(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := intakeSetup(t, kind)
		now := f.clock.Now()
		tol := webhook.DefaultTolerance
		std := func(secret, id string, ts time.Time) http.Header {
			return signStandard(t, secret, id, ts, decisionBody)
		}
		with := func(h http.Header, name, value string) http.Header {
			h = h.Clone()
			if value == "" {
				h.Del(name)
			} else {
				h.Set(name, value)
			}
			return h
		}
		good := std(chatNewSecret, "msg_base", now)
		wrongSig := std(chatOtherSecret, "msg_base", now).Get("webhook-signature")
		goodSig := good.Get("webhook-signature")
		big := []byte(`{"type":"approval.decision","pad":"` + strings.Repeat("x", smallBody) + `"}`)

		tests := []struct {
			name   string
			source string
			header http.Header
			body   []byte
			status int
		}{
			{"standard: new secret", "chat", std(chatNewSecret, "msg_new", now), decisionBody, 200},
			{"standard: old secret while rotating", "chat", std(chatOldSecret, "msg_old", now), decisionBody, 200},
			{"standard: bad entries before a good one", "chat",
				with(std(chatNewSecret, "msg_list", now), "webhook-signature", "v1,!!!notbase64 v1,AAAA v1a,bXlzaWc= "+wrongSig+" "+std(chatNewSecret, "msg_list", now).Get("webhook-signature")),
				decisionBody, 200},
			{"standard: timestamp just inside, past", "chat", std(chatNewSecret, "msg_past", now.Add(-tol)), decisionBody, 200},
			{"standard: timestamp just inside, future", "chat", std(chatNewSecret, "msg_future", now.Add(tol)), decisionBody, 200},
			{"standard: timestamp just outside, past", "chat", std(chatNewSecret, "msg_late", now.Add(-tol-time.Second)), decisionBody, 401},
			{"standard: timestamp just outside, future", "chat", std(chatNewSecret, "msg_early", now.Add(tol+time.Second)), decisionBody, 401},
			{"standard: body byte flipped", "chat", good, flipByte(decisionBody, 10), 401},
			{"standard: body with a byte more", "chat", good, append([]byte(string(decisionBody)), ' '), 401},
			{"standard: wrong secret", "chat", std(chatOtherSecret, "msg_wrong", now), decisionBody, 401},
			{"standard: only unusable signatures", "chat", with(good, "webhook-signature", "v1a,"+strings.TrimPrefix(goodSig, "v1,")), decisionBody, 401},
			{"standard: missing id", "chat", with(good, "webhook-id", ""), decisionBody, 400},
			{"standard: missing timestamp", "chat", with(good, "webhook-timestamp", ""), decisionBody, 400},
			{"standard: timestamp hello", "chat", with(good, "webhook-timestamp", "hello"), decisionBody, 400},
			{"standard: missing signature", "chat", with(good, "webhook-signature", ""), decisionBody, 400},
			{"standard: malformed signature", "chat", with(good, "webhook-signature", "garbage"), decisionBody, 400},

			{"stripe: new secret", "stripe", signStripe(stripeNewSecret, now, stripeEvent("evt_new"), ""), stripeEvent("evt_new"), 200},
			{"stripe: old secret while rotating", "stripe", signStripe(stripeOldSecret, now, stripeEvent("evt_old"), ""), stripeEvent("evt_old"), 200},
			{"stripe: v0 only", "stripe", signStripe(stripeNewSecret, now, stripeEvent("evt_v0"), "v0"), stripeEvent("evt_v0"), 401},
			{"stripe: wrong secret", "stripe", signStripe(stripeOtherSecret, now, stripeEvent("evt_w"), ""), stripeEvent("evt_w"), 401},
			{"stripe: body byte flipped", "stripe", signStripe(stripeNewSecret, now, stripeEvent("evt_f"), ""), flipByte(stripeEvent("evt_f"), 40), 401},
			{"stripe: timestamp just inside", "stripe", signStripe(stripeNewSecret, now.Add(-tol), stripeEvent("evt_in"), ""), stripeEvent("evt_in"), 200},
			{"stripe: timestamp just outside, past", "stripe", signStripe(stripeNewSecret, now.Add(-tol-time.Second), stripeEvent("evt_late"), ""), stripeEvent("evt_late"), 401},
			{"stripe: timestamp just outside, future", "stripe", signStripe(stripeNewSecret, now.Add(tol+time.Second), stripeEvent("evt_early"), ""), stripeEvent("evt_early"), 401},
			{"stripe: missing header", "stripe", http.Header{}, stripeEvent("evt_none"), 400},
			{"stripe: malformed header", "stripe", with(http.Header{}, "Stripe-Signature", "t=hello,v1=00"), stripeEvent("evt_bad"), 400},

			{"github: sha256", "github", signGitHub(githubSecret, "gh-1", "ping", githubBody, sha256.New), githubBody, 200},
			{"github: sha1 only", "github", signGitHub(githubSecret, "gh-2", "ping", githubBody, sha1.New), githubBody, 401},
			{"github: wrong secret", "github", signGitHub(githubOtherSecret, "gh-3", "ping", githubBody, sha256.New), githubBody, 401},
			{"github: body byte flipped", "github", signGitHub(githubSecret, "gh-4", "ping", githubBody, sha256.New), flipByte(githubBody, 3), 401},
			{"github: missing delivery id", "github", with(signGitHub(githubSecret, "gh-5", "ping", githubBody, sha256.New), "X-GitHub-Delivery", ""), githubBody, 400},

			{"body over the limit", "small", std(chatNewSecret, "msg_big", now), big, 413},
			{"body at the limit", "small", signStandard(t, chatNewSecret, "msg_fit", now, big[:smallBody]), big[:smallBody], 200},
			{"unknown source", "nope", std(chatNewSecret, "msg_nope", now), decisionBody, 404},
		}
		stored := 0
		for _, tt := range tests {
			resp := f.deliver(tt.source, tt.header, tt.body)
			if resp.status != tt.status {
				t.Errorf("%s: got %d %s, want %d", tt.name, resp.status, resp.body, tt.status)
				continue
			}
			if tt.status != http.StatusOK {
				resp.problem(t, tt.status)
				if strings.Contains(string(resp.body), "whsec_") || strings.Contains(string(resp.body), githubSecret) {
					t.Errorf("%s: a secret is in the answer: %s", tt.name, resp.body)
				}
				continue
			}
			in := resp.accepted(t)
			if in.Duplicate || in.ID == "" {
				t.Errorf("%s: got %s, want a new event's id", tt.name, resp.body)
			}
			stored++
		}
		if got := f.inboxTotal(); got != stored {
			t.Fatalf("stored events: got %d, want %d (refused deliveries store nothing)", got, stored)
		}
		f.logs.mu.Lock()
		logs := f.logs.buf.String()
		f.logs.mu.Unlock()
		for _, secret := range []string{chatNewSecret, chatOldSecret, stripeNewSecret, stripeOldSecret, githubSecret} {
			if strings.Contains(logs, secret) {
				t.Errorf("a secret is in the logs")
			}
		}
	})
}

// TestIntakeStoresDelivery checks what is stored for each scheme: the provider's event id, the
// type that picks the handler, the headers that matter and the body byte for byte.
func TestIntakeStoresDelivery(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := intakeSetup(t, kind)
		olga := f.token("olga", approval.RoleOperator)
		now := f.clock.Now()
		binary := []byte{0xff, 0xfe, 0x00, 'x', 0x80}

		tests := []struct {
			source, eventID, typ string
			header               http.Header
			body                 []byte
			headers              []string
		}{
			{"chat", "msg_s1", "approval.decision", signStandard(t, chatNewSecret, "msg_s1", now, decisionBody), decisionBody,
				[]string{"webhook-id", "webhook-timestamp", "webhook-signature", "Content-Type"}},
			{"stripe", "evt_s2", "charge.refunded", signStripe(stripeNewSecret, now, stripeEvent("evt_s2"), ""), stripeEvent("evt_s2"),
				[]string{"Stripe-Signature"}},
			{"github", "gh-s3", "push", signGitHub(githubSecret, "gh-s3", "push", githubBody, sha256.New), githubBody,
				[]string{"X-GitHub-Delivery", "X-GitHub-Event", "X-Hub-Signature-256"}},
			{"github", "gh-s4", "ping", signGitHub(githubSecret, "gh-s4", "ping", binary, sha256.New), binary, nil},
			{"chat", "msg_s5", "", signStandard(t, chatNewSecret, "msg_s5", now, []byte(`{"type": 42}`)), []byte(`{"type": 42}`), nil},
			{"chat", "msg_s6", "", signStandard(t, chatNewSecret, "msg_s6", now, []byte(`not json`)), []byte(`not json`), nil},
		}
		for _, tt := range tests {
			tt.header.Set("X-Forwarded-For", "10.0.0.1") // not kept
			in := f.deliver(tt.source, tt.header, tt.body).accepted(t)
			e := f.inboxEvent(olga, in.ID)
			if e.ID != in.ID || e.Source != tt.source || e.EventID != tt.eventID || e.Type != tt.typ || e.Status != approval.InboxPending {
				t.Errorf("%s: got id %s source %s event %s type %q status %s, want %s %s %s %q pending",
					tt.eventID, e.ID, e.Source, e.EventID, e.Type, e.Status, in.ID, tt.source, tt.eventID, tt.typ)
			}
			for _, name := range tt.headers {
				if e.Headers[name] != tt.header.Get(name) {
					t.Errorf("%s: header %s: got %q, want %q", tt.eventID, name, e.Headers[name], tt.header.Get(name))
				}
			}
			if _, ok := e.Headers["X-Forwarded-For"]; ok {
				t.Errorf("%s: kept a header that does not matter: %v", tt.eventID, e.Headers)
			}
			var got []byte
			switch {
			case e.Body != nil && e.BodyBase64 == nil:
				got = []byte(*e.Body)
			case e.Body == nil && e.BodyBase64 != nil:
				var err error
				if got, err = base64.StdEncoding.DecodeString(*e.BodyBase64); err != nil {
					t.Fatalf("%s: body_base64: %v", tt.eventID, err)
				}
			default:
				t.Fatalf("%s: want exactly one of body and body_base64, got %v and %v", tt.eventID, e.Body, e.BodyBase64)
			}
			if string(got) != string(tt.body) {
				t.Errorf("%s: body: got %q, want %q", tt.eventID, got, tt.body)
			}
		}
	})
}

// TestIntakeConcurrentRedeliveries sends one event 50 times at once: one row, 50 answers 200,
// exactly one of them new.
func TestIntakeConcurrentRedeliveries(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := intakeSetup(t, kind)
		h := signStandard(t, chatNewSecret, "msg_storm", f.clock.Now(), decisionBody)
		const n = 50
		answers := make([]*response, n)
		errs := make([]error, n)
		race(n, func(i int) { answers[i], errs[i] = f.sendDelivery("chat", h, decisionBody) })

		fresh, ids := 0, map[string]bool{}
		for i, resp := range answers {
			if errs[i] != nil {
				t.Fatalf("delivery %d: %v", i, errs[i])
			}
			in := resp.accepted(t)
			if !in.Duplicate {
				fresh++
			}
			if in.ID == "" {
				t.Fatalf("delivery %d: got %+v, want the stored event's id", i, in)
			}
			ids[in.ID] = true
		}
		if fresh != 1 {
			t.Fatalf("new events: got %d, want 1 (the others duplicates)", fresh)
		}
		if len(ids) != 1 {
			t.Fatalf("answered ids: got %v, want the one stored event's", ids)
		}
		if got := f.inboxTotal(); got != 1 {
			t.Fatalf("stored events: got %d, want 1", got)
		}
		metrics := string(f.do("GET", "/metrics", "", "").body)
		for _, want := range []string{
			`approvald_inbox_received_total{result="stored",source="chat"} 1`,
			`approvald_inbox_received_total{result="duplicate",source="chat"} 49`,
			`approvald_inbox_received_total{result="rejected",source="chat"} 0`,
		} {
			if !strings.Contains(metrics, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
	})
}

// TestIntakeRedeliveredLater: a provider redelivers days later, re-signed at its new time:
// still a duplicate, acknowledged 200. The old signed delivery replayed as it was is refused:
// its timestamp is out of the window.
func TestIntakeRedeliveredLater(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := intakeSetup(t, kind)
		first := signStandard(t, chatNewSecret, "msg_later", f.clock.Now(), decisionBody)
		in := f.deliver("chat", first, decisionBody).accepted(t)

		f.clock.Advance(72 * time.Hour)
		again := f.deliver("chat", signStandard(t, chatNewSecret, "msg_later", f.clock.Now(), decisionBody), decisionBody).accepted(t)
		if !again.Duplicate || again.ID != in.ID {
			t.Fatalf("redelivery: got %+v, want a duplicate of %s", again, in.ID)
		}
		f.deliver("chat", first, decisionBody).problem(t, http.StatusUnauthorized)
		if got := f.inboxTotal(); got != 1 {
			t.Fatalf("stored events: got %d, want 1", got)
		}
	})
}

// TestIntakeConflictingBody: a redelivery of an id with another body keeps the first body and
// shows operators the conflict.
func TestIntakeConflictingBody(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := intakeSetup(t, kind)
		olga := f.token("olga", approval.RoleOperator)
		now := f.clock.Now()
		in := f.deliver("chat", signStandard(t, chatNewSecret, "msg_twice", now, decisionBody), decisionBody).accepted(t)
		other := []byte(`{"type":"approval.decision","data":{"approval_id":"apr_1","approver":"alice","verdict":"reject"}}`)
		f.clock.Advance(time.Minute)
		dup := f.deliver("chat", signStandard(t, chatNewSecret, "msg_twice", f.clock.Now(), other), other).accepted(t)
		if !dup.Duplicate || dup.ID != in.ID {
			t.Fatalf("same id, other body: got %+v, want a duplicate of %s", dup, in.ID)
		}
		e := f.inboxEvent(olga, in.ID)
		if e.Body == nil || *e.Body != string(decisionBody) {
			t.Fatalf("body: got %v, want the first one", e.Body)
		}
		if e.Conflicts != 1 || e.LastConflictAt == nil || !e.LastConflictAt.Equal(f.clock.Now()) {
			t.Fatalf("conflicts: got %d at %v, want 1 at %v", e.Conflicts, e.LastConflictAt, f.clock.Now())
		}
		// The same body again is a plain duplicate, not a conflict.
		f.deliver("chat", signStandard(t, chatNewSecret, "msg_twice", f.clock.Now(), decisionBody), decisionBody).accepted(t)
		if e := f.inboxEvent(olga, in.ID); e.Conflicts != 1 {
			t.Fatalf("conflicts after an identical redelivery: got %d, want 1", e.Conflicts)
		}
	})
}

// TestIntakeGitHubReplay: GitHub signs only the body, so a captured delivery resent under a
// new X-GitHub-Delivery verifies. The intake keys github events on the body's hash as well,
// so the replay is answered as a redelivery, names the event kept and stores nothing; other
// bodies are events of their own, and a Standard Webhooks source is keyed on its signed id
// alone.
func TestIntakeGitHubReplay(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := intakeSetup(t, kind)
		olga := f.token("olga", approval.RoleOperator)
		in := f.deliver("github", signGitHub(githubSecret, "gh-r1", "ping", githubBody, sha256.New), githubBody).accepted(t)
		if in.Duplicate {
			t.Fatalf("first delivery: got %+v, want a new event", in)
		}
		f.clock.Advance(time.Hour)
		replay := f.deliver("github", signGitHub(githubSecret, "gh-r2", "ping", githubBody, sha256.New), githubBody).accepted(t)
		if !replay.Duplicate || replay.ID != in.ID {
			t.Fatalf("the same body under gh-r2: got %+v, want a duplicate of %s", replay, in.ID)
		}
		if e := f.inboxEvent(olga, in.ID); e.EventID != "gh-r1" || e.Conflicts != 0 {
			t.Fatalf("kept event: got event id %s, %d conflicts; want gh-r1, 0", e.EventID, e.Conflicts)
		}
		other := []byte(`{"zen":"Design for failure.","hook_id":1}`)
		if in2 := f.deliver("github", signGitHub(githubSecret, "gh-r3", "ping", other, sha256.New), other).accepted(t); in2.Duplicate {
			t.Fatalf("another body: got %+v, want a new event", in2)
		}
		// The Standard Webhooks scheme signs the id and a time: the same body under two ids
		// is two events.
		now := f.clock.Now()
		f.deliver("chat", signStandard(t, chatNewSecret, "msg_a", now, decisionBody), decisionBody).accepted(t)
		if b := f.deliver("chat", signStandard(t, chatNewSecret, "msg_b", now, decisionBody), decisionBody).accepted(t); b.Duplicate {
			t.Fatalf("standard webhooks, the same body under msg_b: got %+v, want a new event", b)
		}
		if got := f.inboxTotal(); got != 4 {
			t.Fatalf("stored events: got %d, want 4", got)
		}
		metrics := string(f.do("GET", "/metrics", "", "").body)
		for _, want := range []string{
			`approvald_inbox_received_total{result="stored",source="github"} 2`,
			`approvald_inbox_received_total{result="replay",source="github"} 1`,
			`approvald_inbox_received_total{result="duplicate",source="github"} 0`,
			`approvald_inbox_received_total{result="replay",source="chat"} 0`,
			`approvald_inbox_received_total{result="stored",source="chat"} 2`,
		} {
			if !strings.Contains(metrics, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
	})
}

// TestIntakeDatabaseDown: when the event cannot be stored the sender gets 503, never 2xx, so
// that it delivers again.
func TestIntakeDatabaseDown(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := intakeSetup(t, kind)
		if err := f.store.Close(); err != nil {
			t.Fatalf("close store: %v", err)
		}
		resp := f.deliver("chat", signStandard(t, chatNewSecret, "msg_down", f.clock.Now(), decisionBody), decisionBody)
		p := resp.problem(t, http.StatusServiceUnavailable)
		if strings.Contains(p.Detail, "sql") || strings.Contains(p.Detail, "closed") {
			t.Errorf("the problem shows internals: %q", p.Detail)
		}
	})
}

// TestInboxOperatorViews: listing, reading and retrying events is for operators and admins;
// lists filter and page; a retry needs a failed event.
func TestInboxOperatorViews(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := intakeSetup(t, kind)
		olga := f.token("olga", approval.RoleOperator)
		root := f.token("root", approval.RoleAdmin)
		now := f.clock.Now()
		var ids []string
		for i := range 3 {
			id := fmt.Sprintf("msg_view_%d", i)
			ids = append(ids, f.deliver("chat", signStandard(t, chatNewSecret, id, now, decisionBody), decisionBody).accepted(t).ID)
		}
		stripeID := f.deliver("stripe", signStripe(stripeNewSecret, now, stripeBody, ""), stripeBody).accepted(t).ID

		for _, path := range []string{"/v1/inbox", "/v1/inbox/" + ids[0], "/v1/sources"} {
			f.do("GET", path, "", "").problem(t, http.StatusUnauthorized)
			f.do("GET", path, f.token("ci-bot", approval.RoleRequester), "").problem(t, http.StatusForbidden)
			f.do("GET", path, f.token("alice", approval.RoleApprover), "").problem(t, http.StatusForbidden)
			if resp := f.do("GET", path, root, ""); resp.status != http.StatusOK {
				t.Fatalf("admin GET %s: got %d %s", path, resp.status, resp.body)
			}
		}
		f.do("POST", "/v1/inbox/"+ids[0]+"/retry", f.token("bob", approval.RoleApprover), "").problem(t, http.StatusForbidden)

		type page struct {
			Events     []map[string]any `json:"events"`
			NextCursor string           `json:"next_cursor"`
		}
		list := func(query string) page {
			t.Helper()
			resp := f.do("GET", "/v1/inbox"+query, olga, "")
			if resp.status != http.StatusOK {
				t.Fatalf("GET /v1/inbox%s: got %d %s", query, resp.status, resp.body)
			}
			var p page
			resp.decode(t, &p)
			return p
		}
		if p := list(""); len(p.Events) != 4 || p.NextCursor != "" {
			t.Fatalf("all: got %d events, cursor %q, want 4 and none", len(p.Events), p.NextCursor)
		} else if _, ok := p.Events[0]["body"]; ok {
			t.Fatalf("a list shows bodies: %v", p.Events[0])
		}
		if p := list("?source=stripe"); len(p.Events) != 1 || p.Events[0]["id"] != stripeID {
			t.Fatalf("source=stripe: got %v", p.Events)
		}
		var seen []string
		for cursor, n := "", 0; n == 0 || cursor != ""; n++ {
			p := list("?source=chat&limit=2&cursor=" + cursor)
			for _, e := range p.Events {
				seen = append(seen, e["id"].(string))
			}
			cursor = p.NextCursor
		}
		if len(seen) != 3 {
			t.Fatalf("paged chat events: got %v, want the 3", seen)
		}
		if p := list("?status=failed"); len(p.Events) != 0 {
			t.Fatalf("status=failed: got %v, want none", p.Events)
		}
		f.do("GET", "/v1/inbox?status=bogus", olga, "").problem(t, http.StatusBadRequest)
		f.do("GET", "/v1/inbox?limit=0", olga, "").problem(t, http.StatusBadRequest)
		f.do("GET", "/v1/inbox/inb_nope", olga, "").problem(t, http.StatusNotFound)
		f.do("POST", "/v1/inbox/inb_nope/retry", olga, "").problem(t, http.StatusNotFound)

		// Only a failed event can be retried: fail one the way a worker does.
		f.do("POST", "/v1/inbox/"+ids[0]+"/retry", olga, "").problem(t, http.StatusConflict)
		ctx := context.Background()
		claimed, err := rules(f.store).ClaimInbox(ctx, time.Minute, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range claimed {
			if e.ID == ids[0] {
				if err := f.service().FailInbox(ctx, e, "handler gave up", nil); err != nil {
					t.Fatal(err)
				}
			}
		}
		if p := list("?status=failed"); len(p.Events) != 1 || p.Events[0]["id"] != ids[0] || p.Events[0]["last_error"] != "handler gave up" {
			t.Fatalf("status=failed: got %v", p.Events)
		}
		resp := f.do("POST", "/v1/inbox/"+ids[0]+"/retry", olga, "")
		var e approval.InboxEvent
		if resp.status != http.StatusOK {
			t.Fatalf("retry: got %d %s", resp.status, resp.body)
		}
		resp.decode(t, &e)
		if e.ID != ids[0] || e.Status != approval.InboxPending {
			t.Fatalf("retry: got %s %s, want %s pending", e.ID, e.Status, ids[0])
		}
		f.do("POST", "/v1/inbox/"+ids[0]+"/retry", olga, "").problem(t, http.StatusConflict)
	})
}

// TestSources: operators see the configured sources, never their secrets.
func TestSources(t *testing.T) {
	t.Parallel()
	f := intakeSetup(t, testdb.SQLite)
	resp := f.do("GET", "/v1/sources", f.token("olga", approval.RoleOperator), "")
	if resp.status != http.StatusOK {
		t.Fatalf("got %d %s", resp.status, resp.body)
	}
	var got struct {
		Sources []struct {
			Name      string   `json:"name"`
			Scheme    string   `json:"scheme"`
			Secrets   int      `json:"secrets"`
			Tolerance string   `json:"tolerance"`
			MaxBody   int64    `json:"max_body"`
			Handlers  []string `json:"handlers"`
			Path      string   `json:"path"`
		} `json:"sources"`
	}
	resp.decode(t, &got)
	if len(got.Sources) != 4 {
		t.Fatalf("got %d sources, want 4: %s", len(got.Sources), resp.body)
	}
	chat, gh, small := got.Sources[0], got.Sources[2], got.Sources[3]
	if chat.Name != "chat" || chat.Scheme != "standard-webhooks" || chat.Secrets != 2 || chat.Tolerance != "5m0s" ||
		chat.MaxBody != httpapi.DefaultMaxWebhookBody || len(chat.Handlers) != 1 || chat.Path != "/v1/inbox/chat" {
		t.Errorf("chat: got %+v", chat)
	}
	if gh.Tolerance != "none" || gh.Handlers == nil {
		t.Errorf("github: got %+v", gh)
	}
	if small.MaxBody != smallBody || small.Tolerance != "1m0s" {
		t.Errorf("small: got %+v", small)
	}
	for _, secret := range []string{chatNewSecret, chatOldSecret, stripeNewSecret, githubSecret} {
		if strings.Contains(string(resp.body), secret) {
			t.Fatalf("a secret is shown: %s", resp.body)
		}
	}
}

// TestIntakeNeedsNoToken: the signature is the authentication; a bearer token is neither
// needed nor a substitute for it.
func TestIntakeNeedsNoToken(t *testing.T) {
	t.Parallel()
	f := intakeSetup(t, testdb.SQLite)
	root := f.token("root", approval.RoleAdmin)
	f.do("POST", "/v1/inbox/chat", root, string(decisionBody)).problem(t, http.StatusBadRequest)
	if got := f.inboxTotal(); got != 0 {
		t.Fatalf("stored events: got %d, want 0", got)
	}
	var body map[string]any
	resp := f.deliver("chat", signStandard(t, chatNewSecret, "msg_anon", f.clock.Now(), decisionBody), decisionBody)
	resp.decode(t, &body)
	if resp.status != http.StatusOK || body["duplicate"] != false {
		t.Fatalf("got %d %s", resp.status, resp.body)
	}
	if raw, _ := json.Marshal(body); !strings.Contains(string(raw), `"id":"inb_`) {
		t.Fatalf("answer lacks the event id: %s", raw)
	}
}

// TestIntakeMisconfiguredSource: a source whose verifier cannot work is our fault, a 500 that
// is not counted as the sender's refusal; a bad signature is.
func TestIntakeMisconfiguredSource(t *testing.T) {
	t.Parallel()
	f := intakeSetup(t, testdb.SQLite, func(c *httpapi.Config) {
		c.Sources = append(c.Sources, httpapi.Source{Name: "broken", Verifier: webhook.Verifier{Scheme: "svix", Secrets: []string{"x"}}})
	})
	h := signStandard(t, chatNewSecret, "msg_cfg", f.clock.Now(), decisionBody)
	f.deliver("broken", h, decisionBody).problem(t, http.StatusInternalServerError)
	f.deliver("chat", signStandard(t, chatOtherSecret, "msg_cfg", f.clock.Now(), decisionBody), decisionBody).problem(t, http.StatusUnauthorized)
	metrics := string(f.do("GET", "/metrics", "", "").body)
	for _, want := range []string{
		`approvald_inbox_received_total{result="rejected",source="broken"} 0`,
		`approvald_inbox_received_total{result="rejected",source="chat"} 1`,
	} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if got := f.inboxTotal(); got != 0 {
		t.Fatalf("stored events: got %d, want 0", got)
	}
}
