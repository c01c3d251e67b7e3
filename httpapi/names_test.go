package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
)

// confusables are names that look like "ci-bot" (or "alice") but are not: each must be refused
// wherever a name is given, with the reason in the answer.
var confusables = []struct{ name, value, reason string }{
	{"a zero-width space", "ci-bot\u200b", "U+200B"},
	{"a Cyrillic letter in a Latin name", "ali\u0441e", "scripts"},
	{"a Unicode hyphen", "ci\u2010bot", "U+2010"},
	{"trailing no-break spaces", "ci-bot\u00a0\u00a0", "U+00A0"},
	{"a right-to-left override", "ci-bot\u202e", "U+202E"},
}

// TestNamesAtTokenCreate: POST /v1/tokens refuses a confusable subject with a 400 naming the
// field and the character, and creates nothing; a case variant is mapped to its normalised
// form, which is what the token shows.
func TestNamesAtTokenCreate(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		admin := f.token("root", approval.RoleAdmin)
		for _, c := range confusables {
			body, _ := json.Marshal(map[string]string{"subject": c.value, "role": "approver"})
			p := f.do("POST", "/v1/tokens", admin, string(body)).problem(t, http.StatusBadRequest)
			if !strings.Contains(p.Detail, "subject") || !strings.Contains(p.Detail, c.reason) {
				t.Errorf("%s: got %q, want a reason naming subject and %s", c.name, p.Detail, c.reason)
			}
		}
		tokens, _, err := f.store.Tokens(context.Background(), approval.TokenFilter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(tokens) != 1 {
			t.Fatalf("refused subjects stored tokens: got %d tokens, want the admin's alone", len(tokens))
		}

		resp := f.do("POST", "/v1/tokens", admin, `{"subject":"CI-BOT","role":"approver"}`)
		if resp.status != http.StatusCreated {
			t.Fatalf("a case variant: got %d %s, want 201", resp.status, resp.body)
		}
		var tok tokenAnswer
		resp.decode(t, &tok)
		if tok.Subject != "ci-bot" {
			t.Fatalf("a case variant: got subject %q, want ci-bot", tok.Subject)
		}
		for _, ok := range []string{"Zoë Martín", "deploy@example.com"} {
			body, _ := json.Marshal(map[string]string{"subject": ok, "role": "approver"})
			if resp := f.do("POST", "/v1/tokens", admin, string(body)); resp.status != http.StatusCreated {
				t.Errorf("subject %q: got %d %s, want 201", ok, resp.status, resp.body)
			}
		}
	})
}

// TestNamesInCreates: a create naming a confusable approver is refused with a 400 naming the
// approver and the character, and stores nothing; case variants are mapped, so that "Alice"
// is stored as "alice" and "alice" with "ALICE" is one approver listed twice.
func TestNamesInCreates(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		ci := f.token("ci-bot", approval.RoleRequester)
		for i, c := range confusables {
			p := f.create(ci, "confusable-"+string(rune('a'+i)), createBody("Deploy", "bob", c.value)).problem(t, http.StatusBadRequest)
			if !strings.Contains(p.Detail, "approvers[1]") || !strings.Contains(p.Detail, c.reason) {
				t.Errorf("%s: got %q, want a reason naming approvers[1] and %s", c.name, p.Detail, c.reason)
			}
		}
		if n := f.count(); n != 0 {
			t.Fatalf("refused creates stored %d approvals", n)
		}

		a := f.mustCreate(ci, "mapped", createBody("Deploy", "Alice", "BOB"))
		if strings.Join(a.Approvers, ",") != "alice,bob" || a.Requester != "ci-bot" {
			t.Fatalf("case variants: got approvers %q requester %q, want alice,bob and ci-bot", a.Approvers, a.Requester)
		}
		p := f.create(ci, "twice", createBody("Deploy", "alice", "ALICE")).problem(t, http.StatusBadRequest)
		if !strings.Contains(p.Detail, "listed twice") {
			t.Fatalf("alice and ALICE: got %q, want listed twice", p.Detail)
		}
		// The requester named in another case is still the requester.
		p = f.create(ci, "only-me", createBody("Deploy", "CI-BOT")).problem(t, http.StatusBadRequest)
		if !strings.Contains(p.Detail, "only the requester") {
			t.Fatalf("requester in capitals: got %q, want only the requester", p.Detail)
		}
		// The token subject "alice" is the approver listed as "Alice".
		alice := f.token("alice", approval.RoleApprover)
		if resp := f.do("POST", "/v1/approvals/"+a.ID+"/approve", alice, ""); resp.status != http.StatusOK {
			t.Fatalf("alice approving as listed Alice: got %d %s, want 200", resp.status, resp.body)
		}
	})
}

// TestConfusableCannotApproveTwin: the attack of issue 31 point 3. A requester cannot list a
// twin of itself as an approver, and a token whose subject is a twin of the requester (made
// under the old rules, or in capitals) cannot approve the request.
func TestConfusableCannotApproveTwin(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		ci := f.token("ci-bot", approval.RoleRequester)

		// A twin listed at create: refused.
		f.create(ci, "twin", createBody("Deploy", "ci-bot\u200b")).problem(t, http.StatusBadRequest)

		// A twin in capitals: the same person, so the requester's own approval is refused.
		shouting := f.token("CI-BOT", approval.RoleApprover)
		a := f.mustCreate(ci, "capitals", createBody("Deploy", "CI-BOT", "alice"))
		f.do("POST", "/v1/approvals/"+a.ID+"/approve", shouting, "").problem(t, http.StatusForbidden)

		// A zero-width twin stored before names were checked, with an approval listing it
		// stored likewise: the twin's token cannot vote.
		now := f.clock.Now()
		secret, tok := approval.NewToken("ci-bot\u200b", approval.RoleApprover, now)
		tx, err := f.store.Begin(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.TokenInsert(context.Background(), tok); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
		old := &approval.Approval{
			ID: approval.NewID("apr"), OperationKey: "old", Action: "deploy", Title: "Old",
			Context: json.RawMessage("{}"), Requester: "ci-bot", Approvers: []string{"ci-bot\u200b", "alice"},
			RequiredApprovals: 1, Status: approval.StatusPending, Decisions: []approval.Decision{},
			CreatedAt: now, ExpiresAt: now.Add(time.Hour), Version: 1, Fingerprint: "seeded",
		}
		if _, err := f.store.InsertApproval(context.Background(), old, approval.Cause{Kind: approval.CauseHTTP}, nil); err != nil {
			t.Fatal(err)
		}
		resp := f.do("POST", "/v1/approvals/"+old.ID+"/approve", secret, "")
		if resp.status == http.StatusOK {
			t.Fatalf("the zero-width twin approved the requester's own request: %s", resp.body)
		}
		got, err := f.store.Approval(context.Background(), old.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != approval.StatusPending || len(got.Decisions) != 0 {
			t.Fatalf("after the twin's vote: got %s with %d decisions, want pending with none", got.Status, len(got.Decisions))
		}
	})
}

// TestNamesInListFilters: the approver and requester filters of GET /v1/approvals compare
// names as the rules do, so that ?approver=Alice lists what alice may decide.
func TestNamesInListFilters(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		ci := f.token("ci-bot", approval.RoleRequester)
		admin := f.token("root", approval.RoleAdmin)
		if resp := f.create(ci, "listed-by-name", createBody("Deploy", "alice")); resp.status != http.StatusCreated {
			t.Fatalf("create: got %d %s", resp.status, resp.body)
		}
		for _, q := range []string{"approver=Alice", "approver=ALICE", "requester=CI-BOT"} {
			var page struct {
				Approvals []json.RawMessage `json:"approvals"`
			}
			f.do("GET", "/v1/approvals?"+q, admin, "").decode(t, &page)
			if len(page.Approvals) != 1 {
				t.Errorf("GET /v1/approvals?%s: got %d approvals, want 1", q, len(page.Approvals))
			}
		}
	})
}
