package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
)

const policyConfig = `
groups:
  sre: [alice, bob, carol]
  security: {members: [dave], oidc_group: platform-security}
  support-leads: [erin]
policies:
  - name: prod-deploy
    match: {action: deploy, when: 'context.env == "prod"'}
    requesters: [ci-bot]
    rules:
      - {group: sre, approvals: 2}
      - {group: security, approvals: 1}
    expires_in: 24h
    remind_every: 4h
  - name: refunds
    match: {action: refund}
    stages:
      - rules: [{group: support-leads, approvals: 1}]
      - rules: [{people: [fiona], approvals: 1}]
  - name: anything-else
    match: {action: "*", when: 'action != "drop"'}
    approvers: from_request
`

// writeConfig writes text to a configuration file and returns its path.
func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "approvald.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestPolicyCheck(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, policyConfig)
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout []string // lines, in order, each contained in one line of stdout
		stderr string
	}{
		{
			name: "prod deploy",
			args: []string{"--action", "deploy", "--context", `{"env":"prod"}`, "--requester", "CI-Bot"},
			stdout: []string{"policy prod-deploy (version ", "stage 1:", "2 of sre: alice, bob, carol",
				"1 of security: dave, members of platform-security at sign-in", "expires in 24h0m0s", "reminders every 4h0m0s", "a create would be accepted"},
		},
		{
			name: "the requester is left out of who is asked",
			args: []string{"--action", "deploy", "--context", `{"env":"prod"}`, "--requester", "ci-bot", "--title", "Deploy"},
			code: 0, stdout: []string{"2 of sre: alice, bob, carol"},
		},
		{
			name:   "another requester",
			args:   []string{"--action", "deploy", "--context", `{"env":"prod"}`, "--requester", "mallory"},
			code:   exitPolicyForbidden,
			stdout: []string{"policy prod-deploy (version "},
			stderr: "a create would be refused: policy prod-deploy lets only ci-bot request deploy; mallory may not",
		},
		{
			name:   "approvers named under a policy",
			args:   []string{"--action", "deploy", "--context", `{"env":"prod"}`, "--requester", "ci-bot", "--approvers", "mallory"},
			code:   exitPolicyInvalid,
			stderr: "policy prod-deploy decides the approvers of deploy",
		},
		{
			name: "staging falls through to the request's approvers",
			args: []string{"--action", "deploy", "--context", `{"env":"staging"}`, "--requester", "ci-bot", "--approvers", "alice,bob"},
			stdout: []string{`policy prod-deploy does not apply: its condition context.env == "prod" is false`,
				"policy refunds does not apply: its action is refund, not deploy", "policy anything-else (version ",
				"approvers from the request: alice, bob", "a create would be accepted"},
		},
		{
			name:   "stages",
			args:   []string{"--action", "refund", "--requester", "support-bot"},
			stdout: []string{"policy refunds (version ", "stage 1:", "1 of support-leads: erin", "stage 2:", "1 of fiona: fiona", "a create would be accepted"},
		},
		{
			name:   "only the requester could meet it",
			args:   []string{"--action", "refund", "--requester", "fiona"},
			code:   exitPolicyInvalid,
			stdout: []string{"1 of fiona: nobody but the requester"},
			stderr: "the policy could only be met with the requester's own vote: stage 2 (1 of fiona)",
		},
		{
			name:   "no policy applies",
			args:   []string{"--action", "drop", "--requester", "ci-bot"},
			code:   exitPolicyInvalid,
			stderr: "no policy applies to the action drop",
		},
		{
			name:   "a missing context key",
			args:   []string{"--action", "deploy", "--requester", "ci-bot"},
			code:   exitPolicyInvalid,
			stderr: "could not be evaluated on this request: no such key: env",
		},
		{
			name:   "no action",
			args:   []string{"--requester", "ci-bot"},
			code:   exitUsage,
			stderr: "--action is required",
		},
		{
			name:   "a context that is not an object",
			args:   []string{"--action", "deploy", "--requester", "ci-bot", "--context", "[1]"},
			code:   exitUsage,
			stderr: "--context: must be a JSON object",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := run(t, append([]string{"policy", "check", "--config", cfg}, tt.args...)...)
			if code != tt.code {
				t.Fatalf("exit code: got %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, stdout, stderr)
			}
			lines := strings.Split(stdout, "\n")
			for _, want := range tt.stdout {
				i := 0
				for i < len(lines) && !strings.Contains(lines[i], want) {
					i++
				}
				if i == len(lines) {
					t.Fatalf("stdout: got %q, want a line containing %q after the lines before", stdout, want)
				}
				lines = lines[i+1:]
			}
			if !strings.Contains(stderr, tt.stderr) {
				t.Errorf("stderr: got %q, want it to contain %q", stderr, tt.stderr)
			}
		})
	}
}

func TestPolicyCheck_noPolicies(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := run(t, "policy", "check", "--config", writeConfig(t, "listen: 127.0.0.1:0\n"), "--action", "deploy", "--requester", "ci-bot", "--approvers", "alice")
	if code != exitOK {
		t.Fatalf("exit code: got %d, want 0\nstderr: %s", code, stderr)
	}
	for _, want := range []string{"no policies are configured: the request names its approvers", "approvers from the request: alice", "a create would be accepted"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout: got %q, want it to contain %q", stdout, want)
		}
	}
}

// TestPolicyCheck_badConfiguration: a policy that does not compile stops every command that
// reads the configuration, naming the policy and, for a condition, the line and column.
func TestPolicyCheck_badConfiguration(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, text, want string
	}{
		{
			name: "a CEL syntax error",
			text: "groups: {sre: [alice]}\npolicies:\n  - name: prod\n    match:\n      action: deploy\n      when: |\n        action == \"deploy\" &&\n          context.env = \"prod\"\n    rules: [{group: sre}]\n",
			want: "policies[0] (prod).match.when: line 8 of the configuration (line 2, column 15 of the condition): Syntax error",
		},
		{
			name: "an unknown group",
			text: "policies:\n  - {name: prod, match: {action: deploy}, rules: [{group: sre}]}\n",
			want: "policies[0] (prod).stages[0].rules[0].group: unknown group \"sre\" (groups: none are configured)",
		},
		{
			name: "a policy after a catch-all",
			text: "policies:\n  - {name: all, match: {action: \"*\"}, approvers: from_request}\n  - {name: late, match: {action: deploy}, approvers: from_request}\n",
			want: "policies[1] (late): unreachable",
		},
		{
			name: "more approvals than members",
			text: "groups: {sre: [alice, bob]}\npolicies:\n  - {name: prod, match: {action: deploy}, rules: [{group: sre, approvals: 3}]}\n",
			want: "policies[0] (prod).stages[0].rules[0].approvals: 3 approvals of sre, which has 2 members",
		},
		{
			name: "an oidc_group that is no name",
			text: "groups: {sre: {members: [alice], oidc_group: \"\"}, ops: {oidc_group: \"a\\tb\"}}\npolicies:\n  - {name: prod, match: {action: deploy}, rules: [{group: sre}]}\n",
			want: "groups.ops.oidc_group",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := writeConfig(t, tt.text)
			for _, args := range [][]string{
				{"policy", "check", "--config", cfg, "--action", "deploy", "--requester", "ci-bot"},
				{"migrate", "--config", cfg, "--database-url", "file:" + filepath.Join(t.TempDir(), "a.db")},
				{"check", "--config", cfg, "--database-url", "file:" + filepath.Join(t.TempDir(), "b.db")},
			} {
				_, stderr, code := run(t, args...)
				if code != exitUsage || !strings.Contains(stderr, tt.want) {
					t.Errorf("%s: got exit %d, stderr %q, want %d and %q", args[0], code, stderr, exitUsage, tt.want)
				}
			}
		})
	}
}

// TestServicePolicies: serve gives the Service no policies when none are configured (the
// requester names the approvers), and otherwise the configuration's, resolved as policy
// check resolves them, with the groups' members.
func TestServicePolicies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	empty, err := ParseConfig(strings.NewReader("database_url: file:x.db\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := empty.Validate(); err != nil {
		t.Fatal(err)
	}
	if p, m := servicePolicies(empty); p != nil || m != nil {
		t.Fatalf("got policies %v and members %v with no policies configured, want none", p, m)
	}

	cfg, err := ParseConfig(strings.NewReader("database_url: file:x.db\n" + policyConfig))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	p, m := servicePolicies(cfg)
	if p == nil || m == nil {
		t.Fatal("got no policies or no members, want the configuration's")
	}
	if !m.InGroup("bob", "sre") || m.InGroup("dave", "sre") {
		t.Errorf("got sre membership bob %v, dave %v; want true, false", m.InGroup("bob", "sre"), m.InGroup("dave", "sre"))
	}
	d, err := p.Resolve(ctx, approval.PolicyInput{Action: "deploy", Requester: "ci-bot", Context: json.RawMessage(`{"env":"prod"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if d.Resolved.Policy != "prod-deploy" || d.FromRequest || d.ExpiresIn != 24*time.Hour || len(d.Resolved.Stages) != 1 || len(d.Resolved.Stages[0].Rules) != 2 {
		t.Errorf("got %+v, want prod-deploy's one stage of two rules, expiring in 24h", d)
	}
	if d, err := p.Resolve(ctx, approval.PolicyInput{Action: "anything", Requester: "ci-bot", Approvers: []string{"alice"}}); err != nil || !d.FromRequest {
		t.Errorf("got %+v, %v; want from_request", d, err)
	}
	if _, err := p.Resolve(ctx, approval.PolicyInput{Action: "deploy", Requester: "mallory", Context: json.RawMessage(`{"env":"prod"}`)}); approval.ErrorCode(err) != approval.EFORBIDDEN {
		t.Errorf("got %v for mallory's deploy, want %s", err, approval.EFORBIDDEN)
	}
}

// TestServe_Policies: serve with policies in its configuration holds creates and votes to
// them (docs/policies.md, "Creates and votes").
func TestServe_Policies(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		dsn := testdb.DSN(t, kind)
		srv := startServeWith(t, dsn, serveOptions{config: policyConfig})
		ciBot := createToken(t, dsn, "ci-bot", "requester")
		mallory := createToken(t, dsn, "mallory", "requester")
		alice := createToken(t, dsn, "alice", "approver")
		fiona := createToken(t, dsn, "fiona", "approver")

		const deploy = `{"action": "deploy", "title": "Deploy", "context": {"env": "prod"}}`
		srv.do(t, "POST", "/v1/approvals", mallory, "d-1", deploy).wantStatus(t, http.StatusForbidden)
		srv.do(t, "POST", "/v1/approvals", ciBot, "d-2", `{"action": "deploy", "title": "Deploy", "context": {"env": "prod"}, "approvers": ["mallory"]}`).
			wantStatus(t, http.StatusUnprocessableEntity)
		srv.do(t, "POST", "/v1/approvals", ciBot, "d-3", `{"action": "drop", "title": "Drop", "approvers": ["alice"]}`).
			wantStatus(t, http.StatusUnprocessableEntity)
		created := srv.do(t, "POST", "/v1/approvals", ciBot, "d-4", deploy)
		created.wantStatus(t, http.StatusCreated)
		var a struct {
			ID     string `json:"id"`
			Status string `json:"status"`
			Policy *struct {
				Name         string `json:"name"`
				CurrentStage int    `json:"current_stage"`
			} `json:"policy"`
		}
		created.decode(t, &a)
		if a.Policy == nil || a.Policy.Name != "prod-deploy" || a.Policy.CurrentStage != 1 {
			t.Fatalf("created: got %s, want the policy prod-deploy in stage 1", created.body)
		}
		srv.do(t, "POST", "/v1/approvals/"+a.ID+"/approve", alice, "", "").wantStatus(t, http.StatusOK)

		refund := srv.do(t, "POST", "/v1/approvals", ciBot, "r-1", `{"action": "refund", "title": "Refund"}`)
		refund.wantStatus(t, http.StatusCreated)
		refund.decode(t, &a)
		srv.do(t, "POST", "/v1/approvals/"+a.ID+"/approve", fiona, "", "").wantStatus(t, http.StatusForbidden)
	})
}
