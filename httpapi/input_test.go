package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/approvald/approval"
	"github.com/approvald/approval/httpapi"
	"github.com/approvald/approval/internal/testdb"
)

// TestInputPolicy: what the input policy refuses (docs/http-api.md, "Input policy") is a 400,
// 413 or 415 problem naming the field, the same on both stores, and stores nothing; what it
// allows is accepted. Each case is a create, so that "stores nothing" can be counted.
func TestInputPolicy(t *testing.T) {
	t.Parallel()
	create := func(fields map[string]any) string {
		body := map[string]any{"action": "deploy", "title": "Deploy", "approvers": []string{"alice"}}
		for k, v := range fields {
			body[k] = v
		}
		b, _ := json.Marshal(body)
		return string(b)
	}
	cases := []struct {
		name    string
		body    string
		headers []string
		status  int
		detail  string // a part of the problem's detail
	}{
		{"a plain create", create(nil), nil, http.StatusCreated, ""},
		{"a title in another script", create(map[string]any{"title": "Déployer l'API — 部署"}), nil, http.StatusCreated, ""},
		{"a title of 200 characters", create(map[string]any{"title": strings.Repeat("é", 200)}), nil, http.StatusCreated, ""},
		{"a title of 201 characters", create(map[string]any{"title": strings.Repeat("é", 201)}), nil, http.StatusBadRequest, "title has 201 characters"},
		{"a newline in the title", create(map[string]any{"title": "one\ntwo"}), nil, http.StatusBadRequest, "title contains the control character U+000A"},
		{"an ESC in the title", create(map[string]any{"title": "red \x1b[31m"}), nil, http.StatusBadRequest, "title contains the control character U+001B"},
		{"a C1 character in the title", create(map[string]any{"title": "next\u0085line"}), nil, http.StatusBadRequest, "U+0085"},
		{"a DEL in the action", create(map[string]any{"action": "de\x7fploy"}), nil, http.StatusBadRequest, "action contains the control character U+007F"},
		{"a NUL in the title", create(map[string]any{"title": "a\x00b"}), nil, http.StatusBadRequest, "title contains a NUL character"},
		{"a tab in an approver", create(map[string]any{"approvers": []string{"al\tice"}}), nil, http.StatusBadRequest, "approvers[0] contains the control character U+0009"},
		{"a newline in an approver", create(map[string]any{"approvers": []string{"bob", "alice\n"}}), nil, http.StatusBadRequest, "approvers[1] contains"},
		{"an approver of 101 characters", create(map[string]any{"approvers": []string{strings.Repeat("a", 101)}}), nil, http.StatusBadRequest, "approvers[0] has 101 characters"},
		{"an approver of 60,000 characters", create(map[string]any{"approvers": []string{strings.Repeat("a", 60000)}}), nil, http.StatusBadRequest, "at most 100"},
		{"51 approvers", create(map[string]any{"approvers": approverNames(51)}), nil, http.StatusBadRequest, "at most 50"},
		{"duplicate top-level keys", `{"action":"deploy","title":"t","approvers":["alice"],"approvers":["bob"]}`, nil, http.StatusBadRequest, `body has the key "approvers" twice`},
		{"duplicate keys in the context", `{"action":"deploy","title":"t","approvers":["alice"],"context":{"amount":1,"amount":1000000}}`, nil, http.StatusBadRequest, `body.context has the key "amount" twice`},
		{"duplicate keys deep in the context", `{"action":"deploy","title":"t","approvers":["alice"],"context":{"a":[{"b":{"c":1}},{"b":{"c":1,"c":2}}]}}`, nil, http.StatusBadRequest, `body.context.a[1].b has the key "c" twice`},
		{"the same key in two objects", `{"action":"deploy","title":"t","approvers":["alice"],"context":{"a":{"x":1},"b":{"x":1}}}`, nil, http.StatusCreated, ""},
		{"a NUL in the context", `{"action":"deploy","title":"t","approvers":["alice"],"context":{"note":"a\u0000b"}}`, nil, http.StatusBadRequest, "body.context.note contains a NUL character"},
		{"a NUL in a context key", `{"action":"deploy","title":"t","approvers":["alice"],"context":{"a\u0000":1}}`, nil, http.StatusBadRequest, "NUL"},
		{"an unpaired surrogate in the context", `{"action":"deploy","title":"t","approvers":["alice"],"context":{"s":"\ud800x"}}`, nil, http.StatusBadRequest, "unpaired UTF-16 surrogate"},
		{"a paired surrogate in the context", `{"action":"deploy","title":"t","approvers":["alice"],"context":{"s":"\ud83d\ude00"}}`, nil, http.StatusCreated, ""},
		{"a number beyond a float", `{"action":"deploy","title":"t","approvers":["alice"],"context":{"n":1e400}}`, nil, http.StatusBadRequest, "out of the range of a 64-bit float"},
		{"control characters inside the context", `{"action":"deploy","title":"t","approvers":["alice"],"context":{"log":"line\none\u001b"}}`, nil, http.StatusCreated, ""},
		{"a form body", "action=deploy", []string{"Content-Type", "application/x-www-form-urlencoded"}, http.StatusUnsupportedMediaType, "is not JSON"},
		{"a text body that is JSON", create(nil), []string{"Content-Type", "text/plain"}, http.StatusUnsupportedMediaType, "text/plain is not JSON"},
		{"an XML body", "<a/>", []string{"Content-Type", "application/xml"}, http.StatusUnsupportedMediaType, "application/xml is not JSON"},
		{"JSON in another charset", create(nil), []string{"Content-Type", "application/json; charset=latin1"}, http.StatusUnsupportedMediaType, "charset=latin1"},
		{"JSON with charset=utf-8", create(nil), []string{"Content-Type", "application/json; charset=UTF-8"}, http.StatusCreated, ""},
		{"a +json media type", create(nil), []string{"Content-Type", "application/vnd.approvald+json"}, http.StatusCreated, ""},
		{"two Content-Types", create(nil), []string{"Content-Type", "application/json", "Content-Type", "application/json"}, http.StatusUnsupportedMediaType, "2 Content-Type headers"},
		{"a body of 65 KiB", create(map[string]any{"context": map[string]string{"x": strings.Repeat("x", 65<<10)}}), nil, http.StatusRequestEntityTooLarge, "larger than 64 KiB"},
		{"bytes that are not UTF-8", "{\"action\":\"deploy\",\"title\":\"\xff\",\"approvers\":[\"alice\"]}", nil, http.StatusBadRequest, "not valid UTF-8"},
	}
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		ci := f.token("ci-bot", approval.RoleRequester)
		created := 0
		for i, c := range cases {
			resp := f.do("POST", "/v1/approvals", ci, c.body, append([]string{"Idempotency-Key", fmt.Sprintf("policy-%d", i)}, c.headers...)...)
			if c.status == http.StatusCreated {
				if resp.status != http.StatusCreated {
					t.Errorf("%s: got %d %s, want 201", c.name, resp.status, resp.body)
				}
				created++
			} else if p := resp.problem(t, c.status); !strings.Contains(p.Detail, c.detail) {
				t.Errorf("%s: got detail %q, want it to say %q", c.name, p.Detail, c.detail)
			}
			if got := f.count(); got != created {
				t.Fatalf("%s: %d approvals stored, want %d", c.name, got, created)
			}
		}
	})
}

// approverNames returns n distinct approver names.
func approverNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("approver-%d", i)
	}
	return out
}

// TestVoteAndNotePolicy: a vote's comment and an operator's note may hold tabs and line
// breaks but no other control character, and are bounded; the answers are the same on both
// stores, and a refused one changes nothing.
func TestVoteAndNotePolicy(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		ci := f.token("ci-bot", approval.RoleRequester)
		alice := f.token("alice", approval.RoleApprover)
		olga := f.token("olga", approval.RoleOperator)
		a := f.mustCreate(ci, "comments", createBody("Comments", "alice"))
		path := "/v1/approvals/" + a.ID + "/approve"

		for _, c := range []struct{ name, body, detail string }{
			{"a NUL", `{"comment":"a\u0000b"}`, "comment contains a NUL character"},
			{"an ESC", `{"comment":"a\u001bb"}`, "comment contains the control character U+001B"},
			{"a C1 character", `{"comment":"a\u009bb"}`, "U+009B"},
			{"2,001 characters", `{"comment":"` + strings.Repeat("é", 2001) + `"}`, "comment has 2001 characters; at most 2000"},
			{"a duplicate key", `{"comment":"a","comment":"b"}`, `body has the key "comment" twice`},
		} {
			if p := f.do("POST", path, alice, c.body).problem(t, http.StatusBadRequest); !strings.Contains(p.Detail, c.detail) {
				t.Errorf("comment with %s: got %q, want %q", c.name, p.Detail, c.detail)
			}
		}
		f.do("POST", path, alice, `{"comment":"x"}`, "Content-Type", "text/plain").problem(t, http.StatusUnsupportedMediaType)
		if got := f.do("GET", "/v1/approvals/"+a.ID, ci, "").approval(t); got.Version != 1 {
			t.Fatalf("refused votes changed the approval: version %d", got.Version)
		}
		// An empty body needs no Content-Type: there is nothing to parse.
		ok := f.do("POST", path, alice, `{"comment":"line one\n\tline two\r\n"}`)
		if ok.status != http.StatusOK || ok.approval(t).Decisions[0].Comment != "line one\n\tline two\r\n" {
			t.Fatalf("comment with line breaks and a tab: got %d %s", ok.status, ok.body)
		}

		b := f.mustCreate(ci, "notes", actionBody(targetedAction, "Notes", "alice"))
		f.do("POST", "/v1/approvals/"+b.ID+"/approve", alice, "")
		exe := f.do("GET", "/v1/approvals/"+b.ID, ci, "").approval(t).Execution.ID
		f.do("POST", "/v1/executions/"+exe+"/cancel", olga, "")
		for _, c := range []struct{ name, body, detail string }{
			{"a NUL", `{"outcome":"failed","note":"a\u0000b"}`, "note contains a NUL character"},
			{"an ESC", `{"outcome":"failed","note":"a\u001bb"}`, "note contains the control character U+001B"},
			{"4,097 bytes", `{"outcome":"failed","note":"` + strings.Repeat("n", 4097) + `"}`, "note is longer than 4096 bytes"},
			{"no note", `{"outcome":"failed","note":" \n"}`, "note is required"},
		} {
			if p := f.do("POST", "/v1/executions/"+exe+"/resolve", olga, c.body).problem(t, http.StatusBadRequest); !strings.Contains(p.Detail, c.detail) {
				t.Errorf("note with %s: got %q, want %q", c.name, p.Detail, c.detail)
			}
		}
	})
}

// TestCreateThatCannotSucceed: a create whose approvals could never be given is refused when
// it is made (the requester may not approve their own request), and stores nothing.
func TestCreateThatCannotSucceed(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		ci := f.token("ci-bot", approval.RoleRequester)
		for _, c := range []struct{ name, body, detail string }{
			{"only the requester", `{"action":"deploy","title":"t","approvers":["ci-bot"]}`, `approvers lists only the requester "ci-bot"`},
			{"a quorum the others cannot reach", `{"action":"deploy","title":"t","approvers":["ci-bot","alice"],"required_approvals":2}`, "required_approvals is 2 but only 1 approvers may approve"},
		} {
			if p := f.create(ci, "never-"+c.name, c.body).problem(t, http.StatusBadRequest); !strings.Contains(p.Detail, c.detail) {
				t.Errorf("%s: got %q, want %q", c.name, p.Detail, c.detail)
			}
		}
		if n := f.count(); n != 0 {
			t.Fatalf("refused creates stored %d approvals", n)
		}
		// The requester may still be listed beside someone who can approve.
		f.mustCreate(ci, "with-requester", `{"action":"deploy","title":"t","approvers":["ci-bot","alice"]}`)
	})
}

// TestRepeatedVote: a vote cast again answers the approval with "already_voted": true and
// says so; a different comment is not dropped silently: the answer says the first stands.
func TestRepeatedVote(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		ci := f.token("ci-bot", approval.RoleRequester)
		alice := f.token("alice", approval.RoleApprover)
		a := f.mustCreate(ci, "repeat", `{"action":"deploy","title":"t","approvers":["alice","bob"],"required_approvals":2}`)
		path := "/v1/approvals/" + a.ID + "/approve"

		type answer struct {
			approval.Approval
			AlreadyVoted *bool  `json:"already_voted"`
			Notice       string `json:"notice"`
		}
		var first, same, other answer
		f.do("POST", path, alice, `{"comment":"lgtm"}`).decode(t, &first)
		if first.AlreadyVoted != nil || first.Version != 2 {
			t.Fatalf("first vote: got %+v, want version 2 and no already_voted", first)
		}
		f.do("POST", path, alice, `{"comment":"lgtm"}`).decode(t, &same)
		if same.AlreadyVoted == nil || !*same.AlreadyVoted || same.Version != 2 || strings.Contains(same.Notice, "comment") {
			t.Fatalf("the same vote again: got %+v", same)
		}
		resp := f.do("POST", path, alice, `{"comment":"actually, wait"}`)
		resp.decode(t, &other)
		if resp.status != http.StatusOK || other.AlreadyVoted == nil || !*other.AlreadyVoted ||
			!strings.Contains(other.Notice, "the first vote's comment stands") || other.Decisions[0].Comment != "lgtm" {
			t.Fatalf("the vote again with another comment: got %d %s", resp.status, resp.body)
		}
		if got := f.do("GET", "/v1/approvals/"+a.ID, ci, "").approval(t); got.Version != 2 || got.Decisions[0].Comment != "lgtm" {
			t.Fatalf("repeats changed the approval: %+v", got)
		}
	})
}

// TestStoredBeforeThePolicy: an approval stored before the policy refused what it holds (a
// title with a newline and an escape, an approver with a tab) is still read, listed and
// voted on: reads never re-validate.
func TestStoredBeforeThePolicy(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		ci := f.token("ci-bot", approval.RoleRequester)
		alice := f.token("alice", approval.RoleApprover)
		a, err := approval.NewApproval(approval.CreateRequest{Action: "deploy", Title: "old", Approvers: []string{"alice"}}, "ci-bot", "old-1", "fp", f.clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		a.Title = "two\nlines \x1b[1mbold"
		a.Approvers = append(a.Approvers, "tab\tbed")
		if _, err := f.store.InsertApproval(context.Background(), a, approval.HTTPCause("req_old"), nil); err != nil {
			t.Fatalf("store an old approval: %v", err)
		}
		if got := f.do("GET", "/v1/approvals/"+a.ID, ci, "").approval(t); got.Title != a.Title || got.Approvers[1] != "tab\tbed" {
			t.Fatalf("read back: got %q %q", got.Title, got.Approvers)
		}
		var list struct{ Approvals []approval.Approval }
		f.do("GET", "/v1/approvals", ci, "").decode(t, &list)
		if len(list.Approvals) != 1 || list.Approvals[0].Title != a.Title {
			t.Fatalf("listed: %+v", list.Approvals)
		}
		if resp := f.do("POST", "/v1/approvals/"+a.ID+"/approve", alice, ""); resp.status != http.StatusOK {
			t.Fatalf("vote on an old approval: got %d %s", resp.status, resp.body)
		}
	})
}

// TestNetHTTPOwnAnswers: the requests net/http refuses before any handler runs are answered
// as problem+json with net/http's status and a reason, on a raw TCP connection
// (docs/http-api.md, "What net/http answers itself"), also after a handler's answer on the
// same connection.
func TestNetHTTPOwnAnswers(t *testing.T) {
	t.Parallel()
	f := setup(t, testdb.SQLite)
	cases := []struct {
		name, request string
		status        int
		detail        string
	}{
		{"a control character in a header", "GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\x01b\r\n\r\n", 400, "malformed"},
		{"a malformed header name", "GET /healthz HTTP/1.1\r\nHost: x\r\nX A: b\r\n\r\n", 400, "header name"},
		{"no Host", "GET /healthz HTTP/1.1\r\n\r\n", 400, "Host header"},
		{"a malformed request line", "GET\r\n\r\n", 400, "request line"},
		{"an unknown HTTP version", "GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n", 505, "HTTP version"},
		{"an unknown transfer coding", "POST /v1/approvals HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: zip\r\n\r\n", 501, "transfer coding"},
		{"an unknown expectation", "GET /healthz HTTP/1.1\r\nHost: x\r\nExpect: coffee\r\n\r\n", 417, "Expect"},
		{"headers over the limit", "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("b", 2<<20) + "\r\n\r\n", 431, "headers"},
	}
	for _, c := range cases {
		for _, after := range []bool{false, true} {
			conn, err := net.Dial("tcp", f.srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(conn)
			if after {
				// A handler's answer first, on the same connection: it is left as it is.
				io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("%s: the handler's answer first: %v", c.name, err)
				}
				body, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != 200 || resp.Header.Get("X-Request-Id") == "" || !strings.Contains(string(body), `"ok"`) {
					t.Fatalf("%s: the handler's answer first: got %d %v %s", c.name, resp.StatusCode, resp.Header, body)
				}
			}
			go func() { io.WriteString(conn, c.request) }() // the server may answer before reading it all
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				conn.Close()
				t.Fatalf("%s: %v", c.name, err)
			}
			body, err := io.ReadAll(resp.Body)
			conn.Close()
			if err != nil {
				t.Fatalf("%s: read the answer: %v", c.name, err)
			}
			var p struct {
				Type   string `json:"type"`
				Title  string `json:"title"`
				Status int    `json:"status"`
				Detail string `json:"detail"`
			}
			if resp.StatusCode != c.status || resp.Header.Get("Content-Type") != "application/problem+json" || !resp.Close {
				t.Errorf("%s (after a handler: %v): got %d, %q, close %v; want %d, application/problem+json, close",
					c.name, after, resp.StatusCode, resp.Header.Get("Content-Type"), resp.Close, c.status)
				continue
			}
			if err := json.Unmarshal(body, &p); err != nil || p.Status != c.status || p.Title != http.StatusText(c.status) ||
				!strings.HasPrefix(p.Type, "https://approvald.dev/problems/") || !strings.Contains(p.Detail, c.detail) {
				t.Errorf("%s: got problem %s (%v), want status %d and a detail with %q", c.name, body, err, c.status, c.detail)
			}
		}
	}
}

// TestServeProblemsLeavesHandlers: only what net/http writes before any handler is rewritten.
// A handler that answers in exactly the shape of net/http's own plain-text 400 (no Date, a
// text body, the connection closing) is passed on byte for byte.
func TestServeProblemsLeavesHandlers(t *testing.T) {
	t.Parallel()
	const canned = "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request"
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Hijacked, the handler writes the very bytes net/http would: still the handler's.
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer conn.Close()
		io.WriteString(conn, canned)
	}))
	srv.Listener = httpapi.ServeProblems(srv.Config, srv.Listener)
	srv.Start()
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	got, err := io.ReadAll(conn)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != canned {
		t.Fatalf("a handler's answer: got %q, want %q untouched", got, canned)
	}
}
