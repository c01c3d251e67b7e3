package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/policy"
	"github.com/approvald/approval/web"
)

// setupPolicies is setup with the policies of a release: one of sre (alice, bob, carol),
// then fiona; anything else names its approvers.
func setupPolicies(tb testing.TB, kind string) *fixture {
	tb.Helper()
	set, err := policy.Compile(map[string]policy.Group{"sre": {Members: []string{"alice", "bob", "carol"}}}, []policy.Policy{
		{Name: "release", Match: policy.Match{Action: "release"}, Requesters: []string{"ci-bot"},
			Stages: []policy.Stage{{Rules: []policy.Rule{{Group: "sre", Approvals: 1}}}, {Rules: []policy.Rule{{People: []string{"fiona"}, Approvals: 1}}}}},
		{Name: "anything-else", Match: policy.Match{Action: "*"}, Approvers: policy.FromRequest},
	})
	if err != nil {
		tb.Fatalf("compile policies: %v", err)
	}
	return setup(tb, kind, func(cfg *web.Config, base string) {
		cfg.Service = &approval.Service{Store: cfg.Store, Policies: set.ForService(), Members: set.Members()}
	})
}

// createRelease asks for a release, which the policies decide who approves.
func (f *fixture) createRelease(title string) *approval.Approval {
	f.tb.Helper()
	var a approval.Approval
	body := `{"action": "release", "title": "` + title + `", "context": {"version": "2.4.0"}}`
	if code := f.api(http.MethodPost, "/v1/approvals", f.token("ci-bot", approval.RoleRequester), body, &a); code != http.StatusCreated {
		f.tb.Fatalf("create release: status %d", code)
	}
	return &a
}

// TestPages_PolicyProgress: the page of an approval created under a policy shows each
// rule's progress and the stage asked; a person of a later stage is told why they cannot
// vote yet and gets no form; a vote by someone no longer eligible (stage 1 was met since
// their page was rendered) is refused with a page that says so, keeps the comment, and
// changes nothing.
func TestPages_PolicyProgress(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setupPolicies(t, kind)
		a := f.createRelease("Release 2.4.0")
		alice, bob, fiona := f.browser(), f.browser(), f.browser()
		alice.signIn(f.token("alice", approval.RoleApprover))
		bob.signIn(f.token("bob", approval.RoleApprover))
		fiona.signIn(f.token("fiona", approval.RoleApprover))

		page := textOf(alice.get("/ui/approvals/" + a.ID).body)
		for _, want := range []string{"Policy release", "Now asked: stage 1 of 2", "sre 0 of 1", "sre: 0 of 1"} {
			must(t, strings.Contains(page, want), "alice's page %q does not say %q", page, want)
		}
		fp := fiona.get("/ui/approvals/" + a.ID).body
		must(t, !strings.Contains(fp, `id="approve"`), "fiona, of stage 2, is offered the vote in stage 1")
		must(t, strings.Contains(textOf(fp), "You cannot vote on this now: asked only in stage 2, once stage 1 is met."), "fiona's page: %q", textOf(fp))

		bobToken := bob.decisionToken(a.ID) // rendered while bob may vote
		if code := f.api(http.MethodPost, "/v1/approvals/"+a.ID+"/approve", f.token("alice", approval.RoleApprover), "", nil); code != http.StatusOK {
			t.Fatalf("alice approves: %d", code)
		}
		before := f.read(a.ID)
		refused := bob.do(http.MethodPost, "/ui/approvals/"+a.ID+"/approve", url.Values{"token": {bobToken}, "comment": {"ship it"}})
		must(t, refused.status == http.StatusForbidden, "bob's vote in stage 2: status %d, want 403", refused.status)
		text := textOf(refused.body)
		must(t, strings.Contains(text, "Your approval was not recorded: bob may not vote on this approval: not an approver of stage 2: 1 of fiona. Nothing changed."), "refusal page: %q", text)
		must(t, strings.Contains(refused.body, ">ship it</textarea>"), "the refused vote's comment is not kept")
		after := f.read(a.ID)
		must(t, after.Version == before.Version && len(after.Decisions) == 1, "the refused vote changed the approval: version %d, %d votes", after.Version, len(after.Decisions))

		page = textOf(fiona.get("/ui/approvals/" + a.ID).body)
		must(t, strings.Contains(page, "Now asked: stage 2 of 2") && strings.Contains(page, "sre 1 of 1") && strings.Contains(page, "fiona: 0 of 1"), "after stage 1: %q", page)
		must(t, strings.Contains(page, "alice approved from the API") && strings.Contains(page, "counted toward stage 1, sre"), "the trail does not say which rule alice's vote counted toward: %q", page)
		must(t, strings.Contains(fiona.get("/ui/approvals/"+a.ID).body, `id="approve"`), "fiona is not offered the vote in stage 2")
	})
}

// TestBrowser_PolicyRefusedVote: in Chromium, the page shows the rule progress and the stage;
// bob, of stage 1, opens the page, alice's approval meets stage 1 meanwhile, and bob's click
// on Approve (a page without JavaScript, which does not follow the approval) is refused on the
// page and changes nothing. With APPROVALD_DOC_IMAGES set, the refused page at 1280 px is
// written there (docs/images).
func TestBrowser_PolicyRefusedVote(t *testing.T) {
	t.Parallel()
	needBrowser(t)
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setupPolicies(t, kind)
		a := f.createRelease("Release 2.4.0")
		bob := f.newTab(t)
		bob.signIn(f.token("bob", approval.RoleApprover))
		bob.quietNetwork = true // the refusal is a 403, which Chromium logs
		bob.do(chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true})
			return err
		}))
		bob.open("/ui/approvals/" + a.ID)
		if got := bob.text("#policy"); !strings.Contains(got, "Now asked: stage 1 of 2") || !strings.Contains(got, "sre 0 of 1") {
			t.Fatalf("policy box: %q", got)
		}
		if code := f.api(http.MethodPost, "/v1/approvals/"+a.ID+"/approve", f.token("alice", approval.RoleApprover), "", nil); code != http.StatusOK {
			t.Fatalf("alice approves: %d", code)
		}
		bob.do(
			chromedp.SendKeys(chromedp.CSS("#comment"), "looks fine"),
			chromedp.Click(chromedp.CSS("#approve")),
			chromedp.WaitVisible(chromedp.CSS("#answer")),
		)
		if got := bob.text("#answer"); !strings.Contains(got, "Your approval was not recorded") || !strings.Contains(got, "not an approver of stage 2") {
			t.Fatalf("answer: %q", got)
		}
		if got := bob.text("#policy"); !strings.Contains(got, "stage 2 of 2") || !strings.Contains(got, "alice") {
			t.Fatalf("policy box after the refusal: %q", got)
		}
		if got := f.read(a.ID); len(got.Decisions) != 1 || got.Status != approval.StatusPending {
			t.Fatalf("after the refused vote: %d votes, %s; want alice's alone, pending", len(got.Decisions), got.Status)
		}
		if kind == testdb.SQLite {
			bob.screenshot("policy-refused")
			if dir := os.Getenv("APPROVALD_DOC_IMAGES"); dir != "" {
				bob.do(chromedp.EmulateViewport(1280, 900))
				png, err := chromedp.Run(bob.ctx, chromedp.CaptureScreenshot())
				if err != nil {
					t.Fatalf("screenshot: %v", err)
				}
				if err := os.WriteFile(filepath.Join(dir, "approval-policy-1280.png"), png, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}

// TestPages_WaitSaysPolicyProgress: the page's long-poll answers, under a policy, the stage
// asked and its rules' progress, and whether the viewer may vote in it now.
func TestPages_WaitSaysPolicyProgress(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setupPolicies(t, kind)
		a := f.createRelease("Release 2.4.0")
		if code := f.api(http.MethodPost, "/v1/approvals/"+a.ID+"/approve", f.token("alice", approval.RoleApprover), "", nil); code != http.StatusOK {
			t.Fatalf("alice approves: %d", code)
		}
		for _, c := range []struct {
			who     string
			canVote bool
		}{{"fiona", true}, {"bob", false}} {
			b := f.browser()
			b.signIn(f.token(c.who, approval.RoleApprover))
			p := b.do(http.MethodGet, "/ui/approvals/"+a.ID+"/wait?version=1", nil, "Accept", "application/json")
			var ans struct {
				Stage    string `json:"stage"`
				Progress string `json:"progress"`
				CanVote  bool   `json:"can_vote"`
			}
			if err := json.Unmarshal([]byte(p.body), &ans); err != nil || p.status != http.StatusOK {
				t.Fatalf("%s's wait: %d %s (%v)", c.who, p.status, p.body, err)
			}
			if ans.Stage != "stage 2 of 2" || ans.Progress != "fiona: 0 of 1" || ans.CanVote != c.canVote {
				t.Errorf("%s's wait: %+v, want stage 2 of 2, fiona: 0 of 1, can_vote %v", c.who, ans, c.canVote)
			}
		}
	})
}
