package httpapi_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/httpapi"
	"github.com/approvald/approval/internal/downstream"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/internal/wait"
	"github.com/approvald/approval/policy"
	"github.com/approvald/approval/webhook"
	"github.com/approvald/approval/worker"
)

// TestConversation drives one scripted HTTP conversation against a server on SQLite and one
// on PostgreSQL, records every exchange, masks what legitimately differs (ids, cursors, ports,
// signatures) and compares the two transcripts exchange by exchange: the stores must say the
// same thing, down to the texts of problems and inbox outcomes. Both servers run on the same
// fixed clock, moved one second before each exchange, so times are compared too (as offsets
// from the start). The script also states the status each step must get, so that both stores
// being wrong in the same way still fails.
func TestConversation(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	transcripts := map[string][]exchange{}
	t.Run("run", func(t *testing.T) {
		for _, kind := range []string{testdb.SQLite, testdb.Postgres} {
			t.Run(kind, func(t *testing.T) {
				t.Parallel()
				if kind == testdb.Postgres {
					testdb.PostgresURL(t) // skip or fail before any set-up
				}
				c := newConversation(t, kind)
				defer func() { // also when the script stops early: compare what it said
					mu.Lock()
					defer mu.Unlock()
					transcripts[kind] = c.log
				}()
				c.script()
				// Every exchange went through the OpenAPI check of the fixture's client.
				if checked := c.f.openapi.checked.Load(); checked < int64(len(c.log)) {
					t.Errorf("%d exchanges checked against the OpenAPI document, want at least the %d recorded", checked, len(c.log))
				}
			})
		}
	})
	want, got := transcripts[testdb.SQLite], transcripts[testdb.Postgres]
	if want == nil || got == nil {
		t.Skip("the conversation did not run on both stores; nothing to compare")
	}
	dir := t.ArtifactDir()
	for kind, log := range transcripts {
		b, err := json.MarshalIndent(log, "", "  ")
		if err != nil {
			t.Fatalf("encode the %s transcript: %v", kind, err)
		}
		if err := os.WriteFile(filepath.Join(dir, kind+".json"), b, 0o644); err != nil {
			t.Fatalf("write the %s transcript: %v", kind, err)
		}
	}
	if diffs := compareTranscripts(want, got); len(diffs) > 0 {
		t.Fatalf("the stores disagree (got: postgres, want: sqlite); both transcripts are in %s (kept with go test -artifacts):\n%s",
			dir, strings.Join(diffs, "\n"))
	}
	t.Logf("%d exchanges, the same on both stores", len(want))
}

// conversationStart is the instant both servers' clocks start at.
var conversationStart = time.Date(2031, time.January, 6, 9, 0, 0, 0, time.UTC)

// conversationSecret signs the deliveries of the "chat" source.
const conversationSecret = chatNewSecret

// exchange is one request of the conversation and its answer, masked.
type exchange struct {
	Step    string            `json:"step"`
	Method  string            `json:"method"`
	Path    string            `json:"path"`
	Request any               `json:"request,omitempty"`
	Status  int               `json:"status"`
	Header  map[string]string `json:"header,omitempty"`
	Body    any               `json:"body"`
}

// recordedHeaders are the answer headers a transcript keeps. Retry-After is kept only as
// present, since its value counts seconds of a lease.
var recordedHeaders = []string{"Content-Type", "Location", "Idempotent-Replayed", "WWW-Authenticate", "Allow"}

// conversation is one run of the script against one store.
type conversation struct {
	t      *testing.T
	f      *fixture
	down   *downstream.Server
	tokens map[string]string // by subject
	mask   *masker
	log    []exchange
	n      int // requests sent, naming each X-Request-Id
	// work runs a worker in the background until the test ends.
	work func(name string, run func(context.Context) error)
}

// newConversation starts a server over a new store of kind with a "chat" webhook source, a
// downstream target for the action "payout", and an inbox processor; the runner starts
// later, when the script has looked at a queued execution.
func newConversation(t *testing.T, kind string) *conversation {
	t.Helper()
	chat := httpapi.Source{
		Name:     "chat",
		Verifier: webhook.Verifier{Scheme: webhook.SchemeStandard, Secrets: []string{conversationSecret}},
		Handlers: []string{approval.TypeApprovalDecision, approval.TypeExecutionResult},
	}
	var svc *approval.Service
	f := setup(t, kind, func(c *httpapi.Config) {
		c.Sources = []httpapi.Source{chat}
		// The policies decide release; every other action but launch-missiles names its
		// approvers, as with no policies.
		svc = rules(c.Store.(approval.Store))
		svc.Policies, svc.Members = conversationPolicies(t)
		c.Service = svc
	})
	svc.Now = f.clock.Now // before the first request
	f.clock.Set(conversationStart)
	c := &conversation{t: t, f: f, tokens: map[string]string{}, mask: newMasker(conversationStart)}
	c.down = downstream.New(downstream.Options{HonourKeys: true})
	t.Cleanup(c.down.Close)

	for subject, role := range map[string]approval.Role{
		"ci-bot": approval.RoleRequester, "ml-bot": approval.RoleRequester,
		"alice": approval.RoleApprover, "bob": approval.RoleApprover, "carol": approval.RoleApprover,
		"olga": approval.RoleOperator, "root": approval.RoleAdmin,
	} {
		c.tokens[subject] = f.token(subject, role)
	}
	c.tokens["forged"] = "apv_this-token-was-never-issued"

	ctx, cancel := context.WithCancel(context.Background())
	var workers sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		workers.Wait()
	})
	c.work = func(name string, run func(context.Context) error) {
		workers.Go(func() {
			if err := run(ctx); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		})
	}
	inbox := &worker.InboxProcessor{
		Store:   f.store,
		Rules:   svc,
		Logger:  slog.New(slog.DiscardHandler),
		Sources: map[string][]string{chat.Name: chat.Handlers},
		Poll:    20 * time.Millisecond,
		Now:     f.clock.Now,
	}
	c.work("inbox processor", inbox.Run)
	return c
}

// startRunner starts the execution runner, calling the downstream for "payout".
func (c *conversation) startRunner() {
	r := &worker.Runner{
		Store:  c.f.store,
		Ledger: c.f.service(),
		Logger: slog.New(slog.DiscardHandler),
		Targets: map[string]worker.Target{targetedAction: {
			Action: targetedAction, URL: c.down.URL(), Idempotent: true, LookupURL: c.down.LookupURL(), Timeout: 10 * time.Second,
		}},
		Poll: 20 * time.Millisecond,
		Now:  c.f.clock.Now,
	}
	c.work("runner", r.Run)
}

// call sends one request of the script as who ("" sends no token) and records the exchange;
// want is the status the script expects, on every store. The clock moves one second first,
// so that everything the request writes has a time of its own and listings have one order.
func (c *conversation) call(step string, want int, method, path, who, body string, headers ...string) *response {
	c.t.Helper()
	c.f.clock.Advance(time.Second)
	c.n++
	headers = append(headers, "X-Request-Id", fmt.Sprintf("conv-%03d", c.n))
	resp := c.f.do(method, path, c.tokens[who], body, headers...)
	c.record(step, method, path, body, resp)
	if resp.status != want {
		c.t.Errorf("%s: %s %s: got %d %s, want %d", step, method, path, resp.status, resp.body, want)
	}
	return resp
}

// deliver signs body as the chat source's event eventID, at the clock's time, and posts it;
// want is the status the script expects.
func (c *conversation) deliver(step string, want int, eventID string, body string) *response {
	c.t.Helper()
	c.f.clock.Advance(time.Second)
	c.n++
	h := signStandard(c.t, conversationSecret, eventID, c.f.clock.Now(), []byte(body))
	h.Set("X-Request-Id", fmt.Sprintf("conv-%03d", c.n))
	resp := c.f.deliver("chat", h, []byte(body))
	c.record(step, "POST", "/v1/inbox/chat", body, resp)
	if resp.status != want {
		c.t.Errorf("%s: delivery %q: got %d %s, want %d", step, eventID, resp.status, resp.body, want)
	}
	return resp
}

// record appends the masked exchange to the transcript.
func (c *conversation) record(step, method, path, body string, resp *response) {
	c.t.Helper()
	e := exchange{Step: step, Method: method, Path: c.mask.text(path), Status: resp.status, Header: map[string]string{}}
	if body != "" {
		e.Request = c.mask.document([]byte(body))
	}
	for _, name := range recordedHeaders {
		if v := resp.header.Get(name); v != "" {
			e.Header[name] = c.mask.text(v)
		}
	}
	if resp.header.Get("Retry-After") != "" {
		e.Header["Retry-After"] = "(present)"
	}
	e.Body = c.mask.document(resp.body)
	c.log = append(c.log, e)
}

// await polls GET path as who, unrecorded, until done accepts the answer, and fails after a
// bound. It waits for the workers; what the script then records is read afterwards.
func (c *conversation) await(what, path, who string, done func(map[string]any) bool) {
	c.t.Helper()
	wait.For(c.t, what, func() error {
		resp, err := c.f.send("GET", path, c.tokens[who], "")
		if err != nil {
			c.t.Fatalf("await %s: %v", what, err)
		}
		var body map[string]any
		if resp.status == http.StatusOK && json.Unmarshal(resp.body, &body) == nil && done(body) {
			return nil
		}
		return fmt.Errorf("still %d %s", resp.status, resp.body)
	})
}

// processed waits until the inbox event id has left pending.
func (c *conversation) processed(id string) {
	c.t.Helper()
	c.await("inbox event "+id, "/v1/inbox/"+id, "olga", func(e map[string]any) bool { return e["status"] != "pending" })
}

// executionSettled waits until the approval's execution is in one of the statuses.
func (c *conversation) executionSettled(approvalID string, statuses ...string) {
	c.t.Helper()
	c.await("execution of "+approvalID, "/v1/approvals/"+approvalID, "olga", func(a map[string]any) bool {
		e, _ := a["execution"].(map[string]any)
		return e != nil && slices.Contains(statuses, fmt.Sprint(e["status"]))
	})
}

// field reads a string at the path of keys from a JSON answer, failing when it is not there.
func (c *conversation) field(resp *response, keys ...string) string {
	c.t.Helper()
	var v any
	if err := json.Unmarshal(resp.body, &v); err != nil {
		c.t.Fatalf("decode %s: %v", resp.body, err)
	}
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			c.t.Fatalf("no %v in %s", keys, resp.body)
		}
		v = m[k]
	}
	s, ok := v.(string)
	if !ok || s == "" {
		c.t.Fatalf("no string %v in %s", keys, resp.body)
	}
	return s
}

// script is the conversation. Each section leaves no work behind for the workers before the
// next begins, so every recorded answer is the same whenever it is asked.
func (c *conversation) script() {
	const (
		created, ok, bad, unauth, forbidden, notFound, conflict, mismatch = 201, 200, 400, 401, 403, 404, 409, 422
	)
	post := func(step string, want int, path, who, body string, headers ...string) *response {
		c.t.Helper()
		return c.call(step, want, "POST", path, who, body, headers...)
	}
	get := func(step string, want int, path, who string) *response {
		c.t.Helper()
		return c.call(step, want, "GET", path, who, "")
	}
	create := func(step string, want int, who, key, body string) *response {
		c.t.Helper()
		return post(step, want, "/v1/approvals", who, body, "Idempotency-Key", key)
	}

	// Authentication and roles.
	get("no token", unauth, "/v1/approvals", "")
	get("unknown token", unauth, "/v1/approvals", "forged")
	c.call("not a bearer token", unauth, "GET", "/v1/approvals", "", "", "Authorization", "Basic YWxpY2U6c2VjcmV0")
	create("an approver may not create", forbidden, "alice", "deploy-x", createBody("X", "bob"))
	// The role is answered before the form of the request: no key, no body, still 403.
	post("an approver may not create, whatever the request", forbidden, "/v1/approvals", "alice", "")
	get("a requester may not list executions", forbidden, "/v1/executions", "ci-bot")
	get("an approver may not read the inbox", forbidden, "/v1/inbox", "alice")
	c.call("method not allowed", 405, "DELETE", "/v1/approvals", "root", "")
	get("no such route", notFound, "/v1/nothing", "root")

	// Create, replay, mismatch.
	bodyA := `{"action": "deploy", "title": "Deploy api v1.42 to prod", "context": {"commit": "9f2c1e", "env": "prod"}, "approvers": ["alice", "bob"]}`
	a := c.field(create("create A", created, "ci-bot", "deploy-1", bodyA), "id")
	create("replay A", created, "ci-bot", "deploy-1", bodyA)
	create("replay A, keys reordered", created, "ci-bot", "deploy-1", `{"approvers": ["alice", "bob"], "context": {"env": "prod", "commit": "9f2c1e"}, "title": "Deploy api v1.42 to prod", "action": "deploy"}`)
	create("replay A, quoted key", created, "ci-bot", `"deploy-1"`, bodyA)
	create("mismatch on A's key", mismatch, "ci-bot", "deploy-1", createBody("Deploy api v1.43 to prod", "alice"))
	create("same key, other requester", created, "ml-bot", "deploy-1", createBody("ML's own deploy-1", "alice"))

	// Bad requests store nothing.
	post("missing key", bad, "/v1/approvals", "ci-bot", bodyA)
	create("empty key", bad, "ci-bot", "", bodyA)
	create("key too long", bad, "ci-bot", strings.Repeat("k", 256), bodyA)
	create("key with a list", bad, "ci-bot", "a,b", bodyA)
	create("key with a bad escape", bad, "ci-bot", `"a\b"`, bodyA)
	post("two keys", bad, "/v1/approvals", "ci-bot", bodyA, "Idempotency-Key", "k1", "Idempotency-Key", "k2")
	for _, tc := range []struct{ step, body string }{
		{"empty body", ``},
		{"not an object", `["deploy"]`},
		{"invalid JSON", `{"action": "deploy", "title": `},
		{"syntax error", `{"action": "deploy",, "title": "x"}`},
		{"data after the object", `{"action": "deploy", "title": "x", "approvers": ["bob"]} {}`},
		{"unknown field", `{"action": "deploy", "title": "x", "approvers": ["bob"], "approver": "bob"}`},
		{"wrong type", `{"action": "deploy", "title": 42, "approvers": ["bob"]}`},
		{"missing action", `{"title": "x", "approvers": ["bob"]}`},
		{"blank title", `{"action": "deploy", "title": "   ", "approvers": ["bob"]}`},
		{"title too long", createBody(strings.Repeat("t", approval.MaxTitleLength+1), "bob")},
		{"no approvers", `{"action": "deploy", "title": "x", "approvers": []}`},
		{"too many approvers", createBody("x", manyNames(approval.MaxApprovers+1)...)},
		{"an empty approver", `{"action": "deploy", "title": "x", "approvers": ["bob", " "]}`},
		{"an approver twice", `{"action": "deploy", "title": "x", "approvers": ["bob", "bob"]}`},
		{"quorum above the approvers", `{"action": "deploy", "title": "x", "approvers": ["bob"], "required_approvals": 2}`},
		{"quorum zero", `{"action": "deploy", "title": "x", "approvers": ["bob"], "required_approvals": 0}`},
		{"bad expiry", `{"action": "deploy", "title": "x", "approvers": ["bob"], "expires_in": "tomorrow"}`},
		{"expiry too far", `{"action": "deploy", "title": "x", "approvers": ["bob"], "expires_in": "2400h"}`},
		{"context not an object", `{"action": "deploy", "title": "x", "approvers": ["bob"], "context": [1]}`},
		{"a NUL in the title", `{"action": "deploy", "title": "x\u0000y", "approvers": ["bob"]}`},
		{"a NUL in an approver", `{"action": "deploy", "title": "x", "approvers": ["bob\u0000"]}`},
	} {
		create(tc.step, bad, "ci-bot", "deploy-bad", tc.body)
	}
	post("body too large", 413, "/v1/approvals", "ci-bot", `{"action": "deploy", "title": "`+strings.Repeat("x", 70<<10)+`", "approvers": ["bob"]}`, "Idempotency-Key", "deploy-bad")
	b := c.field(create("the refused key is free", created, "ci-bot", "deploy-bad",
		`{"action": "deploy", "title": "Deploy web v7", "approvers": ["alice", "bob", "carol"], "required_approvals": 2, "expires_in": "48h"}`), "id")

	// More approvals, to decide, cancel, expire and list.
	cc := c.field(create("create C", created, "ci-bot", "deploy-3", createBody("Deploy db migration", "bob")), "id")
	d := c.field(create("create D by another requester", created, "ml-bot", "retrain-1", actionBody("retrain", "Retrain model", "alice")), "id")
	e := c.field(create("create E, expiring in 1h", created, "ci-bot", "deploy-5", `{"action": "deploy", "title": "Short-lived", "approvers": ["alice"], "expires_in": "1h"}`), "id")
	h := c.field(create("create H, to cancel", created, "ci-bot", "deploy-6", createBody("To cancel", "carol")), "id")
	s := c.field(create("create S, the admin among its approvers", created, "root", "root-1", createBody("Root's own", "root", "alice")), "id")

	// Reads.
	get("get A as requester", ok, "/v1/approvals/"+a, "ci-bot")
	get("get A as approver", ok, "/v1/approvals/"+a, "alice")
	get("get A as operator", ok, "/v1/approvals/"+a, "olga")
	get("get A as a stranger", notFound, "/v1/approvals/"+a, "carol")
	get("get D as another requester", notFound, "/v1/approvals/"+d, "ci-bot")
	get("get a missing approval", notFound, "/v1/approvals/apr_nope", "root")
	get("get an id with a NUL", bad, "/v1/approvals/apr%00x", "root")
	get("get an id that is not UTF-8", bad, "/v1/approvals/apr%FFx", "root")
	post("approve an id with a NUL", bad, "/v1/approvals/apr%00x/approve", "alice", "")
	get("list by an approver with a NUL", bad, "/v1/approvals?approver=bob%00", "root")
	get("inbox by a source that is not UTF-8", bad, "/v1/inbox?source=%FF", "root")
	get("execution id with a NUL", bad, "/v1/executions/exe%00", "root")
	get("long-poll already past", ok, "/v1/approvals/"+a+"?wait=1s&version=0", "ci-bot")
	get("long-poll bad wait", bad, "/v1/approvals/"+a+"?wait=soon&version=1", "ci-bot")
	get("long-poll without version", bad, "/v1/approvals/"+a+"?wait=1s", "ci-bot")

	// Decisions: quorum 2 of 3 on B, any reject final, repeats, conflicts, the rules.
	post("alice approves B", ok, "/v1/approvals/"+b+"/approve", "alice", `{"comment": "looks good"}`)
	post("alice approves B again", ok, "/v1/approvals/"+b+"/approve", "alice", `{"comment": "looks good"}`)
	post("alice now rejects B", conflict, "/v1/approvals/"+b+"/reject", "alice", "")
	post("a requester may not vote", forbidden, "/v1/approvals/"+b+"/approve", "ci-bot", "")
	post("an operator may not vote", forbidden, "/v1/approvals/"+b+"/approve", "olga", "")
	post("carol is not an approver of A, so A is not found for her", notFound, "/v1/approvals/"+a+"/approve", "carol", "")
	post("the requester may not approve their own", forbidden, "/v1/approvals/"+s+"/approve", "root", "")
	post("vote with an unknown field", bad, "/v1/approvals/"+b+"/approve", "bob", `{"comment": "x", "verdict": "approve"}`)
	post("vote with a NUL in the comment", bad, "/v1/approvals/"+b+"/approve", "bob", `{"comment": "x\u0000y"}`)
	post("vote with invalid JSON", bad, "/v1/approvals/"+b+"/approve", "bob", `{"comment": `)
	post("vote on a missing approval", notFound, "/v1/approvals/apr_nope/approve", "bob", "")
	post("bob approves B: quorum", ok, "/v1/approvals/"+b+"/approve", "bob", `{"comment": "ship it"}`)
	post("carol rejects approved B", conflict, "/v1/approvals/"+b+"/reject", "carol", `{"comment": "too late"}`)
	post("bob approves B again", ok, "/v1/approvals/"+b+"/approve", "bob", `{"comment": "ship it"}`)
	post("bob rejects C", ok, "/v1/approvals/"+cc+"/reject", "bob", `{"comment": "not now"}`)
	post("bob approves rejected C", conflict, "/v1/approvals/"+cc+"/approve", "bob", "")
	post("the requester rejects their own", ok, "/v1/approvals/"+s+"/reject", "root", `{"comment": "changed my mind"}`)

	// Cancel.
	post("an approver may not cancel", forbidden, "/v1/approvals/"+h+"/cancel", "carol", "")
	post("a stranger requester cannot see H", notFound, "/v1/approvals/"+h+"/cancel", "ml-bot", "")
	post("ci-bot cancels H", ok, "/v1/approvals/"+h+"/cancel", "ci-bot", "")
	post("cancel H again", conflict, "/v1/approvals/"+h+"/cancel", "ci-bot", "")
	post("carol approves cancelled H", conflict, "/v1/approvals/"+h+"/approve", "carol", "")
	post("cancel approved B", conflict, "/v1/approvals/"+b+"/cancel", "root", "")

	// Expiry: E expires in an hour; two hours later a vote finds it expired.
	c.f.clock.Advance(2 * time.Hour)
	get("E past its expiry, not yet swept", ok, "/v1/approvals/"+e, "ci-bot")
	post("alice approves expired E", conflict, "/v1/approvals/"+e+"/approve", "alice", "")
	post("cancel expired E", conflict, "/v1/approvals/"+e+"/cancel", "ci-bot", "")
	get("E expired", ok, "/v1/approvals/"+e, "ci-bot")

	// Audit trails.
	for _, tc := range []struct{ name, id string }{{"A", a}, {"B", b}, {"C", cc}, {"E", e}, {"H", h}, {"S", s}} {
		get("events of "+tc.name, ok, "/v1/approvals/"+tc.id+"/events", "root")
	}
	get("events of a missing approval", notFound, "/v1/approvals/apr_nope/events", "ci-bot")
	get("events of D, not visible", notFound, "/v1/approvals/"+d+"/events", "ci-bot")

	// Listings: filters, limits, cursors across pages.
	for _, q := range []string{"", "?status=pending", "?status=approved", "?status=rejected", "?status=expired",
		"?status=cancelled", "?approver=bob", "?approver=alice&status=pending", "?approver=nobody"} {
		get("list as ci-bot "+q, ok, "/v1/approvals"+q, "ci-bot")
	}
	get("list as alice", ok, "/v1/approvals", "alice")
	get("list as root", ok, "/v1/approvals", "root")
	c.pages("list as root", "/v1/approvals?limit=2", "root")
	c.pages("list pending as ci-bot", "/v1/approvals?status=pending&limit=1", "ci-bot")
	for _, q := range []string{"?status=bogus", "?limit=0", "?limit=201", "?limit=two", "?cursor=garbage!",
		"?cursor=" + encodeCursor("no-colon"), "?cursor=" + encodeCursor("123:"), "?cursor=" + encodeCursor("soon:apr_x"),
		"?cursor=" + encodeCursor("9223372036854775807:apr_x"), "?cursor=" + encodeCursor("-62135596800000001:apr_x"),
		"?cursor=" + encodeCursor("1:apr\x00x"), "?cursor=" + encodeCursor("1:apr\xffx")} {
		get("bad list "+q, bad, "/v1/approvals"+q, "root")
	}

	// The inbox: decisions and results delivered by a webhook source.
	in1 := c.field(c.deliver("alice approves A by webhook", ok, "msg_1",
		`{"type": "approval.decision", "data": {"approval_id": "`+a+`", "approver": "alice", "verdict": "approve", "comment": "from chat"}}`), "id")
	c.processed(in1)
	get("inbox event 1", ok, "/v1/inbox/"+in1, "olga")
	get("A approved by webhook", ok, "/v1/approvals/"+a, "ci-bot")
	c.deliver("the same delivery again", ok, "msg_1",
		`{"type": "approval.decision", "data": {"approval_id": "`+a+`", "approver": "alice", "verdict": "approve", "comment": "from chat"}}`)
	c.deliver("the same id with another body", ok, "msg_1",
		`{"type": "approval.decision", "data": {"approval_id": "`+a+`", "approver": "alice", "verdict": "reject"}}`)
	get("inbox event 1 with its conflict", ok, "/v1/inbox/"+in1, "olga")
	for i, tc := range []struct{ step, body string }{
		{"alice repeats her vote on A", `{"type": "approval.decision", "data": {"approval_id": "` + a + `", "approver": "alice", "verdict": "approve"}}`},
		{"bob rejects approved A", `{"type": "approval.decision", "data": {"approval_id": "` + a + `", "approver": "bob", "verdict": "reject"}}`},
		{"carol is not an approver of D", `{"type": "approval.decision", "data": {"approval_id": "` + d + `", "approver": "carol", "verdict": "approve"}}`},
		{"a decision on a missing approval", `{"type": "approval.decision", "data": {"approval_id": "apr_nope", "approver": "alice", "verdict": "approve"}}`},
		{"a decision by a key two requesters use", `{"type": "approval.decision", "data": {"operation_key": "deploy-1", "approver": "alice", "verdict": "approve"}}`},
		{"a decision by an unknown key", `{"type": "approval.decision", "data": {"operation_key": "deploy-404", "approver": "alice", "verdict": "approve"}}`},
		{"alice approves D by its key", `{"type": "approval.decision", "data": {"operation_key": "retrain-1", "approver": "alice", "verdict": "approve"}}`},
		{"a decision on expired E", `{"type": "approval.decision", "data": {"approval_id": "` + e + `", "approver": "alice", "verdict": "approve"}}`},
		{"a decision with a NUL in its comment", `{"type": "approval.decision", "data": {"approval_id": "` + d + `", "approver": "alice", "verdict": "reject", "comment": "x\u0000y"}}`},
		{"a decision without an approver", `{"type": "approval.decision", "data": {"approval_id": "` + a + `", "verdict": "approve"}}`},
		{"an unknown type", `{"type": "approval.bogus", "data": {}}`},
		{"a result for expired E", `{"type": "execution.result", "data": {"operation_key": "deploy-5", "status": "succeeded", "version": 1}}`},
	} {
		id := c.field(c.deliver(tc.step, ok, fmt.Sprintf("msg_%d", i+2), tc.body), "id")
		c.processed(id)
		get("inbox: "+tc.step, ok, "/v1/inbox/"+id, "olga")
	}

	c.deliver("an event id that is not UTF-8", bad, "msg_\xff", `{"type": "approval.bogus"}`)

	// Reports of an execution without a target: by API and by webhook, versions only forward.
	get("A's execution is not configured", ok, "/v1/approvals/"+a, "ci-bot")
	post("report B succeeded, version 2", ok, "/v1/approvals/"+b+"/execution", "ci-bot", `{"status": "succeeded", "version": 2, "result": {"deployed": "v7"}}`)
	post("report B failed, version 1 (stale)", ok, "/v1/approvals/"+b+"/execution", "ci-bot", `{"status": "failed", "version": 1}`)
	post("an approver may not report", forbidden, "/v1/approvals/"+b+"/execution", "alice", `{"status": "failed", "version": 3}`)
	post("report on cancelled H", conflict, "/v1/approvals/"+h+"/execution", "ci-bot", `{"status": "failed", "version": 3}`)
	post("report without a version", bad, "/v1/approvals/"+b+"/execution", "ci-bot", `{"status": "failed"}`)
	post("report running", bad, "/v1/approvals/"+b+"/execution", "ci-bot", `{"status": "running", "version": 3}`)
	for i, tc := range []struct{ step, body string }{
		{"webhook result for B, version 1 (stale)", `{"type": "execution.result", "data": {"operation_key": "deploy-bad", "status": "failed", "version": 1}}`},
		{"webhook result for B, version 3", `{"type": "execution.result", "data": {"operation_key": "deploy-bad", "status": "failed", "version": 3, "result": {"error": "rolled back"}}}`},
		{"webhook result for a missing key", `{"type": "execution.result", "data": {"operation_key": "nope-1", "status": "failed", "version": 1}}`},
		{"webhook result for A by a key only its execution has", `{"type": "execution.result", "data": {"operation_key": "deploy-1", "status": "failed", "version": 1}}`},
		{"webhook result with a NUL in its key", `{"type": "execution.result", "data": {"operation_key": "deploy-bad\u0000", "status": "failed", "version": 5}}`},
		{"webhook result without a status", `{"type": "execution.result", "data": {"operation_key": "deploy-bad", "version": 4}}`},
	} {
		id := c.field(c.deliver(tc.step, ok, fmt.Sprintf("res_%d", i+1), tc.body), "id")
		c.processed(id)
		get("inbox: "+tc.step, ok, "/v1/inbox/"+id, "olga")
	}
	get("B after its reports", ok, "/v1/approvals/"+b, "ci-bot")
	get("events of B after its reports", ok, "/v1/approvals/"+b+"/events", "ci-bot")

	// Executions with a target, the runner off at first: a queued one can be cancelled.
	p1 := c.field(create("create P1, a payout", created, "ci-bot", "payout-1", actionBody(targetedAction, "Payout 1", "alice")), "id")
	x1 := c.field(post("alice approves P1: queued", ok, "/v1/approvals/"+p1+"/approve", "alice", ""), "execution", "id")
	get("executions queued", ok, "/v1/executions?status=queued", "olga")
	get("execution of P1", ok, "/v1/executions/"+x1, "olga")
	post("retry a queued execution", conflict, "/v1/executions/"+x1+"/retry", "olga", "")
	post("resolve a queued execution", conflict, "/v1/executions/"+x1+"/resolve", "olga", `{"outcome": "succeeded", "note": "done by hand"}`)
	post("cancel P1's execution", ok, "/v1/executions/"+x1+"/cancel", "olga", "")
	post("cancel it again", conflict, "/v1/executions/"+x1+"/cancel", "olga", "")
	post("a report cannot decide a targeted execution", conflict, "/v1/approvals/"+p1+"/execution", "ci-bot", `{"status": "succeeded", "version": 1}`)
	post("retry the cancelled execution", ok, "/v1/executions/"+x1+"/retry", "root", "")
	post("a requester may not retry", forbidden, "/v1/executions/"+x1+"/retry", "ci-bot", "")
	get("a missing execution", notFound, "/v1/executions/exe_nope", "olga")
	post("cancel a missing execution", notFound, "/v1/executions/exe_nope/cancel", "olga", "")

	c.startRunner()
	c.executionSettled(p1, "succeeded")
	get("P1 executed", ok, "/v1/approvals/"+p1, "ci-bot")
	post("retry a succeeded execution", conflict, "/v1/executions/"+x1+"/retry", "olga", "")
	post("resolve a succeeded execution", conflict, "/v1/executions/"+x1+"/resolve", "olga", `{"outcome": "failed", "note": "no"}`)
	post("cancel a succeeded execution", conflict, "/v1/executions/"+x1+"/cancel", "olga", "")

	// A target that refuses (400) fails the execution at once; an operator resolves one and
	// retries another.
	p2 := c.field(create("create P2", created, "ci-bot", "payout-2", actionBody(targetedAction, "Payout 2", "alice")), "id")
	c.down.FailWith(http.StatusBadRequest)
	x2 := c.field(post("alice approves P2", ok, "/v1/approvals/"+p2+"/approve", "alice", ""), "execution", "id")
	c.executionSettled(p2, "failed")
	get("P2 failed", ok, "/v1/executions/"+x2, "olga")
	for _, body := range []string{``, `{"outcome": "succeeded"}`, `{"outcome": "running", "note": "x"}`,
		`{"outcome": "succeeded", "note": "x", "extra": 1}`, `{"outcome": "succeeded", "note": "x\u0000"}`} {
		post("bad resolve "+body, bad, "/v1/executions/"+x2+"/resolve", "olga", body)
	}
	post("resolve P2", ok, "/v1/executions/"+x2+"/resolve", "olga", `{"outcome": "succeeded", "note": "paid by hand"}`)
	post("report after the resolve", conflict, "/v1/approvals/"+p2+"/execution", "olga", `{"status": "failed", "version": 1}`)

	p3 := c.field(create("create P3", created, "ci-bot", "payout-3", actionBody(targetedAction, "Payout 3", "alice")), "id")
	c.down.FailWith(http.StatusBadRequest)
	x3 := c.field(post("alice approves P3", ok, "/v1/approvals/"+p3+"/approve", "alice", ""), "execution", "id")
	c.executionSettled(p3, "failed")
	post("retry failed P3", ok, "/v1/executions/"+x3+"/retry", "olga", "")
	c.executionSettled(p3, "succeeded")
	get("P3 executed on its retry", ok, "/v1/executions/"+x3, "olga")
	for _, tc := range []struct{ name, id string }{{"P1", p1}, {"P2", p2}, {"P3", p3}} {
		get("events of "+tc.name, ok, "/v1/approvals/"+tc.id+"/events", "olga")
	}

	// Operator views.
	for _, q := range []string{"", "?status=succeeded", "?status=not_configured", "?status=failed"} {
		get("executions "+q, ok, "/v1/executions"+q, "olga")
	}
	c.pages("executions", "/v1/executions?limit=2", "olga")
	for _, q := range []string{"?status=done", "?limit=500", "?cursor=garbage!", "?cursor=" + encodeCursor("x:")} {
		get("bad executions "+q, bad, "/v1/executions"+q, "olga")
	}
	for _, q := range []string{"", "?status=processed", "?status=ignored", "?status=stale", "?source=chat&status=pending"} {
		get("inbox "+q, ok, "/v1/inbox"+q, "olga")
	}
	c.pages("inbox", "/v1/inbox?limit=5", "olga")
	for _, q := range []string{"?status=bogus", "?limit=0", "?cursor=garbage!", "?cursor=" + encodeCursor("1:")} {
		get("bad inbox "+q, bad, "/v1/inbox"+q, "olga")
	}
	get("a missing inbox event", notFound, "/v1/inbox/inb_nope", "olga")
	post("retry a processed inbox event", conflict, "/v1/inbox/"+in1+"/retry", "olga", "")
	post("retry a missing inbox event", notFound, "/v1/inbox/inb_nope/retry", "olga", "")
	get("sources", ok, "/v1/sources", "root")

	// Policies: release is decided by the configuration, alice of sre first, then bob.
	release := `{"action": "release", "title": "Release 2.0", "context": {"env": "prod"}}`
	create("release naming approvers", mismatch, "ci-bot", "release-x", `{"action": "release", "title": "Release 2.0", "approvers": ["mallory"]}`)
	create("release by a requester the policy does not list", forbidden, "ml-bot", "release-1", release)
	create("an action no policy applies to", mismatch, "ci-bot", "missiles-1", `{"action": "launch-missiles", "title": "No"}`)
	rel := c.field(create("create release", created, "ci-bot", "release-1", release), "id")
	create("replay release", created, "ci-bot", "release-1", release)
	post("bob is asked only in stage 2", forbidden, "/v1/approvals/"+rel+"/approve", "bob", "")
	post("carol is asked in no stage", notFound, "/v1/approvals/"+rel+"/approve", "carol", "")
	post("alice approves release", ok, "/v1/approvals/"+rel+"/approve", "alice", "")
	get("release in stage 2", ok, "/v1/approvals/"+rel, "ci-bot")
	post("bob approves release", ok, "/v1/approvals/"+rel+"/approve", "bob", "")
	get("events of release", ok, "/v1/approvals/"+rel+"/events", "ci-bot")
}

// conversationPolicies are the conversation's policies and groups.
func conversationPolicies(t *testing.T) (approval.Policies, approval.Members) {
	t.Helper()
	set, err := policy.Compile(map[string]policy.Group{"sre": {Members: []string{"alice"}}}, []policy.Policy{
		{Name: "release", Match: policy.Match{Action: "release"}, Requesters: []string{"ci-bot"},
			Stages: []policy.Stage{{Rules: []policy.Rule{{Group: "sre", Approvals: 1}}}, {Rules: []policy.Rule{{People: []string{"bob"}, Approvals: 1}}}}},
		{Name: "anything-else", Match: policy.Match{Action: "*", When: `action != "launch-missiles"`}, Approvers: policy.FromRequest},
	})
	if err != nil {
		t.Fatal(err)
	}
	return set.ForService(), set.Members()
}

// pages follows next_cursor from path until the last page, recording each page.
func (c *conversation) pages(step, path, who string) {
	c.t.Helper()
	sep := "&"
	if !strings.Contains(path, "?") {
		sep = "?"
	}
	cursor := ""
	for page := 1; ; page++ {
		p := path
		if cursor != "" {
			p += sep + "cursor=" + cursor
		}
		resp := c.call(fmt.Sprintf("%s, page %d", step, page), http.StatusOK, "GET", p, who, "")
		var body struct {
			NextCursor string `json:"next_cursor"`
		}
		resp.decode(c.t, &body)
		if body.NextCursor == "" {
			return
		}
		if page == 50 {
			c.t.Fatalf("%s: more than 50 pages", step)
		}
		cursor = body.NextCursor
	}
}

// encodeCursor makes a cursor of the stores' current form (base64url of its text), to show
// that one that decodes but names no position is refused alike.
func encodeCursor(text string) string { return base64.RawURLEncoding.EncodeToString([]byte(text)) }

// manyNames returns n distinct approver names.
func manyNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = "approver-" + strconv.Itoa(i)
	}
	return names
}

// masker replaces what legitimately differs between two runs of the conversation: ids
// become placeholders numbered by first appearance per kind (the same id, the same
// placeholder), times offsets from the start, cursors placeholders, loopback ports and
// webhook signatures fixed text.
type masker struct {
	start   time.Time
	ids     map[string]string
	counts  map[string]int
	cursors map[string]string
}

func newMasker(start time.Time) *masker {
	return &masker{start: start, ids: map[string]string{}, counts: map[string]int{}, cursors: map[string]string{}}
}

var (
	maskedID   = regexp.MustCompile(`\b(apr|exe|inb|req|tok)_[0-9a-z]{26}\b`)
	maskedTime = regexp.MustCompile(`\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})`)
	maskedPort = regexp.MustCompile(`127\.0\.0\.1:\d+`)
)

// text masks a string.
func (m *masker) text(s string) string {
	cursors := make([]string, 0, len(m.cursors))
	for raw := range m.cursors {
		cursors = append(cursors, raw)
	}
	slices.SortFunc(cursors, func(a, b string) int { return len(b) - len(a) }) // a longer one first
	for _, raw := range cursors {
		s = strings.ReplaceAll(s, raw, m.cursors[raw])
	}
	s = maskedID.ReplaceAllStringFunc(s, func(id string) string {
		if p, ok := m.ids[id]; ok {
			return p
		}
		kind, _, _ := strings.Cut(id, "_")
		m.counts[kind]++
		p := fmt.Sprintf("<%s-%d>", kind, m.counts[kind])
		m.ids[id] = p
		return p
	})
	s = maskedTime.ReplaceAllStringFunc(s, func(v string) string {
		at, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return v
		}
		return "<start+" + at.Sub(m.start).String() + ">"
	})
	return maskedPort.ReplaceAllString(s, "127.0.0.1:<port>")
}

// document masks a body: JSON is decoded and masked value by value (so that the comparison
// can name the field that differs), anything else is masked as text.
func (m *masker) document(body []byte) any {
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return m.text(string(body))
	}
	return m.value("", v)
}

func (m *masker) value(key string, v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = m.value(k, x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = m.value(key, x)
		}
		return out
	case string:
		switch {
		case key == "next_cursor" && v != "":
			if _, ok := m.cursors[v]; !ok {
				m.cursors[v] = fmt.Sprintf("<cursor-%d>", len(m.cursors)+1)
			}
			return m.cursors[v]
		case key == "webhook-signature":
			return "<signature>"
		}
		return m.text(v)
	}
	return v
}

// maxReportedDiffs bounds how many differing exchanges a failure shows.
const maxReportedDiffs = 10

// compareTranscripts compares got (PostgreSQL's) with want (SQLite's) exchange by exchange and
// describes the first differences, field by field.
func compareTranscripts(want, got []exchange) []string {
	var out []string
	differing := 0
	for i := range min(len(want), len(got)) {
		var fields []string
		diffValues("", toJSONValue(want[i]), toJSONValue(got[i]), &fields)
		if len(fields) == 0 {
			continue
		}
		differing++
		if differing > maxReportedDiffs {
			continue
		}
		out = append(out, fmt.Sprintf("exchange %d, %q: %s %s", i+1, want[i].Step, want[i].Method, want[i].Path))
		for _, f := range fields {
			out = append(out, "    "+f)
		}
	}
	if differing > maxReportedDiffs {
		out = append(out, fmt.Sprintf("... and %d more differing exchanges", differing-maxReportedDiffs))
	}
	if len(want) != len(got) {
		out = append(out, fmt.Sprintf("the transcripts have %d exchanges on postgres and %d on sqlite (one run stopped early)", len(got), len(want)))
	}
	return out
}

// toJSONValue turns an exchange into plain JSON values, so one walk compares every part.
func toJSONValue(e exchange) any {
	b, err := json.Marshal(e)
	if err != nil {
		panic(err)
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		panic(err)
	}
	return v
}

// diffValues appends "path: got X on postgres, want Y as on sqlite" for each place where got
// and want differ.
func diffValues(path string, want, got any, out *[]string) {
	wm, wok := want.(map[string]any)
	gm, gok := got.(map[string]any)
	if wok && gok {
		keys := map[string]bool{}
		for k := range wm {
			keys[k] = true
		}
		for k := range gm {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		slices.Sort(sorted)
		for _, k := range sorted {
			w, inW := wm[k]
			g, inG := gm[k]
			switch {
			case !inW:
				*out = append(*out, fmt.Sprintf("%s: got %s on postgres, absent on sqlite", join(path, k), show(g)))
			case !inG:
				*out = append(*out, fmt.Sprintf("%s: absent on postgres, want %s as on sqlite", join(path, k), show(w)))
			default:
				diffValues(join(path, k), w, g, out)
			}
		}
		return
	}
	wl, wok := want.([]any)
	gl, gok := got.([]any)
	if wok && gok && len(wl) == len(gl) {
		for i := range wl {
			diffValues(fmt.Sprintf("%s[%d]", path, i), wl[i], gl[i], out)
		}
		return
	}
	if !reflect.DeepEqual(want, got) {
		*out = append(*out, fmt.Sprintf("%s: got %s on postgres, want %s as on sqlite", path, show(got), show(want)))
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func show(v any) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSuffix(b.String(), "\n")
}
