// Package policy is the configuration language that decides who must approve what
// (docs/policies.md): groups of people, and an ordered list of policies, each matching an
// action (and a CEL condition over the request) and resolving to stages of rules that
// approval.Tally evaluates. Compile checks the whole configuration at start; Resolve picks the
// policy that applies to one request, or refuses it.
package policy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/approvald/approval"
)

// MinRemindEvery is the shortest remind_every a policy may set: reminders are for people, and
// one a minute is already more than anyone reads.
const MinRemindEvery = time.Minute

// FromRequest is the value of Policy.Approvers under which the request names its approvers.
const FromRequest = "from_request"

// Group is a named group of people: Members listed in the configuration, and, with OIDCGroup,
// the people whose identity-provider groups held it at their last sign-in. In YAML it is a
// list of members (sre: [alice, bob]) or a map (sre: {members: [alice], oidc_group: x}).
type Group struct {
	Members   []string `yaml:"members" json:"members,omitempty"`
	OIDCGroup string   `yaml:"oidc_group" json:"oidc_group,omitempty"`
}

// UnmarshalYAML accepts both forms of a group.
func (g *Group) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.SequenceNode {
		*g = Group{}
		return n.Decode(&g.Members)
	}
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: a group is a list of people, such as [alice, bob], or a map with members and oidc_group", n.Line)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; k.Value != "members" && k.Value != "oidc_group" {
			return fmt.Errorf("line %d: unknown setting %q in a group; the settings there are members, oidc_group", k.Line, k.Value)
		}
	}
	type plain Group
	return n.Decode((*plain)(g))
}

// Policy is one entry of the ordered list of policies.
type Policy struct {
	Name       string   `yaml:"name" json:"name"`
	Match      Match    `yaml:"match" json:"match"`
	Requesters []string `yaml:"requesters" json:"requesters,omitempty"`
	// Rules is the one stage of a policy without Stages.
	Rules  []Rule  `yaml:"rules" json:"rules,omitempty"`
	Stages []Stage `yaml:"stages" json:"stages,omitempty"`
	// Approvers is FromRequest to let the request name its approvers, or empty.
	Approvers   string        `yaml:"approvers" json:"approvers,omitempty"`
	ExpiresIn   time.Duration `yaml:"expires_in" json:"expires_in,omitempty"`
	RemindEvery time.Duration `yaml:"remind_every" json:"remind_every,omitempty"`
	// ChatDecisions false keeps the policy's approvals from being decided in chat: their
	// Slack messages carry only the link to the page. Nil means true.
	ChatDecisions *bool `yaml:"chat_decisions" json:"chat_decisions,omitempty"`
}

// Match selects the requests a policy applies to: Action ("*" for any) and, when set, the
// CEL condition When.
type Match struct {
	Action string `yaml:"action" json:"action"`
	When   string `yaml:"when" json:"when,omitempty"`

	whenLine int // the configuration's line of When's first line, for errors
}

// UnmarshalYAML keeps the line of when, so that a CEL error names the configuration's line.
func (m *Match) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: match is a map with action and when", n.Line)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		switch k := n.Content[i]; k.Value {
		case "when":
			v := n.Content[i+1]
			m.whenLine = v.Line
			if v.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
				m.whenLine++ // a block: the condition starts on the line after the | or >
			}
		case "action":
		default:
			return fmt.Errorf("line %d: unknown setting %q in match; the settings there are action, when", k.Line, k.Value)
		}
	}
	type plain Match
	return n.Decode((*plain)(m))
}

// Stage is a set of rules that must all be met before the next stage is asked.
type Stage struct {
	Rules []Rule `yaml:"rules" json:"rules"`
}

// Rule asks for Approvals (default 1) votes from people of Group, or from People.
type Rule struct {
	Group     string   `yaml:"group" json:"group,omitempty"`
	People    []string `yaml:"people" json:"people,omitempty"`
	Approvals int      `yaml:"approvals" json:"approvals"`
}

// Set is a compiled configuration of groups and policies.
type Set struct {
	groups   map[string]Group // names normalised
	list     []approval.GroupInfo
	policies []*compiled
}

type compiled struct {
	Policy
	version string
	stages  []approval.Stage
	when    *condition // nil: no condition
}

// Compile checks groups and policies and compiles their conditions. Errors name the policy
// (its index and name), the field and, for a condition, the line and column.
func Compile(groups map[string]Group, policies []Policy) (*Set, error) {
	s := &Set{groups: make(map[string]Group, len(groups))}
	for name, g := range groups {
		if err := approval.CheckName("group name", name, approval.MaxNameLength); err != nil {
			return nil, fmt.Errorf("groups: %s", approval.ErrorMessage(err))
		}
		members := make([]string, len(g.Members))
		for i, m := range g.Members {
			n, err := approval.NormalizeName(fmt.Sprintf("groups.%s[%d]", name, i), m)
			if err != nil {
				return nil, errors.New(approval.ErrorMessage(err))
			}
			members[i] = n
		}
		if g.OIDCGroup != "" {
			if err := approval.CheckName(fmt.Sprintf("groups.%s.oidc_group", name), g.OIDCGroup, approval.MaxNameLength); err != nil {
				return nil, errors.New(approval.ErrorMessage(err))
			}
		}
		slices.Sort(members)
		s.groups[name] = Group{Members: slices.Compact(members), OIDCGroup: g.OIDCGroup}
	}
	for name, g := range s.groups {
		s.list = append(s.list, approval.GroupInfo{Name: name, Members: g.Members, OIDCGroup: g.OIDCGroup})
	}
	slices.SortFunc(s.list, func(a, b approval.GroupInfo) int { return strings.Compare(a.Name, b.Name) })
	seen := map[string]bool{}
	catchAll := ""
	for i, p := range policies {
		where := fmt.Sprintf("policies[%d]", i)
		if p.Name != "" {
			where += fmt.Sprintf(" (%s)", p.Name)
		}
		switch {
		case p.Name == "":
			return nil, fmt.Errorf("%s.name: required", where)
		case seen[p.Name]:
			return nil, fmt.Errorf("%s.name: %q is already the name of an earlier policy", where, p.Name)
		case catchAll != "":
			return nil, fmt.Errorf("%s: unreachable: the earlier policy %q matches every action without a condition", where, catchAll)
		}
		seen[p.Name] = true
		c, err := s.compile(where, p)
		if err != nil {
			return nil, err
		}
		if p.Match.Action == "*" && p.Match.When == "" {
			catchAll = p.Name
		}
		s.policies = append(s.policies, c)
	}
	return s, nil
}

// compile checks one policy and resolves its stages and version.
func (s *Set) compile(where string, p Policy) (*compiled, error) {
	if p.Match.Action == "" {
		return nil, fmt.Errorf("%s.match.action: required (an action name, or \"*\" for any)", where)
	}
	if p.Match.Action != "*" {
		if err := approval.CheckName("match.action", p.Match.Action, approval.MaxNameLength); err != nil {
			return nil, fmt.Errorf("%s.%s", where, approval.ErrorMessage(err))
		}
	}
	p.Requesters = slices.Clone(p.Requesters)
	for i := range p.Requesters {
		n, err := approval.NormalizeName(fmt.Sprintf("%s.requesters[%d]", where, i), p.Requesters[i])
		if err != nil {
			return nil, errors.New(approval.ErrorMessage(err))
		}
		p.Requesters[i] = n
	}
	if p.ExpiresIn < 0 {
		return nil, fmt.Errorf("%s.expires_in: must not be negative", where)
	}
	if p.RemindEvery < 0 {
		return nil, fmt.Errorf("%s.remind_every: must not be negative", where)
	} else if p.RemindEvery > 0 && p.RemindEvery < MinRemindEvery {
		return nil, fmt.Errorf("%s.remind_every: %s is less than a minute; reminders come at most once a minute", where, p.RemindEvery)
	}
	stages := p.Stages
	switch {
	case p.Approvers != "" && p.Approvers != FromRequest:
		return nil, fmt.Errorf("%s.approvers: %q: the only value is %s", where, p.Approvers, FromRequest)
	case p.Approvers == FromRequest && (len(p.Rules) > 0 || len(p.Stages) > 0):
		return nil, fmt.Errorf("%s: approvers: %s lets the request name its approvers; it takes no rules or stages", where, FromRequest)
	case p.Approvers == "" && len(p.Rules) > 0 && len(p.Stages) > 0:
		return nil, fmt.Errorf("%s: write rules (one stage) or stages, not both", where)
	case p.Approvers == "" && len(p.Rules) == 0 && len(p.Stages) == 0:
		return nil, fmt.Errorf("%s: rules or stages are required (or approvers: %s)", where, FromRequest)
	case len(p.Rules) > 0:
		stages = []Stage{{Rules: p.Rules}}
	}
	p.Rules = nil // the version hashes rules and the one stage they make alike
	c := &compiled{Policy: p}
	c.Stages = make([]Stage, len(stages)) // normalised copies: the caller's configuration is left as written
	for si, st := range stages {
		field := fmt.Sprintf("%s.stages[%d]", where, si)
		if len(st.Rules) == 0 {
			return nil, fmt.Errorf("%s.rules: required", field)
		}
		var out approval.Stage
		for ri := range st.Rules {
			r := st.Rules[ri]
			r.People = slices.Clone(r.People)
			rf := fmt.Sprintf("%s.rules[%d]", field, ri)
			if r.Approvals == 0 {
				r.Approvals = 1
			}
			if r.Approvals < 0 {
				return nil, fmt.Errorf("%s.approvals: must be at least 1", rf)
			}
			switch {
			case r.Group != "" && len(r.People) > 0:
				return nil, fmt.Errorf("%s: a rule names a group or people, not both", rf)
			case r.Group != "":
				g, ok := s.groups[r.Group]
				if !ok {
					return nil, fmt.Errorf("%s.group: unknown group %q (groups: %s)", rf, r.Group, s.groupNames())
				}
				if g.OIDCGroup == "" && r.Approvals > len(g.Members) {
					return nil, fmt.Errorf("%s.approvals: %d approvals of %s, which has %d members", rf, r.Approvals, r.Group, len(g.Members))
				}
			case len(r.People) > 0:
				for i := range r.People {
					n, err := approval.NormalizeName(fmt.Sprintf("%s.people[%d]", rf, i), r.People[i])
					if err != nil {
						return nil, errors.New(approval.ErrorMessage(err))
					}
					r.People[i] = n
				}
				r.People = slices.Compact(slices.Sorted(slices.Values(r.People)))
				if r.Approvals > len(r.People) {
					return nil, fmt.Errorf("%s.approvals: %d approvals of %d people", rf, r.Approvals, len(r.People))
				}
			default:
				return nil, fmt.Errorf("%s: a rule names a group or people", rf)
			}
			c.Stages[si].Rules = append(c.Stages[si].Rules, r)
			out.Rules = append(out.Rules, approval.Rule{Group: r.Group, People: r.People, Approvals: r.Approvals})
		}
		c.stages = append(c.stages, out)
	}
	if p.Match.When != "" {
		cond, err := compileCondition(p.Match.When)
		var errs conditionErrors
		if errors.As(err, &errs) {
			return nil, fmt.Errorf("%s.match.when: %s", where, errs.at(p.Match.whenLine))
		} else if err != nil {
			return nil, fmt.Errorf("%s.match.when: %w", where, err)
		}
		c.when = cond
	}
	c.version = s.version(c.Policy)
	return c, nil
}

// version is a hash of the policy's normalised text and of the groups it references, so that
// a change to either gives the policy a new version.
func (s *Set) version(p Policy) string {
	referenced := map[string]Group{}
	for _, st := range p.Stages {
		for _, r := range st.Rules {
			if r.Group != "" {
				referenced[r.Group] = s.groups[r.Group]
			}
		}
	}
	doc, err := json.Marshal(struct {
		Policy Policy           `json:"policy"`
		Groups map[string]Group `json:"groups"`
	}{p, referenced})
	if err != nil {
		panic(err) // plain structs of strings, numbers and durations always marshal
	}
	sum := sha256.Sum256(doc)
	return hex.EncodeToString(sum[:8])
}

func (s *Set) groupNames() string {
	if len(s.groups) == 0 {
		return "none are configured"
	}
	names := make([]string, 0, len(s.groups))
	for n := range s.groups {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// Input is what a create asks, as Resolve needs it.
type Input struct {
	Action    string
	Title     string
	Requester string
	Context   json.RawMessage // a JSON object, or empty
	// Approvers are the approvers the request names, allowed only under FromRequest.
	Approvers []string
}

// Result is the policy that applies to a request, and why each earlier one did not.
type Result struct {
	// Policy and Version name the policy; both are empty when no policies are configured.
	Policy  string
	Version string
	// Stages are the rules the approval is to keep; empty with FromRequest.
	Stages []approval.Stage
	// FromRequest: the request's approvers and required approvals apply.
	FromRequest bool
	ExpiresIn   time.Duration // 0: the request's or the default
	RemindEvery time.Duration // 0: no reminders
	// NoChatDecisions: the policy says chat_decisions: false.
	NoChatDecisions bool
	// Skipped says, in order, why each earlier policy did not apply.
	Skipped []Skip
}

// Resolved returns what the approval keeps of the policy.
func (r Result) Resolved() approval.Resolved {
	return approval.Resolved{Policy: r.Policy, Version: r.Version, Stages: r.Stages, RemindEvery: r.RemindEvery,
		NoChatDecisions: r.NoChatDecisions}
}

// Skip is a policy that did not apply, and why.
type Skip struct {
	Policy string
	Reason string
}

// Info is a configured policy as operators see it: its text and version.
type Info struct {
	Policy
	Version string
}

// Policies returns the configured policies in order, rules written as one stage.
func (s *Set) Policies() []Info {
	out := make([]Info, len(s.policies))
	for i, c := range s.policies {
		out[i] = Info{Policy: c.Policy, Version: c.version}
	}
	return out
}

// Groups returns the configured groups, names of people normalised.
func (s *Set) Groups() map[string]Group { return s.groups }

// Members returns the static members of the configured groups.
func (s *Set) Members() approval.GroupMembers {
	m := make(approval.GroupMembers, len(s.groups))
	for name, g := range s.groups {
		m[name] = g.Members
	}
	return m
}

// Empty reports whether no policies are configured: requesters name their approvers.
func (s *Set) Empty() bool { return s == nil || len(s.policies) == 0 }

// Resolve returns the first policy whose match holds for in, or refuses the request:
// EUNPROCESSABLE when no policy matches the action, or when the request names approvers
// under a policy that does not take them; EINVALID when a condition cannot be evaluated on
// the request; EFORBIDDEN when the requester is not among the policy's requesters. Result.Skipped is
// filled in either case. A nil or empty Set resolves every request to FromRequest.
func (s *Set) Resolve(ctx context.Context, in Input) (Result, error) {
	var res Result
	if s.Empty() {
		res.FromRequest = true
		return res, nil
	}
	var vars map[string]any
	for _, c := range s.policies {
		if c.Match.Action != "*" && c.Match.Action != in.Action {
			res.Skipped = append(res.Skipped, Skip{c.Name, fmt.Sprintf("its action is %s, not %s", c.Match.Action, in.Action)})
			continue
		}
		if c.when != nil {
			if vars == nil {
				var err error
				if vars, err = variables(in); err != nil {
					return res, err
				}
			}
			ok, err := c.when.eval(ctx, vars)
			if err != nil {
				return res, approval.Errorf(approval.EINVALID, "policy %s: its condition %s could not be evaluated on this request: %s", c.Name, c.Match.When, err)
			}
			if !ok {
				res.Skipped = append(res.Skipped, Skip{c.Name, fmt.Sprintf("its condition %s is false", c.Match.When)})
				continue
			}
		}
		res.Policy, res.Version = c.Name, c.version
		res.Stages, res.FromRequest = c.stages, c.Approvers == FromRequest
		res.ExpiresIn, res.RemindEvery = c.ExpiresIn, c.RemindEvery
		res.NoChatDecisions = c.ChatDecisions != nil && !*c.ChatDecisions
		if len(c.Requesters) > 0 && !slices.ContainsFunc(c.Requesters, func(r string) bool { return approval.SameName(r, in.Requester) }) {
			return res, approval.Errorf(approval.EFORBIDDEN, "policy %s lets only %s request %s; %s may not", c.Name, strings.Join(c.Requesters, ", "), in.Action, in.Requester)
		}
		if len(in.Approvers) > 0 && !res.FromRequest {
			return res, approval.Errorf(approval.EUNPROCESSABLE, "policy %s decides the approvers of %s; remove approvers from the request (only a policy with approvers: %s takes them)", c.Name, in.Action, FromRequest)
		}
		return res, nil
	}
	return res, approval.Errorf(approval.EUNPROCESSABLE, "no policy applies to the action %s; the configuration's policies decide who approves which action", in.Action)
}

// variables are the CEL variables of a request.
func variables(in Input) (map[string]any, error) {
	ctxVal := map[string]any{}
	if len(in.Context) > 0 && string(in.Context) != "null" {
		if err := json.Unmarshal(in.Context, &ctxVal); err != nil {
			return nil, approval.Errorf(approval.EINVALID, "context must be a JSON object")
		}
	}
	return map[string]any{"action": in.Action, "title": in.Title, "requester": approval.NameKey(in.Requester), "context": ctxVal}, nil
}

// ForService returns s as the Service asks it at every create (approval.Policies).
func (s *Set) ForService() approval.Policies { return forService{s} }

// forService is a Set as approval.Policies.
type forService struct{ set *Set }

// Resolve resolves in by Set.Resolve.
func (f forService) Resolve(ctx context.Context, in approval.PolicyInput) (*approval.PolicyDecision, error) {
	res, err := f.set.Resolve(ctx, Input{Action: in.Action, Title: in.Title, Requester: in.Requester,
		Context: in.Context, Approvers: in.Approvers})
	if err != nil {
		return nil, err
	}
	return &approval.PolicyDecision{Resolved: res.Resolved(), FromRequest: res.FromRequest, ExpiresIn: res.ExpiresIn}, nil
}

// List returns the policies in order as operators see them (approval.Policies).
func (f forService) List() []approval.PolicyInfo {
	out := make([]approval.PolicyInfo, len(f.set.policies))
	for i, c := range f.set.policies {
		requesters := c.Requesters
		if requesters == nil {
			requesters = []string{}
		}
		stages := c.stages
		if stages == nil {
			stages = []approval.Stage{}
		}
		out[i] = approval.PolicyInfo{Name: c.Name, Version: c.version,
			Match:      approval.PolicyMatch{Action: c.Match.Action, When: c.Match.When},
			Requesters: requesters, Stages: stages, FromRequest: c.Approvers == FromRequest,
			ExpiresIn: duration(c.ExpiresIn), RemindEvery: duration(c.RemindEvery)}
	}
	return out
}

// Groups returns the configured groups in name order (approval.Policies), made once at
// Compile: every vote under a policy asks for them, and nobody may change what it returns.
func (f forService) Groups() []approval.GroupInfo { return f.set.list }

// duration is d as a Go duration, "" for 0.
func duration(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}
