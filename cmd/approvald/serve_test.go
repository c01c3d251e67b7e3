package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
)

// A long-poll must not hold up shutdown for its whole wait: SIGTERM ends it after
// longPollGrace, and serve still drains cleanly (a long-poll still waiting when the drain
// timeout hits would make Run fail). Run in process so that the test knows, through ConnState, that
// the long-poll is in flight before it cancels (in the binary, SIGTERM cancels the same ctx).
func TestServe_ShutdownEndsLongPolls(t *testing.T) {
	t.Parallel()
	dsn := testdb.DSN(t, testdb.SQLite)

	stdout, stderr := newLineWriter(), newLineWriter()
	cmd := NewServeCommand(stdout, stderr)
	// The remote address of every connection that starts a request.
	active := make(chan string, 64)
	cmd.connState = func(conn net.Conn, state http.ConnState) {
		if state == http.StateActive {
			active <- conn.RemoteAddr().String()
		}
	}
	if err := cmd.ParseFlags(context.Background(), []string{"--listen", "127.0.0.1:0", "--database-url", dsn}); err != nil {
		t.Fatalf("parse flags: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- cmd.Run(ctx) }()
	defer cmd.Close()

	srv := &server{addr: waitListening(t, stderr, nil), stdout: stdout, stderr: stderr}
	admin := srv.bootstrapToken(t)
	created := srv.do(t, "POST", "/v1/approvals", admin, "deploy-prod-7", `{"action": "deploy", "title": "t", "approvers": ["alice"]}`)
	created.wantStatus(t, http.StatusCreated)
	var a struct{ ID string }
	created.decode(t, &a)

	// The long-poll goes on a connection of its own, whose address tells its request apart
	// from the create's in connState. The events of the requests above are all in active by
	// now (the hook runs before a request is handled): dropped, so that one of an earlier,
	// closed connection whose port the long-poll's dial reuses cannot pass for the long-poll
	// (cancelling then would close the listener with the long-poll's connection not yet
	// accepted, and the client would read EOF).
	for drained := false; !drained; {
		select {
		case <-active:
		default:
			drained = true
		}
	}
	dialed := make(chan string, 1)
	client := &http.Client{Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err == nil {
				dialed <- conn.LocalAddr().String()
			}
			return conn, err
		},
	}}
	type answer struct {
		status int
		body   []byte
		err    error
	}
	polled := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest("GET", "http://"+srv.addr+"/v1/approvals/"+a.ID+"?wait=60s&version=1", nil)
		req.Header.Set("Authorization", "Bearer "+admin)
		resp, err := client.Do(req)
		if err != nil {
			polled <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		polled <- answer{status: resp.StatusCode, body: body, err: err}
	}()
	deadline := time.After(startTimeout)
	var local string
	select {
	case local = <-dialed:
	case <-deadline:
		t.Fatal("the long-poll never connected")
	}
	for inFlight := false; !inFlight; {
		select {
		case remote := <-active:
			inFlight = remote == local
		case <-deadline:
			t.Fatal("the long-poll never reached the server")
		}
	}

	cancel()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("serve: got %v, want a clean stop", err)
		}
	case <-time.After(exitTimeout):
		t.Fatalf("serve did not stop within %s with a long-poll in flight", exitTimeout)
	}
	if err := cmd.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	// The long-poll is answered rather than left hanging or dropped, and, as docs/http-api.md
	// promises, with 200 and the approval even though shutdown cut its wait short.
	got := <-polled
	if got.err != nil {
		t.Fatalf("long-poll: %v", got.err)
	}
	if got.status != http.StatusOK {
		t.Fatalf("long-poll: got %d %s, want 200", got.status, got.body)
	}
	var polledApproval struct{ ID string }
	if err := json.Unmarshal(got.body, &polledApproval); err != nil || polledApproval.ID != a.ID {
		t.Fatalf("long-poll: got %s (%v), want the approval %s", got.body, err, a.ID)
	}
	if !strings.Contains(stderr.String(), `"msg":"stopped"`) {
		t.Errorf("no \"stopped\" log line:\n%s", stderr)
	}
}

// TestDefaultMemoryLimit: serve sets its soft memory limit only when GOMEMLIMIT does not
// name one.
func TestDefaultMemoryLimit(t *testing.T) {
	unset := func(string) (string, bool) { return "", false }
	if limit, ok := defaultMemoryLimit(unset); !ok || limit != DefaultMemoryLimit {
		t.Errorf("GOMEMLIMIT unset: got %d, %v; want %d, true", limit, ok, DefaultMemoryLimit)
	}
	set := func(k string) (string, bool) { return "256MiB", k == "GOMEMLIMIT" }
	if limit, ok := defaultMemoryLimit(set); ok {
		t.Errorf("GOMEMLIMIT=256MiB: got %d, true; want the runtime's own limit left alone", limit)
	}
}

// TestServe_LogLinesHeld: with log.flush_interval set, serve writes the "listening" line at
// once (whoever started it waits for the address), holds an access line, and writes it and
// "stopped" by the time Run returns. The interval is an hour, and the configuration leaves
// serve no warning to give (one would write the lines held), so only the flushes the test
// names can have written anything.
func TestServe_LogLinesHeld(t *testing.T) {
	t.Parallel()
	dsn := testdb.DSN(t, testdb.SQLite)
	config := filepath.Join(t.TempDir(), "approvald.yaml")
	if err := os.WriteFile(config, []byte("log: {flush_interval: 1h}\nweb: {session_key: 0123456789abcdef0123456789abcdef}\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	stdout, stderr := newLineWriter(), newLineWriter()
	cmd := NewServeCommand(stdout, stderr)
	if err := cmd.ParseFlags(context.Background(), []string{"--listen", "127.0.0.1:0", "--database-url", dsn, "--config", config}); err != nil {
		t.Fatalf("parse flags: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- cmd.Run(ctx) }()
	defer func() {
		cancel()
		<-stopped
		cmd.Close()
	}()

	srv := &server{addr: waitListening(t, stderr, nil), stdout: stdout, stderr: stderr, client: &http.Client{}}
	srv.do(t, "GET", "/v1/approvals/apr_nothing", "", "", "").wantStatus(t, http.StatusUnauthorized)
	const accessLine = `"msg":"request"`
	if strings.Contains(stderr.String(), accessLine) {
		t.Fatalf("the access line was written before the interval passed:\n%s", stderr)
	}

	cancel()
	if err := <-stopped; err != nil {
		t.Fatalf("run: %v", err)
	}
	stopped <- nil // for the deferred stop
	log := stderr.String()
	if !strings.Contains(log, accessLine) || !strings.Contains(log, `"msg":"stopped"`) {
		t.Errorf("after Run returned: want the access line and \"stopped\" written:\n%s", log)
	}
}

// migrated is a test store for serve's steps that take the store as migrated already.
type migrated struct{ approval.Store }

func (migrated) Migrate(context.Context) error { return nil }

// TestServe_BootstrapTokenExpires: the admin token serve prints on a new database expires
// bootstrap.token_ttl after it is made (a day by default), so a copy left in a terminal's
// scrollback or a deployment log stops working; a second serve on the database makes none.
func TestServe_BootstrapTokenExpires(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		st := testdb.Open(t, kind, nil)
		var out strings.Builder
		c := &ServeCommand{stdout: &out, config: DefaultConfig(), logger: slog.New(slog.DiscardHandler), store: migrated{st}}
		made := approval.Now()
		if err := c.bootstrap(t.Context()); err != nil {
			t.Fatal(err)
		}
		secret, ok := strings.CutPrefix(strings.TrimSpace(out.String()), "bootstrap admin token: ")
		if !ok {
			t.Fatalf("stdout %q, want the bootstrap token", out.String())
		}
		at := func(d time.Duration) error {
			svc := &approval.Service{Store: st, Now: func() time.Time { return made.Add(d) }}
			_, err := svc.Authenticate(t.Context(), secret)
			return err
		}
		if err := at(24*time.Hour - time.Minute); err != nil {
			t.Errorf("a minute before its day is out: %v, want the token to work", err)
		}
		if err := at(24*time.Hour + time.Second); approval.ErrorCode(err) != approval.EUNAUTHORIZED {
			t.Errorf("after its day: %v, want it refused as expired", err)
		}
		out.Reset()
		if err := c.bootstrap(t.Context()); err != nil || out.Len() != 0 {
			t.Errorf("second bootstrap: %v, printed %q; want nothing", err, out.String())
		}
	})
}
