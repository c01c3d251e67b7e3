package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"
)

var _ command = (*HealthCommand)(nil)

// defaultHealthTimeout bounds the whole check: a container health check must end.
const defaultHealthTimeout = 5 * time.Second

// HealthCommand asks a running server whether it is alive (GET /healthz) or ready (GET
// /readyz, which also reaches the database), and exits 0 when it answers 200. It exists for
// container health checks: the image has no shell and no curl.
type HealthCommand struct {
	stdout io.Writer
	stderr io.Writer

	url     string
	timeout time.Duration
}

// NewHealthCommand returns a HealthCommand writing to the given streams.
func NewHealthCommand(stdout, stderr io.Writer) *HealthCommand {
	return &HealthCommand{stdout: stdout, stderr: stderr}
}

// ParseFlags parses the flags. Without --url the address comes from the configuration's
// listen setting (the file, or APPROVALD_LISTEN), with a wildcard host asked on loopback.
func (c *HealthCommand) ParseFlags(ctx context.Context, args []string) error {
	fs := newFlagSet("approvald health", healthUsage, c.stderr)
	var cf configFlags
	cf.register(fs)
	ready := fs.Bool("ready", false, "ask /readyz (the database answers and takes writes too) instead of /healthz")
	fs.StringVar(&c.url, "url", "", "the server's base `URL` (default: http:// and the configured listen address)")
	fs.DurationVar(&c.timeout, "timeout", defaultHealthTimeout, "give up after `DURATION`")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if c.timeout <= 0 {
		return fmt.Errorf("--timeout: %w", ErrNotPositive)
	}
	if c.url == "" {
		cfg, err := cf.load()
		if err != nil {
			return err
		}
		host, port, err := net.SplitHostPort(cfg.Listen)
		if err != nil {
			return fmt.Errorf("listen: %w", ErrInvalidListen)
		}
		if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
			host = "127.0.0.1"
		}
		c.url = "http://" + net.JoinHostPort(host, port)
	}
	u, err := url.Parse(c.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--url %q: must be http(s)://HOST:PORT", c.url)
	}
	u.Path = "/healthz"
	if *ready {
		u.Path = "/readyz"
	}
	c.url = u.String()
	return nil
}

// Run asks the server once.
func (c *HealthCommand) Run(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", c.url, err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return errors.New("GET " + c.url + ": " + resp.Status)
	}
	_, err = fmt.Fprintf(c.stdout, "%s: %s\n", c.url, resp.Status)
	return err
}

// Close does nothing.
func (c *HealthCommand) Close() error { return nil }

const healthUsage = `Usage: approvald health [--ready] [--url URL]

Asks a running server whether it is alive (GET /healthz) or, with --ready, ready to serve
(GET /readyz: its database answers and takes writes), and exits 0 when it answers 200 OK, 1 otherwise. The
container image's HEALTHCHECK runs it.

Flags:
`
