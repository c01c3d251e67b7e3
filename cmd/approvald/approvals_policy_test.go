package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/client"
	"github.com/approvald/approval/httpapi"
	"github.com/approvald/approval/internal/testdb"
)

// twoStages applies one policy to every create: 1 of sre, then carol.
type twoStages struct{}

// List and Groups: the test lists neither.
func (twoStages) List() []approval.PolicyInfo  { return nil }
func (twoStages) Groups() []approval.GroupInfo { return nil }

func (twoStages) Resolve(context.Context, approval.PolicyInput) (*approval.PolicyDecision, error) {
	return &approval.PolicyDecision{Resolved: approval.Resolved{
		Policy: "two-stages", Version: "0123456789abcdef",
		Stages: []approval.Stage{
			{Rules: []approval.Rule{{Group: "sre", Approvals: 1}}},
			{Rules: []approval.Rule{{People: []string{"carol"}, Approvals: 1}}},
		},
	}}, nil
}

// approvald approvals get shows an approval's policy, its current stage and the progress of
// that stage's rules, as the notifications do.
func TestApprovalsCommand_Policy(t *testing.T) {
	t.Parallel()
	g := newGate(t, testdb.SQLite)
	svc := &approval.Service{Store: g.store, Policies: twoStages{}, Members: approval.GroupMembers{"sre": {"alice", "bob"}}}
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Store: g.store, Service: svc, LongPollInterval: 50 * time.Millisecond}))
	t.Cleanup(srv.Close)
	g.url = srv.URL
	res, err := g.client("ci-bot").CreateApproval(t.Context(), "refund-1", client.CreateRequest{Action: "refund", Title: "Refund 40 EUR"})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Approval.ID
	get := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		cmd := exec.Command(binary, append([]string{"approvals"}, args...)...)
		cmd.Env = append(os.Environ(), "APPROVALD_TOKEN="+g.tokens["alice"], "APPROVALD_SERVER="+g.url)
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("approvals %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
		}
		return out.String()
	}
	lines := func(out string) []string {
		var l []string
		for _, line := range strings.Split(out, "\n") {
			l = append(l, strings.Join(strings.Fields(line), " "))
		}
		return l
	}
	out := lines(get("get", id))
	for _, want := range []string{"policy two-stages (version 0123456789abcdef)", "stage stage 1 of 2", "progress sre: 0 of 1"} {
		if !slices.Contains(out, want) {
			t.Errorf("get before a vote: want the line %q in\n%s", want, strings.Join(out, "\n"))
		}
	}
	out = lines(get("approve", id))
	for _, want := range []string{"stage stage 2 of 2", "progress carol: 0 of 1"} {
		if !slices.Contains(out, want) {
			t.Errorf("approve: want the line %q in\n%s", want, strings.Join(out, "\n"))
		}
	}
}

// Under a policy the server chooses the approvers: approvald request asks without
// --approver, and the approval it prints carries the policy's rules.
func TestRequest_UnderPolicyNeedsNoApprover(t *testing.T) {
	t.Parallel()
	g := newGate(t, testdb.SQLite)
	svc := &approval.Service{Store: g.store, Policies: twoStages{}, Members: approval.GroupMembers{"sre": {"alice", "bob"}}}
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Store: g.store, Service: svc, LongPollInterval: 50 * time.Millisecond}))
	t.Cleanup(srv.Close)
	var out, errOut bytes.Buffer
	cmd := exec.Command(binary, "request", "--server", srv.URL, "--key", "refund-2", "--action", "refund", "--title", "Refund 40 EUR")
	cmd.Env = append(os.Environ(), "APPROVALD_TOKEN="+g.tokens["ci-bot"])
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != exitWaitTimeout {
		t.Fatalf("got exit %d (%v), want %d (pending); stderr:\n%s", code, err, exitWaitTimeout, errOut.String())
	}
	var a client.Approval
	if err := json.Unmarshal(out.Bytes(), &a); err != nil {
		t.Fatalf("stdout is not the approval: %v\n%s", err, out.String())
	}
	if a.Status != client.StatusPending || a.Policy == nil {
		t.Errorf("got %s with policy %v, want pending under two-stages", a.Status, a.Policy)
	}

	// Without a policy the server still asks for the approvers, and the gate says why.
	errOut.Reset()
	cmd = exec.Command(binary, "request", "--server", g.url, "--key", "k", "--action", "deploy", "--title", "Deploy")
	cmd.Env = append(os.Environ(), "APPROVALD_TOKEN="+g.tokens["ci-bot"])
	cmd.Stderr = &errOut
	cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != exitGateError || !strings.Contains(errOut.String(), "approvers is required") {
		t.Errorf("no policy, no approver: got exit %d %q, want 4 naming approvers", code, errOut.String())
	}
}
