package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// buildApprovald builds cmd/approvald of the module in repo into out. The benchmark runs the
// real binary, as an operator would, rather than importing the service.
func buildApprovald(ctx context.Context, repo, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/approvald")
	cmd.Dir = repo
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build approvald in %s: %w", repo, err)
	}
	return nil
}

// runApprovald measures approvald: `approvald serve` on a fresh schema with one action whose
// target is the downstream; N approvals created and approved over HTTP while the gate holds
// the runner's first calls; then the gate opens and the clock runs until all N executions
// are succeeded.
func runApprovald(ctx context.Context, cfg runConfig, admin *pgx.Conn) (res runResult, err error) {
	res = runResult{System: "approvald", N: cfg.N, Workers: cfg.Workers}

	schema, err := newSchema(ctx, admin, "bench_apvd_")
	if err != nil {
		return res, err
	}
	if !cfg.Keep {
		defer func() {
			if dropErr := dropSchema(context.WithoutCancel(ctx), admin, schema); err == nil {
				err = dropErr
			}
		}()
	}
	dbURL, err := withSearchPath(cfg.DatabaseURL, schema)
	if err != nil {
		return res, err
	}

	down, err := startDownstream()
	if err != nil {
		return res, err
	}
	defer down.Close()

	dir := filepath.Join(cfg.WorkDir, schema)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return res, fmt.Errorf("make run directory: %w", err)
	}
	config := filepath.Join(dir, "approvald.yaml")
	if err := os.WriteFile(config, []byte(approvaldConfig(dbURL, down.URL(), cfg.Workers)), 0o600); err != nil {
		return res, fmt.Errorf("write approvald config: %w", err)
	}

	// Tokens first: token create migrates the new schema, so serve starts on a ready one.
	tokens := make(map[string]string)
	for subject, role := range map[string]string{requesterSubject: "requester", approverSubject: "approver", operatorSubject: "operator"} {
		if tokens[subject], err = createToken(ctx, cfg.Approvald, config, subject, role); err != nil {
			return res, err
		}
	}

	srv, err := startServe(ctx, cfg.Approvald, config, filepath.Join(dir, "serve.log"))
	if err != nil {
		return res, err
	}
	defer func() {
		if stopErr := srv.Stop(); stopErr != nil && err == nil {
			err = stopErr
		}
	}()
	api := &apiClient{
		base:   "http://" + srv.addr,
		client: &http.Client{Transport: keepAliveTransport(cfg.Loaders), Timeout: time.Minute},
	}

	if err := queueApprovals(ctx, api, tokens, schema, cfg.N, cfg.Loaders); err != nil {
		return res, err
	}

	res.Held = down.WaitArrived(ctx, min(cfg.Workers, cfg.N), gateQuiet)
	start := time.Now()
	down.Open()
	end, err := waitCount(ctx, admin, "SELECT count(*) FROM "+schema+".executions WHERE status = 'succeeded'", cfg.N)
	if err != nil {
		return res, err
	}
	res.Elapsed = end.Sub(start)

	// Claim (the attempt's event, written when the runner claims the execution) to the
	// recorded success, for executions claimed after the gate opened.
	ls, err := latencies(ctx, admin, `
		SELECT EXTRACT(EPOCH FROM x.updated_at - a.at)::float8
		FROM `+schema+`.executions x
		JOIN `+schema+`.events a ON a.approval_id = x.approval_id AND a.type = 'execution.attempt'
		WHERE a.at >= $1`, start)
	if err != nil {
		return res, err
	}
	res.setLatencies(ls)

	// Confirm through the API, as an operator would see it.
	succeeded, err := api.countExecutions(ctx, tokens[operatorSubject], "succeeded")
	if err != nil {
		return res, err
	}
	return res, checkCalls(&res, down.Counts(), cfg.N-succeeded)
}

// approvaldConfig is the configuration of a run: approvald's defaults, but for the worker
// count W, and a lease and call timeout long enough for the calls held at the gate while the
// approvals are being queued.
func approvaldConfig(databaseURL, target string, workers int) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
database_url: %q
workers: {lease: %s, concurrency: %d}
actions:
  - name: %s
    url: %q
    secret: %q
    idempotent: true
    timeout: %s
`, databaseURL, holdTimeout, workers, benchAction, target, benchSecret, holdTimeout)
}

// createToken runs `approvald token create` and returns the token it prints.
func createToken(ctx context.Context, bin, config, subject, role string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "token", "create", "--config", config, "--subject", subject, "--role", role)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("approvald token create %s: %w: %s", subject, err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

// serveProcess is a running `approvald serve`.
type serveProcess struct {
	cmd    *exec.Cmd
	addr   string
	exited chan error
}

// startServe starts `approvald serve`, its logs going to logPath, and waits until it
// listens.
func startServe(ctx context.Context, bin, config, logPath string) (*serveProcess, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("create serve log: %w", err)
	}
	cmd := exec.Command(bin, "serve", "--config", config)
	cmd.Stdout = logFile // the bootstrap admin token; not needed here
	stderr, err := cmd.StderrPipe()
	if err != nil {
		logFile.Close()
		return nil, fmt.Errorf("serve stderr: %w", err)
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start approvald serve: %w", err)
	}

	p := &serveProcess{cmd: cmd, exited: make(chan error, 1)}
	listening := make(chan string, 1)
	var copied sync.WaitGroup
	copied.Go(func() { scanServeLog(stderr, logFile, listening) })
	go func() {
		copied.Wait() // Wait closes the pipe, so read it all first
		p.exited <- cmd.Wait()
		logFile.Close()
	}()

	select {
	case p.addr = <-listening:
		return p, nil
	case err := <-p.exited:
		p.exited <- err
		return nil, fmt.Errorf("approvald serve exited before listening (%v); see %s", err, logPath)
	case <-time.After(30 * time.Second):
		p.Stop()
		return nil, fmt.Errorf("approvald serve did not listen within 30s; see %s", logPath)
	case <-ctx.Done():
		p.Stop()
		return nil, ctx.Err()
	}
}

// scanServeLog copies serve's JSON log lines to w and sends the address of the "listening"
// line on listening.
func scanServeLog(r io.Reader, w io.Writer, listening chan<- string) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		fmt.Fprintf(w, "%s\n", line)
		var entry struct{ Msg, Addr string }
		if json.Unmarshal(line, &entry) == nil && entry.Msg == "listening" && entry.Addr != "" {
			select {
			case listening <- entry.Addr:
			default:
			}
		}
	}
	io.Copy(io.Discard, r) // a line over the limit: keep the pipe drained until exit
}

// Stop sends SIGTERM and waits for a graceful exit, killing the process after 20 s.
func (p *serveProcess) Stop() error {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal approvald serve: %w", err)
	}
	select {
	case err := <-p.exited:
		p.exited <- err
		if err != nil {
			return fmt.Errorf("approvald serve: %w", err)
		}
		return nil
	case <-time.After(20 * time.Second):
		p.cmd.Process.Kill()
		return errors.New("approvald serve did not stop within 20s of SIGTERM; killed")
	}
}

// queueApprovals creates and approves n approvals with loaders concurrent clients. Each
// approve commits the approval and its queued execution in one transaction.
func queueApprovals(ctx context.Context, api *apiClient, tokens map[string]string, prefix string, n, loaders int) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	units := make(chan int)
	var wg sync.WaitGroup
	for range loaders {
		wg.Go(func() {
			for i := range units {
				if err := api.createAndApprove(ctx, tokens, fmt.Sprintf("%s-%d", prefix, i), i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case units <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(units)
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return fmt.Errorf("queue approvals: %w", err)
	}
	return nil
}

// apiClient calls approvald's HTTP API.
type apiClient struct {
	base   string
	client *http.Client
}

// createAndApprove creates the i-th approval under key and approves it.
func (c *apiClient) createAndApprove(ctx context.Context, tokens map[string]string, key string, i int) error {
	body, err := json.Marshal(map[string]any{
		"action":    benchAction,
		"title":     benchTitle(i),
		"context":   benchContext(i),
		"approvers": []string{approverSubject},
	})
	if err != nil {
		return fmt.Errorf("encode create: %w", err)
	}
	var created struct{ ID string }
	if err := c.do(ctx, http.MethodPost, "/v1/approvals", tokens[requesterSubject], key, body, http.StatusCreated, &created); err != nil {
		return fmt.Errorf("create %s: %w", key, err)
	}
	if err := c.do(ctx, http.MethodPost, "/v1/approvals/"+url.PathEscape(created.ID)+"/approve", tokens[approverSubject], "", []byte(`{}`), http.StatusOK, nil); err != nil {
		return fmt.Errorf("approve %s: %w", key, err)
	}
	return nil
}

// countExecutions pages through GET /v1/executions?status=... and counts the executions.
func (c *apiClient) countExecutions(ctx context.Context, token, status string) (int, error) {
	count, cursor := 0, ""
	for {
		q := url.Values{"status": {status}, "limit": {"100"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page struct {
			Executions []json.RawMessage `json:"executions"`
			NextCursor string            `json:"next_cursor"`
		}
		if err := c.do(ctx, http.MethodGet, "/v1/executions?"+q.Encode(), token, "", nil, http.StatusOK, &page); err != nil {
			return count, fmt.Errorf("list %s executions: %w", status, err)
		}
		count += len(page.Executions)
		if page.NextCursor == "" {
			return count, nil
		}
		cursor = page.NextCursor
	}
}

// do sends one request and decodes the answer into out (when not nil), failing unless the
// status is want.
func (c *apiClient) do(ctx context.Context, method, path, token, key string, body []byte, want int, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("read answer: %w", err)
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: status %d, want %d: %s", method, path, resp.StatusCode, want, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("decode answer: %w", err)
		}
	}
	return nil
}

// keepAliveTransport keeps a connection per concurrent client.
func keepAliveTransport(conns int) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = conns
	return tr
}
