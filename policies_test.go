package approval_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/policy"
)

// testPolicies are the policies the tests of creates and votes under policies run with.
const testPolicies = `
groups:
  sre: [alice, bob, carol]
  security: [dave]
  support-leads: [erin]
policies:
  - name: prod-deploy
    match: {action: deploy, when: 'context.env == "prod"'}
    requesters: [ci-bot]
    rules:
      - {group: sre, approvals: 2}
      - {group: security, approvals: 1}
    expires_in: 2h
  - name: refunds
    match: {action: refund}
    stages:
      - rules: [{group: support-leads, approvals: 1}]
      - rules: [{people: [fiona], approvals: 1}]
  - name: selfie
    match: {action: selfie}
    rules: [{people: [ci-bot], approvals: 1}]
  - name: legacy
    match: {action: legacy}
    approvers: from_request
`

// MustPolicies compiles the groups and policies of text and returns them with the groups'
// members.
func MustPolicies(tb testing.TB, text string) (approval.Policies, approval.GroupMembers) {
	tb.Helper()
	var c struct {
		Groups   map[string]policy.Group `yaml:"groups"`
		Policies []policy.Policy         `yaml:"policies"`
	}
	if err := yaml.Unmarshal([]byte(text), &c); err != nil {
		tb.Fatal(err)
	}
	set, err := policy.Compile(c.Groups, c.Policies)
	if err != nil {
		tb.Fatal(err)
	}
	return set.ForService(), set.Members()
}

// policyCreate is a create of body (a JSON object) under key.
func policyCreate(key, body string) approval.CreateCommand {
	return approval.CreateCommand{
		Key:  key,
		Body: []byte(body),
		Decode: func() (approval.CreateRequest, error) {
			var req approval.CreateRequest
			err := json.Unmarshal([]byte(body), &req)
			return req, err
		},
		Cause:   approval.HTTPCause("create-" + key),
		Respond: func(*approval.Approval) (approval.StoredResponse, error) { return approval.StoredResponse{}, nil },
	}
}

var ciBot = approval.Principal{Subject: "ci-bot", Role: approval.RoleRequester}

const prodDeploy = `{"action":"deploy","title":"Deploy api","context":{"env":"prod"}}`

func TestCreateUnderPolicy(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		ctx := t.Context()
		st := testdb.Open(t, kind, nil)
		policies, members := MustPolicies(t, testPolicies)
		svc := &approval.Service{Store: st, Policies: policies, Members: members}

		res, err := svc.Create(ctx, ciBot, policyCreate("deploy-1", prodDeploy))
		if err != nil {
			t.Fatal(err)
		}
		a := res.Approval
		if a.Resolved == nil || a.Resolved.Policy != "prod-deploy" || a.Resolved.Version == "" {
			t.Fatalf("got resolved %+v, want prod-deploy with its version", a.Resolved)
		}
		if got, want := strings.Join(a.Approvers, ","), "alice,bob,carol,dave"; got != want {
			t.Errorf("approvers: got %s, want %s", got, want)
		}
		if a.RequiredApprovals != 3 {
			t.Errorf("required approvals: got %d, want 3", a.RequiredApprovals)
		}
		if got, want := a.ExpiresAt.Sub(a.CreatedAt), 2*time.Hour; got != want {
			t.Errorf("expires in: got %s, want %s (the policy's)", got, want)
		}
		read, err := st.Approval(ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		gotJSON, _ := json.Marshal(read.Resolved)
		wantJSON, _ := json.Marshal(a.Resolved)
		if string(gotJSON) != string(wantJSON) {
			t.Errorf("stored policy: got %s, want %s", gotJSON, wantJSON)
		}

		// A retry is answered with the original, whatever the policy's version now.
		changed, changedMembers := MustPolicies(t, strings.Replace(testPolicies, "sre, approvals: 2", "sre, approvals: 3", 1))
		again := &approval.Service{Store: st, Policies: changed, Members: changedMembers}
		if res, err := again.Create(ctx, ciBot, policyCreate("deploy-1", prodDeploy)); err != nil || !res.Replayed || res.Approval.ID != a.ID {
			t.Errorf("retry under a changed policy: got %+v, %v; want the original approval replayed", res, err)
		}
		// Even when the policies now refuse the request.
		gone, goneMembers := MustPolicies(t, strings.Replace(testPolicies, "action: deploy,", "action: deploy-old,", 1))
		refusing := &approval.Service{Store: st, Policies: gone, Members: goneMembers}
		if res, err := refusing.Create(ctx, ciBot, policyCreate("deploy-1", prodDeploy)); err != nil || !res.Replayed || res.Approval.ID != a.ID {
			t.Errorf("retry under policies that now refuse it: got %+v, %v; want the original approval replayed", res, err)
		}
		if _, err := refusing.Create(ctx, ciBot, policyCreate("deploy-1", `{"action":"deploy","title":"other","context":{"env":"prod"}}`)); approval.ErrorCode(err) != approval.EMISMATCH {
			t.Errorf("another request under the key, refused by the policies: got %v, want %s", err, approval.EMISMATCH)
		}

		if res, err := svc.Create(ctx, ciBot, policyCreate("deploy-short", `{"action":"deploy","title":"t","context":{"env":"prod"},"expires_in":"1h"}`)); err != nil {
			t.Errorf("a shorter expiry: got %v, want it accepted", err)
		} else if got := res.Approval.ExpiresAt.Sub(res.Approval.CreatedAt); got != time.Hour {
			t.Errorf("a shorter expiry: got %s, want 1h", got)
		}

		legacy, err := svc.Create(ctx, ciBot, policyCreate("legacy-1", `{"action":"legacy","title":"t","approvers":["mallory"]}`))
		if err != nil {
			t.Fatal(err)
		}
		if a := legacy.Approval; a.Resolved != nil || strings.Join(a.Approvers, ",") != "mallory" || a.RequiredApprovals != 1 {
			t.Errorf("from_request: got resolved %+v approvers %v required %d, want none, [mallory], 1", a.Resolved, a.Approvers, a.RequiredApprovals)
		}

		for _, tt := range []struct {
			name    string
			p       approval.Principal
			body    string
			code    string
			message string
		}{
			{"another requester", approval.Principal{Subject: "mallory", Role: approval.RoleRequester}, prodDeploy,
				approval.EFORBIDDEN, "policy prod-deploy lets only ci-bot request deploy"},
			{"approvers named", ciBot, `{"action":"deploy","title":"t","context":{"env":"prod"},"approvers":["mallory"]}`,
				approval.EUNPROCESSABLE, "policy prod-deploy decides the approvers of deploy"},
			{"required approvals named", ciBot, `{"action":"deploy","title":"t","context":{"env":"prod"},"required_approvals":1}`,
				approval.EUNPROCESSABLE, "policy prod-deploy decides how many approvals deploy needs"},
			{"no policy", ciBot, `{"action":"drop-db","title":"t"}`,
				approval.EUNPROCESSABLE, "no policy applies to the action drop-db"},
			{"only the requester", ciBot, `{"action":"selfie","title":"t"}`,
				approval.EUNPROCESSABLE, "policy selfie could only be met with the requester's own vote"},
			{"a longer expiry", ciBot, `{"action":"deploy","title":"t","context":{"env":"prod"},"expires_in":"3h"}`,
				approval.EUNPROCESSABLE, "expires_in 3h0m0s is longer than policy prod-deploy allows (2h0m0s)"},
			{"a condition that fails", ciBot, `{"action":"deploy","title":"t"}`,
				approval.EINVALID, "policy prod-deploy: its condition"},
		} {
			_, err := svc.Create(ctx, tt.p, policyCreate("refused-"+tt.name, tt.body))
			if got := approval.ErrorCode(err); got != tt.code || !strings.HasPrefix(approval.ErrorMessage(err), tt.message) {
				t.Errorf("%s: got %s %q, want %s %q", tt.name, got, approval.ErrorMessage(err), tt.code, tt.message)
			}
			// Nothing was written: the key is free for a corrected request.
			if _, err := svc.Create(ctx, ciBot, policyCreate("refused-"+tt.name, `{"action":"legacy","title":"t","approvers":["alice"]}`)); err != nil {
				t.Errorf("%s: the key reused after the refusal: got %v, want it free", tt.name, err)
			}
		}
	})
}

// TestCreateWithoutPolicies: with no policies configured a create is today's: the request
// names its approvers and the approval keeps no policy.
func TestCreateWithoutPolicies(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		st := testdb.Open(t, kind, nil)
		svc := &approval.Service{Store: st}
		res, err := svc.Create(t.Context(), ciBot, policyCreate("k", `{"action":"deploy","title":"t","approvers":["mallory"]}`))
		if err != nil {
			t.Fatal(err)
		}
		read, err := st.Approval(t.Context(), res.Approval.ID)
		if err != nil {
			t.Fatal(err)
		}
		if read.Resolved != nil || strings.Join(read.Approvers, ",") != "mallory" {
			t.Errorf("got resolved %+v approvers %v, want none and [mallory]", read.Resolved, read.Approvers)
		}
	})
}

// vote is p's verdict on the approval id.
func vote(ctx context.Context, svc *approval.Service, id, person string, v approval.Verdict) (*approval.Approval, error) {
	return svc.Decide(ctx, approval.Principal{Subject: person, Role: approval.RoleApprover},
		approval.DecideRequest{ApprovalID: id, Verdict: v, Cause: approval.HTTPCause("vote-" + person)})
}

func TestDecideUnderPolicy(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		ctx := t.Context()
		st := testdb.Open(t, kind, nil)
		policies, members := MustPolicies(t, testPolicies)
		svc := &approval.Service{Store: st, Policies: policies, Members: members}
		create := func(key, body string) *approval.Approval {
			t.Helper()
			res, err := svc.Create(ctx, ciBot, policyCreate(key, body))
			if err != nil {
				t.Fatal(err)
			}
			return res.Approval
		}
		refused := func(a *approval.Approval, person, want string) {
			t.Helper()
			_, err := vote(ctx, svc, a.ID, person, approval.VerdictApprove)
			if approval.ErrorCode(err) != approval.EFORBIDDEN || !strings.Contains(approval.ErrorMessage(err), want) {
				t.Errorf("%s's vote: got %v, want forbidden saying %q", person, err, want)
			}
		}

		// Two of sre and one of security: three distinct people.
		a := create("deploy", prodDeploy)
		// Someone the approval does not list may not learn that it exists.
		if _, err := vote(ctx, svc, a.ID, "mallory", approval.VerdictApprove); approval.ErrorCode(err) != approval.ENOTFOUND {
			t.Errorf("mallory's vote: got %v, want %s", err, approval.ENOTFOUND)
		}
		refused(a, "ci-bot", "the requester may not vote")
		for _, person := range []string{"alice", "bob"} {
			if got, err := vote(ctx, svc, a.ID, person, approval.VerdictApprove); err != nil || got.Status != approval.StatusPending {
				t.Fatalf("%s approves: got %v, %v; want pending", person, got, err)
			}
		}
		got, err := vote(ctx, svc, a.ID, "dave", approval.VerdictApprove)
		if err != nil || got.Status != approval.StatusApproved || got.Execution == nil {
			t.Fatalf("dave approves: got %+v, %v; want approved with its execution", got, err)
		}
		events, err := st.Events(ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		var toward []string
		for _, e := range events {
			if e.Type == approval.EventVoted {
				c, _ := e.Detail["counted_toward"].(map[string]any)
				toward = append(toward, e.Actor+":"+anyText(c["rule"]))
			}
		}
		if got, want := strings.Join(toward, " "), "alice:sre bob:sre dave:security"; got != want {
			t.Errorf("counted toward: got %s, want %s", got, want)
		}

		// Stages: fiona is asked only once a support lead approved.
		r := create("refund", `{"action":"refund","title":"Refund"}`)
		refused(r, "fiona", "asked only in stage 2, once stage 1 is met")
		if got, err := vote(ctx, svc, r.ID, "erin", approval.VerdictApprove); err != nil || got.Status != approval.StatusPending {
			t.Fatalf("erin approves: got %v, %v; want pending", got, err)
		}
		if got, err := vote(ctx, svc, r.ID, "fiona", approval.VerdictApprove); err != nil || got.Status != approval.StatusApproved {
			t.Fatalf("fiona approves: got %v, %v; want approved", got, err)
		}

		// A rejection by someone eligible vetoes.
		v := create("deploy-veto", prodDeploy)
		if got, err := vote(ctx, svc, v.ID, "dave", approval.VerdictReject); err != nil || got.Status != approval.StatusRejected {
			t.Fatalf("dave rejects: got %v, %v; want rejected", got, err)
		}

		// Removing someone from a group ends their say at once: the Service asks Members at
		// each vote.
		m := create("deploy-removed", prodDeploy)
		svc.Members = approval.GroupMembers{"sre": {"alice", "carol"}, "security": {"dave"}}
		refused(m, "bob", "not an approver of stage 1")
		if after, err := st.Approval(ctx, m.ID); err != nil || after.Version != m.Version || len(after.Decisions) != 0 {
			t.Errorf("after the refused vote: got %+v, %v; want it unchanged", after, err)
		}
		svc.Members = members
	})
}

// anyText is v as text, "" for nil.
func anyText(v any) string {
	s, _ := v.(string)
	return s
}

// TestDecideUnderPolicy_concurrent: two eligible people of different rules approve at once,
// many times: the approval is approved exactly once, with both votes recorded.
func TestDecideUnderPolicy_concurrent(t *testing.T) {
	const rounds = 30
	text := `
groups:
  sre: [alice]
  security: [dave]
policies:
  - name: two
    match: {action: deploy}
    rules: [{group: sre}, {group: security}]
`
	testdb.Each(t, func(t *testing.T, kind string) {
		ctx := t.Context()
		st := testdb.Open(t, kind, nil)
		policies, members := MustPolicies(t, text)
		svc := &approval.Service{Store: st, Policies: policies, Members: members}
		for i := range rounds {
			res, err := svc.Create(ctx, ciBot, policyCreate("race-"+strconv.Itoa(i), `{"action":"deploy","title":"race"}`))
			if err != nil {
				t.Fatal(err)
			}
			id := res.Approval.ID
			start := make(chan struct{})
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for j, person := range []string{"alice", "dave"} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					_, errs[j] = vote(ctx, svc, id, person, approval.VerdictApprove)
				}()
			}
			close(start)
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					t.Fatalf("round %d: got %v, want both votes accepted", i, err)
				}
			}
			a, err := st.Approval(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if a.Status != approval.StatusApproved || len(a.Decisions) != 2 || a.Execution == nil {
				t.Fatalf("round %d: got %s with %d votes, execution %v; want approved with 2 votes and an execution", i, a.Status, len(a.Decisions), a.Execution)
			}
			events, err := st.Events(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			approved := 0
			for _, e := range events {
				if e.Type == approval.EventApproved {
					approved++
				}
			}
			if approved != 1 {
				t.Fatalf("round %d: got %d approved events, want 1", i, approved)
			}
		}
	})
}
