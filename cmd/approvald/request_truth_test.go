package main

import (
	"context"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/approvald/approval/client"
	"github.com/approvald/approval/internal/testdb"
)

// A rerun of a rejected approval says at once who rejected it and when, and exits 1 without
// waiting.
func TestRequest_RerunOfDecidedSaysSo(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		g := newGate(t, kind)
		r := g.request("deploy-prod-11", "--wait", "60s")
		id := r.approvalID(t)
		if _, err := g.client("bob").Reject(context.Background(), id, "not on a Friday"); err != nil {
			t.Fatal(err)
		}
		if code, _ := r.exit(t); code != exitRejected {
			t.Fatalf("first run: got exit %d, want %d; stderr:\n%s", code, exitRejected, r.stderr)
		}

		rerun := g.request("deploy-prod-11", "--wait", "30m")
		code, a := rerun.exit(t)
		if code != exitRejected || a.Status != client.StatusRejected {
			t.Fatalf("rerun: got exit %d, %s, want %d and rejected; stderr:\n%s", code, a.Status, exitRejected, rerun.stderr)
		}
		want := regexp.MustCompile(`approval ` + id + `, asked for under key deploy-prod-11, was already rejected by bob at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ: http`)
		got := rerun.stderr.String()
		if !want.MatchString(got) {
			t.Errorf("rerun: got stderr\n%s\nwant a line matching %s", got, want)
		}
		if strings.Contains(got, "pending") || strings.Contains(got, "waiting up to") {
			t.Errorf("rerun: got stderr\n%s\nwant no word of pending or waiting", got)
		}
	})
}

// While the server cannot be reached the gate says it is retrying and since when, and says
// so again when the server answers; the run then goes on as usual.
func TestRequest_UnreachableServer(t *testing.T) {
	t.Parallel()
	g := newGate(t, testdb.SQLite)
	// A port with nothing listening: taken from the system, then closed.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	r := g.request("deploy-prod-12", "--server", "http://"+addr)
	retrying := regexp.MustCompile(`^cannot reach http://` + regexp.QuoteMeta(addr) + ` \(.*connection refused\); retrying since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`)
	timeout := time.After(30 * time.Second)
	for seen := false; !seen; {
		select {
		case line := <-r.stderr.lines:
			seen = retrying.MatchString(line)
		case <-r.done:
			t.Fatalf("the gate exited while the server was down; stderr:\n%s", r.stderr)
		case <-timeout:
			t.Fatalf("got stderr\n%s\nwant a line matching %s", r.stderr, retrying)
		}
	}

	// The server comes up on that address.
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen again on %s: %v", addr, err)
	}
	srv := &http.Server{Handler: g.api}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	code, a := r.exit(t)
	if code != exitWaitTimeout || a.Status != client.StatusPending {
		t.Fatalf("got exit %d, %s, want %d and the pending approval; stderr:\n%s", code, a.Status, exitWaitTimeout, r.stderr)
	}
	if got := r.stderr.String(); !regexp.MustCompile(`http://` + regexp.QuoteMeta(addr) + ` answers again, after \d+s`).MatchString(got) {
		t.Errorf("got stderr\n%s\nwant a line saying the server answers again", got)
	}
	if n := g.count(); n != 1 {
		t.Errorf("got %d approvals, want 1", n)
	}
}

// --help shows each default once, and a server's refusal is one line with one prefix.
func TestRequest_HelpAndErrorsAreClean(t *testing.T) {
	t.Parallel()
	_, help, code := run(t, "request", "--help")
	if code != 0 {
		t.Errorf("--help: got exit %d, want 0", code)
	}
	for _, line := range strings.Split(help, "\n") {
		if n := strings.Count(line, "(default"); n > 1 {
			t.Errorf("--help: got %q, want the default named once", line)
		}
	}
	if !strings.Contains(help, `$APPROVALD_SERVER sets the default (default "`) {
		t.Errorf("--help: got\n%s\nwant --server's default and where it comes from", help)
	}

	g := newGate(t, testdb.SQLite)
	first := g.request("deploy-13")
	first.exit(t)
	r := g.request("deploy-13", "--title", "something else")
	<-r.done
	got := strings.TrimSpace(r.stderr.String())
	lines := strings.Split(got, "\n")
	last := lines[len(lines)-1]
	if code := r.cmd.ProcessState.ExitCode(); code != exitGateError {
		t.Errorf("mismatch: got exit %d, want %d", code, exitGateError)
	}
	if !strings.HasPrefix(last, "approvald request: 422 ") || strings.Count(last, "approvald") != 1 {
		t.Errorf("mismatch: got %q, want one line starting \"approvald request: 422 \" with no other prefix", last)
	}
}
