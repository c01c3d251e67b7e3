package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
)

// FuzzHTTPInput drives arbitrary JSON bodies and strings through the API (creates, an approve
// with a comment, an operator's resolve with a note, listings with odd query parameters) on
// both stores, and requires the same status from each and never a 5xx: the input policy is
// enforced before the store, so neither store ever sees what the other could not keep.
//
// Both servers get the same requests in the same order, so their states stay alike; the seed
// corpus runs as a plain test on every go test.
func FuzzHTTPInput(f *testing.F) {
	for _, seed := range []struct {
		route uint8
		body  string
		text  string
	}{
		{0, `{"action":"deploy","title":"t","approvers":["alice"]}`, ""},
		{0, `{"action":"deploy","title":"t","approvers":["alice"],"approvers":["bob"]}`, ""},
		{0, `{"action":"deploy","title":"t","approvers":["alice"],"context":{"a":"\u0000","b":"\ud800"}}`, ""},
		{0, `{"action":"deploy","title":"t","approvers":["alice"],"context":{"n":1e999,"m":-0.0e-999}}`, ""},
		{0, `{"action":"d","title":"t","approvers":["alice"],"context":{"x":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}}`, ""},
		{0, `{"action":"deploy","title":"t","approvers":["alice"],"expires_in":"-1s","required_approvals":0}`, ""},
		{0, "{\"action\":\"deploy\",\"title\":\"\xff\",\"approvers\":[\"alice\"]}", ""},
		{0, `[1,2]`, ""},
		{0, `{"action":"deploy","title":"t","approvers":["alice"]} trailing`, ""},
		{1, "", "a\x00b"},
		{1, "", "line\nbreak"},
		{1, "", "\x1b[31mred"},
		{1, "", "\u0085\u2028\ufeff"},
		{1, "", "ci-bot"},
		{1, "", "   "},
		{2, `{"comment":"a\u0000b"}`, "a\x00b"},
		{2, `{"comment":"ok","comment":"dup"}`, "tab\there\nnewline"},
		{2, `{"comment":"\u001b"}`, "\x7f"},
		{2, ``, ""},
		{3, `{"outcome":"failed","note":"\u0000"}`, "a\x00b"},
		{3, `{"outcome":"failed","note":"x","note":"y"}`, "\x1b"},
		{3, `{"outcome":"bogus"}`, "fine note"},
		{4, "", "status=pending&limit=-1"},
		{4, "", "approver=%00&cursor=%ff"},
		{4, "", "limit=99999999999999999999&cursor=abc&status=\x00"},
		{4, "", "a\x01b"},
	} {
		f.Add(seed.route, seed.body, seed.text)
	}

	stores := []*fuzzTarget{newFuzzTarget(f, testdb.SQLite), newFuzzTarget(f, testdb.Postgres)}
	n := 0
	f.Fuzz(func(t *testing.T, route uint8, body, text string) {
		n++
		for _, s := range stores {
			s.f.openapi.report.Store(t)
		}
		reqs := fuzzRequests(route, body, text, n)
		for _, rq := range reqs {
			statuses := make([]int, len(stores))
			for i, s := range stores {
				resp, err := s.f.send(rq.method, s.path(rq.path), s.tokens[rq.who], rq.body, rq.headers...)
				if err != nil {
					if rq.mayFailToSend {
						return // the URL could not be built, for either store
					}
					t.Fatalf("%s %s on %s: %v", rq.method, rq.path, s.kind, err)
				}
				if resp.status >= 500 {
					t.Fatalf("%s %s %q on %s: got %d %s", rq.method, rq.path, rq.body, s.kind, resp.status, resp.body)
				}
				statuses[i] = resp.status
			}
			if statuses[0] != statuses[1] {
				t.Fatalf("%s %s %q: %s answered %d, %s answered %d", rq.method, rq.path, rq.body,
					stores[0].kind, statuses[0], stores[1].kind, statuses[1])
			}
		}
	})
}

// fuzzTarget is one store's server with the approvals the fuzzed requests act on.
type fuzzTarget struct {
	kind   string
	f      *fixture
	tokens map[string]string
	// ids maps the placeholders of a path ({pending}, {execution}) to this store's ids.
	ids map[string]string
}

func newFuzzTarget(tb testing.TB, kind string) *fuzzTarget {
	tb.Helper()
	f := setup(tb, kind)
	t := &fuzzTarget{kind: kind, f: f, tokens: map[string]string{
		"ci-bot": f.token("ci-bot", approval.RoleRequester),
		"alice":  f.token("alice", approval.RoleApprover),
		"olga":   f.token("olga", approval.RoleOperator),
	}, ids: map[string]string{}}
	// A pending approval needing two votes, on which alice's vote and its repeats land.
	t.ids["{pending}"] = f.mustCreate(t.tokens["ci-bot"], "fuzz-pending", `{"action":"deploy","title":"t","approvers":["alice","bob"],"required_approvals":2}`).ID
	// A cancelled execution, which an operator's resolve finds in conflict once the note passes.
	a := f.mustCreate(t.tokens["ci-bot"], "fuzz-exe", actionBody(targetedAction, "t", "alice"))
	if resp := f.do("POST", "/v1/approvals/"+a.ID+"/approve", t.tokens["alice"], ""); resp.status != http.StatusOK {
		tb.Fatalf("approve: got %d %s", resp.status, resp.body)
	}
	exe := f.do("GET", "/v1/approvals/"+a.ID, t.tokens["ci-bot"], "").approval(tb).Execution.ID
	f.do("POST", "/v1/executions/"+exe+"/cancel", t.tokens["olga"], "")
	t.ids["{execution}"] = exe
	return t
}

// path replaces the placeholders of p with this store's ids.
func (t *fuzzTarget) path(p string) string {
	for k, v := range t.ids {
		p = strings.ReplaceAll(p, k, v)
	}
	return p
}

// fuzzRequest is one request of an iteration, sent to both stores.
type fuzzRequest struct {
	method, path, who, body string
	headers                 []string
	mayFailToSend           bool
}

// fuzzRequests are the requests one input makes: the raw body on a route, and text placed in
// the fields of a well-formed body (or the query) of the same route.
func fuzzRequests(route uint8, body, text string, n int) []fuzzRequest {
	key := func(s string) []string { return []string{"Idempotency-Key", fmt.Sprintf("fuzz-%d-%s", n, s)} }
	str := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	switch route % 5 {
	case 0:
		return []fuzzRequest{{method: "POST", path: "/v1/approvals", who: "ci-bot", body: body, headers: key("raw")}}
	case 1:
		return []fuzzRequest{
			{method: "POST", path: "/v1/approvals", who: "ci-bot", headers: key("title"), body: str(map[string]any{"action": "deploy", "title": text, "approvers": []string{"alice"}})},
			{method: "POST", path: "/v1/approvals", who: "ci-bot", headers: key("action"), body: str(map[string]any{"action": text, "title": "t", "approvers": []string{"alice"}})},
			{method: "POST", path: "/v1/approvals", who: "ci-bot", headers: key("approver"), body: str(map[string]any{"action": "deploy", "title": "t", "approvers": []string{text}})},
			{method: "POST", path: "/v1/approvals", who: "ci-bot", headers: key("context"), body: str(map[string]any{"action": "deploy", "title": "t", "approvers": []string{"alice"}, "context": map[string]string{text: text}})},
			{method: "POST", path: "/v1/approvals", who: "ci-bot", headers: key("expires"), body: str(map[string]any{"action": "deploy", "title": "t", "approvers": []string{"alice"}, "expires_in": text})},
		}
	case 2:
		return []fuzzRequest{
			{method: "POST", path: "/v1/approvals/{pending}/approve", who: "alice", body: body},
			{method: "POST", path: "/v1/approvals/{pending}/approve", who: "alice", body: str(map[string]string{"comment": text})},
		}
	case 3:
		return []fuzzRequest{
			{method: "POST", path: "/v1/executions/{execution}/resolve", who: "olga", body: body},
			{method: "POST", path: "/v1/executions/{execution}/resolve", who: "olga", body: str(map[string]string{"outcome": "failed", "note": text})},
		}
	default:
		q := url.Values{"status": {text}, "approver": {text}, "cursor": {text}, "limit": {text}}
		return []fuzzRequest{
			{method: "GET", path: "/v1/approvals?" + text, who: "alice", mayFailToSend: true},
			{method: "GET", path: "/v1/approvals?" + q.Encode(), who: "ci-bot"},
			{method: "GET", path: "/v1/approvals?approver=" + url.QueryEscape(text), who: "olga"},
			{method: "GET", path: "/v1/approvals/" + url.PathEscape(text), who: "alice"},
		}
	}
}
