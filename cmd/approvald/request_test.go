package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/client"
	"github.com/approvald/approval/httpapi"
	"github.com/approvald/approval/internal/testdb"
)

// gate is the real API in process over a fresh store, with tokens, for the request command
// run as a subprocess.
type gate struct {
	t      *testing.T
	store  approval.Store
	url    string
	tokens map[string]string
	api    http.Handler // the API the gate's server serves
}

func newGate(t *testing.T, kind string) *gate {
	t.Helper()
	g := &gate{t: t, store: testdb.Open(t, kind, nil), tokens: map[string]string{}}
	g.api = httpapi.New(httpapi.Config{Store: g.store, Service: &approval.Service{Store: g.store}, LongPollInterval: 50 * time.Millisecond})
	srv := httptest.NewServer(g.api)
	t.Cleanup(srv.Close)
	g.url = srv.URL
	for subject, role := range map[string]approval.Role{"ci-bot": approval.RoleRequester, "alice": approval.RoleApprover, "bob": approval.RoleApprover} {
		secret, _, err := (&approval.Service{Store: g.store}).CreateToken(context.Background(), tokenCommand, approval.TokenSpec{Subject: subject, Role: role})
		if err != nil {
			t.Fatalf("create token: %v", err)
		}
		g.tokens[subject] = secret
	}
	return g
}

// client returns a client acting as subject.
func (g *gate) client(subject string) *client.Client {
	c, err := client.New(g.url, g.tokens[subject])
	if err != nil {
		g.t.Fatal(err)
	}
	return c
}

// request starts approvald request for key as ci-bot with the extra args.
func (g *gate) request(key string, extra ...string) *gateRun {
	g.t.Helper()
	args := append([]string{"request", "--server", g.url, "--key", key, "--action", "deploy",
		"--title", "Deploy api " + key, "--approver", "alice", "--approver", "bob"}, extra...)
	r := &gateRun{stderr: newLineWriter(), done: make(chan struct{})}
	r.cmd = exec.Command(binary, args...)
	r.cmd.Env = append(os.Environ(), "APPROVALD_TOKEN="+g.tokens["ci-bot"])
	r.cmd.Stdout, r.cmd.Stderr = &r.stdout, r.stderr
	if err := r.cmd.Start(); err != nil {
		g.t.Fatalf("start approvald request: %v", err)
	}
	go func() {
		defer close(r.done)
		r.cmd.Wait()
	}()
	g.t.Cleanup(func() {
		r.cmd.Process.Kill()
		<-r.done
	})
	return r
}

// count is how many approvals the store holds.
func (g *gate) count() int {
	counts, err := g.store.ApprovalCounts(context.Background())
	if err != nil {
		g.t.Fatal(err)
	}
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}

type gateRun struct {
	cmd    *exec.Cmd
	stdout bytes.Buffer
	stderr *lineWriter
	done   chan struct{}
}

var linkLine = regexp.MustCompile(`/ui/approvals/(apr_[A-Za-z0-9]+)`)

// approvalID waits for the line with the approval's link and returns the id.
func (r *gateRun) approvalID(t *testing.T) string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case line := <-r.stderr.lines:
			if m := linkLine.FindStringSubmatch(line); m != nil {
				return m[1]
			}
		case <-r.done:
			t.Fatalf("approvald request exited before printing the link; stderr:\n%s", r.stderr)
		case <-timeout:
			t.Fatalf("no link printed; stderr:\n%s", r.stderr)
		}
	}
}

// exit waits for the command and returns its exit code and the approval it printed.
func (r *gateRun) exit(t *testing.T) (int, *client.Approval) {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("approvald request did not exit; stderr:\n%s", r.stderr)
	}
	var a client.Approval
	if err := json.Unmarshal(r.stdout.Bytes(), &a); err != nil {
		t.Fatalf("stdout is not the approval: %v\n%s\nstderr:\n%s", err, r.stdout.String(), r.stderr)
	}
	return r.cmd.ProcessState.ExitCode(), &a
}

// An approval given while the gate waits lets it through (0); the pipeline's rerun with the
// same key finds the decision at once (0) and asks nobody again.
func TestRequest_ApprovedWhileWaiting(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		g := newGate(t, kind)
		r := g.request("deploy-prod-1042", "--wait", "60s")
		id := r.approvalID(t)
		if _, err := g.client("alice").Approve(context.Background(), id, "ship it"); err != nil {
			t.Fatal(err)
		}
		code, a := r.exit(t)
		if code != exitApproved || a.ID != id || a.Status != client.StatusApproved {
			t.Fatalf("got exit %d, %s %s, want 0 and %s approved; stderr:\n%s", code, a.ID, a.Status, id, r.stderr)
		}
		if !strings.Contains(r.stderr.String(), "alice voted approve") || !strings.Contains(r.stderr.String(), g.url+"/ui/approvals/"+id) {
			t.Errorf("stderr lacks the progress or the link:\n%s", r.stderr)
		}

		start := time.Now()
		rerun := g.request("deploy-prod-1042", "--wait", "60s")
		code, a = rerun.exit(t)
		if code != exitApproved || a.ID != id {
			t.Fatalf("rerun: got exit %d, approval %s, want 0 and %s; stderr:\n%s", code, a.ID, id, rerun.stderr)
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("rerun took %s, want at once", d)
		}
		if got := rerun.stderr.String(); !strings.Contains(got, "asked for under key deploy-prod-1042, was already approved by alice at ") ||
			strings.Contains(got, "pending") || strings.Contains(got, "waiting") {
			t.Errorf("rerun stderr does not say at once that alice approved it:\n%s", got)
		}
		if n := g.count(); n != 1 {
			t.Errorf("got %d approvals, want 1", n)
		}
	})
}

// A rejection ends the gate with 1.
func TestRequest_Rejected(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		g := newGate(t, kind)
		r := g.request("deploy-prod-7", "--wait", "60s", "--quorum", "2")
		id := r.approvalID(t)
		if _, err := g.client("bob").Reject(context.Background(), id, "not on a Friday"); err != nil {
			t.Fatal(err)
		}
		code, a := r.exit(t)
		if code != exitRejected || a.Status != client.StatusRejected || a.RequiredApprovals != 2 {
			t.Fatalf("got exit %d, %s (quorum %d), want 1, rejected, 2; stderr:\n%s", code, a.Status, a.RequiredApprovals, r.stderr)
		}
	})
}

// A wait that ends with the approval pending gives 3, with the pending approval on stdout.
func TestRequest_WaitTimesOut(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		g := newGate(t, kind)
		ctxFile := t.TempDir() + "/ctx.json"
		if err := os.WriteFile(ctxFile, []byte(`{"commit": "9f2c1e"}`), 0o600); err != nil {
			t.Fatal(err)
		}
		r := g.request("deploy-prod-8", "--wait", "1s", "--context-file", ctxFile)
		code, a := r.exit(t)
		var compact bytes.Buffer
		json.Compact(&compact, a.Context)
		if code != exitWaitTimeout || a.Status != client.StatusPending || compact.String() != `{"commit":"9f2c1e"}` {
			t.Fatalf("got exit %d, %s %s, want 3 and the pending approval with its context; stderr:\n%s", code, a.Status, compact.String(), r.stderr)
		}
	})
}

// A cancelled approval gives 2; usage and server errors give 4.
func TestRequest_EndedAndErrors(t *testing.T) {
	t.Parallel()
	g := newGate(t, testdb.SQLite)
	res, err := g.client("ci-bot").CreateApproval(context.Background(), "deploy-9", client.CreateRequest{
		Action: "deploy", Title: "Deploy api deploy-9", Approvers: []string{"alice", "bob"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.client("ci-bot").Cancel(context.Background(), res.Approval.ID); err != nil {
		t.Fatal(err)
	}
	if code, a := g.request("deploy-9", "--wait", "60s").exit(t); code != exitEnded || a.Status != client.StatusCancelled {
		t.Errorf("cancelled: got exit %d, %s, want 2", code, a.Status)
	}

	// The same key with another title is a different request: 422, exit 4.
	r := g.request("deploy-9", "--title", "something else")
	<-r.done
	if code := r.cmd.ProcessState.ExitCode(); code != exitGateError || !strings.Contains(r.stderr.String(), "422") {
		t.Errorf("mismatch: got exit %d, want 4; stderr:\n%s", code, r.stderr)
	}
	_, stderr, code := run(t, "request", "--server", g.url, "--key", "k")
	if code != exitGateError || !strings.Contains(stderr, "missing --action") {
		t.Errorf("usage: got exit %d %q, want 4", code, stderr)
	}
}

// approvald approvals shows a table or JSON and votes as the token's subject.
func TestApprovalsCommand(t *testing.T) {
	t.Parallel()
	g := newGate(t, testdb.SQLite)
	res, err := g.client("ci-bot").CreateApproval(context.Background(), "deploy-10", client.CreateRequest{
		Action: "deploy", Title: "Deploy api v1.10", Approvers: []string{"alice"},
	})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Approval.ID
	as := func(subject string, args ...string) (string, string, int) {
		var out, errOut bytes.Buffer
		cmd := exec.Command(binary, append([]string{"approvals"}, args...)...)
		cmd.Env = append(os.Environ(), "APPROVALD_TOKEN="+g.tokens[subject], "APPROVALD_SERVER="+g.url)
		cmd.Stdout, cmd.Stderr = &out, &errOut
		cmd.Run()
		return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
	}

	out, stderr, code := as("alice", "list", "--status", "pending")
	if code != 0 || !strings.HasPrefix(out, "ID ") || !strings.Contains(out, id) || !strings.Contains(out, "0/1") {
		t.Errorf("list: got exit %d, stdout:\n%s\nstderr: %s", code, out, stderr)
	}
	out, stderr, code = as("alice", "list", "--waiting", "--json")
	if code != 0 || !strings.Contains(out, id) {
		t.Errorf("list --waiting before her vote: got exit %d, stdout:\n%s\nstderr: %s", code, out, stderr)
	}
	if _, stderr, code = as("alice", "list", "--waiting", "--status", "pending"); code != exitFailure || !strings.Contains(stderr, "400") {
		t.Errorf("list --waiting --status: got exit %d, stderr %q, want 1 and the 400", code, stderr)
	}
	out, _, code = as("alice", "approve", id, "--comment", "ship it")
	if code != 0 || !strings.Contains(out, "approved") || !strings.Contains(out, "alice approve") {
		t.Errorf("approve: got exit %d, stdout:\n%s", code, out)
	}
	out, _, code = as("ci-bot", "get", "--json", id)
	var a client.Approval
	if code != 0 || json.Unmarshal([]byte(out), &a) != nil || a.Status != client.StatusApproved || a.Decisions[0].Comment != "ship it" {
		t.Errorf("get --json: got exit %d, stdout:\n%s", code, out)
	}
	out, _, code = as("ci-bot", "list", "--json", "--status", "pending")
	if code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("list --json: got exit %d, stdout %q, want []", code, out)
	}
	out, _, code = as("alice", "list", "--json", "--waiting")
	if code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("list --waiting after her vote: got exit %d, stdout %q, want []", code, out)
	}
	_, stderr, code = as("ci-bot", "cancel", id)
	if code != exitFailure || !strings.Contains(stderr, "409") {
		t.Errorf("cancel a decided approval: got exit %d, stderr %q, want 1 and the 409", code, stderr)
	}
	if _, _, code = as("ci-bot", "get"); code != exitUsage {
		t.Errorf("get without an id: got exit %d, want 2", code)
	}
}

// approvald approvals get and list write what a terminal would act on (C0 and C1 control
// characters from a context) as escapes in their table; --json stays the JSON the server
// sent. PostgreSQL's jsonb gives a C1 character back unescaped, so both stores are run.
func TestApprovalsCommand_ControlCharacters(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		g := newGate(t, kind)
		res, err := g.client("ci-bot").CreateApproval(context.Background(), "deploy-11", client.CreateRequest{
			Action: "deploy", Title: "Deploy api v1.11", Approvers: []string{"alice"},
			Context: json.RawMessage("{\"csi\": \"\u009b31m\", \"esc\": \"\\u001b[31m\"}"),
		})
		if err != nil {
			t.Fatal(err)
		}
		id := res.Approval.ID
		run := func(args ...string) string {
			t.Helper()
			var out, errOut bytes.Buffer
			cmd := exec.Command(binary, append([]string{"approvals"}, args...)...)
			cmd.Env = append(os.Environ(), "APPROVALD_TOKEN="+g.tokens["alice"], "APPROVALD_SERVER="+g.url)
			cmd.Stdout, cmd.Stderr = &out, &errOut
			if err := cmd.Run(); err != nil {
				t.Fatalf("approvals %v: %v; stderr: %s", args, err, errOut.String())
			}
			return out.String()
		}
		for _, args := range [][]string{{"get", id}, {"list"}} {
			out := run(args...)
			for i, r := range out {
				if (r < 0x20 && r != '\n') || (r >= 0x7f && r <= 0x9f) {
					t.Errorf("approvals %v: the control character %U at byte %d reaches the terminal:\n%q", args, r, i, out)
					break
				}
			}
			if args[0] == "get" && (!strings.Contains(out, `\u009b31m`) || !strings.Contains(out, `\u001b[31m`)) {
				t.Errorf("approvals get: the context's control characters are not shown as escapes:\n%s", out)
			}
		}
		var a client.Approval
		if out := run("get", "--json", id); json.Unmarshal([]byte(out), &a) != nil {
			t.Fatalf("get --json is not JSON: %q", out)
		}
		var ctx map[string]string
		if json.Unmarshal(a.Context, &ctx) != nil || ctx["csi"] != "\u009b31m" || ctx["esc"] != "\x1b[31m" {
			t.Errorf("get --json: context %q, want the characters as sent", a.Context)
		}
	})
}
