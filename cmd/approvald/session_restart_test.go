package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/approvald/approval/internal/testdb"
)

// TestServe_SessionSurvivesRestart: serve without web.session_key, stopped and started again
// on the same database, keeps a page session and the decision form rendered before the
// restart, because the key it signs with was made once and kept in the database. It warns
// about session_key on PostgreSQL, which replicas share, and only there.
func TestServe_SessionSurvivesRestart(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		dsn := testdb.DSN(t, kind)
		first := startServe(t, dsn)
		first.bootstrapToken(t)
		alice := createToken(t, dsn, "alice", "approver")
		requester := createToken(t, dsn, "ci-bot", "requester")
		var a struct{ ID string }
		created := first.do(t, "POST", "/v1/approvals", requester, "restart-1",
			`{"action": "deploy", "title": "Deploy across a restart", "approvers": ["alice"]}`)
		created.wantStatus(t, http.StatusCreated)
		created.decode(t, &a)

		b := newPageClient(t)
		b.signIn(t, first, alice)
		page := b.get(t, first, "/ui/approvals/"+a.ID)
		if page.status != http.StatusOK {
			t.Fatalf("approval page before the restart: status %d", page.status)
		}
		token := hiddenInput(t, page.body, "token")
		first.stop(t)

		second := startServe(t, dsn)
		if got := b.get(t, second, "/ui/"); got.status != http.StatusOK {
			t.Fatalf("waiting page after the restart: status %d (Location %q), want 200: the session should survive",
				got.status, got.header.Get("Location"))
		}
		vote := b.post(t, second, "/ui/approvals/"+a.ID+"/approve", url.Values{"token": {token}, "comment": {"after the restart"}})
		if vote.status != http.StatusSeeOther || !strings.Contains(vote.header.Get("Location"), "/answer?") {
			t.Fatalf("vote with the form from before the restart: status %d, Location %q; want 303 to the answer\n%s",
				vote.status, vote.header.Get("Location"), vote.body)
		}
		second.stop(t)

		for i, srv := range []*server{first, second} {
			warned := false
			for _, line := range strings.Split(srv.stderr.String(), "\n") {
				var rec struct{ Level, Msg string }
				if json.Unmarshal([]byte(line), &rec) == nil && strings.Contains(rec.Msg, "session_key") && rec.Level == "WARN" {
					warned = true
				}
			}
			if want := kind == testdb.Postgres; warned != want {
				t.Errorf("serve %d on %s: warned about session_key %v, want %v\nstderr:\n%s", i+1, kind, warned, want, srv.stderr)
			}
		}
	})
}

// pageClient is a browser's cookie jar for the pages of any number of serve processes on
// one host, that does not follow redirects.
type pageClient struct{ client *http.Client }

func newPageClient(t *testing.T) *pageClient {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Jar: jar, Transport: &http.Transport{},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	t.Cleanup(c.CloseIdleConnections)
	return &pageClient{client: c}
}

func (b *pageClient) send(t *testing.T, srv *server, method, path string, form url.Values) response {
	t.Helper()
	var body *strings.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	} else {
		body = strings.NewReader("")
	}
	req, err := http.NewRequest(method, "http://"+srv.addr+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/html")
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := b.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var buf strings.Builder
	if _, err := io.Copy(&buf, resp.Body); err != nil {
		t.Fatalf("%s %s: read: %v", method, path, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: []byte(buf.String())}
}

func (b *pageClient) get(t *testing.T, srv *server, path string) response {
	t.Helper()
	return b.send(t, srv, http.MethodGet, path, nil)
}

func (b *pageClient) post(t *testing.T, srv *server, path string, form url.Values) response {
	t.Helper()
	return b.send(t, srv, http.MethodPost, path, form)
}

// signIn signs in through the pages' token form.
func (b *pageClient) signIn(t *testing.T, srv *server, token string) {
	t.Helper()
	page := b.get(t, srv, "/ui/signin")
	resp := b.post(t, srv, "/ui/signin/token", url.Values{"csrf": {hiddenInput(t, page.body, "csrf")}, "token": {token}, "next": {"/ui/"}})
	if resp.status != http.StatusSeeOther {
		t.Fatalf("sign in: status %d, want 303\n%s", resp.status, resp.body)
	}
}

var hiddenInputRE = regexp.MustCompile(`<input type="hidden" name="([a-z]+)" value="([^"]*)">`)

// hiddenInput returns the value of the first hidden input named name in an HTML page.
func hiddenInput(t *testing.T, body []byte, name string) string {
	t.Helper()
	for _, m := range hiddenInputRE.FindAllSubmatch(body, -1) {
		if string(m[1]) == name {
			return string(m[2])
		}
	}
	t.Fatalf("no hidden input %q in the page:\n%s", name, body)
	return ""
}
