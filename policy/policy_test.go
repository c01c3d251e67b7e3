package policy_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/approvald/approval"
	"github.com/approvald/approval/policy"
)

// config is the groups and policies sections of a configuration file.
type config struct {
	Groups   map[string]policy.Group `yaml:"groups"`
	Policies []policy.Policy         `yaml:"policies"`
}

const issueExample = `
groups:
  sre: [Alice, bob, carol]
  security: {members: [dave], oidc_group: platform-security}
  support-leads: [erin]
policies:
  - name: prod-deploy
    match: {action: deploy, when: 'context.env == "prod"'}
    requesters: [CI-Bot]
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
    match: {action: "*"}
    approvers: from_request
`

// MustCompile decodes text and compiles it.
func MustCompile(tb testing.TB, text string) *policy.Set {
	tb.Helper()
	s, err := compileText(text)
	if err != nil {
		tb.Fatalf("compile: %v", err)
	}
	return s
}

func compileText(text string) (*policy.Set, error) {
	var c config
	dec := yaml.NewDecoder(strings.NewReader(text))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return nil, err
	}
	return policy.Compile(c.Groups, c.Policies)
}

func TestCompile_groups(t *testing.T) {
	t.Parallel()
	s := MustCompile(t, issueExample)
	want := map[string]policy.Group{
		"sre":           {Members: []string{"alice", "bob", "carol"}},
		"security":      {Members: []string{"dave"}, OIDCGroup: "platform-security"},
		"support-leads": {Members: []string{"erin"}},
	}
	if got := s.Groups(); !reflect.DeepEqual(got, want) {
		t.Errorf("groups: got %+v, want %+v", got, want)
	}
	var infos []string
	for _, p := range s.Policies() {
		infos = append(infos, p.Name)
		if len(p.Version) != 16 {
			t.Errorf("%s: version %q, want 16 hex digits", p.Name, p.Version)
		}
	}
	if got, want := strings.Join(infos, ","), "prod-deploy,refunds,anything-else"; got != want {
		t.Errorf("policies: got %s, want %s", got, want)
	}
}

func TestCompile_errors(t *testing.T) {
	t.Parallel()
	const groups = "groups:\n  sre: [alice, bob]\n  idp: {oidc_group: platform}\n"
	tests := []struct {
		name, text, want string
	}{
		{"unknown group", groups + "policies:\n  - name: p\n    match: {action: deploy}\n    rules: [{group: ops}]\n",
			"policies[0] (p).stages[0].rules[0].group: unknown group \"ops\" (groups: idp, sre)"},
		{"more approvals than members", groups + "policies:\n  - name: p\n    match: {action: deploy}\n    rules: [{group: sre, approvals: 3}]\n",
			"policies[0] (p).stages[0].rules[0].approvals: 3 approvals of sre, which has 2 members"},
		{"duplicate name", groups + "policies:\n  - {name: p, match: {action: a}, rules: [{group: sre}]}\n  - {name: p, match: {action: b}, rules: [{group: sre}]}\n",
			"policies[1] (p).name: \"p\" is already the name of an earlier policy"},
		{"after a catch-all", groups + "policies:\n  - {name: all, match: {action: \"*\"}, approvers: from_request}\n  - {name: p, match: {action: b}, rules: [{group: sre}]}\n",
			"policies[1] (p): unreachable: the earlier policy \"all\" matches every action without a condition"},
		{"a bad name", groups + "policies:\n  - {name: p, match: {action: a}, requesters: [\"ci\u200bbot\"], rules: [{group: sre}]}\n",
			"policies[0] (p).requesters[0] contains the invisible character U+200B at character 3"},
		{"a bad member", "groups:\n  sre: [alice, \"b\u0430b\"]\n",
			"groups.sre[1] mixes the Latin and Cyrillic scripts"},
		{"a CEL syntax error", groups + "policies:\n  - name: p\n    match:\n      action: a\n      when: 'context.env = \"prod\"'\n    rules: [{group: sre}]\n",
			"policies[0] (p).match.when: line 8 of the configuration (line 1, column 13 of the condition): Syntax error"},
		{"a CEL type error", groups + "policies:\n  - {name: p, match: {action: a, when: 'context.env'}, rules: [{group: sre}]}\n",
			"policies[0] (p).match.when: the condition is of type dyn; it must be true or false (bool)"},
		{"an unknown variable", groups + "policies:\n  - {name: p, match: {action: a, when: 'ctx.env == 1'}, rules: [{group: sre}]}\n",
			"line 1, column 1 of the condition): undeclared reference to 'ctx'"},
		{"a condition over the cost limit", groups + "policies:\n  - {name: p, match: {action: a, when: 'context.l.all(x, context.l.all(y, x == y))'}, rules: [{group: sre}]}\n",
			"more than the limit of 1000000"},
		{"rules and approvers from the request", groups + "policies:\n  - {name: p, match: {action: a}, approvers: from_request, rules: [{group: sre}]}\n",
			"policies[0] (p): approvers: from_request lets the request name its approvers; it takes no rules or stages"},
		{"no rules", groups + "policies:\n  - {name: p, match: {action: a}}\n",
			"policies[0] (p): rules or stages are required (or approvers: from_request)"},
		{"a group and people", groups + "policies:\n  - {name: p, match: {action: a}, rules: [{group: sre, people: [x]}]}\n",
			"a rule names a group or people, not both"},
		{"reminders too often", groups + "policies:\n  - {name: p, match: {action: a}, rules: [{group: sre}], remind_every: 10s}\n",
			"policies[0] (p).remind_every: 10s is less than a minute; reminders come at most once a minute"},
		{"no action", groups + "policies:\n  - {name: p, match: {}, rules: [{group: sre}]}\n",
			"policies[0] (p).match.action: required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := compileText(tt.text)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestCompile_oidcGroupNeedsNoMembers(t *testing.T) {
	t.Parallel()
	MustCompile(t, "groups:\n  idp: {oidc_group: platform}\npolicies:\n  - {name: p, match: {action: a}, rules: [{group: idp, approvals: 3}]}\n")
}

func TestCompile_groupForms(t *testing.T) {
	t.Parallel()
	for _, text := range []string{"groups:\n  sre: alice\n", "groups:\n  sre: {member: [alice]}\n"} {
		if _, err := compileText(text); err == nil {
			t.Errorf("%q: got no error, want one", text)
		}
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	version := func(text string) string {
		return MustCompile(t, text).Policies()[0].Version
	}
	base := version("groups:\n  sre: [alice, bob]\npolicies:\n  - {name: p, match: {action: a}, rules: [{group: sre}]}\n")
	same := []string{
		// Names are normalised, members sorted, approvals 1 by default, rules are one stage.
		"groups:\n  sre: [Bob, alice]\npolicies:\n  - name: p\n    match: {action: a}\n    rules: [{group: sre, approvals: 1}]\n",
		"groups:\n  sre: [alice, bob]\npolicies:\n  - {name: p, match: {action: a}, stages: [{rules: [{group: sre}]}]}\n",
		"groups:\n  sre: [alice, bob]\n  other: [carol]\npolicies:\n  - {name: p, match: {action: a}, rules: [{group: sre}]}\n",
	}
	for _, text := range same {
		if got := version(text); got != base {
			t.Errorf("%q: got version %s, want %s (the same policy)", text, got, base)
		}
	}
	changed := []string{
		"groups:\n  sre: [alice, bob, carol]\npolicies:\n  - {name: p, match: {action: a}, rules: [{group: sre}]}\n",
		"groups:\n  sre: [alice, bob]\npolicies:\n  - {name: p, match: {action: a}, rules: [{group: sre, approvals: 2}]}\n",
		"groups:\n  sre: [alice, bob]\npolicies:\n  - {name: p, match: {action: a}, rules: [{group: sre}], expires_in: 1h}\n",
	}
	for _, text := range changed {
		if got := version(text); got == base {
			t.Errorf("%q: got version %s, want another (a changed policy)", text, got)
		}
	}
}

func TestResolve(t *testing.T) {
	t.Parallel()
	s := MustCompile(t, issueExample)
	tests := []struct {
		name    string
		in      policy.Input
		policy  string
		code    string
		message string
		skipped []string
		stages  []approval.Stage
	}{
		{
			name:   "prod deploy",
			in:     policy.Input{Action: "deploy", Requester: "ci-bot", Context: json.RawMessage(`{"env":"prod"}`)},
			policy: "prod-deploy",
			stages: []approval.Stage{{Rules: []approval.Rule{{Group: "sre", Approvals: 2}, {Group: "security", Approvals: 1}}}},
		},
		{
			name: "another requester", in: policy.Input{Action: "deploy", Requester: "mallory", Context: json.RawMessage(`{"env":"prod"}`)},
			policy: "prod-deploy", code: approval.EFORBIDDEN, message: "policy prod-deploy lets only ci-bot request deploy; mallory may not",
		},
		{
			name: "approvers named under a policy", in: policy.Input{Action: "deploy", Requester: "CI-BOT", Context: json.RawMessage(`{"env":"prod"}`), Approvers: []string{"mallory"}},
			policy: "prod-deploy", code: approval.EUNPROCESSABLE, message: "policy prod-deploy decides the approvers of deploy",
		},
		{
			name: "staging deploy falls through", in: policy.Input{Action: "deploy", Requester: "ci-bot", Context: json.RawMessage(`{"env":"staging"}`), Approvers: []string{"alice"}},
			policy: "anything-else", skipped: []string{`prod-deploy: its condition context.env == "prod" is false`, "refunds: its action is refund, not deploy"},
		},
		{
			name: "refund", in: policy.Input{Action: "refund", Requester: "support-bot"},
			policy: "refunds", skipped: []string{"prod-deploy: its action is deploy, not refund"},
			stages: []approval.Stage{{Rules: []approval.Rule{{Group: "support-leads", Approvals: 1}}}, {Rules: []approval.Rule{{People: []string{"fiona"}, Approvals: 1}}}},
		},
		{
			name: "a missing key refuses", in: policy.Input{Action: "deploy", Requester: "ci-bot"},
			code: approval.EINVALID, message: "policy prod-deploy: its condition context.env == \"prod\" could not be evaluated on this request: no such key: env",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := s.Resolve(context.Background(), tt.in)
			if got := approval.ErrorCode(err); got != tt.code {
				t.Fatalf("code: got %q (%v), want %q", got, err, tt.code)
			}
			if got := approval.ErrorMessage(err); !strings.HasPrefix(got, tt.message) {
				t.Errorf("message: got %q, want it to start %q", got, tt.message)
			}
			if res.Policy != tt.policy {
				t.Errorf("policy: got %q, want %q", res.Policy, tt.policy)
			}
			var skipped []string
			for _, s := range res.Skipped {
				skipped = append(skipped, s.Policy+": "+s.Reason)
			}
			if !reflect.DeepEqual(skipped, tt.skipped) {
				t.Errorf("skipped: got %q, want %q", skipped, tt.skipped)
			}
			if tt.stages != nil && !reflect.DeepEqual(res.Stages, tt.stages) {
				t.Errorf("stages: got %+v, want %+v", res.Stages, tt.stages)
			}
		})
	}
	res, _ := s.Resolve(context.Background(), policy.Input{Action: "deploy", Requester: "ci-bot", Context: json.RawMessage(`{"env":"prod"}`)})
	if res.ExpiresIn != 24*time.Hour || res.RemindEvery != 4*time.Hour || res.FromRequest {
		t.Errorf("prod-deploy: got expires_in %s remind_every %s from_request %v, want 24h 4h false", res.ExpiresIn, res.RemindEvery, res.FromRequest)
	}
}

func TestResolve_noPolicies(t *testing.T) {
	t.Parallel()
	s, err := policy.Compile(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Resolve(context.Background(), policy.Input{Action: "deploy", Requester: "ci-bot", Approvers: []string{"alice"}})
	if err != nil || !res.FromRequest || res.Policy != "" {
		t.Errorf("got %+v, %v, want from_request and no policy", res, err)
	}
}

func TestResolve_noMatch(t *testing.T) {
	t.Parallel()
	s := MustCompile(t, "groups: {sre: [alice]}\npolicies:\n  - {name: p, match: {action: deploy}, rules: [{group: sre}]}\n")
	_, err := s.Resolve(context.Background(), policy.Input{Action: "refund", Requester: "ci-bot"})
	if got, want := approval.ErrorMessage(err), "no policy applies to the action refund"; approval.ErrorCode(err) != approval.EUNPROCESSABLE || !strings.HasPrefix(got, want) {
		t.Errorf("got %s %q, want unprocessable %q", approval.ErrorCode(err), got, want)
	}
}

func TestResolve_conditionVariables(t *testing.T) {
	t.Parallel()
	s := MustCompile(t, `groups: {sre: [alice]}
policies:
  - name: p
    match:
      action: "*"
      when: |
        requester == "ci-bot" && title.startsWith("Deploy") && action == "deploy" &&
        context.replicas > 3 && context.tags.exists(t, t == "db")
    rules: [{group: sre}]
`)
	in := policy.Input{Action: "deploy", Title: "Deploy api", Requester: "CI-Bot", Context: json.RawMessage(`{"replicas": 4, "tags": ["web", "db"]}`)}
	if res, err := s.Resolve(context.Background(), in); err != nil || res.Policy != "p" {
		t.Errorf("got %q, %v, want p", res.Policy, err)
	}
	in.Context = json.RawMessage(`{"replicas": 3, "tags": ["db"]}`)
	if _, err := s.Resolve(context.Background(), in); approval.ErrorCode(err) != approval.EUNPROCESSABLE {
		t.Errorf("got %v, want no policy to apply", err)
	}
}

func TestDecode_unknownSettings(t *testing.T) {
	t.Parallel()
	for text, want := range map[string]string{
		"policies:\n  - {name: p, match: {action: a, whn: x}, approvers: from_request}\n": `line 2: unknown setting "whn" in match`,
		"groups:\n  sre: {members: [a], oidc: x}\n":                                       `line 2: unknown setting "oidc" in a group`,
	} {
		if _, err := compileText(text); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want an error containing %q", text, err, want)
		}
	}
}
