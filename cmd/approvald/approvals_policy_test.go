package main

import (
	"bytes"
	"context"
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
