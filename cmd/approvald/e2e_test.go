package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/approvald/approval/internal/testdb"
)

// binary is the approvald binary built by TestMain: the end-to-end tests run the real
// program, with its flag parsing, signal handling and output, not a copy of its wiring.
var binary string

// Bounds for a failing test only; a passing one moves on as soon as the event happens.
const (
	startTimeout = 60 * time.Second // the binary migrates a new database before it listens
	exitTimeout  = 30 * time.Second // more than serve's own drain timeout
)

var tokenLine = regexp.MustCompile(`^apv_[A-Za-z0-9_-]+$`)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "approvald-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: temp dir:", err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "approvald")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: go build:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func TestServe(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		dsn := testdb.DSN(t, kind)

		srv := startServe(t, dsn)
		admin := srv.bootstrapToken(t)
		requester := createToken(t, dsn, "ci-bot", "requester")
		alice := createToken(t, dsn, "alice", "approver")
		createToken(t, dsn, "bob", "approver")

		const body = `{"action": "deploy", "title": "Deploy api v1.42 to prod", "context": {"commit": "9f2c1e"},
			"approvers": ["alice", "bob"], "required_approvals": 1, "expires_in": "24h"}`
		created := srv.do(t, "POST", "/v1/approvals", requester, "deploy-prod-1042", body)
		created.wantStatus(t, http.StatusCreated)
		var a struct {
			ID           string `json:"id"`
			OperationKey string `json:"operation_key"`
			Status       string `json:"status"`
			Requester    string `json:"requester"`
		}
		created.decode(t, &a)
		if a.Status != "pending" || a.Requester != "ci-bot" || a.OperationKey != "deploy-prod-1042" {
			t.Fatalf("created approval: got %+v, want pending, requester ci-bot, key deploy-prod-1042", a)
		}
		if got, want := created.header.Get("Location"), "/v1/approvals/"+a.ID; got != want {
			t.Errorf("Location: got %q, want %q", got, want)
		}
		if got := created.header.Get("Idempotent-Replayed"); got != "" {
			t.Errorf("first create: got Idempotent-Replayed %q, want none", got)
		}

		// The same request again (key order and white space do not matter) is a replay of
		// the stored response, byte for byte.
		replay := srv.do(t, "POST", "/v1/approvals", requester, "deploy-prod-1042",
			`{"title":"Deploy api v1.42 to prod","action":"deploy","context":{"commit":"9f2c1e"},"approvers":["alice","bob"],"required_approvals":1,"expires_in":"24h"}`)
		replay.wantStatus(t, http.StatusCreated)
		if got := replay.header.Get("Idempotent-Replayed"); got != "true" {
			t.Errorf("replay: got Idempotent-Replayed %q, want true", got)
		}
		if !bytes.Equal(replay.body, created.body) {
			t.Errorf("replay body differs:\ngot  %s\nwant %s", replay.body, created.body)
		}
		if got := replay.header.Get("Location"); got != created.header.Get("Location") {
			t.Errorf("replay Location: got %q, want %q", got, created.header.Get("Location"))
		}

		// Another request under the same key is refused.
		srv.do(t, "POST", "/v1/approvals", requester, "deploy-prod-1042",
			`{"action": "deploy", "title": "Deploy api v1.43 to prod", "approvers": ["alice"]}`).
			wantStatus(t, http.StatusUnprocessableEntity)

		approved := srv.do(t, "POST", "/v1/approvals/"+a.ID+"/approve", alice, "", `{"comment": "ship it"}`)
		approved.wantStatus(t, http.StatusOK)
		approved.decode(t, &a)
		if a.Status != "approved" {
			t.Errorf("after approve: got status %q, want approved", a.Status)
		}

		// The bootstrap admin token reads every approval.
		srv.do(t, "GET", "/v1/approvals/"+a.ID, admin, "", "").wantStatus(t, http.StatusOK)

		events := srv.do(t, "GET", "/v1/approvals/"+a.ID+"/events", requester, "", "")
		events.wantStatus(t, http.StatusOK)
		var trail struct {
			Events []struct {
				Seq   int64  `json:"seq"`
				Type  string `json:"type"`
				Actor string `json:"actor"`
				Cause struct {
					Kind string `json:"kind"`
				} `json:"cause"`
			} `json:"events"`
		}
		events.decode(t, &trail)
		var types []string
		for _, e := range trail.Events {
			types = append(types, e.Type)
			if e.Cause.Kind != "http" {
				t.Errorf("event %d %s: got cause kind %q, want http", e.Seq, e.Type, e.Cause.Kind)
			}
		}
		if got, want := strings.Join(types, ","), "approval.created,approval.voted,approval.approved"; got != want {
			t.Errorf("event types: got %s, want %s", got, want)
		}

		srv.do(t, "GET", "/healthz", "", "", "").wantStatus(t, http.StatusOK)
		srv.do(t, "GET", "/readyz", "", "", "").wantStatus(t, http.StatusOK)
		metrics := srv.do(t, "GET", "/metrics", "", "", "")
		metrics.wantStatus(t, http.StatusOK)
		names := []string{"approvald_http_requests_total", "approvald_approvals", "go_goroutines"}
		// The create above ran in a batch (of one), and on PostgreSQL so did the GETs.
		names = append(names, `approvald_store_batches_total{kind="create"} `)
		if kind == testdb.Postgres {
			names = append(names, `approvald_store_batched_calls_total{kind="read"} `)
		}
		for _, name := range names {
			if !bytes.Contains(metrics.body, []byte(name)) {
				t.Errorf("/metrics does not show %s", name)
			}
		}
		if bytes.Contains(metrics.body, []byte(`approvald_store_batches_total{kind="create"} 0`)) {
			t.Errorf("/metrics counts no create batch:\n%s", metrics.body)
		}

		// A second process on the same database finds it bootstrapped and prints nothing on
		// stdout, and serves the same data.
		second := startServe(t, dsn)
		second.do(t, "GET", "/v1/approvals/"+a.ID, requester, "", "").wantStatus(t, http.StatusOK)
		second.stop(t)
		if out := second.stdout.String(); out != "" {
			t.Errorf("second serve printed on stdout: %q, want nothing", out)
		}

		srv.stop(t)
		if got := strings.Count(srv.stdout.String(), "\n"); got != 1 {
			t.Errorf("first serve printed %d lines on stdout, want 1 (the bootstrap token)", got)
		}
	})
}

func TestTokenCreate(t *testing.T) {
	t.Parallel()
	dsn := testdb.DSN(t, testdb.SQLite) // a new database: token create migrates it first

	stdout, stderr, code := run(t, "token", "create", "--subject", "ci-bot", "--role", "requester", "--database-url", dsn)
	if code != 0 {
		t.Fatalf("token create: exit %d, stderr %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(lines) != 1 || !tokenLine.MatchString(lines[0]) || !strings.HasSuffix(stdout, "\n") {
		t.Errorf("token create stdout: got %q, want one line matching %s", stdout, tokenLine)
	}
	if strings.Contains(stderr, lines[0]) {
		t.Errorf("token create logged the token on stderr")
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	dsn := testdb.DSN(t, testdb.SQLite)
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"token"},
		{"token", "create", "--subject", "ci-bot", "--role", "superuser", "--database-url", dsn},
		{"token", "create", "--subject", "", "--role", "requester", "--database-url", dsn},
		{"token", "create", "--role", "requester", "--database-url", dsn},
		{"serve", "--no-such-flag"},
		{"serve", "extra-argument"},
		{"serve", "--listen", "nowhere", "--database-url", dsn},
		{"migrate", "--database-url", "mysql://db/approvald"},
		{"migrate", "--config", filepath.Join(t.TempDir(), "missing.yaml")},
	} {
		stdout, stderr, code := run(t, args...)
		if code != 2 {
			t.Errorf("approvald %s: got exit %d, want 2 (stderr %q)", strings.Join(args, " "), code, stderr)
		}
		if stdout != "" {
			t.Errorf("approvald %s: got stdout %q, want nothing", strings.Join(args, " "), stdout)
		}
		if stderr == "" {
			t.Errorf("approvald %s: nothing on stderr, want the problem", strings.Join(args, " "))
		}
	}
}

// A failpoint spec that names no known point, or is malformed, stops serve before it touches
// the database: a crash test must never run a binary that silently ignores its failpoint.
func TestServe_BadFailpointsExitTwo(t *testing.T) {
	t.Parallel()
	dsn := testdb.DSN(t, testdb.SQLite)
	for _, spec := range []string{"execution.after-sned=crash", "execution.after-send=explode", "execution.after-send"} {
		cmd := exec.Command(binary, "serve", "--listen", "127.0.0.1:0", "--database-url", dsn)
		cmd.Env = append(os.Environ(), "APPROVALD_FAILPOINTS="+spec)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Errorf("APPROVALD_FAILPOINTS=%q: got %v, want exit 2", spec, err)
		}
		if !strings.Contains(stderr.String(), "APPROVALD_FAILPOINTS") || strings.Count(stderr.String(), "\n") != 1 {
			t.Errorf("APPROVALD_FAILPOINTS=%q: got stderr %q, want one line naming the variable", spec, stderr.String())
		}
	}
}

func TestRuntimeErrorExitsOne(t *testing.T) {
	t.Parallel()
	// A database in a directory that does not exist cannot be opened: exit 1, one line.
	dsn := "file:" + filepath.Join(t.TempDir(), "missing", "approvald.db")
	stdout, stderr, code := run(t, "migrate", "--database-url", dsn)
	if code != 1 {
		t.Fatalf("migrate: got exit %d, want 1 (stderr %q)", code, stderr)
	}
	if stdout != "" || strings.Count(stderr, "\n") != 1 {
		t.Errorf("migrate: got stdout %q and stderr %q, want nothing and one line", stdout, stderr)
	}
}

func TestMigrateAndVersion(t *testing.T) {
	t.Parallel()
	dsn := testdb.DSN(t, testdb.SQLite)
	for range 2 { // migrating twice is a no-op the second time
		if _, stderr, code := run(t, "migrate", "--database-url", dsn); code != 0 {
			t.Fatalf("migrate: exit %d, stderr %s", code, stderr)
		}
	}
	stdout, stderr, code := run(t, "version")
	if code != 0 || !strings.HasPrefix(stdout, "approvald ") || strings.Count(stdout, "\n") != 1 {
		t.Errorf("version: got exit %d, stdout %q, stderr %q; want 0 and one line starting \"approvald \"", code, stdout, stderr)
	}
}

// server is a running `approvald serve`.
type server struct {
	cmd  *exec.Cmd
	addr string
	// client has connections of its own, so that a connection kept alive to a process that
	// has died is never handed to a request meant for another; nil uses http.DefaultClient.
	client *http.Client
	stdout *lineWriter
	stderr *lineWriter

	exited  chan struct{} // closed when the process has exited
	waitErr error         // Wait's result, set before exited is closed
}

// startServe starts `approvald serve` on an ephemeral port and waits for its "listening" log
// line. The process is killed when the test ends if it is still running.
func startServe(t *testing.T, dsn string) *server {
	t.Helper()
	return startServeWith(t, dsn, serveOptions{})
}

// serveOptions are what a test may add to `approvald serve`.
type serveOptions struct {
	config string   // YAML, written to a file passed with --config; "" for none
	env    []string // NAME=value entries added to the environment, e.g. APPROVALD_FAILPOINTS
}

// startServeWith is startServe with a configuration and environment.
func startServeWith(t *testing.T, dsn string, opts serveOptions) *server {
	t.Helper()
	args := []string{"serve", "--listen", "127.0.0.1:0", "--database-url", dsn}
	if opts.config != "" {
		path := filepath.Join(t.TempDir(), "approvald.yaml")
		if err := os.WriteFile(path, []byte(opts.config), 0o600); err != nil {
			t.Fatalf("write config: %v", err)
		}
		args = append(args, "--config", path)
	}
	s := &server{
		client: &http.Client{Transport: &http.Transport{}},
		stdout: newLineWriter(),
		stderr: newLineWriter(),
		exited: make(chan struct{}),
	}
	t.Cleanup(s.client.CloseIdleConnections)
	s.cmd = exec.Command(binary, args...)
	s.cmd.Env = append(os.Environ(), opts.env...)
	s.cmd.Stdout, s.cmd.Stderr = s.stdout, s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start serve: %v", err)
	}
	go func() {
		s.waitErr = s.cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-s.exited:
		default:
			s.cmd.Process.Kill()
			<-s.exited
		}
	})

	s.addr = waitListening(t, s.stderr, s.exited)
	return s
}

// waitListening returns the address of the "listening" log line written to stderr. It fails
// the test if exited is closed first.
func waitListening(t *testing.T, stderr *lineWriter, exited <-chan struct{}) string {
	t.Helper()
	deadline := time.After(startTimeout)
	for {
		select {
		case line := <-stderr.lines:
			var rec struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "listening" {
				return rec.Addr
			}
		case <-exited:
			t.Fatalf("serve exited before listening\nstderr:\n%s", stderr)
		case <-deadline:
			t.Fatalf("serve did not log \"listening\" within %s\nstderr:\n%s", startTimeout, stderr)
		}
	}
}

// bootstrapToken returns the token of the "bootstrap admin token: ..." line on stdout.
func (s *server) bootstrapToken(t *testing.T) string {
	t.Helper()
	select {
	case line := <-s.stdout.lines:
		token, ok := strings.CutPrefix(line, "bootstrap admin token: ")
		if !ok || !tokenLine.MatchString(token) {
			t.Fatalf("stdout: got %q, want \"bootstrap admin token: apv_...\"", line)
		}
		return token
	case <-time.After(startTimeout):
		t.Fatalf("no bootstrap token on stdout\nstderr:\n%s", s.stderr)
	}
	return ""
}

// stop sends SIGTERM and requires a clean exit (code 0) in time.
func (s *server) stop(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("signal serve: %v", err)
	}
	select {
	case <-s.exited:
		if s.waitErr != nil {
			t.Fatalf("serve after SIGTERM: %v, want exit 0\nstderr:\n%s", s.waitErr, s.stderr)
		}
	case <-time.After(exitTimeout):
		t.Fatalf("serve did not exit within %s of SIGTERM\nstderr:\n%s", exitTimeout, s.stderr)
	}
}

// response is an HTTP answer read in full.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (s *server) do(t *testing.T, method, path, token, key, body string) response {
	t.Helper()
	r, err := s.try(method, path, token, key, body, nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// try makes one request and returns its answer, or the error of a request that got none (the
// process died under it). header, when not nil, is added to the request.
func (s *server) try(method, path, token, key, body string, header http.Header) (response, error) {
	req, err := http.NewRequest(method, "http://"+s.addr+path, strings.NewReader(body))
	if err != nil {
		return response{}, err
	}
	for name, values := range header {
		req.Header[name] = values
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	client := s.client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, fmt.Errorf("read body: %w", err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

func (r response) wantStatus(t *testing.T, want int) {
	t.Helper()
	if r.status != want {
		t.Fatalf("got status %d, want %d; body %s", r.status, want, r.body)
	}
}

func (r response) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

// createToken runs `approvald token create` and returns the token it printed.
func createToken(t *testing.T, dsn, subject, role string) string {
	t.Helper()
	stdout, stderr, code := run(t, "token", "create", "--subject", subject, "--role", role, "--database-url", dsn)
	if code != 0 {
		t.Fatalf("token create %s: exit %d, stderr %s", subject, code, stderr)
	}
	token := strings.TrimSuffix(stdout, "\n")
	if !tokenLine.MatchString(token) {
		t.Fatalf("token create %s: got stdout %q, want one token line", subject, stdout)
	}
	return token
}

// run runs the binary to completion and returns its output and exit code.
func run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if exit, ok := err.(*exec.ExitError); ok {
		return out.String(), errOut.String(), exit.ExitCode()
	} else if err != nil {
		t.Fatalf("run approvald %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errOut.String(), 0
}

// lineWriter keeps everything a process writes and hands each complete line to lines, so that
// a test can wait for a line without polling. Lines nobody waits for are dropped from the
// channel but kept in the buffer.
type lineWriter struct {
	mu      sync.Mutex
	all     bytes.Buffer
	partial []byte
	lines   chan string
}

func newLineWriter() *lineWriter { return &lineWriter{lines: make(chan string, 256)} }

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.all.Write(p)
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		select {
		case w.lines <- string(w.partial[:i]):
		default:
		}
		w.partial = w.partial[i+1:]
	}
	return len(p), nil
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.all.String()
}
