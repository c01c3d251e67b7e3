package approval_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/approvald/approval"
)

var testGroups = approval.GroupMembers{
	"sre":      {"alice", "bob", "carol"},
	"security": {"alice", "dave"},
	"leads":    {"erin", "fiona"},
}

func approve(names ...string) []approval.Decision {
	var out []approval.Decision
	for _, n := range names {
		out = append(out, approval.Decision{Approver: n, Verdict: approval.VerdictApprove})
	}
	return out
}

func reject(name string) approval.Decision {
	return approval.Decision{Approver: name, Verdict: approval.VerdictReject}
}

// progressLines renders every stage's progress, one "|" apart.
func progressLines(p approval.Progress) string {
	parts := make([]string, len(p.Stages))
	for i, s := range p.Stages {
		parts[i] = s.String()
	}
	return strings.Join(parts, " | ")
}

func TestTally(t *testing.T) {
	t.Parallel()
	twoRules := []approval.Stage{{Rules: []approval.Rule{{Group: "sre", Approvals: 2}, {Group: "security", Approvals: 1}}}}
	staged := []approval.Stage{
		{Rules: []approval.Rule{{Group: "leads", Approvals: 1}}},
		{Rules: []approval.Rule{{People: []string{"fiona"}, Approvals: 1}}},
	}
	tests := []struct {
		name      string
		stages    []approval.Stage
		requester string
		votes     []approval.Decision
		progress  string
		current   int
		approved  bool
		rejected  bool
	}{
		{
			name: "nothing yet", stages: twoRules, requester: "ci-bot",
			progress: "sre: 0 of 2; security: 0 of 1",
		},
		{
			name: "one of sre", stages: twoRules, requester: "ci-bot", votes: approve("alice"),
			progress: "sre: 1 of 2 (alice); security: 0 of 1",
		},
		{
			// alice is in both groups: her vote counts once.
			name: "a person in two groups counts once", stages: twoRules, requester: "ci-bot",
			votes:    approve("alice", "bob"),
			progress: "sre: 2 of 2 (alice, bob); security: 0 of 1",
		},
		{
			name: "three distinct people meet both rules", stages: twoRules, requester: "ci-bot",
			votes:    approve("alice", "bob", "carol"),
			progress: "sre: 2 of 2 (bob, carol); security: 1 of 1 (alice)", current: 1, approved: true,
		},
		{
			name: "the requester never counts", stages: twoRules, requester: "bob",
			votes:    approve("Bob", "alice", "carol"),
			progress: "sre: 2 of 2 (alice, carol); security: 0 of 1",
		},
		{
			name: "a person outside every rule counts nothing", stages: twoRules, requester: "ci-bot",
			votes:    approve("mallory", "dave"),
			progress: "sre: 0 of 2; security: 1 of 1 (dave)",
		},
		{
			name: "a second vote of the same person counts once", stages: twoRules, requester: "ci-bot",
			votes:    approve("bob", "BOB"),
			progress: "sre: 1 of 2 (bob); security: 0 of 1",
		},
		{
			name: "stage two is current once stage one is met", stages: staged, requester: "ci-bot",
			votes:    approve("erin"),
			progress: "leads: 1 of 1 (erin) | fiona: 0 of 1", current: 1,
		},
		{
			name: "stages need distinct people", stages: staged, requester: "ci-bot",
			votes:    approve("fiona"),
			progress: "leads: 1 of 1 (fiona) | fiona: 0 of 1", current: 1,
		},
		{
			name: "a later stage counts nothing before it is current", stages: staged, requester: "erin",
			votes:    approve("fiona"),
			progress: "leads: 1 of 1 (fiona) | fiona: 0 of 1", current: 1,
		},
		{
			name: "both stages met", stages: staged, requester: "ci-bot",
			votes:    approve("fiona", "erin"),
			progress: "leads: 1 of 1 (erin) | fiona: 1 of 1 (fiona)", current: 2, approved: true,
		},
		{
			name: "a rejection by an eligible person rejects", stages: twoRules, requester: "ci-bot",
			votes:    append(approve("alice", "bob"), reject("dave")),
			progress: "sre: 2 of 2 (alice, bob); security: 0 of 1", rejected: true,
		},
		{
			name: "a rejection by a person outside the rules does not", stages: twoRules, requester: "ci-bot",
			votes:    []approval.Decision{reject("mallory")},
			progress: "sre: 0 of 2; security: 0 of 1",
		},
		{
			name: "a rejection by a person of a later stage does not", stages: staged, requester: "ci-bot",
			votes:    []approval.Decision{reject("fiona2")},
			progress: "leads: 0 of 1 | fiona: 0 of 1",
		},
		{
			name: "the requester's rejection does not", stages: twoRules, requester: "dave",
			votes:    []approval.Decision{reject("dave")},
			progress: "sre: 0 of 2; security: 0 of 1",
		},
		{
			name: "no stages: approved", requester: "ci-bot", current: 0, approved: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := approval.Tally(tt.stages, testGroups, tt.requester, tt.votes)
			if got := progressLines(p); got != tt.progress {
				t.Errorf("progress: got %q, want %q", got, tt.progress)
			}
			if p.Current != tt.current || p.Approved != tt.approved || p.Rejected != tt.rejected {
				t.Errorf("got current %d approved %v rejected %v, want %d %v %v", p.Current, p.Approved, p.Rejected, tt.current, tt.approved, tt.rejected)
			}
		})
	}
}

func TestTally_toward(t *testing.T) {
	t.Parallel()
	stages := []approval.Stage{{Rules: []approval.Rule{{Group: "sre", Approvals: 2}, {Group: "security", Approvals: 1}}}}
	// alice, in both groups, moves to security when carol's vote needs her place in sre.
	votes := append(approve("alice", "bob", "mallory", "carol"), reject("dave"))
	p := approval.Tally(stages, testGroups, "ci-bot", votes)
	want := []approval.Count{{Stage: 0, Rule: 1}, {Stage: 0, Rule: 0}, {Stage: -1, Rule: -1}, {Stage: 0, Rule: 0}, {Stage: -1, Rule: -1}}
	if !reflect.DeepEqual(p.Toward, want) {
		t.Errorf("toward: got %v, want %v", p.Toward, want)
	}
	if p.Rejecter != "dave" {
		t.Errorf("rejecter: got %q, want dave", p.Rejecter)
	}
}

func TestTally_eligible(t *testing.T) {
	t.Parallel()
	stages := []approval.Stage{
		{Rules: []approval.Rule{{Group: "leads", Approvals: 1}}},
		{Rules: []approval.Rule{{People: []string{"carol"}, Approvals: 1}}},
	}
	tests := []struct {
		votes  []approval.Decision
		person string
		ok     bool
		why    string
	}{
		{person: "erin", ok: true},
		{person: "Fiona", ok: true},
		{person: "ci-bot", why: "the requester may not vote on their own request"},
		{person: "carol", why: "asked only in stage 2, once stage 1 is met"},
		{person: "mallory", why: "not an approver of stage 1: 1 of leads"},
		{votes: approve("erin"), person: "erin", why: "already voted on this approval"},
		{votes: approve("erin"), person: "fiona", why: "not an approver of stage 2: 1 of carol"},
		{votes: approve("erin"), person: "carol", ok: true},
		{votes: approve("erin", "carol"), person: "fiona", why: "the approval is already approved"},
		{votes: []approval.Decision{reject("erin")}, person: "fiona", why: "the approval is already rejected"},
	}
	for _, tt := range tests {
		p := approval.Tally(stages, testGroups, "ci-bot", tt.votes)
		ok, why := p.Eligible(stages, testGroups, "ci-bot", tt.votes, tt.person)
		if ok != tt.ok || why != tt.why {
			t.Errorf("%s after %v: got %v %q, want %v %q", tt.person, tt.votes, ok, why, tt.ok, tt.why)
		}
	}
}

func TestSatisfiable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		stages    []approval.Stage
		requester string
		ok        bool
		why       string
	}{
		{name: "enough people", stages: []approval.Stage{{Rules: []approval.Rule{{Group: "sre", Approvals: 2}, {Group: "security", Approvals: 1}}}}, requester: "ci-bot", ok: true},
		{name: "only with the requester", stages: []approval.Stage{{Rules: []approval.Rule{{Group: "sre", Approvals: 3}, {Group: "security", Approvals: 1}}}}, requester: "dave",
			why: "stage 1 (3 of sre, 1 of security) cannot be met by distinct people other than the requester dave"},
		{name: "the requester named alone", stages: []approval.Stage{{Rules: []approval.Rule{{People: []string{"ci-bot"}, Approvals: 1}}}}, requester: "CI-BOT",
			why: "stage 1 (1 of ci-bot) cannot be met by distinct people other than the requester CI-BOT"},
		{name: "stages share people", stages: []approval.Stage{
			{Rules: []approval.Rule{{Group: "leads", Approvals: 2}}},
			{Rules: []approval.Rule{{People: []string{"fiona"}, Approvals: 1}}},
		}, requester: "ci-bot", why: "stage 2 (1 of fiona) cannot be met by distinct people other than the requester ci-bot"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok, why := approval.Satisfiable(tt.stages, testGroups, tt.requester)
			if ok != tt.ok || why != tt.why {
				t.Errorf("got %v %q, want %v %q", ok, why, tt.ok, tt.why)
			}
		})
	}
}

// TestTally_property checks, over random groups, rules and votes, that the outcome does not
// depend on the order of the votes, that nobody counts twice or toward a rule that does not
// name them, that the requester never counts, and that a stage is met only with enough votes.
func TestTally_property(t *testing.T) {
	t.Parallel()
	people := []string{"ann", "ben", "cat", "dan", "eve", "fay", "gus", "hal"}
	for seed := uint64(0); seed < 2000; seed++ {
		r := rand.New(rand.NewPCG(seed, 33))
		groups := approval.GroupMembers{}
		for _, g := range []string{"g0", "g1", "g2"} {
			for _, p := range people {
				if r.IntN(3) == 0 {
					groups[g] = append(groups[g], p)
				}
			}
		}
		var stages []approval.Stage
		for range 1 + r.IntN(3) {
			var s approval.Stage
			for range 1 + r.IntN(3) {
				rule := approval.Rule{Approvals: 1 + r.IntN(2)}
				if r.IntN(3) == 0 {
					rule.People = []string{people[r.IntN(len(people))], people[r.IntN(len(people))]}
				} else {
					rule.Group = fmt.Sprintf("g%d", r.IntN(3))
				}
				s.Rules = append(s.Rules, rule)
			}
			stages = append(stages, s)
		}
		requester := people[r.IntN(len(people))]
		var votes []approval.Decision
		for _, p := range people {
			switch r.IntN(6) {
			case 0:
				votes = append(votes, reject(p))
			case 1, 2, 3:
				votes = append(votes, approve(p)...)
			}
		}
		want := approval.Tally(stages, groups, requester, votes)
		byPerson := func(p approval.Progress, votes []approval.Decision) map[string]approval.Count {
			m := map[string]approval.Count{}
			for i, c := range p.Toward {
				m[votes[i].Approver] = c
			}
			return m
		}
		wantBy := byPerson(want, votes)
		for range 5 {
			shuffled := slices.Clone(votes)
			r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			got := approval.Tally(stages, groups, requester, shuffled)
			if progressLines(got) != progressLines(want) || got.Current != want.Current || got.Approved != want.Approved || got.Rejected != want.Rejected {
				t.Fatalf("seed %d: shuffled votes: got %q current %d approved %v rejected %v, want %q %d %v %v",
					seed, progressLines(got), got.Current, got.Approved, got.Rejected, progressLines(want), want.Current, want.Approved, want.Rejected)
			}
			if gotBy := byPerson(got, shuffled); !reflect.DeepEqual(gotBy, wantBy) {
				t.Fatalf("seed %d: shuffled votes counted toward: got %v, want %v", seed, gotBy, wantBy)
			}
		}
		counted := map[string]int{}
		for s, sp := range want.Stages {
			for ri, rp := range sp.Rules {
				if len(rp.By) > rp.Rule.Approvals {
					t.Fatalf("seed %d: stage %d rule %d: got %d counted, want at most %d", seed, s, ri, len(rp.By), rp.Rule.Approvals)
				}
				for _, p := range rp.By {
					counted[p]++
					if approval.SameName(p, requester) {
						t.Fatalf("seed %d: requester %s counted toward stage %d rule %d", seed, p, s, ri)
					}
					if rp.Rule.Group != "" && !groups.InGroup(p, rp.Rule.Group) || rp.Rule.Group == "" && !slices.Contains(rp.Rule.People, p) {
						t.Fatalf("seed %d: %s counted toward %s, which does not name them", seed, p, rp.Rule.Label())
					}
				}
			}
			if sp.Met != (s < want.Current) {
				t.Fatalf("seed %d: stage %d met %v with current %d", seed, s, sp.Met, want.Current)
			}
		}
		for p, n := range counted {
			if n > 1 {
				t.Fatalf("seed %d: %s counted %d times, want once", seed, p, n)
			}
		}
		// Maximality: the first stage is met exactly when some assignment of distinct
		// approvers to its rules' places exists, found here by exhaustive search.
		var approvers []string
		for _, v := range votes {
			if v.Verdict == approval.VerdictApprove && !approval.SameName(v.Approver, requester) {
				approvers = append(approvers, v.Approver)
			}
		}
		need := make([]int, len(stages[0].Rules))
		for i, rule := range stages[0].Rules {
			need[i] = rule.Approvals
		}
		if got, want := want.Stages[0].Met, canMeet(stages[0].Rules, groups, approvers, need); got != want {
			t.Fatalf("seed %d: stage 1 met: got %v, want %v (exhaustive search)", seed, got, want)
		}
		// With everyone but the requester approving, Satisfiable and Tally agree.
		ok, _ := approval.Satisfiable(stages, groups, requester)
		var all []approval.Decision
		for _, p := range people {
			all = append(all, approve(p)...)
		}
		if got := approval.Tally(stages, groups, requester, all).Approved; got != ok {
			t.Fatalf("seed %d: everyone approving: got approved %v, want %v (Satisfiable)", seed, got, ok)
		}
	}
}

// canMeet reports whether the people can fill the places the rules still need, each person
// at most one place of a rule that names them.
func canMeet(rules []approval.Rule, groups approval.GroupMembers, people []string, need []int) bool {
	if !slices.ContainsFunc(need, func(n int) bool { return n > 0 }) {
		return true
	}
	if len(people) == 0 {
		return false
	}
	p, rest := people[0], people[1:]
	if canMeet(rules, groups, rest, need) {
		return true
	}
	for i, r := range rules {
		names := r.Group != "" && groups.InGroup(p, r.Group) || r.Group == "" && slices.Contains(r.People, p)
		if need[i] > 0 && names {
			need[i]--
			ok := canMeet(rules, groups, rest, need)
			need[i]++
			if ok {
				return true
			}
		}
	}
	return false
}

func BenchmarkTally(b *testing.B) {
	stages := []approval.Stage{{Rules: []approval.Rule{{Group: "sre", Approvals: 2}, {Group: "security", Approvals: 1}}}}
	votes := approve("alice", "bob", "carol")
	b.ReportAllocs()
	for b.Loop() {
		approval.Tally(stages, testGroups, "ci-bot", votes)
	}
}
