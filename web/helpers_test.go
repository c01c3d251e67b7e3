package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/httpapi"
	"github.com/approvald/approval/internal/mailtest"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/notify"
	"github.com/approvald/approval/web"
	"github.com/approvald/approval/worker"
)

// testKey is the session key of the test servers.
var testKey = []byte("0123456789abcdef0123456789abcdef-test")

// fixture is the binary's handler (the API and the pages, as serve wires them) on a real
// loopback server over a fresh store.
type fixture struct {
	tb      testing.TB
	store   approval.Store
	routing approval.Routing // the rules' routing of notifications
	srv     *httptest.Server
	ui      *web.Server
}

// setup starts the pages and the API over a new store of the given kind. opts adjust the
// pages' Config; they get the server's base URL.
func setup(tb testing.TB, kind string, opts ...func(cfg *web.Config, base string)) *fixture {
	tb.Helper()
	return setupRouted(tb, kind, approval.Routing{}, opts...)
}

// setupRouted is setup with the rules' routing of notifications.
func setupRouted(tb testing.TB, kind string, routing approval.Routing, opts ...func(cfg *web.Config, base string)) *fixture {
	tb.Helper()
	return setupStore(tb, testdb.Open(tb, kind, nil), routing, opts...)
}

// setupStore is setupRouted over a store the caller opened: a second server over the
// database of another fixture, say, as a replica or a restart with another configuration.
// A Service an option sets without targets or routing gets the fixture's.
func setupStore(tb testing.TB, store approval.Store, routing approval.Routing, opts ...func(cfg *web.Config, base string)) *fixture {
	tb.Helper()
	f := &fixture{tb: tb, store: store, routing: routing}
	f.srv = httptest.NewUnstartedServer(nil)
	base := "http://" + f.srv.Listener.Addr().String()
	cfg := web.Config{Store: f.store, SessionKey: testKey, Logger: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(&cfg, base)
	}
	apiRules := f.rules(f.store)
	if cfg.Service == nil {
		cfg.Service = f.rules(f.store)
		cfg.Service.Now = cfg.Now
	} else if cfg.Service.Targeted == nil {
		cfg.Service.Targeted, cfg.Service.Routing = payoutTargeted, f.routing
	}
	if cfg.Service.Policies != nil {
		apiRules = cfg.Service // the API creates under the same policies
	}
	api := httpapi.New(httpapi.Config{Store: f.store, Service: apiRules})
	ui, err := web.New(cfg)
	if err != nil {
		tb.Fatalf("web.New: %v", err)
	}
	f.ui = ui
	f.srv.Config.Handler = ui.Handler(api)
	f.srv.Start()
	tb.Cleanup(f.srv.Close)
	return f
}

// token stores a new API token and returns its secret.
func (f *fixture) token(subject string, role approval.Role) string {
	f.tb.Helper()
	secret, _, err := (&approval.Service{Store: f.store}).CreateToken(context.Background(), tokenIssuer, approval.TokenSpec{Subject: subject, Role: role})
	if err != nil {
		f.tb.Fatalf("create token: %v", err)
	}
	return secret
}

// api sends one API request with a bearer token and decodes the JSON answer into out.
func (f *fixture) api(method, path, token, body string, out any) int {
	f.tb.Helper()
	req, _ := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json") // the API refuses other bodies (415)
	}
	if method == http.MethodPost && strings.HasPrefix(path, "/v1/approvals") && !strings.Contains(path[len("/v1/approvals"):], "/") {
		req.Header.Set("Idempotency-Key", approval.NewID("key"))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.tb.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			f.tb.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
	}
	return resp.StatusCode
}

// create makes an approval through the API as a requester and returns it.
func (f *fixture) create(title string, approvers []string, required int, ctx string) *approval.Approval {
	f.tb.Helper()
	req := f.token("ci-bot", approval.RoleRequester)
	if ctx == "" {
		ctx = "{}"
	}
	body, _ := json.Marshal(map[string]any{
		"action": "deploy", "title": title, "approvers": approvers,
		"required_approvals": required, "context": json.RawMessage(ctx),
	})
	var a approval.Approval
	if code := f.api(http.MethodPost, "/v1/approvals", req, string(body), &a); code != http.StatusCreated {
		f.tb.Fatalf("create: status %d", code)
	}
	return &a
}

// needsReview makes an execution in needs_review: an approval of the targeted action
// "payout", approved, whose first attempt ends uncertain, as the runner records a call that
// may have reached a target that neither honours keys nor can be asked.
func (f *fixture) needsReview() *approval.ExecutionRecord {
	f.tb.Helper()
	ctx := context.Background()
	approver := f.token("ana", approval.RoleApprover)
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/v1/approvals", strings.NewReader(
		`{"action": "payout", "title": "Pay out invoice 88", "approvers": ["ana"], "context": {"invoice": 88}}`))
	req.Header.Set("Authorization", "Bearer "+f.token("billing", approval.RoleRequester))
	req.Header.Set("Idempotency-Key", approval.NewID("op"))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.tb.Fatal(err)
	}
	var a approval.Approval
	json.NewDecoder(resp.Body).Decode(&a)
	resp.Body.Close()
	if code := f.api(http.MethodPost, "/v1/approvals/"+a.ID+"/approve", approver, "", nil); code != http.StatusOK {
		f.tb.Fatalf("approve: %d", code)
	}
	svc := f.rules(f.store)
	claims, err := svc.ClaimExecutions(ctx, time.Minute, 10)
	if err != nil || len(claims) != 1 {
		f.tb.Fatalf("claim executions: %d claimed, %v; want 1", len(claims), err)
	}
	if _, err := svc.FinishAttempt(ctx, claims[0].Record.ID, claims[0].Attempt, approval.AttemptOutcome{
		Status: approval.ExecutionNeedsReview, Error: "the call timed out after the request was sent",
		Reason: "the target neither honours the Idempotency-Key nor has a lookup URL",
	}); err != nil {
		f.tb.Fatalf("finish attempt: %v", err)
	}
	list, _, err := f.store.Executions(ctx, approval.ExecutionFilter{Status: approval.ExecutionNeedsReview})
	if err != nil || len(list) != 1 {
		f.tb.Fatalf("executions in needs_review: %d, %v; want 1", len(list), err)
	}
	return list[0]
}

// failedExecutions makes n executions that failed: approvals of the targeted action
// "payout", approved, whose first attempt fails for good.
func (f *fixture) failedExecutions(n int) {
	f.tb.Helper()
	ctx := context.Background()
	ana, billing := f.token("ana", approval.RoleApprover), f.token("billing", approval.RoleRequester)
	for i := range n {
		var a approval.Approval
		req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/v1/approvals", strings.NewReader(
			fmt.Sprintf(`{"action": "payout", "title": "Pay out invoice %d to the supplier", "approvers": ["ana"]}`, 100+i)))
		req.Header.Set("Authorization", "Bearer "+billing)
		req.Header.Set("Idempotency-Key", approval.NewID("op"))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			f.tb.Fatal(err)
		}
		json.NewDecoder(resp.Body).Decode(&a)
		resp.Body.Close()
		if code := f.api(http.MethodPost, "/v1/approvals/"+a.ID+"/approve", ana, "", nil); code != http.StatusOK {
			f.tb.Fatalf("approve: %d", code)
		}
	}
	svc := f.rules(f.store)
	claims, err := svc.ClaimExecutions(ctx, time.Minute, n)
	if err != nil || len(claims) != n {
		f.tb.Fatalf("claim executions: %d claimed, %v; want %d", len(claims), err, n)
	}
	for _, c := range claims {
		if _, err := svc.FinishAttempt(ctx, c.Record.ID, c.Attempt, approval.AttemptOutcome{
			Status: approval.ExecutionFailed, Error: "422 from target: the supplier's account is closed", Reason: "the target refused the call",
		}); err != nil {
			f.tb.Fatalf("finish attempt: %v", err)
		}
	}
}

// read returns an approval as the store has it.
func (f *fixture) read(id string) *approval.Approval {
	f.tb.Helper()
	a, err := f.store.Approval(context.Background(), id)
	if err != nil {
		f.tb.Fatalf("read approval: %v", err)
	}
	return a
}

// browser is an http.Client with a cookie jar that does not follow redirects, so that each
// answer can be checked.
type browser struct {
	f      *fixture
	client *http.Client
}

func (f *fixture) browser() *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{f: f, client: &http.Client{
		Jar:           jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// page is an answer read in full.
type page struct {
	status int
	header http.Header
	body   string
}

func (b *browser) do(method, path string, form url.Values, headers ...string) page {
	b.f.tb.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	u := path
	if !strings.HasPrefix(u, "http") {
		u = b.f.srv.URL + path
	}
	req, _ := http.NewRequest(method, u, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.Header.Set("Accept", "text/html")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := b.client.Do(req)
	if err != nil {
		b.f.tb.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return page{status: resp.StatusCode, header: resp.Header, body: string(raw)}
}

func (b *browser) get(path string) page { return b.do(http.MethodGet, path, nil) }

// signIn signs in with an API token through the sign-in form.
func (b *browser) signIn(token string) {
	b.f.tb.Helper()
	p := b.get("/ui/signin")
	resp := b.do(http.MethodPost, "/ui/signin/token", url.Values{"csrf": {field(b.f.tb, p.body, "csrf")}, "token": {token}, "next": {"/ui/"}})
	if resp.status != http.StatusSeeOther {
		b.f.tb.Fatalf("sign in: status %d, want 303: %s", resp.status, resp.body)
	}
}

var inputValue = regexp.MustCompile(`<input type="hidden" name="([a-z]+)" value="([^"]*)">`)

// field returns the value of the first hidden input named name in an HTML page.
func field(tb testing.TB, body, name string) string {
	tb.Helper()
	for _, m := range inputValue.FindAllStringSubmatch(body, -1) {
		if m[1] == name {
			return m[2]
		}
	}
	tb.Fatalf("no hidden input %q in the page", name)
	return ""
}

// decisionToken opens an approval's page and returns its form's decision token.
func (b *browser) decisionToken(id string) string {
	b.f.tb.Helper()
	p := b.get("/ui/approvals/" + id)
	if p.status != http.StatusOK {
		b.f.tb.Fatalf("approval page: status %d", p.status)
	}
	return field(b.f.tb, p.body, "token")
}

// textOf strips tags and collapses whitespace, to compare what a page says.
func textOf(html string) string {
	t := regexp.MustCompile(`<[^>]*>`).ReplaceAllString(html, "")
	return strings.Join(strings.Fields(t), " ")
}

func must(tb testing.TB, ok bool, format string, args ...any) {
	tb.Helper()
	if !ok {
		tb.Fatalf(format, args...)
	}
}

// rules returns the rules the fixture's server runs, over store: payout is the one action
// with a downstream target, and notifications go by the fixture's routing.
func (f *fixture) rules(store approval.Store) *approval.Service {
	return &approval.Service{Store: store, Targeted: payoutTargeted, Routing: f.routing}
}

// payoutTargeted reports that payout, and only payout, has a downstream target.
func payoutTargeted(action string) bool { return action == "payout" }

// tokenIssuer is the admin the tests make their tokens as.
var tokenIssuer = approval.Principal{Subject: "test-admin", Role: approval.RoleAdmin}

// mailOutbox returns an outbox of f's store that mails through a real SMTP server started
// for the test, with links to f's pages, and that server.
func (f *fixture) mailOutbox(t *testing.T) (*worker.Outbox, *mailtest.Server) {
	t.Helper()
	smtp := mailtest.Start(t)
	svc := f.rules(f.store)
	return &worker.Outbox{Store: f.store, Mailbox: svc, Senders: map[string]worker.Sender{
		approval.ChannelEmail: &notify.Mail{
			Host: "127.0.0.1", Port: smtp.Port, StartTLS: notify.StartTLSNone,
			From: "approvald <approvals@example.com>", PublicURL: f.srv.URL, Address: svc.EmailAddress,
		},
	}}, smtp
}
