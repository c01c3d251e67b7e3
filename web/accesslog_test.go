package web_test

import (
	"bufio"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/web"
)

// logLines returns the JSON log lines with msg "request", by request id.
func logLines(t *testing.T, logs *lockedBuffer) map[string][]map[string]any {
	t.Helper()
	lines := map[string][]map[string]any{}
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		if m["msg"] == "request" {
			id, _ := m["request_id"].(string)
			lines[id] = append(lines[id], m)
		}
	}
	return lines
}

// TestPages_AccessLog: every page request writes one log line with the API's fields
// (method, route, path, status, duration, request id, subject), found by the X-Request-Id
// the page answered, and no line holds a cookie, a token, a query or a form's contents.
func TestPages_AccessLog(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		var logs lockedBuffer
		f := setup(t, kind, func(cfg *web.Config, _ string) {
			cfg.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
		})
		a := f.create("Deploy api v2", []string{"alice"}, 1, "")
		secret := f.token("alice", approval.RoleApprover)
		b := f.browser()
		b.signIn(secret)
		token := b.decisionToken(a.ID)
		const comment = "comment-never-logged"
		vote := b.do(http.MethodPost, "/ui/approvals/"+a.ID+"/approve", url.Values{"token": {token}, "comment": {comment}})
		if vote.status != http.StatusSeeOther {
			t.Fatalf("vote: got %d, want 303", vote.status)
		}
		shown := b.get("/ui/approvals/" + a.ID)
		const linkToken = "link-token-never-logged"
		b.get("/ui/signin/link?t=" + linkToken)
		missing := b.get("/ui/nope")

		lines := logLines(t, &logs)
		for _, tc := range []struct {
			p                     page
			method, route, status string
			subject               string // "" where no session is read
		}{
			{vote, "POST", "/ui/approvals/{id}/approve", "303", "alice"},
			{shown, "GET", "/ui/approvals/{id}", "200", "alice"},
			{missing, "GET", "unmatched", "404", ""},
		} {
			id := tc.p.header.Get("X-Request-Id")
			got := lines[id]
			if len(got) != 1 {
				t.Fatalf("request %s (%s %s): got %d log lines, want 1:\n%s", id, tc.method, tc.route, len(got), logs.String())
			}
			line := got[0]
			for k, want := range map[string]string{"method": tc.method, "route": tc.route, "subject": tc.subject} {
				if line[k] != want {
					t.Errorf("request %s: got %s %v, want %q", id, k, line[k], want)
				}
			}
			if s, _ := line["status"].(float64); int(s) != map[string]int{"303": 303, "200": 200, "404": 404}[tc.status] {
				t.Errorf("request %s: got status %v, want %s", id, line["status"], tc.status)
			}
			if _, ok := line["duration"]; !ok {
				t.Errorf("request %s: no duration in %v", id, line)
			}
		}
		// The sign-in page and its post, the decision page, the vote, the page, the link and
		// the missing page.
		if n := len(lines); n != 7 {
			t.Errorf("got %d requests logged, want 7, one per page request:\n%s", n, logs.String())
		}

		all := logs.String()
		u, _ := url.Parse(f.srv.URL)
		for _, c := range b.client.Jar.Cookies(u) {
			if strings.Contains(all, c.Value) {
				t.Errorf("the logs hold the value of cookie %s", c.Name)
			}
		}
		for name, s := range map[string]string{"API token": secret, "decision token": token, "comment": comment, "sign-in link token": linkToken} {
			if strings.Contains(all, s) {
				t.Errorf("the logs hold the %s %q:\n%s", name, s, all)
			}
		}
	})
}
