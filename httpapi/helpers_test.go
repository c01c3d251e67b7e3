package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/approvald/approval"
	"github.com/approvald/approval/httpapi"
	"github.com/approvald/approval/internal/fakeclock"
	"github.com/approvald/approval/internal/testdb"
)

// fixture is one server on a real loopback listener over a fresh store.
type fixture struct {
	tb       testing.TB
	store    approval.Store
	clock    *fakeclock.Clock
	api      *httpapi.Server
	srv      *httptest.Server
	client   *http.Client
	registry *prometheus.Registry
	logs     *lockedBuffer
	// openapi checks every exchange of client against the OpenAPI document.
	openapi *validatingTransport
}

// service returns the rules over the fixture's store, for a change made behind the API's back.
func (f *fixture) service() *approval.Service { return rules(f.store) }

// rules returns the rules the test servers run, over s: targetedAction is the one action
// with a downstream target; alice is notified by e-mail, so that approvals fill the outbox
// operators read; a create may name a callback_url on callbacks.example.com and
// build.ci.example.com, https on 443.
func rules(s approval.Store) *approval.Service {
	return &approval.Service{
		Store:    s,
		Targeted: func(action string) bool { return action == targetedAction },
		Routing: approval.Routing{
			Channels:        map[string][]string{"alice": {approval.ChannelEmail}},
			Emails:          map[string]string{"alice": "alice@example.com"},
			CallbackOrigins: []string{"https://callbacks.example.com:443", "https://build.ci.example.com:443"},
		},
	}
}

// setup starts a server over a new store of the given kind. opts adjust the Config.
func setup(tb testing.TB, kind string, opts ...func(*httpapi.Config)) *fixture {
	tb.Helper()
	clock := fakeclock.New(approval.Now())
	return serveOn(tb, testdb.OpenWith(tb, kind, testdb.Options{Now: clock.Now}), clock, opts...)
}

// serveOn starts a server over store, whose clock is clock. opts adjust the Config.
func serveOn(tb testing.TB, store approval.Store, clock *fakeclock.Clock, opts ...func(*httpapi.Config)) *fixture {
	tb.Helper()
	f := &fixture{tb: tb, clock: clock, store: store, registry: prometheus.NewRegistry(), logs: &lockedBuffer{}}
	cfg := httpapi.Config{
		Store:    f.store,
		Logger:   slog.New(slog.NewJSONHandler(f.logs, nil)),
		Registry: f.registry,
		Now:      f.clock.Now,
	}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.Service == nil {
		cfg.Service = rules(f.store)
		cfg.Service.Now = f.clock.Now
	}
	f.api = httpapi.New(cfg)
	f.srv = httptest.NewUnstartedServer(f.api)
	f.srv.Listener = httpapi.ServeProblems(f.srv.Config, f.srv.Listener)
	f.srv.Start()
	tb.Cleanup(f.srv.Close)
	transport := &http.Transport{MaxIdleConnsPerHost: 128}
	tb.Cleanup(transport.CloseIdleConnections)
	f.openapi = &validatingTransport{tb: tb, spec: loadSpec(tb), next: transport}
	f.client = &http.Client{Transport: f.openapi}
	return f
}

// token stores a new token for subject and role and returns its secret.
func (f *fixture) token(subject string, role approval.Role) string {
	f.tb.Helper()
	svc := rules(f.store)
	svc.Now = f.clock.Now
	secret, _, err := svc.CreateToken(context.Background(), tokenIssuer, approval.TokenSpec{Subject: subject, Role: role})
	if err != nil {
		f.tb.Fatalf("create token: %v", err)
	}
	return secret
}

// response is an answer read in full.
type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request. headers are name, value pairs; a name may repeat.
func (f *fixture) do(method, path, token, body string, headers ...string) *response {
	f.tb.Helper()
	resp, err := f.send(method, path, token, body, headers...)
	if err != nil {
		f.tb.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

// send is do for use outside the test goroutine: it returns the error instead of failing.
func (f *fixture) send(method, path, token, body string, headers ...string) (*response, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, f.srv.URL+path, rd)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	if _, set := req.Header["Content-Type"]; body != "" && !set {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// create posts a create request with the Idempotency-Key.
func (f *fixture) create(token, key, body string) *response {
	f.tb.Helper()
	return f.do("POST", "/v1/approvals", token, body, "Idempotency-Key", key)
}

// mustCreate creates an approval and returns it.
func (f *fixture) mustCreate(token, key, body string) *approval.Approval {
	f.tb.Helper()
	resp := f.create(token, key, body)
	if resp.status != http.StatusCreated {
		f.tb.Fatalf("create: got %d %s, want 201", resp.status, resp.body)
	}
	return resp.approval(f.tb)
}

// count returns how many approvals the store holds.
func (f *fixture) count() int {
	f.tb.Helper()
	counts, err := f.store.ApprovalCounts(context.Background())
	if err != nil {
		f.tb.Fatalf("approval counts: %v", err)
	}
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}

func (r *response) decode(tb testing.TB, v any) {
	tb.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		tb.Fatalf("decode %s: %v", r.body, err)
	}
}

func (r *response) approval(tb testing.TB) *approval.Approval {
	tb.Helper()
	var a approval.Approval
	r.decode(tb, &a)
	return &a
}

// problemBody is an RFC 9457 answer.
type problemBody struct {
	Type      string             `json:"type"`
	Title     string             `json:"title"`
	Status    int                `json:"status"`
	Detail    string             `json:"detail"`
	RequestID string             `json:"request_id"`
	Approval  *approval.Approval `json:"approval"`
}

// problem checks that r is a problem+json answer with the status, and returns it.
func (r *response) problem(tb testing.TB, status int) problemBody {
	tb.Helper()
	if r.status != status {
		tb.Fatalf("got status %d %s, want %d", r.status, r.body, status)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		tb.Fatalf("got Content-Type %q, want application/problem+json", ct)
	}
	var p problemBody
	r.decode(tb, &p)
	if p.Status != status || p.Type == "" || p.Title == "" || p.Detail == "" {
		tb.Fatalf("incomplete problem: %s", r.body)
	}
	return p
}

// targetedAction is the one action with a downstream target in every fixture's store:
// approving it queues an execution, while any other action's execution is not_configured.
const targetedAction = "payout"

// createBody is a valid create request for the approvers, of an action with no target.
func createBody(title string, approvers ...string) string {
	return actionBody("deploy", title, approvers...)
}

// actionBody is a valid create request of the action for the approvers.
func actionBody(action, title string, approvers ...string) string {
	b, _ := json.Marshal(map[string]any{"action": action, "title": title, "approvers": approvers})
	return string(b)
}

// lockedBuffer is an io.Writer safe for the server's concurrent log lines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the JSON log lines written so far.
func (b *lockedBuffer) lines(tb testing.TB) []map[string]any {
	tb.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(b.buf.Bytes()), []byte("\n")) {
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			tb.Fatalf("log line %q is not JSON: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// race runs fn n times concurrently, released together by one barrier, and waits for all.
func race(n int, fn func(i int)) {
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			fn(i)
		}()
	}
	close(start)
	wg.Wait()
}

// tokenIssuer is the admin the tests make their tokens as.
var tokenIssuer = approval.Principal{Subject: "test-admin", Role: approval.RoleAdmin}
