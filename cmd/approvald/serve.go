package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/approvald/approval"
	"github.com/approvald/approval/failpoint"
	"github.com/approvald/approval/httpapi"
	"github.com/approvald/approval/notify"
	"github.com/approvald/approval/web"
	"github.com/approvald/approval/webhook"
	"github.com/approvald/approval/worker"
)

// HTTP server limits.
const (
	// clockEvery is how often a replica measures its clock against the database's, and
	// clockBoundDivisor the share of the lease its offset may reach before it stops claiming
	// work: two replicas within lease/20 of the database are within lease/10 of each other,
	// the margin the runner keeps before a lease ends (docs/operations.md, "Clocks").
	clockEvery        = 10 * time.Second
	clockBoundDivisor = 20
	// readHeaderTimeout bounds a client that opens a connection and sends headers slowly.
	readHeaderTimeout = 10 * time.Second
	// readTimeout bounds reading a whole request, body included: the webhook intake needs no
	// token, so without it anyone could hold goroutines and buffers open by trickling a body.
	// It does not limit writing, so long-polls are unaffected.
	readTimeout = 30 * time.Second
	// idleTimeout closes keep-alive connections nobody uses.
	idleTimeout = 2 * time.Minute
	// shutdownTimeout bounds the drain of in-flight requests after SIGTERM, well inside the
	// usual 30 s an orchestrator waits before it kills the process.
	shutdownTimeout = 15 * time.Second
	// longPollGrace is how long shutdown lets requests finish on their own before it cancels
	// their context. Ordinary requests take milliseconds; cancelling them mid-transaction
	// would turn them into errors, so only what outlasts this (long-polls) is cut short.
	longPollGrace = time.Second
)

// sweepBatch is how many approvals or records one sweeper transaction touches.
const sweepBatch = 100

// bootstrapSubject is the subject of the admin token made on a new database.
const bootstrapSubject = "admin"

var _ command = (*ServeCommand)(nil)

// ServeCommand runs the HTTP API and the background workers until SIGINT or SIGTERM.
type ServeCommand struct {
	stdout io.Writer // the bootstrap token, and nothing else
	stderr io.Writer // JSON logs

	config     Config
	failpoints *failpoint.Set // from APPROVALD_FAILPOINTS; nil in production
	logger     *slog.Logger
	store      store
	// logOut holds the log's lines below warning for up to log.flush_interval; nil when the
	// interval is 0 (every line written at once).
	logOut *logOutput

	// connState, when set, is told of every connection state change, so that a test can
	// know a request is in flight before it signals shutdown.
	connState func(net.Conn, http.ConnState)
}

// NewServeCommand returns a ServeCommand writing to the given streams.
func NewServeCommand(stdout, stderr io.Writer) *ServeCommand {
	return &ServeCommand{stdout: stdout, stderr: stderr}
}

// ParseFlags parses the flags and loads the configuration.
func (c *ServeCommand) ParseFlags(ctx context.Context, args []string) error {
	fs := newFlagSet("approvald serve", serveUsage, c.stderr)
	var cf configFlags
	cf.register(fs)
	listen := fs.String("listen", "", "listen on `ADDR` (default "+DefaultListen+")")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := cf.load()
	if err != nil {
		return err
	}
	if *listen != "" {
		cfg.Listen = *listen
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	// A bad failpoint spec is a usage error: a crash test must not run a binary that silently
	// ignores the point it means to kill.
	fp, err := failpoint.FromEnv()
	if err != nil {
		return err
	}
	c.config, c.failpoints = cfg, fp
	return nil
}

// Run opens and migrates the store, prints the bootstrap token on a new database, and serves
// the API and runs the workers (sweeper, inbox processor, execution runner) until ctx ends or
// a worker fails. Then it stops in order: HTTP intake first (no new connections, in-flight
// requests drained), then the workers (the runner gives back claims it has not sent, and lets
// calls in flight finish and be recorded); Close then closes the store both were using.
func (c *ServeCommand) Run(ctx context.Context) error {
	// With failpoints armed the process may kill itself at any point: every line is written as
	// it comes, so that the lines before the kill are there to read.
	if every := c.config.Log.FlushInterval; every > 0 && c.failpoints == nil {
		c.logOut = startLogOutput(c.stderr, every)
		c.logger = newBufferedLogger(c.logOut)
	} else {
		c.logger = newLogger(c.stderr)
	}
	defer c.flushLog() // what Run logged is written when it returns; Close ends the holding
	if c.failpoints != nil {
		c.logger.Warn("failpoints armed: this process may fail or kill itself on purpose", "failpoints", c.failpoints.String())
	}
	tuneCollector(c.logger, os.LookupEnv)
	warnNoPolicies(c.logger, c.config)
	svc := newService(c.config, c.logger, c.failpoints)
	svc.connState = c.connState
	s, err := openStore(ctx, c.config.DatabaseURL, c.logger)
	if err != nil {
		return err
	}
	c.store = s
	if err := c.bootstrap(ctx); err != nil {
		return err
	}

	ln, err := net.Listen("tcp", c.config.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	// The real address, so that "listen: 127.0.0.1:0" can be found by whoever started us.
	c.logger.Info("listening", "addr", ln.Addr().String())
	c.flushLog() // whoever waits for the address should not wait for the interval too
	return svc.serve(ctx, c.store, ln)
}

// DefaultMemoryLimit is the Go runtime's soft memory limit that serve sets when GOMEMLIMIT is
// not in its environment (docs/operations.md, "Memory"). Without one the collector lets the
// heap grow to twice what is live, and a server holding a thousand long-polls beside 64 busy
// clients passed 100 MiB; with it the collector works harder as the process nears the limit
// instead. It is soft: a process that truly needs more gets it, at a higher GC cost.
const DefaultMemoryLimit = 64 << 20

// batching is a store that gathers calls into batches (PostgreSQL's creates, intakes, reads
// and token look-ups, SQLite's creates, intakes and write transactions: docs/architecture.md,
// "Creates, intakes and reads in batches", "Write transactions that share a commit").
type batching interface {
	BatchStats(report func(kind string, batches, calls uint64))
}

// batchCollector reports a batching store's counts: batches run and calls in them, by kind.
// Their rates' ratio is the mean batch size, which grows with the load.
type batchCollector struct{ store batching }

var (
	batchesDesc = prometheus.NewDesc("approvald_store_batches_total",
		"Batches this process's store ran, by kind (create, intake, on PostgreSQL read and token, on SQLite transaction): each one round trip for all its calls on PostgreSQL, one transaction and one commit on SQLite.", []string{"kind"}, nil)
	batchedCallsDesc = prometheus.NewDesc("approvald_store_batched_calls_total",
		"Calls this process's store ran in batches, by kind; over approvald_store_batches_total, the mean batch size.", []string{"kind"}, nil)
)

func (c batchCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- batchesDesc
	ch <- batchedCallsDesc
}

func (c batchCollector) Collect(ch chan<- prometheus.Metric) {
	c.store.BatchStats(func(kind string, batches, calls uint64) {
		ch <- prometheus.MustNewConstMetric(batchesDesc, prometheus.CounterValue, float64(batches), kind)
		ch <- prometheus.MustNewConstMetric(batchedCallsDesc, prometheus.CounterValue, float64(calls), kind)
	})
}

// DefaultGCPercent is the collector's GOGC that serve sets when GOGC is not in its
// environment (docs/operations.md, "Memory"): a collection when the heap has grown by four
// times what is live, not by once (Go's default, 100). A server's live heap is small (a few
// MiB of pools, caches and requests in flight), so at 100 it would collect every few hundred
// requests, and the collector's work beside the requests would be the tail of a short
// request's latency, such as a replay's. The memory
// limit bounds what the larger growth may cost: as the heap nears DefaultMemoryLimit the
// collector runs as often as it must, whatever GOGC says.
const DefaultGCPercent = 400

// tuneCollector sets the collector's defaults (DefaultMemoryLimit, DefaultGCPercent) where
// the environment does not name its own (GOMEMLIMIT, GOGC), and logs what it set.
func tuneCollector(logger *slog.Logger, lookup func(string) (string, bool)) {
	if limit, ok := defaultMemoryLimit(lookup); ok {
		debug.SetMemoryLimit(limit)
		logger.Info("soft memory limit", "bytes", limit, "override", "GOMEMLIMIT")
	}
	if _, set := lookup("GOGC"); !set {
		debug.SetGCPercent(DefaultGCPercent)
		logger.Info("collector growth", "percent", DefaultGCPercent, "override", "GOGC")
	}
}

// defaultMemoryLimit returns the limit serve sets, and false when GOMEMLIMIT is set (the
// runtime has applied it already).
func defaultMemoryLimit(lookup func(string) (string, bool)) (int64, bool) {
	if _, set := lookup("GOMEMLIMIT"); set {
		return 0, false
	}
	return DefaultMemoryLimit, true
}

// bootstrap makes the first admin token on a new database and prints it once. Of several
// replicas starting together on one new database, exactly one prints it. The token expires
// after bootstrap.token_ttl: it is printed where logs and scrollback keep it, and is meant
// for making the real tokens, not for use.
func (c *ServeCommand) bootstrap(ctx context.Context) error {
	now := approval.Now().UTC().Truncate(approval.Precision)
	secret, t := approval.NewToken(bootstrapSubject, approval.RoleAdmin, now)
	expires := now.Add(cmp.Or(c.config.Bootstrap.TokenTTL, DefaultBootstrapTokenTTL))
	t.ExpiresAt = &expires
	created, err := (&approval.Service{Store: c.store}).Bootstrap(ctx, t)
	if err != nil {
		return fmt.Errorf("bootstrap admin token: %w", err)
	} else if !created {
		return nil
	}
	if _, err := fmt.Fprintf(c.stdout, "bootstrap admin token: %s\n", secret); err != nil {
		return fmt.Errorf("print bootstrap admin token: %w", err)
	}
	c.logger.Info("bootstrap admin token printed on stdout; it is shown only once", "subject", t.Subject, "token_id", t.ID, "expires_at", expires)
	return nil
}

// Close closes the store, then the log's output: the lines it holds are written, and any
// logged afterwards are written as they come.
func (c *ServeCommand) Close() error {
	var err error
	if c.store != nil {
		if cerr := c.store.Close(); cerr != nil {
			err = fmt.Errorf("close store: %w", cerr)
		}
	}
	if c.logOut != nil {
		c.logOut.Close()
	}
	return err
}

// flushLog writes the log lines serve holds (logOutput), if it holds any.
func (c *ServeCommand) flushLog() {
	if c.logOut != nil {
		c.logOut.Flush()
	}
}

// service is approvald's HTTP API and background workers (sweeper, inbox processor, execution
// runner) on one store, wired from a Config: what serve runs, and what bench starts in
// process, so that a benchmark measures the server as it is deployed.
type service struct {
	config     Config
	logger     *slog.Logger
	failpoints *failpoint.Set
	targets    map[string]worker.Target // by action name

	// connState, when set, is told of every connection state change.
	connState func(net.Conn, http.ConnState)
}

// newService returns the service cfg describes.
func newService(cfg Config, logger *slog.Logger, fp *failpoint.Set) *service {
	targets := make(map[string]worker.Target, len(cfg.Actions))
	for _, a := range cfg.Actions {
		targets[a.Name] = a.Target()
	}
	return &service{config: cfg, logger: logger, failpoints: fp, targets: targets}
}

// targeted reports whether action has an execution target. The approving transaction
// creates the execution queued when it has, not_configured otherwise. Replicas must share
// the actions for this to agree.
func (svc *service) targeted(action string) bool {
	_, ok := svc.targets[action]
	return ok
}

// serve serves the API on ln and runs the workers on st until ctx ends or a worker fails,
// then stops in order: HTTP intake first, then the workers. It does not close st.
func (svc *service) serve(ctx context.Context, st store, ln net.Listener) error {
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if b, ok := st.(batching); ok {
		registry.MustRegister(batchCollector{b})
	}
	// One Service holds the rules for every consumer in this process: the API, the pages and
	// the workers decide alike.
	rules := &approval.Service{Store: st, Retention: svc.config.Retention.Responses,
		Targeted: svc.targeted, Routing: svc.config.routing()}
	rules.Policies, rules.Members = servicePolicies(svc.config)
	if err := restoreAsks(ctx, rules); err != nil {
		return err
	}
	// Leases are judged by the replicas' clocks: measure this one against the database's
	// before any work is claimed, and keep measuring (docs/operations.md, "Clocks").
	rules.Clock = &approval.ClockWatch{Store: st, Bound: svc.config.Workers.Lease / clockBoundDivisor,
		Every: clockEvery, Logger: svc.logger.With("worker", "clock")}
	measureCtx, measured := context.WithTimeout(ctx, clockEvery)
	rules.Clock.Measure(measureCtx)
	measured()
	go rules.Clock.Run(ctx)
	registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "approvald_clock_offset_seconds",
		Help: "The database's clock minus this process's, as last measured; beyond the bound (workers.lease/20) the replica claims no work.",
	}, func() float64 {
		offset, _, _ := rules.Clock.Offset()
		return offset.Seconds()
	}))
	// One budget for every body read before its sender is known: the intake's and the
	// sign-in forms'.
	bodies := httpapi.NewBodyBudget(svc.config.Limits.MaxInflightBodyBytes)
	api := httpapi.New(httpapi.Config{
		Store:            st,
		Service:          rules,
		Logger:           svc.logger,
		Registry:         registry,
		IdempotencyLease: svc.config.Idempotency.Lease,
		RequestTimeout:   svc.config.Limits.RequestTimeout,
		Sources:          svc.sources(),
		Failpoints:       svc.failpoints,
		Bodies:           bodies,
		// With metrics.token_required a scraper sends a token of its own.
		MetricsTokenRequired: svc.config.Metrics.TokenRequired,
		SlackSigningSecret:   svc.config.slackSigningSecret(),
	})

	webConfig := svc.webConfig(st, rules)
	webConfig.Bodies = bodies
	if webConfig.SessionKey == nil {
		key, err := svc.storedSessionKey(ctx, rules)
		if err != nil {
			return err
		}
		webConfig.SessionKey = key
	}
	webConfig.RequestTimeout = svc.config.Limits.RequestTimeout
	ui, err := web.New(webConfig)
	if err != nil {
		return fmt.Errorf("web: %w", err)
	}

	// Requests run under requestCtx, which is cancelled longPollGrace into shutdown: by then
	// ordinary requests have finished, and what is left are long-polls, which return at once
	// instead of holding the drain for their full wait.
	requestCtx, endRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer endRequests()
	srv := &http.Server{
		Handler:           httpapi.LimitRequests(ui.Handler(api), svc.config.Limits.MaxInflightRequests),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		IdleTimeout:       idleTimeout,
		BaseContext:       func(net.Listener) context.Context { return requestCtx },
		ErrorLog:          slog.NewLogLogger(svc.logger.Handler(), slog.LevelWarn),
		ConnState:         svc.connState,
	}
	// net/http's own answers to malformed requests become problem+json like every other; the
	// connections past the limit are answered beneath, before net/http sees them.
	ln = httpapi.ServeProblems(srv, httpapi.LimitConnections(ln, svc.config.Limits.MaxConnections))
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	workerCtx, stopWorkers := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWorkers()
	var workers sync.WaitGroup
	// A worker returns before workerCtx ends only when it cannot work at all; the process
	// then stops rather than serve an API whose approvals would never execute.
	workerFailed := make(chan error, 5)
	startWorker := func(name string, run func(context.Context) error) {
		workers.Go(func() {
			if err := run(workerCtx); err != nil {
				workerFailed <- fmt.Errorf("%s: %w", name, err)
			}
		})
	}
	startWorker("sweeper", (&worker.Sweeper{
		Rules:       rules,
		Logger:      svc.logger.With("worker", "sweeper"),
		Interval:    svc.config.Workers.Poll,
		Batch:       sweepBatch,
		InboxIDs:    svc.config.Retention.InboxIDs,
		InboxBodies: svc.config.Retention.InboxBodyRetention(),
	}).Run)
	// One Slack client for the outbox and the inbox: a 429 holds a method back for both.
	var slackSender *notify.Slack
	var slackUsers worker.SlackUsers
	if svc.config.Slack != nil {
		slackSender = svc.config.slackSender(rules, svc.failpoints)
		slackUsers = slackSender
	}
	startWorker("inbox processor", (&worker.InboxProcessor{
		Store:   st,
		Rules:   rules,
		Logger:  svc.logger.With("worker", "inbox"),
		Sources: svc.sourceHandlers(),
		Lease:   svc.config.Workers.Lease,
		Poll:    svc.config.Workers.Poll,
		// A click of a Slack user nobody is known as is looked up by the user's address.
		SlackUsers: slackUsers,
		// Batch, Backoff and MaxAttempts: the worker's defaults. An event whose store work
		// keeps failing is retried with backoff, then marked failed for an operator.
	}).Run)
	startWorker("execution runner", (&worker.Runner{
		Store:       st,
		Ledger:      rules,
		Logger:      svc.logger.With("worker", "runner"),
		Targets:     svc.targets,
		Lease:       svc.config.Workers.Lease,
		Poll:        svc.config.Workers.Poll,
		Batch:       svc.config.Workers.Concurrency,
		Concurrency: svc.config.Workers.Concurrency,
		Failpoints:  svc.failpoints,
	}).Run)

	// /metrics serves the counts that grow with the history from a read every minute.
	startWorker("metrics counts", api.RunCounts)
	startWorker("outbox", (&worker.Outbox{
		Store:      st,
		Mailbox:    rules,
		Logger:     svc.logger.With("worker", "outbox"),
		Senders:    svc.config.senders(rules, slackSender),
		Lease:      svc.config.Workers.Lease,
		Poll:       svc.config.Workers.Poll,
		Failpoints: svc.failpoints,
	}).Run)

	var serveErr error
	listenerFailed := false
	select {
	case <-ctx.Done():
		svc.logger.Info("shutting down")
	case err := <-served: // the listener failed; there is nothing to drain
		listenerFailed, serveErr = true, fmt.Errorf("serve http: %w", err)
	case serveErr = <-workerFailed:
		svc.logger.Error("worker failed; shutting down", "error", serveErr)
	}

	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	endLongPolls := time.AfterFunc(longPollGrace, endRequests)
	defer endLongPolls.Stop()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		srv.Close()
		serveErr = errors.Join(serveErr, fmt.Errorf("drain http requests: %w", err))
	}
	if !listenerFailed {
		<-served // http.ErrServerClosed, returned as soon as Shutdown began
	}

	stopWorkers()
	workers.Wait()
	rules.Wait() // the tokens' last-use writes still in flight
	close(workerFailed)
	for err := range workerFailed { // a worker that failed while the others were stopping
		serveErr = errors.Join(serveErr, err)
	}
	if serveErr == nil {
		svc.logger.Info("stopped")
	}
	return serveErr
}

// storedSessionKey returns the session key kept in the database, made at the first start
// without web.session_key, so that a restart keeps the pages' sessions (docs/web.md,
// "Session"). On PostgreSQL, which replicas share, it warns: the key is then in the
// database and its backups, readable by whoever reads them, and cannot be rotated from the
// configuration. A SQLite file belongs to one process, which keeps its key beside the
// sessions it signs.
func (svc *service) storedSessionKey(ctx context.Context, rules *approval.Service) ([]byte, error) {
	key, err := rules.StoredSessionKey(ctx)
	if err != nil {
		return nil, fmt.Errorf("web: session key kept in the database: %w", err)
	}
	if kind, _ := ParseDatabaseURL(svc.config.DatabaseURL); kind == databasePostgres {
		svc.logger.Warn("web.session_key is not set: the pages sign sessions with a key kept in the database, shared by every replica on it; " +
			"whoever can read the database or its backups can sign session cookies. Set web.session_key, the same on every replica, to keep the key out of the database")
	} else {
		svc.logger.Info("web.session_key is not set: the pages sign sessions with a key kept in the database, so sessions survive a restart")
	}
	return key, nil
}

// webConfig returns the pages' configuration on st, deciding through rules.
func (svc *service) webConfig(st store, rules *approval.Service) web.Config {
	w := svc.config.Web
	cfg := web.Config{
		Store:      st,
		Service:    rules,
		Logger:     svc.logger.With("component", "web"),
		SessionTTL: w.SessionTTL,
		PublicURL:  w.PublicURL,
		Targets:    make(map[string]string, len(svc.targets)),
	}
	for action, t := range svc.targets {
		cfg.Targets[action] = t.URL
	}
	if w.SessionKey != "" {
		cfg.SessionKey = []byte(w.SessionKey)
	}
	if l := w.SigninLinks; l != nil {
		// Validate has checked the prefixes.
		proxies, _ := l.trustedProxies()
		cfg.Links = &web.LinksConfig{Operators: l.Operators, Admins: l.Admins, TrustedProxies: proxies, TrackedAddresses: l.TrackedAddresses}
	}
	if o := w.OIDC; o != nil {
		cfg.OIDC = &web.OIDCConfig{
			Issuer: o.Issuer, ClientID: o.ClientID, ClientSecret: o.ClientSecret, RedirectURL: o.RedirectURL,
			SubjectClaim: o.SubjectClaim, AllowedDomains: o.AllowedDomains, TrustEmail: o.TrustEmail,
			Operators: o.Operators, Admins: o.Admins, GroupsClaim: o.GroupsClaim, Scopes: o.Scopes,
		}
	}
	return cfg
}

// sources returns the webhook sources of the configuration for the intake.
func (svc *service) sources() []httpapi.Source {
	sources := make([]httpapi.Source, len(svc.config.Sources))
	for i, s := range svc.config.Sources {
		sources[i] = httpapi.Source{
			Name: s.Name,
			Verifier: webhook.Verifier{
				Scheme:    webhook.Scheme(s.Scheme),
				Secrets:   s.Secrets,
				Tolerance: s.Tolerance,
			},
			MaxBody:  s.MaxBody,
			Handlers: s.Handlers,
		}
	}
	return sources
}

// sourceHandlers maps each source to the handlers its events may trigger, for the inbox
// processor.
func (svc *service) sourceHandlers() map[string][]string {
	m := make(map[string][]string, len(svc.config.Sources))
	for _, s := range svc.config.Sources {
		m[s.Name] = s.Handlers
	}
	return m
}

const serveUsage = `Usage: approvald serve [flags]

Runs the HTTP API and the background workers (sweeper, inbox processor, execution runner).
With no configuration it uses SQLite at ./approvald.db and listens on 127.0.0.1:8080. On a new
database it prints a bootstrap admin token, once, on stdout. SIGINT or SIGTERM stops it
gracefully. APPROVALD_FAILPOINTS arms failure points for crash tests (docs/operations.md, "Failpoints").

Flags:
`

// restoreAsksBatch is how many approvals one transaction of restoreAsks gives their asks.
const restoreAsksBatch = 500

// restoreAsks gives every pending approval under a policy that asks nobody (one created
// before migration 0027) its current stage's asks, before the service answers, so that
// "waiting for me" finds it (docs/policies.md, "Waiting for me"). Once done, a start reads
// one empty range.
func restoreAsks(ctx context.Context, rules *approval.Service) error {
	for {
		n, err := rules.RestoreAsks(ctx, restoreAsksBatch)
		if err != nil {
			return fmt.Errorf("restore whom pending approvals ask: %w", err)
		}
		if n < restoreAsksBatch {
			return nil
		}
	}
}
