package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/approvald/approval"
	"github.com/approvald/approval/policy"
)

// The policy check command's exit codes (docs/policies.md, "Checking a request"): 0 when a
// create would be accepted, and, when it would be refused, one code per answer the API
// would give.
const (
	exitPolicyInvalid   = 3 // refused as invalid: no policy applies, approvers not taken, a rule only the requester could meet
	exitPolicyForbidden = 4 // refused as forbidden: the requester may not ask for it
)

var _ command = (*PolicyCheckCommand)(nil)

// PolicyCheckCommand explains which policy of the configuration applies to a request, why
// each earlier one did not, and who would be asked in each stage, without a database or a
// server: the configuration is the one serve reads.
type PolicyCheckCommand struct {
	stdout io.Writer
	stderr io.Writer

	config Config
	input  policy.Input
}

// NewPolicyCheckCommand returns a PolicyCheckCommand writing to the given streams.
func NewPolicyCheckCommand(stdout, stderr io.Writer) *PolicyCheckCommand {
	return &PolicyCheckCommand{stdout: stdout, stderr: stderr}
}

// ParseFlags parses the flags and loads and validates the configuration, policies included.
func (c *PolicyCheckCommand) ParseFlags(ctx context.Context, args []string) error {
	fs := newFlagSet("approvald policy check", policyCheckUsage, c.stderr)
	var cf configFlags
	cf.register(fs)
	action := fs.String("action", "", "the request's `ACTION` (required)")
	requester := fs.String("requester", "", "the `NAME` of the requester, a token's subject (required)")
	title := fs.String("title", "", "the request's `TITLE`")
	reqContext := fs.String("context", "", "the request's context, a JSON `OBJECT`")
	approvers := fs.String("approvers", "", "the approvers the request names, `a,b`")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case *action == "":
		return errors.New("--action is required")
	case *requester == "":
		return errors.New("--requester is required")
	}
	in := policy.Input{Action: *action, Title: *title}
	var err error
	if in.Requester, err = approval.NormalizeName("--requester", *requester); err != nil {
		return errors.New(approval.ErrorMessage(err))
	}
	if *reqContext != "" {
		var obj map[string]any
		if err := json.Unmarshal([]byte(*reqContext), &obj); err != nil {
			return fmt.Errorf("--context: must be a JSON object: %w", err)
		}
		in.Context = json.RawMessage(*reqContext)
	}
	if *approvers != "" {
		in.Approvers = strings.Split(*approvers, ",")
	}
	cfg, err := cf.load()
	if err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	c.config, c.input = cfg, in
	return nil
}

// Run prints the explanation and returns an exitError when the create would be refused.
func (c *PolicyCheckCommand) Run(ctx context.Context) error {
	set, w, in := c.config.PolicySet(), c.stdout, c.input
	res, err := set.Resolve(ctx, in)
	for _, s := range res.Skipped {
		fmt.Fprintf(w, "policy %s does not apply: %s\n", s.Policy, s.Reason)
	}
	if err != nil {
		code := exitPolicyInvalid
		if approval.ErrorCode(err) == approval.EFORBIDDEN {
			code = exitPolicyForbidden
		}
		if res.Policy != "" {
			fmt.Fprintf(w, "policy %s (version %s) applies\n", res.Policy, res.Version)
		}
		return &exitError{code: code, err: fmt.Errorf("a create would be refused: %s", approval.ErrorMessage(err))}
	}
	switch {
	case set.Empty():
		fmt.Fprintln(w, "no policies are configured: the request names its approvers")
	default:
		fmt.Fprintf(w, "policy %s (version %s) applies\n", res.Policy, res.Version)
	}
	if res.FromRequest {
		if len(in.Approvers) > 0 {
			fmt.Fprintf(w, "approvers from the request: %s\n", strings.Join(in.Approvers, ", "))
		} else if !set.Empty() {
			fmt.Fprintln(w, "approvers: from the request (approvers: from_request)")
		}
		fmt.Fprintln(w, "a create would be accepted")
		return nil
	}
	groups := set.Groups()
	oidc := false
	for i, st := range res.Stages {
		fmt.Fprintf(w, "stage %d:\n", i+1)
		for _, r := range st.Rules {
			fmt.Fprintf(w, "\t%d of %s: %s\n", r.Approvals, r.Label(), askedBy(r, groups, in.Requester, &oidc))
		}
	}
	if res.ExpiresIn > 0 {
		fmt.Fprintf(w, "expires in %s\n", res.ExpiresIn)
	}
	if res.RemindEvery > 0 {
		fmt.Fprintf(w, "reminders every %s\n", res.RemindEvery)
	}
	if ok, why := approval.Satisfiable(res.Stages, set.Members(), in.Requester); !ok {
		if !oidc {
			return &exitError{code: exitPolicyInvalid, err: fmt.Errorf("a create would be refused: the policy could only be met with the requester's own vote: %s", why)}
		}
		fmt.Fprintf(w, "the listed members alone cannot meet it (%s): whether a create is accepted depends on who has signed in\n", why)
	}
	fmt.Fprintln(w, "a create would be accepted")
	return nil
}

// askedBy lists the people a rule asks, the requester left out: static members, and the
// members of an identity-provider group as such. It sets *oidc when a group has one.
func askedBy(r approval.Rule, groups map[string]policy.Group, requester string, oidc *bool) string {
	people := r.People
	var idp string
	if r.Group != "" {
		g := groups[r.Group]
		people = g.Members
		if g.OIDCGroup != "" {
			idp, *oidc = "members of "+g.OIDCGroup+" at sign-in", true
		}
	}
	var parts []string
	for _, p := range people {
		if approval.SameName(p, requester) {
			continue
		}
		parts = append(parts, p)
	}
	if idp != "" {
		parts = append(parts, idp)
	}
	if len(parts) == 0 {
		return "nobody but the requester"
	}
	return strings.Join(parts, ", ")
}

// Close does nothing: the command holds no resources.
func (c *PolicyCheckCommand) Close() error { return nil }

// warnNoPolicies logs, at serve's start, that without policies requesters choose their
// approvers.
func warnNoPolicies(logger *slog.Logger, cfg Config) {
	if cfg.PolicySet().Empty() {
		logger.Warn("no policies configured: requesters choose their approvers (docs/policies.md)")
	}
}

const policyCheckUsage = `Usage: approvald policy check --action ACTION --requester NAME [flags]

Explains which policy of the configuration applies to a request, why each earlier policy
does not, and who would be asked in each stage. It reads the configuration serve reads and
needs neither the database nor a server. Exits 0 when a create would be accepted, 3 when it
would be refused as invalid (no policy applies, approvers named under a policy that does not
take them, rules only the requester could meet), 4 when the requester may not ask for it,
2 for a usage or configuration error.

Flags:
`

// servicePolicies are the Service's policies and group membership from cfg: none when no
// policies are configured, so that requesters name their approvers.
func servicePolicies(cfg Config) (approval.Policies, approval.Members) {
	set := cfg.PolicySet()
	if set.Empty() {
		return nil, nil
	}
	return set.ForService(), set.Members()
}
