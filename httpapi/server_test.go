package httpapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/approvald/approval"
	"github.com/approvald/approval/httpapi"
	"github.com/approvald/approval/internal/testdb"
)

// TestHealth: /healthz answers while the process runs; /readyz follows the database.
func TestHealth(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		if resp := f.do("GET", "/healthz", "", ""); resp.status != http.StatusOK {
			t.Fatalf("/healthz: got %d", resp.status)
		}
		if resp := f.do("GET", "/readyz", "", ""); resp.status != http.StatusOK {
			t.Fatalf("/readyz: got %d %s", resp.status, resp.body)
		}
		if err := f.store.Close(); err != nil {
			t.Fatalf("close store: %v", err)
		}
		f.do("GET", "/readyz", "", "").problem(t, http.StatusServiceUnavailable)
		if resp := f.do("GET", "/healthz", "", ""); resp.status != http.StatusOK {
			t.Fatalf("/healthz with the database gone: got %d, want 200", resp.status)
		}
	})
}

// TestMetrics: request counts are labelled with the route pattern, never the raw path, and the
// approvals gauge and idempotency counters are exported.
func TestMetrics(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		ci := f.token("ci-bot", approval.RoleRequester)
		body := createBody("Metered", "alice")
		a := f.mustCreate(ci, "metrics-1", body)
		f.create(ci, "metrics-1", body)
		f.create(ci, "metrics-1", createBody("Other", "alice"))
		f.do("GET", "/v1/approvals/"+a.ID, ci, "")
		f.do("GET", "/no/such/path", ci, "")
		f.do("DELETE", "/v1/approvals", ci, "")
		f.do("GET", "/healthz", "", "")

		resp := f.do("GET", "/metrics", "", "")
		if resp.status != http.StatusOK {
			t.Fatalf("/metrics: got %d", resp.status)
		}
		text := string(resp.body)
		for _, want := range []string{
			// Every route is labelled by its path pattern, whatever answered it (the route or
			// its 405), the method by a label of its own.
			`approvald_http_requests_total{method="POST",route="/v1/approvals",status="201"} 2`,
			`approvald_http_requests_total{method="POST",route="/v1/approvals",status="422"} 1`,
			`approvald_http_requests_total{method="DELETE",route="/v1/approvals",status="405"} 1`,
			`approvald_http_requests_total{method="GET",route="/v1/approvals/{id}",status="200"} 1`,
			`approvald_http_requests_total{method="GET",route="/healthz",status="200"} 1`,
			`approvald_http_requests_total{method="GET",route="unmatched",status="404"} 1`,
			`approvald_http_request_duration_seconds_count{method="POST",route="/v1/approvals"} 3`,
			`approvald_idempotent_replays_total 1`,
			`approvald_idempotency_conflicts_total{kind="mismatch"} 1`,
			`approvald_idempotency_conflicts_total{kind="in_flight"} 0`,
			`approvald_approvals{status="pending"} 1`,
			`approvald_approvals{status="approved"} 0`,
		} {
			if !strings.Contains(text, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
		if strings.Contains(text, a.ID) || strings.Contains(text, "/no/such/path") {
			t.Errorf("/metrics has a raw path in a label")
		}
	})
}

// TestMetrics_TokenRequired: with MetricsTokenRequired, /metrics answers a usable token of
// any role and refuses with 401 a request without one, or with a revoked or unknown one,
// reading nothing; without it, /metrics stays open.
func TestMetrics_TokenRequired(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind, func(c *httpapi.Config) { c.MetricsTokenRequired = true })
		scraper := f.token("prometheus", approval.RoleApprover)
		admin := f.token("root", approval.RoleAdmin)
		revoked := f.token("old-scraper", approval.RoleApprover)
		var list struct {
			Tokens []approval.Token `json:"tokens"`
		}
		if resp := f.do("GET", "/v1/tokens", admin, ""); resp.status != http.StatusOK || json.Unmarshal(resp.body, &list) != nil {
			t.Fatalf("list tokens: %d", resp.status)
		}
		for _, tok := range list.Tokens {
			if tok.Subject == "old-scraper" {
				f.do("POST", "/v1/tokens/"+tok.ID+"/revoke", admin, "")
			}
		}
		for name, token := range map[string]string{"no token": "", "a revoked token": revoked, "an unknown token": "apv_unknown"} {
			resp := f.do("GET", "/metrics", token, "")
			resp.problem(t, http.StatusUnauthorized)
			if strings.Contains(string(resp.body), "approvald_") {
				t.Errorf("%s: the 401 carries metrics", name)
			}
		}
		if resp := f.do("GET", "/metrics", scraper, ""); resp.status != http.StatusOK || !strings.Contains(string(resp.body), "approvald_http_requests_total") {
			t.Errorf("/metrics with an approver's token: %d, want 200 with the metrics", resp.status)
		}

		open := setup(t, kind)
		if resp := open.do("GET", "/metrics", "", ""); resp.status != http.StatusOK {
			t.Errorf("/metrics without the option: %d, want 200", resp.status)
		}
	})
}

// TestRequestIDAndLogs: every answer carries the server's own request id, whatever the
// client sent; the client's sane X-Request-Id is logged beside it, others are dropped; and
// each request writes one JSON access line naming both.
func TestRequestIDAndLogs(t *testing.T) {
	t.Parallel()
	f := setup(t, testdb.SQLite)
	ci := f.token("ci-bot", approval.RoleRequester)

	resp := f.do("GET", "/v1/approvals", ci, "", "X-Request-Id", "trace-42")
	server := resp.header.Get("X-Request-Id")
	if !strings.HasPrefix(server, "req_") {
		t.Fatalf("answered X-Request-Id: got %q, want the server's req_ id", server)
	}
	for _, bad := range []string{"", "has space", "tab\there", strings.Repeat("x", 129)} {
		resp := f.do("GET", "/healthz", "", "", "X-Request-Id", bad)
		if got := resp.header.Get("X-Request-Id"); !strings.HasPrefix(got, "req_") {
			t.Fatalf("X-Request-Id %q: got %q, want a generated id", bad, got)
		}
	}
	p := f.do("GET", "/v1/approvals/x", "", "", "X-Request-Id", "trace-43").problem(t, http.StatusUnauthorized)
	if !strings.HasPrefix(p.RequestID, "req_") || p.RequestID == "trace-43" {
		t.Fatalf("problem request_id: got %q, want the server's", p.RequestID)
	}

	var found, dropped bool
	for _, line := range f.logs.lines(t) {
		if line["msg"] != "request" {
			continue
		}
		if line["request_id"] == server {
			found = true
			if line["client_request_id"] != "trace-42" || line["route"] != "/v1/approvals" || line["method"] != "GET" ||
				line["status"] != float64(200) || line["subject"] != "ci-bot" || line["duration"] == nil {
				t.Fatalf("access line: %v", line)
			}
		}
		if id, ok := line["client_request_id"].(string); ok && (strings.Contains(id, " ") || len(id) > 128) {
			t.Fatalf("an insane client id was logged: %v", line)
		}
		if line["route"] == "/healthz" {
			dropped = true
		}
	}
	if !found || !dropped {
		t.Fatalf("access lines missing: request %s %v, healthz %v", server, found, dropped)
	}
}

// TestUnknownRoutes: unknown paths and methods are answered as problems, with Allow on 405.
func TestUnknownRoutes(t *testing.T) {
	t.Parallel()
	f := setup(t, testdb.SQLite)
	f.do("GET", "/v2/nothing", "", "").problem(t, http.StatusNotFound)
	resp := f.do("DELETE", "/v1/approvals/apr_x", "", "")
	resp.problem(t, http.StatusMethodNotAllowed)
	if allow := resp.header.Get("Allow"); allow != "GET, HEAD" {
		t.Fatalf("Allow: got %q, want GET, HEAD", allow)
	}
	if allow := f.do("GET", "/v1/approvals/apr_x/approve", "", "").header.Get("Allow"); allow != "POST" {
		t.Fatalf("Allow: got %q, want POST", allow)
	}
	// POST /v1/inbox/{source} and GET /v1/inbox/{id} are one path with two wildcard names.
	if allow := f.do("PUT", "/v1/inbox/x", "", "").header.Get("Allow"); allow != "POST, GET, HEAD" {
		t.Fatalf("Allow: got %q, want POST, GET, HEAD", allow)
	}
}
