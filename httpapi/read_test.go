package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/httpapi"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/internal/wait"
)

// TestGetVisibility: requesters and approvers read what they requested or are listed on,
// operators and admins read everything, and everyone else gets 404 as if it did not exist.
func TestGetVisibility(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		ci := f.token("ci-bot", approval.RoleRequester)
		a := f.mustCreate(ci, "vis-1", createBody("Visible", "alice"))
		path := "/v1/approvals/" + a.ID
		for _, tc := range []struct {
			name   string
			token  string
			status int
		}{
			{"requester", ci, 200},
			{"listed approver", f.token("alice", approval.RoleApprover), 200},
			{"operator", f.token("olga", approval.RoleOperator), 200},
			{"admin", f.token("root", approval.RoleAdmin), 200},
			{"other requester", f.token("other-bot", approval.RoleRequester), 404},
			{"other approver", f.token("bob", approval.RoleApprover), 404},
		} {
			for _, p := range []string{path, path + "/events"} {
				if resp := f.do("GET", p, tc.token, ""); resp.status != tc.status {
					t.Fatalf("%s GET %s: got %d %s, want %d", tc.name, p, resp.status, resp.body, tc.status)
				}
			}
		}
		resp := f.do("GET", "/v1/approvals/apr_nope", ci, "")
		resp.problem(t, http.StatusNotFound)
		if ct := f.do("GET", path, ci, "").header.Get("Content-Type"); ct != "application/json" {
			t.Fatalf("Content-Type %q, want application/json", ct)
		}
	})
}

// TestLongPoll: ?wait= answers when the version passes the one the client has, whether the
// change is made through this server (woken at once) or behind its back (seen by re-reading),
// and answers 200 with the unchanged approval at the timeout.
func TestLongPoll(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Run("woken by a decision through the API", func(t *testing.T) {
			// An hour-long poll interval: only the in-process wake-up can answer in time.
			f := setup(t, kind, func(c *httpapi.Config) { c.LongPollInterval = time.Hour })
			ci := f.token("ci-bot", approval.RoleRequester)
			alice := f.token("alice", approval.RoleApprover)
			a := f.mustCreate(ci, "poll-1", createBody("Poll", "alice"))

			got := make(chan *response, 1)
			go func() {
				resp, err := f.send("GET", "/v1/approvals/"+a.ID+"?wait=60s&version=1", ci, "")
				if err != nil {
					t.Error(err)
				}
				got <- resp
			}()
			waitForLongPoll(t, f)
			if resp := f.do("POST", "/v1/approvals/"+a.ID+"/approve", alice, ""); resp.status != http.StatusOK {
				t.Fatalf("approve: %d %s", resp.status, resp.body)
			}
			resp := <-got
			if resp == nil || resp.status != http.StatusOK {
				t.Fatalf("long-poll: got %+v", resp)
			}
			if b := resp.approval(t); b.Version != 2 || b.Status != approval.StatusApproved {
				t.Fatalf("long-poll: got version %d %s, want 2 approved", b.Version, b.Status)
			}
		})

		t.Run("change made elsewhere", func(t *testing.T) {
			f := setup(t, kind, func(c *httpapi.Config) { c.LongPollInterval = 10 * time.Millisecond })
			ci := f.token("ci-bot", approval.RoleRequester)
			a := f.mustCreate(ci, "poll-2", createBody("Poll", "alice"))
			got := make(chan *response, 1)
			go func() {
				resp, err := f.send("GET", "/v1/approvals/"+a.ID+"?wait=60s&version=1", ci, "")
				if err != nil {
					t.Error(err)
				}
				got <- resp
			}()
			waitForLongPoll(t, f)
			// Another replica's change: straight to the store, this server is not told.
			if _, err := f.service().Cancel(context.Background(), approval.Principal{Subject: "root", Role: approval.RoleAdmin}, a.ID, approval.HTTPCause("elsewhere")); err != nil {
				t.Fatal(err)
			}
			if resp := <-got; resp == nil || resp.status != http.StatusOK || resp.approval(t).Status != approval.StatusCancelled {
				t.Fatalf("long-poll: got %+v", resp)
			}
		})

		t.Run("woken by the store's signal", func(t *testing.T) {
			// Another replica or a worker changes the approval: only the store's approvals
			// signal (NOTIFY on PostgreSQL) can wake the poll within an hour-long interval.
			f := setup(t, kind, func(c *httpapi.Config) { c.LongPollInterval = time.Hour })
			ci := f.token("ci-bot", approval.RoleRequester)
			a := f.mustCreate(ci, "poll-signal", createBody("Poll", "alice"))
			got := make(chan *response, 1)
			go func() {
				resp, err := f.send("GET", "/v1/approvals/"+a.ID+"?wait=60s&version=1", ci, "")
				if err != nil {
					t.Error(err)
				}
				got <- resp
			}()
			waitForLongPoll(t, f)
			if _, err := f.service().Decide(context.Background(), approval.Principal{Subject: "alice", Role: approval.RoleAdmin}, approval.DecideRequest{
				ApprovalID: a.ID, Approver: "alice", Verdict: approval.VerdictReject, Cause: approval.HTTPCause("elsewhere"),
			}); err != nil {
				t.Fatal(err)
			}
			if resp := <-got; resp == nil || resp.status != http.StatusOK || resp.approval(t).Status != approval.StatusRejected {
				t.Fatalf("long-poll: got %+v", resp)
			}
		})

		t.Run("cut short by shutdown", func(t *testing.T) {
			// Server shutdown cancels the requests' base context: the long-poll still answers
			// 200 with the approval, as docs/http-api.md promises.
			f := setup(t, kind, func(c *httpapi.Config) { c.LongPollInterval = time.Hour })
			ci := f.token("ci-bot", approval.RoleRequester)
			a := f.mustCreate(ci, "poll-shutdown", createBody("Poll", "alice"))
			base, endRequests := context.WithCancel(context.Background())
			defer endRequests()
			srv := httptest.NewUnstartedServer(f.api)
			srv.Config.BaseContext = func(net.Listener) context.Context { return base }
			srv.Start()
			defer srv.Close()

			got := make(chan *response, 1)
			go func() {
				req, _ := http.NewRequest("GET", srv.URL+"/v1/approvals/"+a.ID+"?wait=60s&version=1", nil)
				req.Header.Set("Authorization", "Bearer "+ci)
				resp, err := srv.Client().Do(req)
				if err != nil {
					t.Error(err)
					got <- nil
					return
				}
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				got <- &response{status: resp.StatusCode, header: resp.Header, body: body}
			}()
			waitForLongPoll(t, f)
			endRequests()
			resp := <-got
			if resp == nil || resp.status != http.StatusOK {
				t.Fatalf("long-poll cut short: got %+v, want 200", resp)
			}
			if b := resp.approval(t); b.ID != a.ID || b.Version != 1 {
				t.Fatalf("long-poll cut short: got %s version %d, want %s version 1", b.ID, b.Version, a.ID)
			}
		})

		t.Run("client goes away", func(t *testing.T) {
			f := setup(t, kind, func(c *httpapi.Config) { c.LongPollInterval = time.Hour })
			ci := f.token("ci-bot", approval.RoleRequester)
			a := f.mustCreate(ci, "poll-gone", createBody("Poll", "alice"))
			ctx, cancel := context.WithCancel(context.Background())
			req, err := http.NewRequestWithContext(ctx, "GET", f.srv.URL+"/v1/approvals/"+a.ID+"?wait=60s&version=1", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+ci)
			done := make(chan error, 1)
			go func() {
				resp, err := f.client.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				done <- err
			}()
			waitForLongPoll(t, f)
			cancel()
			if err := <-done; err == nil {
				t.Fatal("cancelled long-poll returned an answer")
			}
			// The handler notices the closed connection and stops watching.
			wait.Until(t, "the long-poll to stop waiting after its client went away", func() bool { return f.api.LongPolls() == 0 })
		})

		t.Run("timeout and parameters", func(t *testing.T) {
			f := setup(t, kind)
			ci := f.token("ci-bot", approval.RoleRequester)
			a := f.mustCreate(ci, "poll-3", createBody("Poll", "alice"))
			path := "/v1/approvals/" + a.ID
			resp := f.do("GET", path+"?wait=50ms&version=1", ci, "")
			if resp.status != http.StatusOK || resp.approval(t).Version != 1 {
				t.Fatalf("timeout: got %d %s, want 200 version 1", resp.status, resp.body)
			}
			if resp := f.do("GET", path+"?wait=60s&version=0", ci, ""); resp.status != http.StatusOK {
				t.Fatalf("version already passed: got %d", resp.status)
			}
			f.do("GET", path+"?wait=30s", ci, "").problem(t, http.StatusBadRequest)
			f.do("GET", path+"?wait=soon&version=1", ci, "").problem(t, http.StatusBadRequest)
			f.do("GET", path+"?wait=-1s&version=1", ci, "").problem(t, http.StatusBadRequest)
			f.do("GET", path+"?wait=1s&version=x", ci, "").problem(t, http.StatusBadRequest)
			f.do("GET", path+"?wait=1s&version=1", f.token("bob", approval.RoleApprover), "").problem(t, http.StatusNotFound)
		})
	})
}

// waitForLongPoll returns once a long-poll of f's server has subscribed to changes, so that the
// change the test makes next lands while the request waits (or between its subscription and
// its read, which must not lose the wake-up either).
func waitForLongPoll(t *testing.T, f *fixture) {
	t.Helper()
	wait.Until(t, "the long-poll to start waiting", func() bool { return f.api.LongPolls() != 0 })
}

// TestList: newest first, paged by cursor, filtered, and limited to what the caller may see.
func TestList(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		ci := f.token("ci-bot", approval.RoleRequester)
		other := f.token("other-bot", approval.RoleRequester)
		alice := f.token("alice", approval.RoleApprover)
		olga := f.token("olga", approval.RoleOperator)
		var ids []string
		for i := range 5 {
			f.clock.Advance(time.Second) // distinct created_at, so "newest first" is defined
			ids = append(ids, f.mustCreate(ci, fmt.Sprintf("list-%d", i), createBody(fmt.Sprintf("List %d", i), "alice")).ID)
		}
		f.clock.Advance(time.Second)
		hidden := f.mustCreate(other, "list-other", createBody("Not for alice", "bob")).ID

		type page struct {
			Approvals  []*approval.Approval `json:"approvals"`
			NextCursor *string              `json:"next_cursor"`
		}
		var got []string
		cursor := ""
		for pages := 0; ; pages++ {
			var p page
			f.do("GET", "/v1/approvals?limit=2&cursor="+cursor, alice, "").decode(t, &p)
			if p.NextCursor == nil {
				t.Fatal("next_cursor missing")
			}
			for _, a := range p.Approvals {
				got = append(got, a.ID)
			}
			if *p.NextCursor == "" {
				if pages != 2 || len(p.Approvals) != 1 {
					t.Fatalf("last page %d has %d approvals, want page 2 with 1", pages, len(p.Approvals))
				}
				break
			}
			cursor = *p.NextCursor
		}
		want := []string{ids[4], ids[3], ids[2], ids[1], ids[0]}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("alice's pages: got %v, want %v", got, want)
		}

		var all page
		f.do("GET", "/v1/approvals", olga, "").decode(t, &all)
		if len(all.Approvals) != 6 || all.Approvals[0].ID != hidden {
			t.Fatalf("operator sees %d approvals, first %s; want 6, first %s", len(all.Approvals), all.Approvals[0].ID, hidden)
		}

		f.do("POST", "/v1/approvals/"+ids[0]+"/approve", alice, "")
		var approved page
		f.do("GET", "/v1/approvals?status=approved", ci, "").decode(t, &approved)
		if len(approved.Approvals) != 1 || approved.Approvals[0].ID != ids[0] {
			t.Fatalf("status=approved: got %d approvals", len(approved.Approvals))
		}
		var byBob page
		f.do("GET", "/v1/approvals?approver=bob", olga, "").decode(t, &byBob)
		if len(byBob.Approvals) != 1 || byBob.Approvals[0].ID != hidden {
			t.Fatalf("approver=bob: got %d approvals", len(byBob.Approvals))
		}
		var none page
		resp := f.do("GET", "/v1/approvals?status=rejected", ci, "")
		resp.decode(t, &none)
		if string(resp.body) != "{\"approvals\":[],\"next_cursor\":\"\"}\n" {
			t.Fatalf("empty list: got %s", resp.body)
		}
		f.do("GET", "/v1/approvals?status=nope", ci, "").problem(t, http.StatusBadRequest)
		f.do("GET", "/v1/approvals?limit=0", ci, "").problem(t, http.StatusBadRequest)
		f.do("GET", "/v1/approvals?limit=201", ci, "").problem(t, http.StatusBadRequest)
		f.do("GET", "/v1/approvals?cursor=not-a-cursor", ci, "").problem(t, http.StatusBadRequest)
	})
}

// TestListSearch: requester=, action= and q= narrow a listing, within what the caller may see,
// and a search text the input policy refuses is a 400 that names it.
func TestListSearch(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		ci := f.token("ci-bot", approval.RoleRequester)
		other := f.token("other-bot", approval.RoleRequester)
		alice := f.token("alice", approval.RoleApprover)
		olga := f.token("olga", approval.RoleOperator)
		f.clock.Advance(time.Second)
		deploy := f.mustCreate(ci, "s-1", createBody("Deploy API 50% canary", "alice")).ID
		f.clock.Advance(time.Second)
		refund := f.mustCreate(ci, "s-2", actionBody("refund", "Refund order_7", "alice")).ID
		f.clock.Advance(time.Second)
		hidden := f.mustCreate(other, "s-3", createBody("Deploy api 50x canary", "bob")).ID

		list := func(path, token string) []string {
			t.Helper()
			var p struct {
				Approvals []*approval.Approval `json:"approvals"`
			}
			f.do("GET", path, token, "").decode(t, &p)
			var ids []string
			for _, a := range p.Approvals {
				ids = append(ids, a.ID)
			}
			return ids
		}
		for _, tc := range []struct {
			path, token string
			want        []string
		}{
			{"/v1/approvals?q=deploy+api", olga, []string{hidden, deploy}},
			{"/v1/approvals?q=deploy+api", alice, []string{deploy}}, // bob's is not hers to see
			{"/v1/approvals?q=50%25", olga, []string{deploy}},
			{"/v1/approvals?q=50_", olga, nil}, // _ is no wildcard
			{"/v1/approvals?q=50_&limit=1", ci, nil},
			{"/v1/approvals?q=order_7", ci, []string{refund}},
			{"/v1/approvals?action=refund", olga, []string{refund}},
			{"/v1/approvals?action=deploy&requester=ci-bot", olga, []string{deploy}},
			{"/v1/approvals?requester=other-bot", olga, []string{hidden}},
			{"/v1/approvals?requester=other-bot", ci, nil},
			{"/v1/approvals?requester=ci-bot&approver=alice&q=canary&status=pending", alice, []string{deploy}},
		} {
			if got := list(tc.path, tc.token); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("%s: got %v, want %v", tc.path, got, tc.want)
			}
		}
		for _, q := range []string{"?q=%01", "?q=a%0Ab", "?q=+++", "?q=" + strings.Repeat("x", approval.MaxTitleLength+1),
			"?q=%FF", "?action=%00", "?requester=%FF", "?approver=a%00b"} {
			p := f.do("GET", "/v1/approvals"+q, olga, "").problem(t, http.StatusBadRequest)
			if p.Detail == "" {
				t.Fatalf("%s: got a problem without detail", q)
			}
		}
	})
}

// TestEvents: the audit trail lists every change oldest first, each naming the request that
// caused it by the server's request id (the one answered in X-Request-Id), with the client's
// X-Request-Id beside it as client_request_id: a client cannot pass its change off as
// another request's.
func TestEvents(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		ci := f.token("ci-bot", approval.RoleRequester)
		alice := f.token("alice", approval.RoleApprover)
		resp := f.do("POST", "/v1/approvals", ci, createBody("Audited", "alice"), "Idempotency-Key", "audit-1", "X-Request-Id", "req-create-1")
		createID := resp.header.Get("X-Request-Id")
		if resp.status != http.StatusCreated || !strings.HasPrefix(createID, "req_") {
			t.Fatalf("create: got %d, X-Request-Id %q", resp.status, createID)
		}
		a := resp.approval(t)
		// A client naming another request's id gets its own id in the trail all the same.
		approveID := f.do("POST", "/v1/approvals/"+a.ID+"/approve", alice, `{"comment":"ship it"}`, "X-Request-Id", createID).header.Get("X-Request-Id")
		if approveID == createID {
			t.Fatalf("the approve took the create's request id %s", createID)
		}

		var got struct {
			Events []approval.Event `json:"events"`
		}
		f.do("GET", "/v1/approvals/"+a.ID+"/events", ci, "").decode(t, &got)
		want := []struct {
			typ, actor, requestID, clientID string
		}{
			{approval.EventCreated, "ci-bot", createID, "req-create-1"},
			{approval.EventVoted, "alice", approveID, createID},
			{approval.EventApproved, "alice", approveID, createID},
		}
		if len(got.Events) != len(want) {
			t.Fatalf("got %d events %+v, want %d", len(got.Events), got.Events, len(want))
		}
		for i, w := range want {
			e := got.Events[i]
			if e.Seq != int64(i+1) || e.Type != w.typ || e.Actor != w.actor || e.Cause.Kind != approval.CauseHTTP ||
				e.Cause.RequestID != w.requestID || e.Cause.ClientRequestID != w.clientID {
				t.Fatalf("event %d: got %+v, want seq %d %s by %s caused by %s (client's %s)", i, e, i+1, w.typ, w.actor, w.requestID, w.clientID)
			}
		}
	})
}
