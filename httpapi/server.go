// Package httpapi serves approvald's JSON API, the signed webhook intake, /healthz, /readyz
// and /metrics: the HTTP contract of docs/http-api.md. Every request gets a request id, one
// access log line and its metrics; every error is answered as RFC 9457 problem+json through
// one code-to-status table (problem.go).
//
// The package grows by resource: one file per resource holds its handlers, and the route table
// in this file lists every route the server answers.
package httpapi

import (
	"cmp"
	"context"
	"fmt"
	"github.com/approvald/approval/internal/httpstatus"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/approvald/approval"
	"github.com/approvald/approval/failpoint"
	"github.com/approvald/approval/webhook"
)

// Store is what the server reads and records without a rule: the reads behind the GET
// routes, the intake's record of a verified delivery, the counts behind /metrics, readiness,
// and the wake-ups of long-polls. Every change that a rule decides (create, vote, cancel,
// executions, inbox retry, token checks) goes through Config.Service. Both drivers'
// stores satisfy it.
type Store interface {
	Approval(ctx context.Context, id string) (*approval.Approval, error)
	Approvals(ctx context.Context, f approval.ApprovalFilter) ([]*approval.Approval, string, error)
	Events(ctx context.Context, approvalID string) ([]approval.Event, error)
	Execution(ctx context.Context, id string) (*approval.ExecutionRecord, error)
	Executions(ctx context.Context, f approval.ExecutionFilter) ([]*approval.ExecutionRecord, string, error)
	InboxEvent(ctx context.Context, id string) (*approval.InboxEvent, error)
	InboxEvents(ctx context.Context, f approval.InboxFilter) ([]*approval.InboxEvent, string, error)
	OutboxMessage(ctx context.Context, id string) (*approval.OutboxMessage, []approval.OutboxAttempt, error)
	OutboxMessages(ctx context.Context, f approval.OutboxFilter) ([]*approval.OutboxMessage, string, error)
	Tokens(ctx context.Context, f approval.TokenFilter) ([]*approval.Token, string, error)
	RecordInbox(ctx context.Context, e *approval.InboxEvent) (duplicate bool, err error)
	counter
	Ping(ctx context.Context) error
	HeartbeatUpdate(ctx context.Context) error
	approval.Notifier
}

// counter is what /metrics reads from the store.
type counter interface {
	ApprovalCounts(ctx context.Context) (map[approval.Status]int, error)
	InboxCounts(ctx context.Context) (map[approval.InboxStatus]int, error)
	ExecutionCounts(ctx context.Context) (counts map[approval.ExecutionStatus]int, stuck int, err error)
	Backlog(ctx context.Context) (approval.Backlog, error)
}

// Config configures a Server. Zero values pick the documented defaults.
type Config struct {
	Store Store
	// Service applies the rules; required. Its own settings (the clock, how long a create's
	// response replays, the memory of token uses) are the server's.
	Service          *approval.Service
	Logger           *slog.Logger         // JSON handler in production; nil = discard
	Registry         *prometheus.Registry // nil = a new one; served at /metrics
	Now              func() time.Time     // nil = approval.Now; the Service has its own
	IdempotencyLease time.Duration        // deadline of a create's work; 0 = 30s
	// RequestTimeout is the deadline of every other request's work, store calls included
	// (a long-poll adds its wait); past it the request is answered 503. 0 = 30s.
	RequestTimeout   time.Duration
	LongPollInterval time.Duration  // how often ?wait= re-reads the store; 0 = 1s
	Sources          []Source       // webhook sources, served at POST /v1/inbox/{name}
	Failpoints       *failpoint.Set // nil = none
	// Bodies is the budget of the bodies read before their sender is known, shared with
	// whatever else the process serves (the sign-in forms); nil = a budget of
	// DefaultMaxInflightBodyBytes for this Server alone.
	Bodies *BodyBudget
	// CountsInterval is how often RunCounts reads the counts of the statuses outside the
	// backlog for /metrics (so how stale they may be); 0 = DefaultCountsInterval.
	CountsInterval time.Duration
	// MetricsTokenRequired makes /metrics answer only a request with a usable token, of any
	// role (a scraper needs no rights); false leaves it open to whoever reaches the server.
	MetricsTokenRequired bool
	// SlackSigningSecret verifies the interactions Slack posts to /v1/slack/interactions
	// (docs/slack.md); empty: Slack is not configured, and the route answers 404.
	SlackSigningSecret string
}

// Source is one configured webhook sender (docs/http-api.md, "Webhook intake"). cmd/approvald
// builds the list from the configuration file, whose Validate checks the verifiers and that
// names are unique.
type Source struct {
	Name     string
	Verifier webhook.Verifier // scheme, secrets (several while rotating), tolerance
	MaxBody  int64            // largest accepted body in bytes; 0 = DefaultMaxWebhookBody
	// Handlers lists the built-in handlers (approval.TypeApprovalDecision, ...) whose events
	// this source may trigger. The inbox worker enforces it; the server only shows it to
	// operators (GET /v1/sources), since the intake stores every verified event whatever its
	// type.
	Handlers []string
}

// Defaults of Config.
const (
	DefaultIdempotencyLease = 30 * time.Second
	DefaultRequestTimeout   = 30 * time.Second
	DefaultLongPollInterval = time.Second
	DefaultCountsInterval   = time.Minute
	DefaultMaxWebhookBody   = 1 << 20
)

// Server is the HTTP API. It keeps no state that correctness depends on: any number of
// Servers may share one store.
type Server struct {
	store        Store
	svc          *approval.Service
	log          *slog.Logger
	now          func() time.Time
	lease        time.Duration
	timeout      time.Duration // every request's deadline but a create's (Config.RequestTimeout)
	pollInterval time.Duration
	sources      map[string]*Source // by name
	sourceOrder  []*Source          // as configured, for GET /v1/sources
	failpoints   *failpoint.Set
	bodies       *BodyBudget
	slackSecret  string

	mux     *http.ServeMux
	metrics *metrics
	counts  *storeCollector // the store's gauges on /metrics
	// longPolls counts the ?wait= requests parked in their wait (a gauge on /metrics).
	longPolls atomic.Int64
	ready     writeProbe // /readyz's write check, shared by the requests of a second
}

// New returns a Server for cfg. Its metrics are registered on cfg.Registry, so a registry
// serves one Server. A missing Store or Service, or two sources with one name, are wiring bugs
// (the configuration's Validate refuses duplicate names), and New panics on them as ServeMux
// does on conflicting patterns.
func New(cfg Config) *Server {
	if cfg.Store == nil || cfg.Service == nil {
		panic("httpapi: Config needs a Store and a Service")
	}
	s := &Server{
		store:        cfg.Store,
		svc:          cfg.Service,
		log:          cfg.Logger,
		now:          cfg.Now,
		lease:        cmp.Or(cfg.IdempotencyLease, DefaultIdempotencyLease),
		timeout:      cmp.Or(cfg.RequestTimeout, DefaultRequestTimeout),
		pollInterval: cmp.Or(cfg.LongPollInterval, DefaultLongPollInterval),
		sources:      make(map[string]*Source, len(cfg.Sources)),
		failpoints:   cfg.Failpoints,
		bodies:       cfg.Bodies,
		slackSecret:  cfg.SlackSigningSecret,
		mux:          http.NewServeMux(),
	}
	if s.bodies == nil {
		s.bodies = NewBodyBudget(DefaultMaxInflightBodyBytes)
	}
	for i := range cfg.Sources {
		src := cfg.Sources[i] // a copy: the caller's slice may change after New
		src.Handlers = slices.Clone(src.Handlers)
		src.Verifier.Secrets = slices.Clone(src.Verifier.Secrets)
		if _, dup := s.sources[src.Name]; dup {
			panic(fmt.Sprintf("httpapi: two webhook sources named %q", src.Name))
		}
		if src.MaxBody <= 0 {
			src.MaxBody = DefaultMaxWebhookBody
		}
		s.sources[src.Name] = &src
		s.sourceOrder = append(s.sourceOrder, &src)
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = approval.Now
	}
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	s.counts = newStoreCollector(s.store, s.log, cmp.Or(cfg.CountsInterval, DefaultCountsInterval))
	s.metrics = newMetrics(reg, s.counts, cfg.Sources, s.longPolls.Load)
	metricsHandler := promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(s.log.Handler(), slog.LevelError),
		ErrorHandling: promhttp.ContinueOnError,
	})
	if cfg.MetricsTokenRequired {
		metricsHandler = s.tokenRequired(metricsHandler)
	}
	s.register(s.routes(metricsHandler))
	return s
}

// RunCounts keeps the counts that /metrics reports for the statuses outside the backlog
// (approved, succeeded, processed...), which grow with the history and cost a read of every
// row: it reads them now, then every CountsInterval, until ctx ends, and returns nil then.
// A scrape reads only the backlog (Store.Backlog) and serves the rest from RunCounts' last
// read; without RunCounts it reads everything itself, as a test's server does.
func (s *Server) RunCounts(ctx context.Context) error {
	s.counts.run(ctx)
	return nil
}

// route is one entry of the route table.
type route struct {
	method  string
	path    string // a net/http ServeMux path pattern
	handler http.Handler
}

// routes is the route table: every route the server answers.
func (s *Server) routes(metricsHandler http.Handler) []route {
	return []route{
		{http.MethodPost, "/v1/approvals", http.HandlerFunc(s.handleCreateApproval)},
		{http.MethodGet, "/v1/approvals", http.HandlerFunc(s.handleListApprovals)},
		{http.MethodGet, "/v1/approvals/{id}", http.HandlerFunc(s.handleGetApproval)},
		{http.MethodPost, "/v1/approvals/{id}/approve", s.handleDecide(approval.VerdictApprove)},
		{http.MethodPost, "/v1/approvals/{id}/reject", s.handleDecide(approval.VerdictReject)},
		{http.MethodPost, "/v1/approvals/{id}/cancel", http.HandlerFunc(s.handleCancelApproval)},
		{http.MethodGet, "/v1/approvals/{id}/events", http.HandlerFunc(s.handleApprovalEvents)},
		{http.MethodPost, "/v1/approvals/{id}/execution", http.HandlerFunc(s.handleReportExecution)},

		{http.MethodPost, "/v1/inbox/{source}", http.HandlerFunc(s.handleIntake)},
		{http.MethodGet, "/v1/inbox", http.HandlerFunc(s.handleListInbox)},
		{http.MethodGet, "/v1/inbox/{id}", http.HandlerFunc(s.handleGetInboxEvent)},
		{http.MethodPost, "/v1/inbox/{id}/retry", http.HandlerFunc(s.handleRetryInboxEvent)},
		{http.MethodGet, "/v1/sources", http.HandlerFunc(s.handleListSources)},
		{http.MethodPost, "/v1/slack/interactions", http.HandlerFunc(s.handleSlackInteraction)},

		{http.MethodGet, "/v1/executions", http.HandlerFunc(s.handleListExecutions)},
		{http.MethodGet, "/v1/executions/{id}", http.HandlerFunc(s.handleGetExecution)},
		{http.MethodPost, "/v1/executions/{id}/retry", http.HandlerFunc(s.handleRetryExecution)},
		{http.MethodPost, "/v1/executions/{id}/resolve", http.HandlerFunc(s.handleResolveExecution)},
		{http.MethodPost, "/v1/executions/{id}/cancel", http.HandlerFunc(s.handleCancelExecution)},
		{http.MethodGet, "/v1/outbox", http.HandlerFunc(s.handleListOutbox)},
		{http.MethodGet, "/v1/outbox/{id}", http.HandlerFunc(s.handleGetOutbox)},
		{http.MethodPost, "/v1/outbox/{id}/retry", http.HandlerFunc(s.handleRetryOutbox)},

		{http.MethodPost, "/v1/tokens", http.HandlerFunc(s.handleCreateToken)},
		{http.MethodGet, "/v1/tokens", http.HandlerFunc(s.handleListTokens)},
		{http.MethodPost, "/v1/tokens/{id}/revoke", http.HandlerFunc(s.handleRevokeToken)},
		{http.MethodPost, "/v1/tokens/{id}/rotate", http.HandlerFunc(s.handleRotateToken)},
		{http.MethodPost, "/v1/sessions/revoke", http.HandlerFunc(s.handleRevokeSessions)},

		{http.MethodGet, "/v1/groups", http.HandlerFunc(s.handleListGroups)},
		{http.MethodGet, "/v1/policies", http.HandlerFunc(s.handleListPolicies)},

		{http.MethodGet, "/v1/openapi.json", http.HandlerFunc(s.handleOpenAPI)},
		{http.MethodGet, "/healthz", http.HandlerFunc(s.handleHealthz)},
		{http.MethodGet, "/readyz", http.HandlerFunc(s.handleReadyz)},
		{http.MethodGet, "/metrics", metricsHandler},
	}
}

// register installs the route table on the mux. Each path also gets a method-less pattern that
// answers 405 with Allow, and "/" answers 404, so that every answer, even to a request no route
// matches, is problem+json and is counted under a pattern rather than a raw path. Paths that
// differ only in the names of their wildcards (POST /v1/inbox/{source}, GET /v1/inbox/{id})
// match the same requests, so they share one 405 pattern, registered under the first spelling.
func (s *Server) register(routes []route) {
	allowed := make(map[string][]string) // by shape
	spelling := make(map[string]string)  // shape -> the first path of that shape
	var shapes []string
	for _, rt := range routes {
		s.mux.Handle(rt.method+" "+rt.path, rt.handler)
		shape := wildcard.ReplaceAllString(rt.path, "{}")
		if _, ok := allowed[shape]; !ok {
			shapes = append(shapes, shape)
			spelling[shape] = rt.path
		}
		allowed[shape] = append(allowed[shape], rt.method)
		if rt.method == http.MethodGet {
			allowed[shape] = append(allowed[shape], http.MethodHead) // ServeMux's GET matches HEAD
		}
	}
	for _, shape := range shapes {
		path, allow := spelling[shape], strings.Join(allowed[shape], ", ")
		s.mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			s.writeError(w, r, approval.Errorf(errMethod, "%s is not allowed on %s; allowed: %s", r.Method, path, allow))
		})
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, approval.Errorf(approval.ENOTFOUND, "no route for %s %s", r.Method, r.URL.Path))
	})
}

// wildcard matches a ServeMux path wildcard such as {id}.
var wildcard = regexp.MustCompile(`\{[^}]*\}`)

// ServeHTTP gives the request an id and its deadline, runs the matching route and records
// the access log line and the metrics. The deadline is RequestTimeout from now, plus the
// wait of a long-poll (?wait=); a create works within its own, the idempotency lease
// (docs/operations.md, "Deadlines"). The id is always the server's own, so that the audit trail's causes cannot
// be chosen by a client; the client's X-Request-Id, when it is sane, is kept beside it
// (clientRequestID) in the log and in the causes. The X-Request-Id answered is the server's.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now() // the wall clock, not s.now: durations are real even when tests move time
	info := &requestInfo{id: approval.NewID("req"), clientID: clientRequestID(r.Header.Values("X-Request-Id"))}
	info.log = s.log.With(slog.String("request_id", info.id))
	if info.clientID != "" {
		info.log = info.log.With(slog.String("client_request_id", info.clientID))
	}
	w.Header().Set("X-Request-Id", info.id)
	ctx, cancel := context.WithTimeout(context.WithValue(r.Context(), requestInfoKey{}, info), s.timeout+longPollWait(r))
	defer cancel()
	r = r.WithContext(ctx)
	sw := &httpstatus.Writer{ResponseWriter: w}

	defer func() {
		v := recover()
		if v != nil && v != http.ErrAbortHandler {
			info.log.Error("handler panicked", slog.Any("panic", v), slog.String("stack", string(debug.Stack())))
			if !sw.Written() {
				s.writeError(sw, r, approval.Errorf(approval.EINTERNAL, "internal error"))
				v = nil
			} else {
				// Part of the answer is out: abort the connection, so that the client cannot
				// take a truncated answer for a whole one.
				v = http.ErrAbortHandler
			}
		}
		s.observe(r, info, sw.Code(), time.Since(start))
		if v != nil {
			panic(v)
		}
	}()
	if err := checkURL(r.URL); err != nil {
		s.writeError(sw, r, err)
		return
	}
	s.mux.ServeHTTP(sw, r)
}

// detached returns a context for work that must run to its end even if r's client goes away
// (cancelling r's context), but no longer than limit nor past r's deadline.
func detached(r *http.Request, limit time.Duration) (context.Context, context.CancelFunc) {
	deadline := time.Now().Add(limit)
	if d, ok := r.Context().Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	return context.WithDeadline(context.WithoutCancel(r.Context()), deadline)
}

// longPollWait is how long the request r may wait for a change before its work starts: the
// ?wait= of a GET, 0 for any other request (a malformed wait is refused by its route).
func longPollWait(r *http.Request) time.Duration {
	if r.Method != http.MethodGet && r.Method != http.MethodHead || !strings.Contains(r.URL.RawQuery, "wait") {
		return 0
	}
	wait, _, err := parseWait(r.URL.Query())
	if err != nil {
		return 0
	}
	return wait
}

// checkURL refuses a request whose path or query holds a NUL character or bytes that are not
// UTF-8. Ids, names and filters are text: PostgreSQL refuses to compare such bytes with its
// text (a 400 from deep in the store) while SQLite finds nothing (a 404, or an empty list),
// so they are refused here, before any route, alike for every store.
func checkURL(u *url.URL) error {
	parts := []string{u.Path}
	for key, values := range u.Query() {
		parts = append(append(parts, key), values...)
	}
	for _, p := range parts {
		if !utf8.ValidString(p) || strings.IndexByte(p, 0) >= 0 {
			return approval.Errorf(approval.EINVALID, "the URL's path or query holds a NUL character or bytes that are not UTF-8")
		}
	}
	return nil
}

// observe writes the access log line and the request metrics. The route is the path of the
// mux pattern that matched (set on r by ServeMux), never the raw path, so label values stay
// bounded; the method is a label of its own, so a route's 405s count under the same route as
// its answers. A request no route matches counts as "unmatched".
func (s *Server) observe(r *http.Request, info *requestInfo, status int, d time.Duration) {
	route := routeLabel(r.Pattern)

	method := metricMethod(r.Method)
	s.metrics.observeRequest(route, method, status, d)
	info.log.LogAttrs(r.Context(), slog.LevelInfo, "request",
		slog.String("method", r.Method),
		slog.String("route", route),
		slog.String("path", r.URL.Path),
		slog.Int("status", status),
		slog.Duration("duration", d),
		slog.String("subject", info.subject),
	)
}

// routeLabel is the route label of a mux pattern: its path, without the method.
func routeLabel(pattern string) string {
	if _, path, ok := strings.Cut(pattern, " "); ok {
		pattern = path
	}
	if pattern == "" || pattern == "/" {
		return "unmatched"
	}
	return pattern
}

// knownMethods are the methods counted under their own name; others count as "other" so that
// a client cannot grow the metrics without bound.
var knownMethods = []string{
	http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
	http.MethodDelete, http.MethodOptions,
}

func metricMethod(m string) string {
	if slices.Contains(knownMethods, m) {
		return m
	}
	return "other"
}

// requestInfo is what the server learns about a request as it is handled. It travels in the
// request's context so that handlers log with the request id and the access line can name the
// authenticated subject.
type requestInfo struct {
	id       string // the server's
	clientID string // the client's X-Request-Id, if it sent a sane one
	subject  string
	log      *slog.Logger
	// check is the request's token check when it rides with the request's first round trip
	// (authenticateFirstTrip); settle runs it before any answer if no store call did.
	check *approval.TokenCheck
}

type requestInfoKey struct{}

// info returns the request's requestInfo, set by ServeHTTP. A handler reached some other way
// gets a fresh one rather than a nil.
func (s *Server) info(r *http.Request) *requestInfo {
	if info, ok := r.Context().Value(requestInfoKey{}).(*requestInfo); ok {
		return info
	}
	return &requestInfo{id: approval.NewID("req"), log: s.log}
}

// cause is the audit cause of a change made by the request r: the server's request id, with
// the client's X-Request-Id beside it, through the API (approval.SourceAPI).
func (s *Server) cause(r *http.Request) approval.Cause {
	info := s.info(r)
	c := approval.HTTPCause(info.id)
	c.ClientRequestID = info.clientID
	c.Source = approval.SourceAPI
	return c
}

// maxRequestIDLength bounds a client's X-Request-Id.
const maxRequestIDLength = 128

// clientRequestID returns the client's X-Request-Id when it is one header of 1 to 128
// visible ASCII characters (so it is safe in logs and in the audit trail), or "". A client
// id is never refused: it is the client's label and the request does not depend on it.
func clientRequestID(values []string) string {
	if len(values) != 1 {
		return ""
	}
	h := values[0]
	if h == "" || len(h) > maxRequestIDLength {
		return ""
	}
	for i := 0; i < len(h); i++ {
		if h[i] < 0x21 || h[i] > 0x7e {
			return ""
		}
	}
	return h
}
