package client_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/client"
	"github.com/approvald/approval/httpapi"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/webhook"
)

// chatSecret signs the webhooks of the test server's "chat" source.
const chatSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// fixture is the real approvald API over a fresh store, on loopback, behind a proxy that
// the test scripts.
type fixture struct {
	t      *testing.T
	store  approval.Store
	server *httptest.Server // the API itself
	proxy  *proxy
	tokens map[string]string // by subject: ci-bot (requester), alice, bob (approvers), ops
}

func setup(t *testing.T, kind string) *fixture {
	t.Helper()
	f := &fixture{t: t, store: testdb.Open(t, kind, nil), tokens: map[string]string{}}
	api := httpapi.New(httpapi.Config{
		Store:            f.store,
		Service:          &approval.Service{Store: f.store},
		LongPollInterval: 50 * time.Millisecond,
		Sources: []httpapi.Source{{
			Name:     "chat",
			Verifier: webhook.Verifier{Scheme: webhook.SchemeStandard, Secrets: []string{chatSecret}},
			Handlers: []string{approval.TypeApprovalDecision},
		}},
	})
	f.server = httptest.NewServer(api)
	t.Cleanup(f.server.Close)
	f.proxy = newProxy(t, f.server.URL)
	for subject, role := range map[string]approval.Role{
		"ci-bot": approval.RoleRequester, "alice": approval.RoleApprover,
		"bob": approval.RoleApprover, "ops": approval.RoleOperator,
	} {
		secret, _, err := (&approval.Service{Store: f.store}).CreateToken(context.Background(), tokenIssuer, approval.TokenSpec{Subject: subject, Role: role})
		if err != nil {
			t.Fatalf("create token: %v", err)
		}
		f.tokens[subject] = secret
	}
	return f
}

// client returns a client for subject that goes through the proxy, with quick retries.
func (f *fixture) client(subject string) *client.Client {
	f.t.Helper()
	c, err := client.New(f.proxy.URL(), f.tokens[subject],
		client.WithRetry(client.Retry{MaxAttempts: 5, Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}))
	if err != nil {
		f.t.Fatalf("new client: %v", err)
	}
	return c
}

// step is what the proxy does with one request.
type step int

const (
	forward         step = iota // pass it on and answer
	forwardThenDrop             // pass it on, then hang up without answering
	answer429                   // 429 with Retry-After: 1, not passed on
	answer503Date               // 503 with Retry-After: an HTTP-date 2 s ahead, not passed on
	answer503Hour               // 503 with Retry-After: 3600, not passed on
	answer500                   // 500 problem, not passed on
)

// proxy forwards requests to the API, except where the script for a route says otherwise,
// and counts the requests of each route ("POST /v1/approvals").
type proxy struct {
	t        *testing.T
	srv      *httptest.Server
	upstream string
	client   *http.Client

	mu     sync.Mutex
	script map[string][]step
	counts map[string]int
}

func newProxy(t *testing.T, upstream string) *proxy {
	p := &proxy{t: t, upstream: upstream, client: &http.Client{}, script: map[string][]step{}, counts: map[string]int{}}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *proxy) URL() string { return p.srv.URL }

// plan makes the next requests of route take the steps, in order; later ones are forwarded.
func (p *proxy) plan(route string, steps ...step) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.script[route] = append(p.script[route], steps...)
}

// count returns how many requests of route the proxy has received.
func (p *proxy) count(route string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts[route]
}

func (p *proxy) serve(w http.ResponseWriter, r *http.Request) {
	route := r.Method + " " + r.URL.Path
	p.mu.Lock()
	p.counts[route]++
	s := forward
	if steps := p.script[route]; len(steps) > 0 {
		s, p.script[route] = steps[0], steps[1:]
	}
	p.mu.Unlock()

	switch s {
	case answer429:
		w.Header().Set("Retry-After", "1")
		http.Error(w, "slow down", http.StatusTooManyRequests)
		return
	case answer503Date:
		w.Header().Set("Retry-After", time.Now().Add(2*time.Second).UTC().Format(http.TimeFormat))
		http.Error(w, "down for a moment", http.StatusServiceUnavailable)
		return
	case answer503Hour:
		w.Header().Set("Retry-After", "3600")
		http.Error(w, "down for a while", http.StatusServiceUnavailable)
		return
	case answer500:
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, `{"type":"https://approvald.dev/problems/internal","title":"Internal error","status":500}`)
		return
	}

	body, err := io.ReadAll(r.Body)
	if err != nil {
		p.t.Errorf("proxy: read request: %v", err)
		return
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, p.upstream+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		p.t.Errorf("proxy: %v", err)
		return
	}
	out.Header = r.Header.Clone()
	resp, err := p.client.Do(out)
	if err != nil && r.Context().Err() != nil {
		return // the caller gave up (a long-poll cut short by its context)
	}
	if err != nil {
		p.t.Errorf("proxy: forward %s: %v", route, err)
		return
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil && r.Context().Err() != nil {
		return
	}
	if err != nil {
		p.t.Errorf("proxy: read answer: %v", err)
		return
	}
	if s == forwardThenDrop {
		// The server has acted and answered; the caller never hears of it.
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			p.t.Errorf("proxy: hijack: %v", err)
			return
		}
		conn.Close()
		return
	}
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(answer)
}

// deployRequest is a create's body.
func deployRequest(title string) client.CreateRequest {
	return client.CreateRequest{
		Action: "deploy", Title: title, Approvers: []string{"alice", "bob"},
		Context: []byte(`{"commit": "9f2c1e"}`),
	}
}

// mustCreate creates an approval directly (not through the proxy's script).
func (f *fixture) mustCreate(key, title string) *client.Approval {
	f.t.Helper()
	res, err := f.client("ci-bot").CreateApproval(context.Background(), key, deployRequest(title))
	if err != nil {
		f.t.Fatalf("create %s: %v", key, err)
	}
	return res.Approval
}

// approvalsWithKey lists the approvals of ci-bot's key, through the client's iterator.
func (f *fixture) approvalsWithKey(key string) []*client.Approval {
	f.t.Helper()
	var out []*client.Approval
	for a, err := range f.client("ops").List(context.Background(), client.ListOptions{Limit: 2}) {
		if err != nil {
			f.t.Fatalf("list: %v", err)
		}
		if a.OperationKey == key && a.Requester == "ci-bot" {
			out = append(out, a)
		}
	}
	return out
}

// tokenIssuer is the admin the tests make their tokens as.
var tokenIssuer = approval.Principal{Subject: "test-admin", Role: approval.RoleAdmin}
