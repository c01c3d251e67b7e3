package httpapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/internal/wait"
)

// TestCreateConcurrentSameKey: 100 clients send one create at the same instant, over 10
// rounds with a fresh key each. Each round exactly one approval is created, and every answer
// is the byte-identical 201: the original once, replays (Idempotent-Replayed) for the rest,
// since a concurrent create waits for the first one's commit instead of answering 409.
func TestCreateConcurrentSameKey(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		ci := f.token("ci-bot", approval.RoleRequester)
		const clients, rounds = 100, 10
		for round := range rounds {
			key := fmt.Sprintf("deploy-prod-%d", round)
			body := createBody(fmt.Sprintf("Deploy round %d", round), "alice", "bob")
			answers := make([]*response, clients)
			errs := make([]error, clients)
			race(clients, func(i int) {
				answers[i], errs[i] = f.send("POST", "/v1/approvals", ci, body, "Idempotency-Key", key)
			})

			// A create is one transaction: every racer after the first waits for its commit
			// and replays it. None is told to come back later.
			var original []byte
			var originals int
			for i, resp := range answers {
				if errs[i] != nil {
					t.Fatalf("round %d client %d: %v", round, i, errs[i])
				}
				if resp.status != http.StatusCreated {
					t.Fatalf("round %d client %d: got %d %s, want 201", round, i, resp.status, resp.body)
				}
				if resp.header.Get("Idempotent-Replayed") == "" {
					originals++
				}
				if original != nil && !bytes.Equal(resp.body, original) {
					t.Fatalf("round %d: two different 201 bodies:\n%s\n%s", round, original, resp.body)
				}
				original = resp.body
			}
			if originals != 1 {
				t.Fatalf("round %d: got %d original 201s, want 1", round, originals)
			}
			if got := f.count(); got != round+1 {
				t.Fatalf("round %d: got %d approvals, want %d", round, got, round+1)
			}

		}
	})
}

// TestCreateReplay covers what a key means: the same request replays, a different one is 422,
// keys are per requester, and the quoted form of a key is the key.
func TestCreateReplay(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		ci := f.token("ci-bot", approval.RoleRequester)
		body := `{"action": "deploy", "title": "Deploy api v1.42", "context": {"commit": "9f2c1e", "env": "prod"}, "approvers": ["alice", "bob"], "required_approvals": 1, "expires_in": "24h"}`

		first := f.create(ci, "deploy-prod-1042", body)
		if first.status != http.StatusCreated {
			t.Fatalf("create: got %d %s", first.status, first.body)
		}
		a := first.approval(t)
		if got, want := first.header.Get("Location"), "/v1/approvals/"+a.ID; got != want {
			t.Fatalf("Location: got %q, want %q", got, want)
		}
		if first.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("first create marked as replayed")
		}
		if a.Status != approval.StatusPending || a.Version != 1 || a.Requester != "ci-bot" || a.OperationKey != "deploy-prod-1042" {
			t.Fatalf("unexpected approval %s", first.body)
		}
		if !bytes.Contains(first.body, []byte(`"decisions":[]`)) || !bytes.Contains(first.body, []byte(`"execution":null`)) || !bytes.Contains(first.body, []byte(`"decided_at":null`)) {
			t.Fatalf("body does not have the API shape: %s", first.body)
		}
		if a.CreatedAt.Location() != time.UTC || !strings.Contains(string(first.body), `Z"`) {
			t.Fatalf("times are not RFC 3339 UTC: %s", first.body)
		}

		replayed := func(name string, resp *response) {
			t.Helper()
			if resp.status != http.StatusCreated || resp.header.Get("Idempotent-Replayed") != "true" ||
				resp.header.Get("Location") != first.header.Get("Location") || !bytes.Equal(resp.body, first.body) {
				t.Fatalf("%s: got %d replayed=%q %s, want the original 201 replayed", name, resp.status, resp.header.Get("Idempotent-Replayed"), resp.body)
			}
		}
		replayed("same request", f.create(ci, "deploy-prod-1042", body))
		reordered := `{
			"expires_in":"24h","required_approvals":1,"approvers":["alice","bob"],
			"context":{"env":"prod","commit":"9f2c1e"},"title":"Deploy api v1.42","action":"deploy"}`
		replayed("keys reordered and white space", f.create(ci, "deploy-prod-1042", reordered))
		replayed("quoted key", f.create(ci, `"deploy-prod-1042"`, body))

		other := strings.Replace(body, "v1.42", "v1.43", 1)
		f.create(ci, "deploy-prod-1042", other).problem(t, http.StatusUnprocessableEntity)
		replayed("after a mismatch", f.create(ci, "deploy-prod-1042", body))

		// Keys are scoped per requester: another requester's same key is another operation.
		ops := f.token("ops-bot", approval.RoleRequester)
		b := f.mustCreate(ops, "deploy-prod-1042", body)
		if b.ID == a.ID || b.Requester != "ops-bot" {
			t.Fatalf("another requester got approval %s (requester %s), want a new one", b.ID, b.Requester)
		}

		// An escaped quoted key unwraps to the bare key.
		c := f.mustCreate(ci, `"say \"hi\" \\ bye"`, createBody("Quoted", "alice"))
		resp := f.create(ci, `say "hi" \ bye`, createBody("Quoted", "alice"))
		if resp.status != http.StatusCreated || resp.header.Get("Idempotent-Replayed") != "true" || resp.approval(t).ID != c.ID {
			t.Fatalf("bare form of an escaped key: got %d %s, want replay of %s", resp.status, resp.body, c.ID)
		}
		if f.count() != 3 {
			t.Fatalf("got %d approvals, want 3", f.count())
		}
	})
}

// TestCreateRefusedStoresNothing: every request refused before any work (400, 401, 403, 413)
// stores nothing, so the corrected request under the same key creates the approval.
func TestCreateRefusedStoresNothing(t *testing.T) {
	t.Parallel()
	valid := createBody("Deploy", "alice", "bob")
	deep := strings.Repeat(`{"a":`, 32) + "1" + strings.Repeat("}", 32)
	tooDeep := strings.Repeat(`{"a":`, 33) + "1" + strings.Repeat("}", 33)
	with := func(field, value string) string {
		return `{"action":"deploy","title":"Deploy","approvers":["alice","bob"],` + strconv.Quote(field) + `:` + value + `}`
	}
	cases := []struct {
		name    string
		status  int
		body    string
		token   string // "requester" (default), "approver", "operator", "unknown", "none"
		headers []string
	}{
		{name: "key missing", status: 400, body: valid, headers: []string{}},
		{name: "key empty", status: 400, body: valid, headers: []string{"Idempotency-Key", ""}},
		{name: "key quoted empty", status: 400, body: valid, headers: []string{"Idempotency-Key", `""`}},
		{name: "key too long", status: 400, body: valid, headers: []string{"Idempotency-Key", strings.Repeat("k", 256)}},
		{name: "key tab", status: 400, body: valid, headers: []string{"Idempotency-Key", "a\tb"}},
		{name: "key non-ascii", status: 400, body: valid, headers: []string{"Idempotency-Key", "clé"}},
		{name: "key two headers", status: 400, body: valid, headers: []string{"Idempotency-Key", "k1", "Idempotency-Key", "k1"}},
		{name: "key list", status: 400, body: valid, headers: []string{"Idempotency-Key", "k1, k2"}},
		{name: "key quoted list", status: 400, body: valid, headers: []string{"Idempotency-Key", `"k1", "k2"`}},
		{name: "key unterminated", status: 400, body: valid, headers: []string{"Idempotency-Key", `"k1`}},
		{name: "key bad escape", status: 400, body: valid, headers: []string{"Idempotency-Key", `"k\1"`}},
		{name: "key after quote", status: 400, body: valid, headers: []string{"Idempotency-Key", `"k1"x`}},

		{name: "no token", status: 401, body: valid, token: "none"},
		{name: "unknown token", status: 401, body: valid, token: "unknown"},
		{name: "approver token", status: 403, body: valid, token: "approver"},
		{name: "operator token", status: 403, body: valid, token: "operator"},
		{name: "too large", status: 413, body: with("context", `{"pad":"`+strings.Repeat("x", 64<<10)+`"}`)},

		{name: "empty body", status: 400, body: ""},
		{name: "not json", status: 400, body: "action=deploy"},
		{name: "array", status: 400, body: "[" + valid + "]"},
		{name: "null", status: 400, body: "null"},
		{name: "truncated", status: 400, body: valid[:len(valid)-1]},
		{name: "trailing data", status: 400, body: valid + "{}"},
		{name: "invalid utf-8", status: 400, body: with("context", "{\"k\":\"\xff\"}")},
		{name: "unknown field", status: 400, body: with("approver", `"alice"`)},
		{name: "action missing", status: 400, body: `{"title":"Deploy","approvers":["alice"]}`},
		{name: "action too long", status: 400, body: `{"action":"` + strings.Repeat("a", 101) + `","title":"Deploy","approvers":["alice"]}`},
		{name: "action not a string", status: 400, body: `{"action":7,"title":"Deploy","approvers":["alice"]}`},
		{name: "title missing", status: 400, body: `{"action":"deploy","approvers":["alice"]}`},
		{name: "title blank", status: 400, body: `{"action":"deploy","title":"   ","approvers":["alice"]}`},
		{name: "title 201 characters", status: 400, body: `{"action":"deploy","title":"` + strings.Repeat("é", 201) + `","approvers":["alice"]}`},
		{name: "approvers missing", status: 400, body: `{"action":"deploy","title":"Deploy"}`},
		{name: "approvers empty", status: 400, body: `{"action":"deploy","title":"Deploy","approvers":[]}`},
		{name: "approvers a string", status: 400, body: `{"action":"deploy","title":"Deploy","approvers":"alice"}`},
		{name: "approvers 51", status: 400, body: createBody("Deploy", names(51)...)},
		{name: "approver empty", status: 400, body: createBody("Deploy", "alice", "")},
		{name: "approver twice", status: 400, body: createBody("Deploy", "alice", "bob", "alice")},
		{name: "required zero", status: 400, body: with("required_approvals", "0")},
		{name: "required above approvers", status: 400, body: with("required_approvals", "3")},
		{name: "required fractional", status: 400, body: with("required_approvals", "1.5")},
		{name: "context array", status: 400, body: with("context", "[]")},
		{name: "context string", status: 400, body: with("context", `"x"`)},
		{name: "context too deep", status: 400, body: with("context", tooDeep)},
		{name: "expires_in not a duration", status: 400, body: with("expires_in", `"soon"`)},
		{name: "expires_in zero", status: 400, body: with("expires_in", `"0s"`)},
		{name: "expires_in negative", status: 400, body: with("expires_in", `"-1h"`)},
		{name: "expires_in over 90 days", status: 400, body: with("expires_in", `"2161h"`)},
		{name: "expires_in a number", status: 400, body: with("expires_in", `3600`)},
		{name: "callback_url host not allowed", status: 400, body: with("callback_url", `"https://internal.example.net/hook"`)},
		{name: "callback_url suffix is not the host", status: 400, body: with("callback_url", `"https://ci.example.com/hook"`)},
		{name: "callback_url lookalike host", status: 400, body: with("callback_url", `"https://evilci.example.com/hook"`)},
		{name: "callback_url http", status: 400, body: with("callback_url", `"http://callbacks.example.com/hook"`)},
		{name: "callback_url http loopback not allowed", status: 400, body: with("callback_url", `"http://127.0.0.1/hook"`)},
		{name: "callback_url relative", status: 400, body: with("callback_url", `"/hook"`)},
		{name: "callback_url user info", status: 400, body: with("callback_url", `"https://u:p@callbacks.example.com/hook"`)},
		{name: "callback_url a number", status: 400, body: with("callback_url", `7`)},
		{name: "callback_url port not allowed", status: 400, body: with("callback_url", `"https://callbacks.example.com:8443/hook"`)},
		{name: "callback_url port 0", status: 400, body: with("callback_url", `"https://callbacks.example.com:0/hook"`)},
		{name: "callback_url port 99999", status: 400, body: with("callback_url", `"https://callbacks.example.com:99999/hook"`)},
		{name: "callback_url port not a number", status: 400, body: with("callback_url", `"https://callbacks.example.com:https/hook"`)},
		{name: "callback_url empty port", status: 400, body: with("callback_url", `"https://callbacks.example.com:/hook"`)},
	}

	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		tokens := map[string]string{
			"requester": f.token("ci-bot", approval.RoleRequester),
			"approver":  f.token("alice", approval.RoleApprover),
			"operator":  f.token("olga", approval.RoleOperator),
			"unknown":   approval.TokenPrefix + "not-a-token",
			"none":      "",
		}
		for i, tc := range cases {
			key := fmt.Sprintf("case-%d", i)
			headers := tc.headers
			if headers == nil {
				headers = []string{"Idempotency-Key", key}
			}
			token := tokens[tc.token]
			if tc.token == "" {
				token = tokens["requester"]
			}
			resp := f.do("POST", "/v1/approvals", token, tc.body, headers...)
			p := resp.problem(t, tc.status)
			if tc.status == 401 && resp.header.Get("WWW-Authenticate") == "" {
				t.Fatalf("%s: 401 without WWW-Authenticate", tc.name)
			}
			if f.count() != i {
				t.Fatalf("%s: got %d approvals after a refused create (%s), want %d", tc.name, f.count(), p.Detail, i)
			}
			// The corrected request under the same key is a new operation, not a replay.
			fixed := f.create(tokens["requester"], key, valid)
			if fixed.status != http.StatusCreated || fixed.header.Get("Idempotent-Replayed") != "" {
				t.Fatalf("%s: corrected request got %d replayed=%q %s, want a fresh 201", tc.name, fixed.status, fixed.header.Get("Idempotent-Replayed"), fixed.body)
			}
		}

		// The limits are inclusive, and titles are counted in characters, not bytes.
		f.mustCreate(tokens["requester"], "limits", `{"action":"`+strings.Repeat("a", 100)+`","title":"`+strings.Repeat("é", 200)+`",`+
			`"approvers":`+jsonList(names(50))+`,"required_approvals":50,"expires_in":"2160h","context":`+deep+`}`)
	})
}

// TestCreateCallbackURL: a callback_url on an allowed host is stored and shown; it is part of
// the request, so the same key with another callback_url is a mismatch; the approval's
// decision queues its callback to that URL.
func TestCreateCallbackURL(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		requester, alice := f.token("ci-bot", approval.RoleRequester), f.token("alice", approval.RoleApprover)
		body := func(url string) string {
			return `{"action":"deploy","title":"Deploy","approvers":["alice","bob"],"callback_url":"` + url + `"}`
		}
		for i, url := range []string{"https://callbacks.example.com/approvald", "https://build.ci.example.com/hook?x=1"} {
			resp := f.create(requester, fmt.Sprintf("cb-%d", i), body(url))
			if resp.status != http.StatusCreated {
				t.Fatalf("create with callback_url %s: got %d %s, want 201", url, resp.status, resp.body)
			}
			var a approval.Approval
			if err := json.Unmarshal(resp.body, &a); err != nil || a.CallbackURL != url {
				t.Fatalf("created approval shows callback_url %q (%v), want %q", a.CallbackURL, err, url)
			}
		}
		if resp := f.create(requester, "cb-0", body("https://callbacks.example.com/other")); resp.status != http.StatusUnprocessableEntity {
			t.Fatalf("same key, another callback_url: got %d %s, want 422", resp.status, resp.body)
		}
		replay := f.create(requester, "cb-0", body("https://callbacks.example.com/approvald"))
		if replay.status != http.StatusCreated || replay.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("same key, same callback_url: got %d replayed=%q, want a replayed 201", replay.status, replay.header.Get("Idempotent-Replayed"))
		}
		var a approval.Approval
		if err := json.Unmarshal(replay.body, &a); err != nil {
			t.Fatal(err)
		}
		if resp := f.do("POST", "/v1/approvals/"+a.ID+"/approve", alice, `{}`); resp.status != http.StatusOK {
			t.Fatalf("approve: got %d %s", resp.status, resp.body)
		}
		msgs, _, err := f.store.OutboxMessages(t.Context(), approval.OutboxFilter{Kind: approval.OutboxCallback})
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) != 1 {
			t.Fatalf("got %d callbacks queued, want 1", len(msgs))
		}
		var n approval.Notice
		if err := json.Unmarshal(msgs[0].Payload, &n); err != nil || n.URL != "https://callbacks.example.com/approvald" || n.Event != approval.EventApproved || n.ApprovalID != a.ID {
			t.Fatalf("callback queued: %+v (%v), want approval.approved of %s to the create's callback_url", n, err, a.ID)
		}
	})
}

// TestCreateResponseLost: the client sends a create and closes the connection at once. The
// server still commits; the retry gets the original answer replayed and no second approval.
func TestCreateResponseLost(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		ci := f.token("ci-bot", approval.RoleRequester)
		body := createBody("Deploy with a lost response", "alice")

		conn, err := net.Dial("tcp", f.srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "POST /v1/approvals HTTP/1.1\r\nHost: approvald\r\nAuthorization: Bearer %s\r\n"+
			"Idempotency-Key: lost-1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", ci, len(body), body)
		conn.Close()

		// Wait for the server to commit (it owes no one an answer, so watch the store).
		wait.Until(t, "the create of a closed connection to commit", func() bool { return f.count() != 0 })
		resp := f.create(ci, "lost-1", body)
		if resp.status != http.StatusCreated || resp.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("retry: got %d replayed=%q %s, want the replayed 201", resp.status, resp.header.Get("Idempotent-Replayed"), resp.body)
		}
		if f.count() != 1 {
			t.Fatalf("got %d approvals, want 1", f.count())
		}
	})
}

// TestCreateAfterRetention: once the create is older than the retention, the same request
// answers 200 with the current approval, and a different one is still 422.
func TestCreateAfterRetention(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		ci := f.token("ci-bot", approval.RoleRequester)
		alice := f.token("alice", approval.RoleApprover)
		body := `{"action":"refund","title":"Refund order 9281","approvers":["alice"],"expires_in":"72h"}`
		a := f.mustCreate(ci, "refund-order-9281", body)
		if resp := f.do("POST", "/v1/approvals/"+a.ID+"/approve", alice, ""); resp.status != http.StatusOK {
			t.Fatalf("approve: got %d %s", resp.status, resp.body)
		}

		f.clock.Advance(25 * time.Hour)
		resp := f.create(ci, "refund-order-9281", body)
		if resp.status != http.StatusOK || resp.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("after retention: got %d replayed=%q %s, want 200 replayed", resp.status, resp.header.Get("Idempotent-Replayed"), resp.body)
		}
		if got := resp.approval(t); got.ID != a.ID || got.Status != approval.StatusApproved {
			t.Fatalf("after retention: got %s %s, want current state of %s (approved)", got.ID, got.Status, a.ID)
		}
		f.create(ci, "refund-order-9281", strings.Replace(body, "9281", "9282", 1)).problem(t, http.StatusUnprocessableEntity)
		if f.count() != 1 {
			t.Fatalf("got %d approvals, want 1", f.count())
		}
	})
}

func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("approver-%02d", i)
	}
	return out
}

func jsonList(items []string) string {
	quoted := make([]string, len(items))
	for i, s := range items {
		quoted[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(quoted, ",") + "]"
}
