package approval

import (
	"context"
	"slices"
	"time"
)

// Groups from the identity provider (docs/policies.md, "Groups"): a configured group may name
// an oidc_group, and the people whose identity provider put them in it at their last OpenID
// Connect sign-in are members too. The sign-in stores the person's groups, replacing the ones
// stored before (RecordIdentityGroups); a vote reads its voters' stored groups inside its own
// transaction, so that the check of membership and the vote are one atomic step, and a sign-in
// that drops a group ends the person's say on every replica as soon as it commits.

// MaxIdentityGroups is the most groups one sign-in may store for a person; a provider naming
// more fails the sign-in (EINVALID) rather than keeping a stale set.
const MaxIdentityGroups = 1000

// IdentityGroup is one group a person's identity provider named at their last OIDC sign-in.
type IdentityGroup struct {
	Person     string    // normalised
	Group      string    // the provider's group, as it named it
	SignedInAt time.Time // the sign-in that stored it
}

// GroupInfo is a configured group as operators see it (GET /v1/groups).
type GroupInfo struct {
	Name string `json:"name"`
	// Members are the people the configuration lists, normalised, in name order.
	Members []string `json:"members"`
	// OIDCGroup, when set, is the identity provider's group whose people are members too.
	OIDCGroup string `json:"oidc_group,omitempty"`
	// OIDCMembers are the people whose last sign-in put them in OIDCGroup, in name order;
	// empty without OIDCGroup.
	OIDCMembers []OIDCMember `json:"oidc_members"`
}

// OIDCMember is a member of a group through the identity provider, as of a sign-in.
type OIDCMember struct {
	Person     string    `json:"person"`
	SignedInAt time.Time `json:"signed_in_at"`
}

// PolicyInfo is a policy in force as operators see it (GET /v1/policies): its text,
// normalised (rules written as one stage), and its version.
type PolicyInfo struct {
	Name       string      `json:"name"`
	Version    string      `json:"version"`
	Match      PolicyMatch `json:"match"`
	Requesters []string    `json:"requesters"`
	// Stages are empty under FromRequest.
	Stages      []Stage `json:"stages"`
	FromRequest bool    `json:"from_request"`
	// ExpiresIn and RemindEvery are Go durations ("24h0m0s"), "" when not set.
	ExpiresIn   string `json:"expires_in,omitempty"`
	RemindEvery string `json:"remind_every,omitempty"`
}

// PolicyMatch is what a policy applies to: an action ("*" for any) and a CEL condition.
type PolicyMatch struct {
	Action string `json:"action"`
	When   string `json:"when,omitempty"`
}

// RecordIdentityGroups stores groups as the identity-provider groups of person at a sign-in
// now, replacing every group stored for them before, in one transaction; an empty list
// removes them all. Names that could not be a configured oidc_group (empty, too long, control
// characters; see CheckName) are left out, duplicates kept once. EINVALID for a person who is
// no name, or more than MaxIdentityGroups groups, and nothing is changed then.
func (s *Service) RecordIdentityGroups(ctx context.Context, person string, groups []string) error {
	if err := CheckName("person", person, MaxNameLength); err != nil {
		return err
	}
	if len(groups) > MaxIdentityGroups {
		return Errorf(EINVALID, "the identity provider named %d groups; at most %d are kept", len(groups), MaxIdentityGroups)
	}
	keep := make([]string, 0, len(groups))
	for _, g := range groups {
		if CheckName("group", g, MaxNameLength) == nil {
			keep = append(keep, g)
		}
	}
	slices.Sort(keep)
	keep = slices.Compact(keep)
	person = NameKey(person)
	_, err := inTx(ctx, s, func(tx Tx) (int, error) { return 0, tx.IdentityGroupReplace(ctx, person, keep) })
	return err
}

// Groups returns the configured groups for p, in name order, each with the people its
// oidc_group holds as of their last sign-in: one read of the store. EFORBIDDEN unless p is an
// operator or an admin. Empty when no policies are configured.
func (s *Service) Groups(ctx context.Context, p Principal) ([]GroupInfo, error) {
	if err := mayReadConfig(p); err != nil {
		return nil, err
	}
	if s.Policies == nil {
		return []GroupInfo{}, nil
	}
	groups := s.Policies.Groups()
	var oidc []string
	for _, g := range groups {
		if g.OIDCGroup != "" && !slices.Contains(oidc, g.OIDCGroup) {
			oidc = append(oidc, g.OIDCGroup)
		}
	}
	stored, err := s.Store.IdentityGroupMembers(ctx, oidc)
	if err != nil {
		return nil, err
	}
	out := make([]GroupInfo, len(groups))
	for i, g := range groups {
		g.Members = slices.Clone(g.Members)
		if g.Members == nil {
			g.Members = []string{}
		}
		g.OIDCMembers = []OIDCMember{}
		for _, m := range stored {
			if g.OIDCGroup != "" && m.Group == g.OIDCGroup {
				g.OIDCMembers = append(g.OIDCMembers, OIDCMember{Person: m.Person, SignedInAt: m.SignedInAt.UTC()})
			}
		}
		out[i] = g
	}
	return out, nil
}

// PolicyList returns the policies in force for p, in the order they are tried. EFORBIDDEN
// unless p is an operator or an admin. Empty when none are configured: requesters name their
// approvers.
func (s *Service) PolicyList(p Principal) ([]PolicyInfo, error) {
	if err := mayReadConfig(p); err != nil {
		return nil, err
	}
	if s.Policies == nil {
		return []PolicyInfo{}, nil
	}
	return s.Policies.List(), nil
}

// mayReadConfig refuses, with EFORBIDDEN, a principal who may not read the groups and the
// policies: operators and admins may.
func mayReadConfig(p Principal) error {
	if !p.MayOperate() {
		return Errorf(EFORBIDDEN, "role %s may not read the groups and policies; use an operator or admin token", p.Role)
	}
	return nil
}

// membership is Members as one transaction sees it: the configured members, and, for a group
// with an oidc_group, the people whose stored identity-provider groups (read once, in the
// transaction) hold it.
type membership struct {
	configured Members
	oidc       map[string]string   // group → its oidc_group
	stored     map[string][]string // person → their stored groups, sorted
}

// InGroup reports whether person is a configured member of group, or a member through its
// oidc_group.
func (m membership) InGroup(person, group string) bool {
	if m.configured.InGroup(person, group) {
		return true
	}
	og := m.oidc[group]
	if og == "" {
		return false
	}
	_, ok := slices.BinarySearch(m.stored[NameKey(person)], og)
	return ok
}

// Members lists the configured members of group, then the people known to be in it through
// its oidc_group, in name order.
func (m membership) Members(group string) []string {
	out := slices.Clone(m.configured.Members(group))
	og := m.oidc[group]
	if og == "" {
		return out
	}
	var extra []string
	for person, groups := range m.stored {
		if _, ok := slices.BinarySearch(groups, og); ok && !slices.ContainsFunc(out, func(c string) bool { return SameName(c, person) }) {
			extra = append(extra, person)
		}
	}
	slices.Sort(extra)
	return append(out, extra...)
}

// oidcGroups returns, for the groups the stages name that have an oidc_group, that group;
// nil when none has one (the configured members are all there is, and nothing is read).
func (s *Service) oidcGroups(stages []Stage) map[string]string {
	if s.Policies == nil {
		return nil
	}
	var out map[string]string
	for _, g := range s.Policies.Groups() {
		if g.OIDCGroup == "" || !stagesName(stages, g.Name) {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[g.Name] = g.OIDCGroup
	}
	return out
}

// stagesName reports whether a rule of the stages names group.
func stagesName(stages []Stage, group string) bool {
	for _, st := range stages {
		for _, r := range st.Rules {
			if r.Group == group {
				return true
			}
		}
	}
	return false
}

// membersFor returns the configured members with, for the groups of oidc, the people stored
// holds in their oidc_group.
func (s *Service) membersFor(stored []IdentityGroup, oidc map[string]string) Members {
	configured := membersOrNone(s.Members)
	if len(oidc) == 0 {
		return configured
	}
	m := membership{configured: configured, oidc: oidc, stored: map[string][]string{}}
	for _, g := range stored {
		m.stored[g.Person] = append(m.stored[g.Person], g.Group)
	}
	for p := range m.stored {
		slices.Sort(m.stored[p])
	}
	return m
}

// voteMembers returns the Members a vote by voter on a, created under a policy, is counted by,
// read inside the vote's transaction tx: the stored groups of everyone who voted and of the
// voter, when a group of a's stages has an oidc_group; no statement otherwise.
func (s *Service) voteMembers(ctx context.Context, tx Tx, a *Approval, voter string) (Members, error) {
	oidc := s.oidcGroups(a.Resolved.Stages)
	if len(oidc) == 0 {
		return membersOrNone(s.Members), nil
	}
	people := []string{NameKey(voter)}
	for _, d := range a.Decisions {
		if k := NameKey(d.Approver); !slices.Contains(people, k) {
			people = append(people, k)
		}
	}
	stored, err := tx.IdentityGroupGetMany(ctx, people)
	if err != nil {
		return nil, err
	}
	return s.membersFor(stored, oidc), nil
}

// createMembers returns the Members a create under stages is judged by: the configured
// members and, for groups with an oidc_group, everyone stored in it (one read of the store).
func (s *Service) createMembers(ctx context.Context, stages []Stage) (Members, error) {
	oidc := s.oidcGroups(stages)
	if len(oidc) == 0 {
		return membersOrNone(s.Members), nil
	}
	return s.storedMembers(ctx, oidc)
}

// ProgressMembers returns the Members by which the progress of the approvals is shown
// (Approval.PolicyStatus): the configured members and, where the stages of an approval that
// has votes name a group with an oidc_group, the people stored in it, read in one statement
// for all the approvals; no read otherwise.
func (s *Service) ProgressMembers(ctx context.Context, as ...*Approval) (Members, error) {
	oidc := map[string]string{}
	for _, a := range as {
		if a == nil || a.Resolved == nil || len(a.Decisions) == 0 {
			continue
		}
		for group, og := range s.oidcGroups(a.Resolved.Stages) {
			oidc[group] = og
		}
	}
	if len(oidc) == 0 {
		return membersOrNone(s.Members), nil
	}
	return s.storedMembers(ctx, oidc)
}

// storedMembers returns the configured members with, for the groups of oidc (group to its
// oidc_group), everyone stored in their oidc_group: one read of the store.
func (s *Service) storedMembers(ctx context.Context, oidc map[string]string) (Members, error) {
	var names []string
	for _, og := range oidc {
		if !slices.Contains(names, og) {
			names = append(names, og)
		}
	}
	slices.Sort(names)
	stored, err := s.Store.IdentityGroupMembers(ctx, names)
	if err != nil {
		return nil, err
	}
	return s.membersFor(stored, oidc), nil
}
