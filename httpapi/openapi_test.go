package httpapi_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	liberrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	"github.com/pb33f/libopenapi/datamodel/high/base"

	"github.com/approvald/approval/httpapi"
	"github.com/approvald/approval/internal/testdb"
)

// apiSpec is the OpenAPI document loaded once for the whole package: every fixture's client
// checks its exchanges against it (validatingTransport).
type apiSpec struct {
	validator  validator.Validator
	problem    *base.Schema
	operations map[string]bool // "METHOD /shape/{}" of every documented operation
	docErrs    []*liberrors.ValidationError

	// problemMu serialises checks against problem: libopenapi renders a schema for validation
	// by writing into the schema's own values, so two tests checking a 404 at once raced
	// (TestUnknownRoutes against TestMetrics under -race, CI of 45d8f2e).
	problemMu sync.Mutex
}

var (
	specOnce sync.Once
	spec     *apiSpec
	specErr  error
)

// loadSpec parses httpapi's embedded OpenAPI document and builds its validator.
func loadSpec(tb testing.TB) *apiSpec {
	tb.Helper()
	specOnce.Do(func() { spec, specErr = newAPISpec(httpapi.OpenAPI()) })
	if specErr != nil {
		tb.Fatalf("load the OpenAPI document: %v", specErr)
	}
	return spec
}

func newAPISpec(raw []byte) (*apiSpec, error) {
	doc, err := libopenapi.NewDocument(raw)
	if err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	model, err := doc.BuildV3Model()
	if err != nil {
		return nil, fmt.Errorf("build the model: %w", err)
	}
	// Strict mode reports properties and headers the document does not declare, so that an
	// answer cannot carry a field the description forgot. The objects whose members are the
	// caller's or a sender's (an approval's context, an execution's result, an event's detail,
	// an inbox event's headers, a webhook's body) are free-form and left out of it.
	v, errs := validator.NewValidator(doc, config.WithStrictMode(), config.WithStrictIgnorePaths(freeForm...))
	if len(errs) > 0 {
		return nil, fmt.Errorf("build the validator: %v", errs)
	}
	_, docErrs := v.ValidateDocument()
	s := &apiSpec{validator: v, operations: map[string]bool{}, docErrs: docErrs}
	for path, item := range model.Model.Paths.PathItems.FromOldest() {
		for method := range item.GetOperations().FromOldest() {
			s.operations[strings.ToUpper(method)+" "+shape(path)] = true
		}
	}
	problem, ok := model.Model.Components.Schemas.Get("Problem")
	if !ok {
		return nil, fmt.Errorf("no Problem schema in components")
	}
	s.problem = problem.Schema()
	return s, nil
}

// freeForm are the JSON paths whose members the document does not name, by design: the
// objects of callers and senders, and the inside of GET /v1/openapi.json's answer, the
// document itself, which TestOpenAPIDocument checks and TestOpenAPIServed compares byte for
// byte.
var freeForm = []string{
	"$.body**.context.*", "$.body**.result.*", "$.body**.detail.*", "$.body**.headers.*", "$.body**.payload.*",
	"$.body.info**", "$.body.servers**", "$.body.security**", "$.body.tags**",
	"$.body.paths**", "$.body.webhooks**", "$.body.components**",
}

// freeFormBracket finds a strict-mode finding inside a free-form object whose member name the
// validator spells in brackets ($.body.context['\x1b[31mred']): its ignore paths match only
// the dotted spelling, so such names are let through here, as freeForm lets the others.
var freeFormBracket = regexp.MustCompile(`\$\.body(\.[a-z_]+|\[\d+\])*\.(context|result|detail|headers|payload)\[`)

// inFreeForm reports whether a finding is strict mode's about a member of a free-form object.
func inFreeForm(e *liberrors.ValidationError) bool {
	return strings.Contains(e.Message, "not declared in schema") && freeFormBracket.MatchString(e.Message)
}

// wildcardName matches a path template's {name}, in OpenAPI and in ServeMux patterns.
var wildcardName = regexp.MustCompile(`\{[^}]*\}`)

// shape forgets the names of a path's wildcards: POST /v1/inbox/{source} and GET
// /v1/inbox/{id} are one path, which OpenAPI spells once.
func shape(path string) string { return wildcardName.ReplaceAllString(path, "{}") }

// documented reports whether the request's method and path match a documented operation.
func (s *apiSpec) documented(method, path string) bool {
	segs := strings.Split(path, "/")
	for op := range s.operations {
		m, p, _ := strings.Cut(op, " ")
		if m != method {
			continue
		}
		want := strings.Split(p, "/")
		if len(want) != len(segs) {
			continue
		}
		match := true
		for i := range want {
			if want[i] != segs[i] && (want[i] != "{}" || segs[i] == "") {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

// check validates one exchange and returns what is wrong with it, one line per finding.
//
// Every answer must match the document: its status, headers and body for a documented
// operation, and a problem (404 or 405) for a request no operation matches. A request is held
// to the document when it was accepted (2xx); tests send malformed requests on purpose, and
// the server's refusal of those is what the answer's check covers. The server takes a body as
// application/json or any application/*+json type (docs/http-api.md, "Input policy"); the
// document names application/json, so an accepted +json body is checked as that. The webhook
// intake takes any bytes, so the document gives its body no schema.
func (s *apiSpec) check(req *http.Request, reqBody []byte, resp *http.Response, respBody []byte) []string {
	var out []string
	add := func(errs []*liberrors.ValidationError) {
		for _, e := range errs {
			if !inFreeForm(e) {
				out = append(out, describe(e))
			}
		}
	}
	rebuild := func() (*http.Request, *http.Response) {
		r := req.Clone(req.Context())
		r.Body = io.NopCloser(bytes.NewReader(reqBody))
		if ct := r.Header.Get("Content-Type"); len(reqBody) > 0 && (ct == "" || strings.Contains(ct, "+json")) {
			r.Header.Set("Content-Type", "application/json")
		}
		a := *resp
		a.Body = io.NopCloser(bytes.NewReader(respBody))
		return r, &a
	}

	if !s.documented(req.Method, req.URL.Path) {
		if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed {
			return []string{fmt.Sprintf("%s %s is not documented, yet the server answered %d", req.Method, req.URL.Path, resp.StatusCode)}
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
			out = append(out, fmt.Sprintf("a %d has Content-Type %q, want application/problem+json", resp.StatusCode, ct))
		}
		s.problemMu.Lock()
		_, errs := schema_validation.NewSchemaValidator().ValidateSchemaBytes(s.problem, respBody)
		s.problemMu.Unlock()
		add(errs)
		return out
	}
	if resp.StatusCode/100 == 2 {
		r, _ := rebuild()
		// The server reads an empty query parameter (?status=&limit=) as one not given (the
		// listings' q.Get("status") == "" is any status); the document describes given values
		// only, so the request is checked without them.
		if q := r.URL.Query(); len(q) > 0 {
			for name, values := range q {
				if len(values) == 1 && values[0] == "" {
					q.Del(name)
				}
			}
			u := *r.URL
			u.RawQuery = q.Encode()
			r.URL = &u
		}
		_, errs := s.validator.ValidateHttpRequestSync(r)
		for _, e := range errs {
			if !inFreeForm(e) {
				out = append(out, "request: "+describe(e))
			}
		}
	}
	r, a := rebuild()
	_, errs := s.validator.ValidateHttpResponse(r, a)
	add(errs)
	return out
}

// describe renders a validation error with its schema failures.
func describe(e *liberrors.ValidationError) string {
	var b strings.Builder
	b.WriteString(e.Message)
	if e.Reason != "" {
		b.WriteString(": " + e.Reason)
	}
	for _, f := range e.SchemaValidationErrors {
		fmt.Fprintf(&b, "; %s", f.Reason)
		if f.FieldPath != "" {
			fmt.Fprintf(&b, " at %s", f.FieldPath)
		}
	}
	return b.String()
}

// validatingTransport checks every exchange of a fixture's client against the OpenAPI
// document and fails the test, naming the request, on any disagreement.
type validatingTransport struct {
	tb testing.TB
	// report, when set, takes the findings instead of tb: a fuzz target's own t (the
	// fixture's tb is then the *testing.F, which must not fail inside the target).
	report  atomic.Pointer[testing.T]
	spec    *apiSpec
	next    http.RoundTripper
	checked atomic.Int64
}

func (t *validatingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	if req.Body != nil {
		var err error
		if reqBody, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		req.Body.Close()
		out := req.Clone(req.Context())
		out.Body = io.NopCloser(bytes.NewReader(reqBody))
		req = out
	}
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	respBody, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(respBody))
	if problems := t.spec.check(req, reqBody, resp, respBody); len(problems) > 0 {
		var tb testing.TB = t.tb
		if r := t.report.Load(); r != nil {
			tb = r
		}
		tb.Errorf("%s %s answered %d against the OpenAPI document (httpapi/openapi.json):\n  %s\n  body: %s",
			req.Method, req.URL.RequestURI(), resp.StatusCode, strings.Join(problems, "\n  "), clip(respBody))
	}
	t.checked.Add(1)
	return resp, nil
}

// clip shortens a body for a failure message.
func clip(b []byte) string {
	const max = 600
	if len(b) > max {
		return string(b[:max]) + "..."
	}
	return string(b)
}

// TestOpenAPIDocument: the document is valid OpenAPI 3.1 by the library's own check of it.
func TestOpenAPIDocument(t *testing.T) {
	t.Parallel()
	s := loadSpec(t)
	for _, e := range s.docErrs {
		t.Errorf("the document is not valid OpenAPI: %s", describe(e))
	}
	if !bytes.Contains(httpapi.OpenAPI(), []byte(`"openapi": "3.1.`)) {
		t.Errorf("the document does not declare OpenAPI 3.1")
	}
}

// TestOpenAPIRoutes: every route of the route table is documented, and every documented
// operation is a route of the table.
func TestOpenAPIRoutes(t *testing.T) {
	t.Parallel()
	s := loadSpec(t)
	f := setup(t, testdb.SQLite)
	table := map[string]bool{}
	for _, rt := range f.api.RouteTable() {
		method, path, _ := strings.Cut(rt, " ")
		table[method+" "+shape(path)] = true
		if !s.operations[method+" "+shape(path)] {
			t.Errorf("route %s is not in the OpenAPI document", rt)
		}
	}
	var documented []string
	for op := range s.operations {
		documented = append(documented, op)
		if !table[op] {
			t.Errorf("the OpenAPI document has %s, which the route table lacks", op)
		}
	}
	if len(table) != len(s.operations) {
		t.Errorf("got %d documented operations, want the route table's %d", len(s.operations), len(table))
	}
	slices.Sort(documented)
	t.Logf("%d operations: %s", len(documented), strings.Join(documented, ", "))
}

// TestOpenAPIServed: GET /v1/openapi.json answers the embedded document without a token.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	f := setup(t, testdb.SQLite)
	resp := f.do("GET", "/v1/openapi.json", "", "")
	if resp.status != http.StatusOK {
		t.Fatalf("got %d %s, want 200", resp.status, resp.body)
	}
	if ct := resp.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("got Content-Type %q, want application/json", ct)
	}
	if !bytes.Equal(resp.body, httpapi.OpenAPI()) {
		t.Errorf("the served document differs from the embedded one")
	}
	f.do("POST", "/v1/openapi.json", "", "{}").problem(t, http.StatusMethodNotAllowed)
}

// TestOpenAPICheckFails: the check that every test's exchanges go through finds what is
// wrong, so that its silence means something.
func TestOpenAPICheckFails(t *testing.T) {
	t.Parallel()
	s := loadSpec(t)
	jsonHeader := func(ct string) http.Header {
		return http.Header{"Content-Type": {ct}, "X-Request-Id": {"req_1"}}
	}
	a := `{"id": "apr_1", "operation_key": "k", "action": "deploy", "title": "t", "context": {}, "requester": "ci-bot",
		"approvers": ["alice"], "required_approvals": 1, "status": "pending", "decisions": [], "decided_at": null,
		"expires_at": "2031-01-01T00:00:00Z", "created_at": "2031-01-01T00:00:00Z", "version": 1, "execution": null}`
	problem := `{"type": "https://approvald.dev/problems/not_found", "title": "Not found", "status": 404, "detail": "x", "request_id": "req_1"}`
	for _, tc := range []struct {
		name, method, target, reqBody string
		reqHeader                     http.Header
		status                        int
		header                        http.Header
		body                          string
		wantErr                       bool
	}{
		{"a good approval", "GET", "/v1/approvals/apr_1", "", nil, 200, jsonHeader("application/json"), a, false},
		{"a good problem", "GET", "/v1/approvals/apr_1", "", nil, 404, jsonHeader("application/problem+json"), problem, false},
		{"a good 404 on an unknown path", "GET", "/v1/nothing", "", nil, 404, jsonHeader("application/problem+json"), problem, false},
		{"an id that is a number", "GET", "/v1/approvals/apr_1", "", nil, 200, jsonHeader("application/json"),
			strings.Replace(a, `"id": "apr_1"`, `"id": 1`, 1), true},
		{"an unknown status", "GET", "/v1/approvals/apr_1", "", nil, 200, jsonHeader("application/json"),
			strings.Replace(a, `"pending"`, `"maybe"`, 1), true},
		{"a field the document lacks", "GET", "/v1/approvals/apr_1", "", nil, 200, jsonHeader("application/json"),
			strings.Replace(a, `"version": 1`, `"version": 1, "colour": "red"`, 1), true},
		{"a missing field", "GET", "/v1/approvals/apr_1", "", nil, 200, jsonHeader("application/json"),
			strings.Replace(a, `"title": "t",`, ``, 1), true},
		{"an undocumented status", "GET", "/v1/approvals/apr_1", "", nil, 418, jsonHeader("application/problem+json"), problem, true},
		{"a problem as application/json", "GET", "/v1/approvals/apr_1", "", nil, 404, jsonHeader("application/json"), problem, true},
		{"a problem without request_id", "GET", "/v1/approvals/apr_1", "", nil, 404, jsonHeader("application/problem+json"),
			strings.Replace(problem, `, "request_id": "req_1"`, ``, 1), true},
		{"a 401 without WWW-Authenticate", "GET", "/v1/approvals", "", nil, 401, jsonHeader("application/problem+json"),
			strings.Replace(problem, "404", "401", 1), true},
		{"an unknown path answered 200", "GET", "/v1/nothing", "", nil, 200, jsonHeader("application/json"), `{}`, true},
		{"an unknown path answered with a non-problem", "GET", "/v1/nothing", "", nil, 404, jsonHeader("application/problem+json"), `{"error": "x"}`, true},
		{"an accepted create without its key", "POST", "/v1/approvals", `{"action": "a", "title": "t", "approvers": ["b"]}`,
			http.Header{"Authorization": {"Bearer x"}}, 201,
			http.Header{"Content-Type": {"application/json"}, "X-Request-Id": {"req_1"}, "Location": {"/v1/approvals/apr_1"}}, a, true},
		{"an accepted create with an unknown field", "POST", "/v1/approvals", `{"action": "a", "title": "t", "approvers": ["b"], "colour": 1}`,
			http.Header{"Authorization": {"Bearer x"}, "Idempotency-Key": {"k"}}, 201,
			http.Header{"Content-Type": {"application/json"}, "X-Request-Id": {"req_1"}, "Location": {"/v1/approvals/apr_1"}}, a, true},
		{"a good create", "POST", "/v1/approvals", `{"action": "a", "title": "t", "approvers": ["b"]}`,
			http.Header{"Authorization": {"Bearer x"}, "Idempotency-Key": {"k"}}, 201,
			http.Header{"Content-Type": {"application/json"}, "X-Request-Id": {"req_1"}, "Location": {"/v1/approvals/apr_1"}}, a, false},
		{"a 201 without Location", "POST", "/v1/approvals", `{"action": "a", "title": "t", "approvers": ["b"]}`,
			http.Header{"Authorization": {"Bearer x"}, "Idempotency-Key": {"k"}}, 201, jsonHeader("application/json"), a, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, "http://127.0.0.1"+tc.target, strings.NewReader(tc.reqBody))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer apv_x")
			for k, v := range tc.reqHeader {
				req.Header[k] = v
			}
			resp := &http.Response{StatusCode: tc.status, Header: tc.header, Request: req}
			got := s.check(req, []byte(tc.reqBody), resp, []byte(tc.body))
			if tc.wantErr && len(got) == 0 {
				t.Errorf("the check found nothing wrong, want a finding")
			} else if !tc.wantErr && len(got) > 0 {
				t.Errorf("the check found %q, want nothing", got)
			}
			t.Logf("findings: %q", got)
		})
	}
}
