// Package web serves the approver's pages under /ui/: the approvals waiting for the viewer,
// one approval with its votes, execution and audit trail, the Approve and Reject forms, the
// operators' page, and sign-in (an API token, or OpenID Connect). Pages are rendered on the
// server with html/template; the one stylesheet and the one script are embedded in the binary.
//
// The pages hold no rule of their own: every change goes through approval.Service and every
// permission through approval.Principal, exactly as for the JSON API. docs/web.md describes
// the pages, the session and the security headers.
package web

import (
	"cmp"
	"context"
	"crypto/rand"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/approvald/approval/internal/httpstatus"
	"html/template"
	"io/fs"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/approvald/approval"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Prefix is the path under which the pages are served.
const Prefix = "/ui/"

// Defaults of Config.
const (
	DefaultSessionTTL       = 12 * time.Hour
	DefaultLongPollInterval = 500 * time.Millisecond
	DefaultLongPollWait     = 25 * time.Second
	DefaultRequestTimeout   = 30 * time.Second
	DefaultStuckAfter       = 5 * time.Minute
	// MinSessionKeyLength is the shortest session key accepted, in bytes.
	MinSessionKeyLength = 32
)

// Config configures a Server. Zero values pick the documented defaults.
type Config struct {
	Store  approval.Store
	Logger *slog.Logger     // nil = discard
	Now    func() time.Time // nil = approval.Now

	// SessionKey signs session cookies and form tokens (HMAC-SHA256). Replicas must share
	// it; when it is nil a random key is made for this process and a warning logged, so
	// sessions do not survive a restart or cross replicas.
	SessionKey []byte
	// SessionTTL is how long a session lasts after sign-in; 0 = DefaultSessionTTL.
	SessionTTL time.Duration
	// PublicURL is the address users reach the service at. When it is https, cookies are
	// Secure even if TLS ends in front of approvald.
	PublicURL string
	// Service applies the rules; New refuses a Config without one. A process that also
	// serves the API passes the API's, so both decide alike and share one memory of token
	// uses.
	Service *approval.Service
	// OIDC enables sign-in with an OpenID Connect provider; nil leaves only the token form.
	OIDC *OIDCConfig
	// Links enables sign-in links by e-mail (docs/web.md, "Sign-in links"); nil offers none.
	Links *LinksConfig
	// Bodies is the budget that sign-in forms reserve their bytes from while they are read,
	// the process's budget of unauthenticated bodies; nil = none beyond the forms' limit.
	Bodies BodyBudget
	// Targets are the URLs of the actions' downstream targets, by action, so that an
	// approval's page says what approving does; only the scheme, host and path are shown.
	// An action without one is run by its requester (docs/http-api.md, "Execution targets").
	Targets map[string]string

	LongPollInterval time.Duration // how often the page's long-poll re-reads; 0 = 500ms
	LongPollWait     time.Duration // how long one long-poll waits; 0 = 25s
	// RequestTimeout is the deadline of a page request's work, store calls included (the
	// page's long-poll adds LongPollWait); past it the request is answered 503. 0 = 30s.
	RequestTimeout time.Duration
	// StuckAfter is how long past its due time a pending inbox event is shown as stuck on
	// the operators' page; 0 = DefaultStuckAfter.
	StuckAfter time.Duration
}

// Server serves the pages. It keeps no state that correctness depends on: a session is a
// row of the store, named by a signed cookie; the in-process memory of decision forms already
// submitted only saves a second request the rules would anyway make harmless, and the count
// of failed sign-ins per address only slows guessing.
type Server struct {
	store      approval.Store
	svc        *approval.Service
	log        *slog.Logger
	now        func() time.Time
	key        []byte
	ttl        time.Duration
	secure     bool
	oidc       *oidcClient
	links      *LinksConfig
	bodies     BodyBudget
	pollEvery  time.Duration
	pollWait   time.Duration
	timeout    time.Duration // a request's deadline (Config.RequestTimeout)
	stuckAfter time.Duration
	targets    map[string]string

	pages  map[string]*template.Template
	static http.Handler
	mux    *http.ServeMux
	cop    *http.CrossOriginProtection
	forms  *submitted
	// linkAddrs counts the sign-in links asked for per client address.
	linkAddrs *addrLimiter
	// failures counts the failed token sign-ins per client address.
	failures *failureLimiter
}

// New returns a Server for cfg, or an error when cfg cannot work (a short session key, a bad
// public URL or OIDC settings).
func New(cfg Config) (*Server, error) {
	s := &Server{
		store:      cfg.Store,
		log:        cfg.Logger,
		now:        cfg.Now,
		ttl:        cmp.Or(cfg.SessionTTL, DefaultSessionTTL),
		pollEvery:  cmp.Or(cfg.LongPollInterval, DefaultLongPollInterval),
		pollWait:   cmp.Or(cfg.LongPollWait, DefaultLongPollWait),
		timeout:    cmp.Or(cfg.RequestTimeout, DefaultRequestTimeout),
		stuckAfter: cmp.Or(cfg.StuckAfter, DefaultStuckAfter),
		links:      cfg.Links,
		targets:    cfg.Targets,
		bodies:     cfg.Bodies,
		mux:        http.NewServeMux(),
		forms:      newSubmitted(),
		failures:   newFailureLimiter(SigninFailures, SigninFailureWindow, maxFailingAddresses),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if cfg.Links != nil {
		if cfg.Links.TrackedAddresses < 0 {
			return nil, fmt.Errorf("links: tracked addresses %d, want 0 (the default) or more", cfg.Links.TrackedAddresses)
		}
		s.linkAddrs = newAddrLimiter(LinksPerAddress, LinksAddressWindow, cmp.Or(cfg.Links.TrackedAddresses, DefaultTrackedAddresses))
	}
	if s.now == nil {
		s.now = approval.Now
	}
	s.svc = cfg.Service
	if s.svc == nil {
		return nil, errors.New("web: no service (Config.Service) to apply the rules with")
	}
	switch {
	case cfg.SessionKey == nil:
		s.key = make([]byte, MinSessionKeyLength)
		rand.Read(s.key)
		s.log.Warn("web.session_key is not set: using a random key for this process; sessions end at restart and do not cross replicas")
	case len(cfg.SessionKey) < MinSessionKeyLength:
		return nil, fmt.Errorf("session key: %d bytes, want at least %d", len(cfg.SessionKey), MinSessionKeyLength)
	default:
		s.key = append([]byte(nil), cfg.SessionKey...)
	}
	if cfg.PublicURL != "" {
		u, err := url.Parse(cfg.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("public url %q: must be an http or https URL with a host", cfg.PublicURL)
		}
		s.secure = u.Scheme == "https"
	}
	if cfg.OIDC != nil {
		c, err := newOIDCClient(*cfg.OIDC)
		if err != nil {
			return nil, err
		}
		s.oidc = c
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	s.pages = pages
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	s.static = http.StripPrefix(Prefix+"static/", http.FileServerFS(sub))

	s.cop = http.NewCrossOriginProtection()
	s.cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, approval.Errorf(approval.EFORBIDDEN, "cross-origin form posts are refused"))
	}))
	s.routes()
	return s, nil
}

// Handler returns the handler the binary serves: the pages under /ui/, the root URL and
// /favicon.ico, and api for everything else.
func (s *Server) Handler(api http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(Prefix, s)
	mux.Handle("GET /ui", s)
	mux.Handle("GET /{$}", s)
	mux.Handle("GET /favicon.ico", s)
	mux.Handle("/", api)
	return mux
}

// ApprovalPath is the path of an approval's page, for links in notifications.
func ApprovalPath(id string) string { return Prefix + "approvals/" + url.PathEscape(id) }

// SigninLinkPath is the page an e-mailed sign-in link opens: it asks to confirm, and only
// the confirming POST uses the token; once signed in, the browser goes to next, when it is
// a page under Prefix, and to the default page otherwise.
func SigninLinkPath(token, next string) string {
	q := url.Values{"t": {token}}
	if next = safeNext(next); next != Prefix {
		q.Set("next", next)
	}
	return Prefix + "signin/link?" + q.Encode()
}

func (s *Server) routes() {
	m := s.mux
	m.HandleFunc("GET /ui/{$}", s.authed(s.handleWaiting))
	m.HandleFunc("GET /ui/approvals", s.authed(s.handleApprovals))
	m.HandleFunc("GET /ui/approvals/{id}", s.authed(s.handleApproval))
	m.HandleFunc("GET /ui/approvals/{id}/answer", s.authed(s.handleAnswer))
	m.HandleFunc("GET /ui/approvals/{id}/wait", s.authed(s.handleWait))
	m.HandleFunc("POST /ui/approvals/{id}/approve", s.handleDecide(approval.VerdictApprove))
	m.HandleFunc("POST /ui/approvals/{id}/reject", s.handleDecide(approval.VerdictReject))
	m.HandleFunc("GET /ui/operations", s.authed(s.handleOperations))
	m.HandleFunc("POST /ui/executions/{id}/retry", s.authed(s.handleRetryExecution))
	m.HandleFunc("POST /ui/executions/{id}/resolve", s.authed(s.handleResolveExecution))
	m.HandleFunc("POST /ui/inbox/{id}/retry", s.authed(s.handleRetryInbox))

	m.HandleFunc("GET /ui/signin", s.handleSignInPage)
	m.HandleFunc("POST /ui/signin/token", s.handleSignInToken)
	m.HandleFunc("POST /ui/signin/email", s.handleSignInEmail)
	m.HandleFunc("GET /ui/signin/link", s.handleSignInLinkPage)
	m.HandleFunc("POST /ui/signin/link", s.handleSignInLink)
	m.HandleFunc("GET /ui/signin/oidc", s.handleOIDCStart)
	m.HandleFunc("GET /ui/signin/oidc/callback", s.handleOIDCCallback)
	m.HandleFunc("POST /ui/signout", s.authed(s.handleSignOut))
	m.Handle("GET /ui/static/", s.staticHandler())
	m.Handle("GET /ui", http.RedirectHandler(Prefix, http.StatusSeeOther))
	m.HandleFunc("GET /{$}", s.handleRoot)
	m.HandleFunc("GET /favicon.ico", s.handleFavicon)
	m.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, approval.Errorf(approval.ENOTFOUND, "no page at %s %s", r.Method, r.URL.Path))
	})
}

// contentSecurityPolicy allows the page's own script, style and images only: no inline
// script or style, no framing, forms posting only here.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"frame-ancestors 'none'; form-action 'self'; base-uri 'none'"

// ServeHTTP sets the security headers on every answer, refuses cross-origin posts, runs the
// matching page within the request's deadline (RequestTimeout, and the long-poll's wait for
// the page that waits), and writes one access log line per request, as the API does
// (docs/web.md, "Logs").
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now() // the wall clock, not s.now: durations are real even when tests move time
	h := w.Header()
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	info := &pageRequest{id: approval.NewID("req")}
	h.Set("X-Request-Id", info.id)
	timeout := s.timeout
	if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, Prefix+"approvals/") && strings.HasSuffix(r.URL.Path, "/wait") {
		timeout += s.pollWait
	}
	ctx, cancel := context.WithTimeout(context.WithValue(r.Context(), pageRequestKey{}, info), timeout)
	defer cancel()
	r = r.WithContext(ctx)
	if r.Method == http.MethodPost {
		// Every form is read within its limit, by readForm or by whatever else reads it.
		limit, _ := formLimit(r.URL.Path)
		r.Body = http.MaxBytesReader(w, r.Body, limit)
	}
	sw := &httpstatus.Writer{ResponseWriter: w}
	defer func() { s.logRequest(r, info, sw.Code(), time.Since(start)) }()
	s.cop.Handler(s.mux).ServeHTTP(sw, r)
}

// pageRequest is what the server learns about a page request as it is handled: its id, for
// the audit trail, error pages and the log, and the session's subject once it is known.
type pageRequest struct {
	id      string
	subject string
}

type pageRequestKey struct{}

// requestOf returns r's pageRequest, set by ServeHTTP; a handler reached some other way gets
// a fresh one.
func requestOf(r *http.Request) *pageRequest {
	if info, ok := r.Context().Value(pageRequestKey{}).(*pageRequest); ok {
		return info
	}
	return &pageRequest{}
}

// requestID is the id of the request r.
func requestID(r *http.Request) string { return requestOf(r).id }

// logRequest writes the access log line of a page request with the API's fields. It names
// the route by its pattern and the path, never the query (a sign-in link's token rides
// there), the headers (cookies) or the form.
func (s *Server) logRequest(r *http.Request, info *pageRequest, status int, d time.Duration) {
	route := r.Pattern
	if _, path, ok := strings.Cut(route, " "); ok {
		route = path
	}
	if route == "" || route == Prefix {
		route = "unmatched" // the catch-all 404 of routes
	}
	s.log.LogAttrs(r.Context(), slog.LevelInfo, "request",
		slog.String("request_id", info.id),
		slog.String("method", r.Method),
		slog.String("route", route),
		slog.String("path", r.URL.Path),
		slog.Int("status", status),
		slog.Duration("duration", d),
		slog.String("subject", info.subject),
	)
}

// causeSource is the Source of the causes of changes made on the pages, so that the audit
// trail tells a vote in the browser from one through the API.
const causeSource = approval.SourceWeb

// cause is the audit trail's cause of a change made by r: an HTTP request, by its id, made on
// the pages.
func cause(r *http.Request) approval.Cause {
	c := approval.HTTPCause(requestID(r))
	c.Source = causeSource
	return c
}

// staticHandler serves the embedded assets. Their names do not change with their content, so
// they are cached for a day and revalidated by Last-Modified afterwards.
func (s *Server) staticHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=86400")
		s.static.ServeHTTP(w, r)
	})
}

// handleRoot answers the root URL, the first address a user tries: a browser goes to the
// pages, any other client is told where the API and its OpenAPI document are.
func (s *Server) handleRoot(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Vary", "Accept")
	if strings.Contains(r.Header.Get("Accept"), "text/html") {
		http.Redirect(w, r, Prefix, http.StatusSeeOther)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(rootAnswer)
}

// rootAnswer is the root URL's answer to a client that is not a browser (docs/http-api.md,
// "The root URL").
var rootAnswer = map[string]string{
	"api":     "/v1/",
	"openapi": "/v1/openapi.json",
	"pages":   Prefix,
	"health":  "/healthz",
}

// handleFavicon serves the pages' icon where browsers look for it unasked.
func (s *Server) handleFavicon(w http.ResponseWriter, r *http.Request) {
	b, err := staticFS.ReadFile("static/favicon.svg")
	if err != nil {
		s.fail(w, r, fmt.Errorf("favicon: %w", err))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "image/svg+xml")
	h.Set("Cache-Control", "public, max-age=86400")
	w.Write(b)
}

// fail answers err: an HTML page for a browser, problem+json for anyone else, with the
// status of the error's code. Internal details are logged, never shown.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	err = approval.Unfinished(r.Context(), err)
	code := approval.ErrorCode(err)
	status, ok := statusOf[code]
	if !ok {
		code, status = approval.EINTERNAL, http.StatusInternalServerError
	}
	detail := approval.ErrorMessage(err)
	id := requestID(r)
	if e := approval.AsError(err); e != nil && e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(e.RetryAfter.Seconds()))))
	}
	if code == approval.EINTERNAL || code == approval.EUNAVAILABLE {
		s.log.Error("web request failed", "request_id", id, "path", r.URL.Path, "error", err)
		if code == approval.EINTERNAL {
			detail = "internal error; quote request id " + id + " when reporting it"
		}
	}
	if !strings.Contains(r.Header.Get("Accept"), "text/html") {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]any{
			"type": "https://approvald.dev/problems/" + code, "title": http.StatusText(status),
			"status": status, "detail": detail, "request_id": id,
		})
		return
	}
	s.render(w, r, status, "error", nil, errorPage{Status: status, Title: http.StatusText(status), Detail: detail, RequestID: id})
}

// statusOf maps the application's error codes to HTTP statuses, as the API does.
var statusOf = map[string]int{
	approval.EINVALID:      http.StatusBadRequest,
	approval.EUNAUTHORIZED: http.StatusUnauthorized,
	approval.EFORBIDDEN:    http.StatusForbidden,
	approval.ENOTFOUND:     http.StatusNotFound,
	approval.ECONFLICT:     http.StatusConflict,
	approval.ETOOLARGE:     http.StatusRequestEntityTooLarge,
	approval.EUNAVAILABLE:  http.StatusServiceUnavailable,
	approval.EINTERNAL:     http.StatusInternalServerError,
}

// submitted remembers the decision forms this process has accepted, by nonce, for as long as
// a form is valid: a second submit of one form waits for the first to finish and gets its
// answer, instead of being a second request. Across processes the decide rule makes the
// repeat harmless anyway (an identical vote changes nothing).
type submitted struct {
	mu      sync.Mutex
	flights map[string]*flight
}

type flight struct {
	done    chan struct{}
	expires time.Time
}

// maxRemembered bounds the memory of submitted forms; past it, expired ones are dropped.
const maxRemembered = 10_000

func newSubmitted() *submitted { return &submitted{flights: make(map[string]*flight)} }

// claim returns the flight of nonce and whether the caller is the first to submit it; the
// first must close f.done when it has finished.
func (m *submitted) claim(nonce string, expires, now time.Time) (f *flight, first bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if f, ok := m.flights[nonce]; ok {
		return f, false
	}
	if len(m.flights) >= maxRemembered {
		for k, f := range m.flights {
			if now.After(f.expires) {
				delete(m.flights, k)
			}
		}
	}
	f = &flight{done: make(chan struct{}), expires: expires}
	if len(m.flights) < maxRemembered {
		m.flights[nonce] = f
	}
	return f, true
}

// forget lets the form of nonce be submitted again, as a first submission: its vote failed
// without being recorded. Submissions already waiting get the first one's answer.
func (m *submitted) forget(nonce string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.flights, nonce)
}
