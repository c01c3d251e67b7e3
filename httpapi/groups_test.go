package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/httpapi"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/policy"
)

// groupsPolicies: sre is alice and the identity provider's platform-sre; two policies, the
// second taking its approvers from the request.
func groupsPolicies(t *testing.T) (approval.Policies, approval.GroupMembers) {
	t.Helper()
	set, err := policy.Compile(map[string]policy.Group{
		"sre":      {Members: []string{"Alice"}, OIDCGroup: "platform-sre"},
		"security": {Members: []string{"dave"}},
	}, []policy.Policy{
		{Name: "prod-deploy", Match: policy.Match{Action: "deploy", When: `context.env == "prod"`}, Requesters: []string{"ci-bot"},
			Rules: []policy.Rule{{Group: "sre", Approvals: 2}, {Group: "security"}}, ExpiresIn: 24 * time.Hour, RemindEvery: 4 * time.Hour},
		{Name: "anything-else", Match: policy.Match{Action: "*"}, Approvers: policy.FromRequest},
	})
	if err != nil {
		t.Fatal(err)
	}
	return set.ForService(), set.Members()
}

// setupGroups is setup with the groups and policies of groupsPolicies, and its Service.
func setupGroups(t *testing.T, kind string) (*fixture, *approval.Service) {
	t.Helper()
	var svc *approval.Service
	f := setup(t, kind, func(c *httpapi.Config) {
		svc = rules(c.Store.(approval.Store))
		svc.Policies, svc.Members = groupsPolicies(t)
		c.Service = svc
	})
	svc.Now = f.clock.Now
	return f, svc
}

// TestGroupsAndPolicies: GET /v1/groups and GET /v1/policies show operators and admins the
// configuration in force, the identity provider's members with their sign-in; the other roles
// are refused (403), and without policies both lists are empty.
func TestGroupsAndPolicies(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		f, svc := setupGroups(t, kind)
		if err := svc.RecordIdentityGroups(t.Context(), "carol", []string{"platform-sre", "staff"}); err != nil {
			t.Fatal(err)
		}
		for _, role := range []approval.Role{approval.RoleRequester, approval.RoleApprover} {
			tok := f.token("someone", role)
			for _, path := range []string{"/v1/groups", "/v1/policies"} {
				if resp := f.do("GET", path, tok, ""); resp.status != http.StatusForbidden {
					t.Errorf("%s as %s: got %d %s, want 403", path, role, resp.status, resp.body)
				}
			}
		}
		for _, role := range []approval.Role{approval.RoleOperator, approval.RoleAdmin} {
			tok := f.token("olga", role)
			resp := f.do("GET", "/v1/groups", tok, "")
			if resp.status != http.StatusOK {
				t.Fatalf("groups as %s: got %d %s", role, resp.status, resp.body)
			}
			var groups struct {
				Groups []approval.GroupInfo `json:"groups"`
			}
			resp.decode(t, &groups)
			if len(groups.Groups) != 2 {
				t.Fatalf("groups: got %s, want security and sre", resp.body)
			}
			sec, sre := groups.Groups[0], groups.Groups[1]
			if sec.Name != "security" || len(sec.Members) != 1 || sec.OIDCGroup != "" || sec.OIDCMembers == nil || len(sec.OIDCMembers) != 0 {
				t.Errorf("security: got %+v", sec)
			}
			if sre.Name != "sre" || len(sre.Members) != 1 || sre.Members[0] != "alice" || sre.OIDCGroup != "platform-sre" ||
				len(sre.OIDCMembers) != 1 || sre.OIDCMembers[0].Person != "carol" || sre.OIDCMembers[0].SignedInAt.IsZero() {
				t.Errorf("sre: got %+v, want alice listed and carol from the provider", sre)
			}

			resp = f.do("GET", "/v1/policies", tok, "")
			if resp.status != http.StatusOK {
				t.Fatalf("policies as %s: got %d %s", role, resp.status, resp.body)
			}
			var policies struct {
				Policies []approval.PolicyInfo `json:"policies"`
			}
			resp.decode(t, &policies)
			if len(policies.Policies) != 2 {
				t.Fatalf("policies: got %s, want 2", resp.body)
			}
			prod, rest := policies.Policies[0], policies.Policies[1]
			if prod.Name != "prod-deploy" || len(prod.Version) != 16 || prod.Match.When != `context.env == "prod"` ||
				len(prod.Stages) != 1 || len(prod.Stages[0].Rules) != 2 || prod.Stages[0].Rules[1].Approvals != 1 ||
				prod.ExpiresIn != "24h0m0s" || prod.RemindEvery != "4h0m0s" || prod.FromRequest || len(prod.Requesters) != 1 {
				t.Errorf("prod-deploy: got %+v", prod)
			}
			if rest.Name != "anything-else" || !rest.FromRequest || rest.Stages == nil || len(rest.Stages) != 0 || rest.Match.Action != "*" {
				t.Errorf("anything-else: got %+v", rest)
			}
		}
	})
}

// TestGroupsAndPolicies_none: without policies both lists are empty.
func TestGroupsAndPolicies_none(t *testing.T) {
	t.Parallel()
	f := setup(t, testdb.SQLite)
	tok := f.token("olga", approval.RoleOperator)
	for path, want := range map[string]string{"/v1/groups": `{"groups":[]}`, "/v1/policies": `{"policies":[]}`} {
		if resp := f.do("GET", path, tok, ""); resp.status != http.StatusOK || strings.TrimSpace(string(resp.body)) != want {
			t.Errorf("%s: got %d %q, want 200 %s", path, resp.status, resp.body, want)
		}
	}
}

// TestListWaiting: GET /v1/approvals?waiting=true lists what waits for the token's subject
// now, through a group joined after the create too, which may then read it; its bad uses are
// 400 and the plain listing is unchanged.
func TestListWaiting(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		f, svc := setupGroups(t, kind)
		for _, p := range []string{"carol", "erin"} {
			if err := svc.RecordIdentityGroups(t.Context(), p, []string{"platform-sre"}); err != nil {
				t.Fatal(err)
			}
		}
		a := f.mustCreate(f.token("ci-bot", approval.RoleRequester), "deploy-1", `{"action":"deploy","title":"Deploy api","context":{"env":"prod"}}`)
		// bob signs in with the group after the create.
		if err := svc.RecordIdentityGroups(t.Context(), "bob", []string{"platform-sre"}); err != nil {
			t.Fatal(err)
		}
		bob := f.token("bob", approval.RoleApprover)
		ids := func(path, tok string) string {
			t.Helper()
			resp := f.do("GET", path, tok, "")
			if resp.status != http.StatusOK {
				t.Fatalf("%s: got %d %s", path, resp.status, resp.body)
			}
			var list struct {
				Approvals []approval.Approval `json:"approvals"`
			}
			resp.decode(t, &list)
			var out []string
			for _, a := range list.Approvals {
				out = append(out, a.ID)
			}
			return strings.Join(out, ",")
		}
		if got := ids("/v1/approvals?waiting=true", bob); got != a.ID {
			t.Errorf("waiting for bob: got %q, want %s", got, a.ID)
		}
		if got := ids("/v1/approvals", bob); got != "" {
			t.Errorf("bob's plain listing: got %q, want none (the approval does not list him)", got)
		}
		if resp := f.do("GET", "/v1/approvals/"+a.ID, bob, ""); resp.status != http.StatusOK {
			t.Errorf("bob reads what waits for him: got %d %s", resp.status, resp.body)
		}
		if got := ids("/v1/approvals?waiting=true&requester=someone-else", bob); got != "" {
			t.Errorf("waiting for bob, another requester: got %q, want none", got)
		}
		if got := ids("/v1/approvals?waiting=true", f.token("dave", approval.RoleApprover)); got != a.ID {
			t.Errorf("waiting for dave, named by security: got %q, want %s", got, a.ID)
		}
		if got := ids("/v1/approvals?waiting=true", f.token("ci-bot", approval.RoleRequester)); got != "" {
			t.Errorf("waiting for the requester: got %q, want none", got)
		}
		for _, q := range []string{"waiting=yes", "waiting=true&status=pending", "waiting=true&approver=bob"} {
			if resp := f.do("GET", "/v1/approvals?"+q, bob, ""); resp.status != http.StatusBadRequest {
				t.Errorf("?%s: got %d %s, want 400", q, resp.status, resp.body)
			}
		}
	})
}
