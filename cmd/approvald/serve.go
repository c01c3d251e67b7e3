package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/approvald/approval"
	"github.com/approvald/approval/httpapi"
	"github.com/approvald/approval/worker"
)

// HTTP server limits.
const (
	// readHeaderTimeout bounds a client that opens a connection and sends headers slowly.
	readHeaderTimeout = 10 * time.Second
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

	config Config
	logger *slog.Logger
	store  store

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
	c.config = cfg
	return nil
}

// Run opens and migrates the store, prints the bootstrap token on a new database, and serves
// until ctx ends. Then it stops accepting connections, drains in-flight requests, and stops
// the workers; Close closes the store.
func (c *ServeCommand) Run(ctx context.Context) error {
	c.logger = newLogger(c.stderr)
	s, err := openStore(ctx, c.config.DatabaseURL)
	if err != nil {
		return err
	}
	c.store = s
	if err := c.bootstrap(ctx); err != nil {
		return err
	}

	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	api := httpapi.New(httpapi.Config{
		Store:             c.store,
		Logger:            c.logger,
		Registry:          registry,
		IdempotencyLease:  c.config.Idempotency.Lease,
		ResponseRetention: c.config.Retention.Responses,
	})

	ln, err := net.Listen("tcp", c.config.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	// The real address, so that "listen: 127.0.0.1:0" can be found by whoever started us.
	c.logger.Info("listening", "addr", ln.Addr().String())

	// Requests run under requestCtx, which is cancelled longPollGrace into shutdown: by then
	// ordinary requests have finished, and what is left are long-polls, which return at once
	// instead of holding the drain for their full wait.
	requestCtx, endRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer endRequests()
	srv := &http.Server{
		Handler:           api,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		BaseContext:       func(net.Listener) context.Context { return requestCtx },
		ErrorLog:          slog.NewLogLogger(c.logger.Handler(), slog.LevelWarn),
		ConnState:         c.connState,
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	workerCtx, stopWorkers := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWorkers()
	var workers sync.WaitGroup
	sweeper := &worker.Sweeper{
		Store:    c.store,
		Logger:   c.logger.With("worker", "sweeper"),
		Interval: c.config.Workers.Poll,
		Batch:    sweepBatch,
		Grace:    c.config.Idempotency.Lease,
	}
	workers.Go(func() {
		if err := sweeper.Run(workerCtx); err != nil {
			c.logger.Error("sweeper stopped", "error", err)
		}
	})

	var serveErr error
	select {
	case <-ctx.Done():
		c.logger.Info("shutting down")
	case serveErr = <-served: // the listener failed; there is nothing to drain
		serveErr = fmt.Errorf("serve http: %w", serveErr)
	}

	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	endLongPolls := time.AfterFunc(longPollGrace, endRequests)
	defer endLongPolls.Stop()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		srv.Close()
		serveErr = errors.Join(serveErr, fmt.Errorf("drain http requests: %w", err))
	}
	if serveErr == nil {
		<-served // http.ErrServerClosed, returned as soon as Shutdown began
	}

	stopWorkers()
	workers.Wait()
	if serveErr == nil {
		c.logger.Info("stopped")
	}
	return serveErr
}

// bootstrap makes the first admin token on a new database and prints it once. Of several
// replicas starting together on one new database, exactly one prints it.
func (c *ServeCommand) bootstrap(ctx context.Context) error {
	secret, t := approval.NewToken(bootstrapSubject, approval.RoleAdmin, approval.Now())
	created, err := c.store.Bootstrap(ctx, t)
	if err != nil {
		return fmt.Errorf("bootstrap admin token: %w", err)
	} else if !created {
		return nil
	}
	if _, err := fmt.Fprintf(c.stdout, "bootstrap admin token: %s\n", secret); err != nil {
		return fmt.Errorf("print bootstrap admin token: %w", err)
	}
	c.logger.Info("bootstrap admin token printed on stdout; it is shown only once", "subject", t.Subject, "token_id", t.ID)
	return nil
}

// Close closes the store.
func (c *ServeCommand) Close() error {
	if c.store == nil {
		return nil
	}
	if err := c.store.Close(); err != nil {
		return fmt.Errorf("close store: %w", err)
	}
	return nil
}

const serveUsage = `Usage: approvald serve [flags]

Runs the HTTP API and the background workers. With no configuration it uses SQLite at
./approvald.db and listens on 127.0.0.1:8080. On a new database it prints a bootstrap admin
token, once, on stdout. SIGINT or SIGTERM stops it gracefully.

Flags:
`
