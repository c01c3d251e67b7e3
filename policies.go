package approval

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// Policies decide who must approve what (docs/policies.md): the Service asks them at every
// create, before anything is written. Package policy implements it (policy.Set.ForService);
// this package does not import the language.
type Policies interface {
	// Resolve returns the policy that applies to in, or refuses the request: EUNPROCESSABLE
	// when no policy matches the action or the request names approvers a policy does not
	// take, EFORBIDDEN when the requester may not ask for it, EINVALID when a condition
	// cannot be evaluated on the request.
	Resolve(ctx context.Context, in PolicyInput) (*PolicyDecision, error)
	// List returns the policies in force, in the order they are tried.
	List() []PolicyInfo
	// Groups returns the configured groups in name order, without OIDCMembers.
	Groups() []GroupInfo
}

// PolicyInput is what a create asks, as Policies resolve it.
type PolicyInput struct {
	Action    string
	Title     string
	Requester string          // normalised
	Context   json.RawMessage // a JSON object, or empty
	// Approvers are the approvers the request names, allowed only under FromRequest.
	Approvers []string
}

// PolicyDecision is the policy that applies to a create.
type PolicyDecision struct {
	// Resolved is what the approval keeps: the policy's name, version and stages (no stages
	// under FromRequest).
	Resolved Resolved
	// FromRequest: the request names its approvers and required approvals, as with no
	// policies; the approval keeps no policy.
	FromRequest bool
	// ExpiresIn, when positive, is the expiry of an approval whose request names none, and
	// the longest one a request may name.
	ExpiresIn time.Duration
}

// resolver returns what newApproval asks of the policies for req: the policy that applies,
// refused (EUNPROCESSABLE) when only the requester's own vote could meet it, and the people
// its stages name by themselves; it sets *refused when the policies refuse. Nil when no
// policies are configured.
func (s *Service) resolver(ctx context.Context, req CreateRequest, refused *bool) func(requester string) (*PolicyDecision, []string, error) {
	if s.Policies == nil {
		return nil
	}
	return func(requester string) (*PolicyDecision, []string, error) {
		d, err := s.Policies.Resolve(ctx, PolicyInput{Action: req.Action, Title: req.Title, Requester: requester,
			Context: req.Context, Approvers: req.Approvers})
		if err != nil {
			*refused = true
			return nil, nil, err
		}
		if d.FromRequest {
			return d, nil, nil
		}
		members, err := s.createMembers(ctx, d.Resolved.Stages)
		if err != nil {
			return nil, nil, err
		}
		if ok, why := Satisfiable(d.Resolved.Stages, members, requester); !ok {
			*refused = true
			return nil, nil, Errorf(EUNPROCESSABLE, "policy %s could only be met with the requester's own vote: %s", d.Resolved.Policy, why)
		}
		return d, staticApprovers(d.Resolved.Stages, members, requester), nil
	}
}

// maxKeySharers bounds how many approvals of other requesters under the same operation key
// replayHeld looks through for the requester's own.
const maxKeySharers = 100

// replayHeld answers a create the policies refuse when its key already holds the requester's
// approval: the policies may have changed since that create, and a retry is answered as the
// create was (docs/http-api.md, "Idempotent create"), a different request under the key with
// EMISMATCH. ok is false when the key holds no approval of the requester; the refusal stands.
func (s *Service) replayHeld(ctx context.Context, c CreateCommand, fingerprint string, sum [sha256.Size]byte) (CreateResult, bool, error) {
	at := s.Store.Incarnation()
	tx, err := s.Store.Begin(ctx)
	if err != nil {
		return CreateResult{}, false, err
	}
	defer tx.Rollback(ctx)
	ids, err := tx.ApprovalIDsByOperationKey(ctx, c.Key, maxKeySharers)
	if err != nil || len(ids) == 0 {
		return CreateResult{}, false, err
	}
	list, err := tx.ApprovalGetByIDMany(ctx, ids)
	if err != nil {
		return CreateResult{}, false, err
	}
	for _, a := range list {
		switch {
		case a.Requester != c.requester:
		case a.Fingerprint != fingerprint:
			return CreateResult{}, true, Errorf(EMISMATCH, "the Idempotency-Key was already used for a different request")
		default:
			res, err := s.replayRemembered(c, a, fingerprint, sum, at)
			return res, true, err
		}
	}
	return CreateResult{}, false, nil
}

// staticApprovers are the people the stages name by themselves: the groups' members members
// knows of and the rules' people, normalised, in order, once each, without the requester.
// They are the approval's approvers, whom listings and notifications reach.
func staticApprovers(stages []Stage, members Members, requester string) []string {
	var out []string
	seen := map[string]bool{}
	add := func(person string) {
		if k := NameKey(person); !seen[k] && !SameName(k, requester) {
			seen[k] = true
			out = append(out, k)
		}
	}
	for _, s := range stages {
		for _, r := range s.Rules {
			if r.Group != "" {
				for _, m := range members.Members(r.Group) {
					add(m)
				}
			}
			for _, person := range r.People {
				add(person)
			}
		}
	}
	return out
}

// requiredOf is the total of the stages' rules' approvals.
func requiredOf(stages []Stage) int {
	n := 0
	for _, s := range stages {
		for _, r := range s.Rules {
			n += r.Approvals
		}
	}
	return n
}

// membersOrNone is members, or no group at all when nil.
func membersOrNone(m Members) Members {
	if m == nil {
		return GroupMembers(nil)
	}
	return m
}

// PolicyStatus is how far an approval created under a policy has come, as the API shows it
// (docs/http-api.md, "The approval").
type PolicyStatus struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	// CurrentStage is the number (from 1) of the stage now asked, 0 once every stage is met.
	CurrentStage int           `json:"current_stage"`
	Stages       []StageStatus `json:"stages"`
}

// StageStatus is one stage of a PolicyStatus.
type StageStatus struct {
	Met   bool         `json:"met"`
	Rules []RuleStatus `json:"rules"`
}

// RuleStatus is one rule of a stage: what it asks and the people whose approvals counted
// toward it.
type RuleStatus struct {
	Label     string   `json:"label"`
	Group     string   `json:"group,omitempty"`
	People    []string `json:"people,omitempty"`
	Approvals int      `json:"approvals"`
	Counted   []string `json:"counted"`
}

// PolicyStatus returns the progress of a, created under a policy, with members as group
// membership now; nil for an approval that keeps no policy.
func (a *Approval) PolicyStatus(members Members) *PolicyStatus {
	if a.Resolved == nil {
		return nil
	}
	return policyStatus(a.Resolved, Tally(a.Resolved.Stages, membersOrNone(members), a.Requester, a.Decisions))
}

// policyStatus is the PolicyStatus of an approval keeping r, tallied as p.
func policyStatus(r *Resolved, p Progress) *PolicyStatus {
	st := &PolicyStatus{Name: r.Policy, Version: r.Version, Stages: make([]StageStatus, len(p.Stages))}
	if p.Current < len(p.Stages) {
		st.CurrentStage = p.Current + 1
	}
	for i, sp := range p.Stages {
		st.Stages[i] = StageStatus{Met: sp.Met, Rules: make([]RuleStatus, len(sp.Rules))}
		for j, r := range sp.Rules {
			counted := r.By
			if counted == nil {
				counted = []string{}
			}
			st.Stages[i].Rules[j] = RuleStatus{Label: r.Rule.Label(), Group: r.Rule.Group, People: r.Rule.People,
				Approvals: r.Rule.Approvals, Counted: counted}
		}
	}
	return st
}

// StageLine says which stage is asked: "stage 1 of 2", or "all 2 stages met" once every stage
// is met ("met" for a policy of one stage).
func (st *PolicyStatus) StageLine() string {
	n := len(st.Stages)
	switch {
	case st.CurrentStage > 0:
		return "stage " + strconv.Itoa(st.CurrentStage) + " of " + strconv.Itoa(n)
	case n == 1:
		return "met"
	}
	return "all " + strconv.Itoa(n) + " stages met"
}

// ProgressLine is the progress of the rules of the current stage (the last once every stage
// is met), as the notifications and the command line show it:
// "sre: 1 of 2 (alice); security: 0 of 1".
func (st *PolicyStatus) ProgressLine() string {
	if len(st.Stages) == 0 {
		return ""
	}
	s := st.Stages[len(st.Stages)-1]
	if st.CurrentStage > 0 {
		s = st.Stages[st.CurrentStage-1]
	}
	parts := make([]string, len(s.Rules))
	for i, r := range s.Rules {
		parts[i] = ruleLine(r.Label, r.Approvals, r.Counted)
	}
	return strings.Join(parts, "; ")
}

// String is the stage and its progress on one line: "stage 1 of 2: sre: 1 of 2 (alice);
// security: 0 of 1".
func (st *PolicyStatus) String() string { return st.StageLine() + ": " + st.ProgressLine() }
