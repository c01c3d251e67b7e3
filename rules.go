package approval

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// Rules of approval (docs/policies.md): a policy resolves to ordered stages, each a set of
// rules that must all be met, each rule "N approvals of a group, or of named people". The
// evaluation here is pure: Tally is given the stages an approval keeps, who is in which group
// now, the requester and the votes, and says how far the approval has come.
//
// The rules of one stage need distinct people and one vote counts toward one rule: votes are
// assigned to the rules' slots as a maximum bipartite matching, filled stage by stage, so that
// the outcome depends on who voted, never on the order of the votes. The requester never
// counts. A rejection by anyone eligible in the current stage, or an earlier one, rejects.

// Rule asks for Approvals votes from people of Group, or from People (one of the two).
type Rule struct {
	Group     string   `json:"group,omitempty"`
	People    []string `json:"people,omitempty"`
	Approvals int      `json:"approvals"`
}

// Label names the rule in progress lines: the group, or the people joined by commas.
func (r Rule) Label() string {
	if r.Group != "" {
		return r.Group
	}
	return strings.Join(r.People, ", ")
}

// Stage is a set of rules that must all be met before the next stage is asked.
type Stage struct {
	Rules []Rule `json:"rules"`
}

// Resolved is what an approval keeps of the policy it was created under: the policy's name
// and version and the stages it resolved to, so that a policy changed later does not change
// what a pending approval needs.
type Resolved struct {
	Policy  string  `json:"policy"`
	Version string  `json:"version"`
	Stages  []Stage `json:"stages"`
	// RemindEvery, when positive, is how often the eligible people of the current stage who
	// have not voted are reminded (docs/policies.md, "Reminders").
	RemindEvery time.Duration `json:"remind_every,omitempty"`
	// NoChatDecisions: the policy says chat_decisions: false, so its approvals are decided
	// on their page after a sign-in, and a chat message carries only the link.
	NoChatDecisions bool `json:"no_chat_decisions,omitempty"`
}

// Members tells who is in a group now: the group's static members and the people whose
// identity-provider groups, as of their last sign-in, include the group's. The caller
// provides it; Tally and Eligible ask InGroup only.
type Members interface {
	// InGroup reports whether person (a normalised name) is in group now.
	InGroup(person, group string) bool
	// Members lists the people known to be in group now, for Satisfiable.
	Members(group string) []string
}

// GroupMembers is Members over a fixed map of group names to normalised names of people.
type GroupMembers map[string][]string

// InGroup reports whether person is listed in group.
func (g GroupMembers) InGroup(person, group string) bool {
	return slices.ContainsFunc(g[group], func(m string) bool { return SameName(m, person) })
}

// Members returns the people listed in group.
func (g GroupMembers) Members(group string) []string { return g[group] }

// Progress is how far an approval has come under its stages.
type Progress struct {
	Stages []StageProgress
	// Current is the index of the stage now asked: the first that is not met, or
	// len(Stages) once all are.
	Current  int
	Approved bool // every stage is met and nobody eligible rejected
	Rejected bool // someone eligible in the current stage or an earlier one rejected
	// Rejecter is the person whose rejection rejected, when Rejected.
	Rejecter string
	// Toward says, for each vote given to Tally (same index), the stage and rule it counted
	// toward; Stage is -1 for a vote that did not count (a rejection, the requester's, a
	// person no rule of a reached stage needed).
	Toward []Count
}

// Count places one vote: the index of its stage and of the rule within the stage.
type Count struct {
	Stage, Rule int
}

// StageProgress is the progress of each rule of one stage.
type StageProgress struct {
	Rules []RuleProgress
	Met   bool
}

// RuleProgress is one rule and the people whose approvals counted toward it, in name order.
type RuleProgress struct {
	Rule Rule
	By   []string
}

// Met reports whether the rule has its approvals.
func (r RuleProgress) Met() bool { return len(r.By) >= r.Rule.Approvals }

// String is the rule's progress as people read it: "sre: 1 of 2 (alice)".
func (r RuleProgress) String() string { return ruleLine(r.Rule.Label(), r.Rule.Approvals, r.By) }

// ruleLine is the one form of a rule's progress, which notifications, the command line and
// the API's users read: "sre: 1 of 2 (alice)", the label, the approvals counted, the
// approvals needed, and who counted.
func ruleLine(label string, approvals int, by []string) string {
	s := label + ": " + strconv.Itoa(len(by)) + " of " + strconv.Itoa(approvals)
	if len(by) > 0 {
		s += " (" + strings.Join(by, ", ") + ")"
	}
	return s
}

// String is the stage's rules' progress joined by "; ":
// "sre: 1 of 2 (alice); security: 0 of 1".
func (s StageProgress) String() string {
	parts := make([]string, len(s.Rules))
	for i, r := range s.Rules {
		parts[i] = r.String()
	}
	return strings.Join(parts, "; ")
}

// Tally evaluates votes under stages for an approval requested by requester. Each person's
// first vote is theirs (decide refuses a second); the result does not depend on the order of
// votes.
func Tally(stages []Stage, members Members, requester string, votes []Decision) Progress {
	p := Progress{Stages: make([]StageProgress, len(stages)), Toward: make([]Count, len(votes))}
	for i := range p.Toward {
		p.Toward[i] = Count{Stage: -1, Rule: -1}
	}
	// The approvers, deduplicated and sorted by name so that the matching, which tries them in
	// this order, does not depend on the order of the votes.
	type voter struct {
		key  string
		vote int // index in votes
	}
	voters := make([]voter, 0, len(votes))
	var rejecters []voter
	seen := make(map[string]bool, len(votes))
	for i, v := range votes {
		key := NameKey(v.Approver)
		if seen[key] || SameName(key, requester) {
			continue
		}
		seen[key] = true
		if v.Verdict == VerdictApprove {
			voters = append(voters, voter{key, i})
		} else if v.Verdict == VerdictReject {
			rejecters = append(rejecters, voter{key, i})
		}
	}
	slices.SortFunc(voters, func(a, b voter) int { return strings.Compare(a.key, b.key) })
	slices.SortFunc(rejecters, func(a, b voter) int { return strings.Compare(a.key, b.key) })

	m := matching{assigned: make([]int, len(voters))}
	for i := range m.assigned {
		m.assigned[i] = -1
	}
	keys := make([]string, len(voters))
	for i, v := range voters {
		keys[i] = v.key
	}
	p.Current = len(stages)
	for s, stage := range stages {
		p.Stages[s].Rules = make([]RuleProgress, len(stage.Rules))
		if p.Current < s {
			for r, rule := range stage.Rules {
				p.Stages[s].Rules[r].Rule = rule
			}
			continue // a later stage than the current one counts nothing
		}
		met := true
		for r, rule := range stage.Rules {
			p.Stages[s].Rules[r].Rule = rule
			slot := len(m.slots)
			m.slots = append(m.slots, slotRule{stage: s, rule: r, can: qualifiers(keys, rule, members)})
			for n := 0; n < rule.Approvals; n++ {
				// A place no augmenting path reaches now is reached by none later (Kuhn).
				if !m.augment(slot, make([]bool, len(m.slots))) {
					met = false
					break
				}
			}
		}
		if !met {
			p.Current = s
		}
	}
	for i, slot := range m.assigned {
		if slot < 0 {
			continue
		}
		sr := m.slots[slot]
		rp := &p.Stages[sr.stage].Rules[sr.rule]
		rp.By = append(rp.By, votes[voters[i].vote].Approver)
		p.Toward[voters[i].vote] = Count{Stage: sr.stage, Rule: sr.rule}
	}
	for s := range p.Stages {
		met := true
		for _, r := range p.Stages[s].Rules {
			met = met && r.Met()
		}
		p.Stages[s].Met = met && s < p.Current
	}
	// A rejection counts when its author could vote in a stage that has been current.
	for _, v := range rejecters {
		for s := 0; s <= p.Current && s < len(stages); s++ {
			if eligibleIn(stages[s], v.key, members) {
				p.Rejected, p.Rejecter = true, votes[v.vote].Approver
				break
			}
		}
		if p.Rejected {
			break
		}
	}
	p.Approved = p.Current == len(stages) && !p.Rejected
	return p
}

// Eligible reports whether person may vote now under p, and when not, why: the approval is
// decided, person requested it, already voted, is asked only in a later stage, or is named by
// no rule. p is the Tally of stages with votes.
func (p Progress) Eligible(stages []Stage, members Members, requester string, votes []Decision, person string) (bool, string) {
	key := NameKey(person)
	switch {
	case p.Approved:
		return false, "the approval is already approved"
	case p.Rejected:
		return false, "the approval is already rejected"
	case SameName(key, requester):
		return false, "the requester may not vote on their own request"
	case slices.ContainsFunc(votes, func(d Decision) bool { return SameName(d.Approver, key) }):
		return false, "already voted on this approval"
	}
	if p.Current < len(stages) && eligibleIn(stages[p.Current], key, members) {
		return true, ""
	}
	for s := p.Current + 1; s < len(stages); s++ {
		if eligibleIn(stages[s], key, members) {
			return false, "asked only in stage " + strconv.Itoa(s+1) + ", once stage " + strconv.Itoa(p.Current+1) + " is met"
		}
	}
	return false, "not an approver of stage " + strconv.Itoa(p.Current+1) + ": " + stageLabels(stages[min(p.Current, len(stages)-1)])
}

// Satisfiable reports whether every stage can be met by distinct people other than the
// requester among those members knows of and the people rules name, and when not, which
// stage falls short; create refuses a policy the requester could only meet with their own
// vote. A group filled from the identity provider counts only the people who have signed in.
func Satisfiable(stages []Stage, members Members, requester string) (bool, string) {
	var everyone []Decision
	seen := map[string]bool{}
	add := func(person string) {
		if k := NameKey(person); !seen[k] && !SameName(k, requester) {
			seen[k] = true
			everyone = append(everyone, Decision{Approver: k, Verdict: VerdictApprove})
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
	p := Tally(stages, members, requester, everyone)
	if p.Approved {
		return true, ""
	}
	return false, "stage " + strconv.Itoa(p.Current+1) + " (" + stageLabels(stages[p.Current]) +
		") cannot be met by distinct people other than the requester " + requester
}

// stageLabels lists the stage's rules as "2 of sre, 1 of security".
func stageLabels(s Stage) string {
	parts := make([]string, len(s.Rules))
	for i, r := range s.Rules {
		parts[i] = strconv.Itoa(r.Approvals) + " of " + r.Label()
	}
	return strings.Join(parts, ", ")
}

// eligibleIn reports whether the person (a name key) is named by a rule of the stage.
func eligibleIn(s Stage, key string, members Members) bool {
	for _, r := range s.Rules {
		if ruleNames(r, key, members) {
			return true
		}
	}
	return false
}

// ruleNames reports whether the rule names the person (a name key).
func ruleNames(r Rule, key string, members Members) bool {
	if r.Group != "" {
		return members.InGroup(key, r.Group)
	}
	return slices.ContainsFunc(r.People, func(p string) bool { return SameName(p, key) })
}

// qualifiers returns the indexes of the voters the rule names.
func qualifiers(keys []string, r Rule, members Members) []int {
	var out []int
	for i, k := range keys {
		if ruleNames(r, k, members) {
			out = append(out, i)
		}
	}
	return out
}

// matching assigns voters to the slots of rules, at most one slot each. Slots are filled one
// at a time by augmenting paths, which never empty a filled slot: filling the slots of stage 1
// first and of stage 2 next gives stage 1 all it can have, and stage 2 the most it can have
// beside that.
type matching struct {
	slots    []slotRule // one per rule; a rule holds up to Approvals voters
	assigned []int      // voter index: the slot (rule) it counts toward, or -1
}

type slotRule struct {
	stage, rule int
	can         []int // the voters the rule names, in name order
}

// augment finds a voter for one more place of slot, moving voters between rules where that
// frees one, and reports whether it did. visited marks the slots on the path.
func (m *matching) augment(slot int, visited []bool) bool {
	visited[slot] = true
	// A free voter first, in name order, so that the assignment is deterministic.
	for _, v := range m.slots[slot].can {
		if m.assigned[v] < 0 {
			m.assigned[v] = slot
			return true
		}
	}
	for _, v := range m.slots[slot].can {
		if other := m.assigned[v]; other != slot && !visited[other] && m.augment(other, visited) {
			m.assigned[v] = slot
			return true
		}
	}
	return false
}
