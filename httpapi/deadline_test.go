package httpapi_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/httpapi"
	"github.com/approvald/approval/internal/fakeclock"
	"github.com/approvald/approval/internal/faultproxy"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/internal/wait"
	"github.com/approvald/approval/postgres"
)

// setupBehindProxy starts a server over a fresh PostgreSQL store reached through a fault
// proxy, and returns both. opts adjust the Config.
func setupBehindProxy(tb testing.TB, opts ...func(*httpapi.Config)) (*fixture, *faultproxy.Proxy) {
	tb.Helper()
	u, err := url.Parse(testdb.DSN(tb, testdb.Postgres))
	if err != nil {
		tb.Fatal(err)
	}
	proxy, err := faultproxy.Start(u.Host)
	if err != nil {
		tb.Fatalf("start the fault proxy: %v", err)
	}
	tb.Cleanup(func() { proxy.Close() })
	u.Host = proxy.Addr()
	ctx := context.Background()
	st, err := postgres.Open(ctx, u.String())
	if err != nil {
		tb.Fatalf("open postgres: %v", err)
	}
	tb.Cleanup(func() { st.Close() })
	clock := fakeclock.New(approval.Now())
	st.Now = clock.Now
	if err := st.Migrate(ctx); err != nil {
		tb.Fatalf("migrate postgres: %v", err)
	}
	f := serveOn(tb, st, clock, opts...)
	// A plain client: the time a request takes is the server's, not the OpenAPI check's of a
	// large answer; and a request held past its deadline fails the test rather than hang it.
	f.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128}, Timeout: time.Minute}
	tb.Cleanup(f.client.CloseIdleConnections)
	return f, proxy
}

// TestDeadlinesHoldWhenTheDatabaseFreezes runs creates, votes, reads, lists and webhook
// intakes concurrently while the link to PostgreSQL freezes (every byte held, connections
// open) or resets: every request is answered, 2xx or 503 with Retry-After, within its
// deadline and a second (the request timeout; a create's is the idempotency lease), and once
// the link is back every acknowledged create, vote and delivery is there exactly once, and a
// create or delivery answered 503 tells the truth when it is sent again.
func TestDeadlinesHoldWhenTheDatabaseFreezes(t *testing.T) {
	const timeout = 2 * time.Second
	f, proxy := setupBehindProxy(t, func(c *httpapi.Config) {
		c.RequestTimeout, c.IdempotencyLease, c.Sources = timeout, timeout, sources()
	})
	ci := f.token("ci", approval.RoleRequester)
	alice := f.token("alice", approval.RoleApprover)
	op := f.token("op", approval.RoleOperator)

	for _, fault := range []string{"freeze", "reset"} {
		const each = 6 // requests of each kind
		pending := make([]*approval.Approval, each)
		for i := range pending {
			pending[i] = f.mustCreate(ci, fmt.Sprintf("%s-vote-%d", fault, i), createBody("vote", "alice"))
		}
		before := f.count()

		type request struct {
			kind, key string
			send      func() (*response, error)
			resp      *response
			err       error
			took      time.Duration
		}
		var reqs []*request
		for i := range each {
			key := fmt.Sprintf("%s-create-%d", fault, i)
			body := createBody(key, "alice")
			delivery := fmt.Sprintf("%s-delivery-%d", fault, i)
			id := pending[i].ID
			reqs = append(reqs,
				&request{kind: "create", key: key, send: func() (*response, error) {
					return f.send("POST", "/v1/approvals", ci, body, "Idempotency-Key", key)
				}},
				&request{kind: "vote", key: id, send: func() (*response, error) {
					return f.send("POST", "/v1/approvals/"+id+"/approve", alice, `{"comment":"ok"}`)
				}},
				&request{kind: "get", send: func() (*response, error) { return f.send("GET", "/v1/approvals/"+id, alice, "") }},
				&request{kind: "list", send: func() (*response, error) { return f.send("GET", "/v1/approvals?limit=50", op, "") }},
				&request{kind: "intake", key: delivery, send: func() (*response, error) {
					return f.sendDelivery("github", signGitHub(githubSecret, delivery, "ping", githubBody, sha256.New), githubBody)
				}},
			)
		}

		// Every request starts at once, and the fault strikes as they do.
		start := make(chan struct{})
		var ready, done sync.WaitGroup
		for _, r := range reqs {
			ready.Add(1)
			done.Add(1)
			go func() {
				defer done.Done()
				ready.Done()
				<-start
				t0 := time.Now()
				r.resp, r.err = r.send()
				r.took = time.Since(t0)
			}()
		}
		ready.Wait()
		close(start)
		switch fault {
		case "freeze":
			proxy.Freeze()
		case "reset":
			proxy.Reset()
		}
		done.Wait()
		proxy.Thaw()

		for _, r := range reqs {
			if r.err != nil {
				t.Fatalf("%s: %s: %v", fault, r.kind, r.err)
			}
			if limit := timeout + time.Second; r.took > limit {
				t.Errorf("%s: a %s answered %d after %v; want within %v", fault, r.kind, r.resp.status, r.took, limit)
			}
			switch {
			case r.resp.status == http.StatusServiceUnavailable:
				if r.resp.header.Get("Retry-After") == "" {
					t.Errorf("%s: a %s answered 503 without Retry-After: %s", fault, r.kind, r.resp.body)
				}
			case r.resp.status/100 != 2:
				t.Errorf("%s: a %s answered %d %s; want 2xx or 503", fault, r.kind, r.resp.status, r.resp.body)
			}
		}

		// The link is back: once the store answers, each request's outcome is the truth.
		wait.For(t, "the store answering again", func() error {
			_, err := f.store.ApprovalCounts(context.Background())
			return err
		})
		created := 0
		for _, r := range reqs {
			switch r.kind {
			case "create":
				again := f.create(ci, r.key, createBody(r.key, "alice"))
				if again.status != http.StatusCreated {
					t.Fatalf("%s: the create %s sent again: got %d %s, want 201", fault, r.key, again.status, again.body)
				}
				if r.resp.status == http.StatusCreated {
					if again.header.Get("Idempotent-Replayed") != "true" || again.approval(t).ID != r.resp.approval(t).ID {
						t.Errorf("%s: the acknowledged create %s sent again: got %s, want its replay", fault, r.key, again.body)
					}
				}
				created++
			case "vote":
				if r.resp.status == http.StatusOK {
					if a := f.do("GET", "/v1/approvals/"+r.key, alice, "").approval(t); a.Status != approval.StatusApproved {
						t.Errorf("%s: an acknowledged vote on %s: the approval is %s, want approved", fault, r.key, a.Status)
					}
				}
			case "intake":
				again := f.sendDeliveryOrFail(r.key)
				if r.resp.status == http.StatusOK && !again.Duplicate {
					t.Errorf("%s: the acknowledged delivery %s sent again was not a duplicate", fault, r.key)
				}
			}
		}
		if got, want := f.count(), before+created; got != want {
			t.Errorf("%s: %d approvals, want %d: each create once", fault, got, want)
		}
	}
}

// sendDeliveryOrFail delivers the GitHub ping with the delivery id and returns its answer,
// which must be an acceptance.
func (f *fixture) sendDeliveryOrFail(delivery string) intake {
	f.tb.Helper()
	return f.deliver("github", signGitHub(githubSecret, delivery, "ping", githubBody, sha256.New), githubBody).accepted(f.tb)
}
