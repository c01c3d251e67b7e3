package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/postgres"
)

// TestRoundTrips counts what each hot operation costs in exchanges with PostgreSQL, on one
// pooled connection whose statements are already prepared (pgx caches them per
// connection): the figures a user feels as latency on a distant database. A count is
// deterministic, unlike a time, so it is asserted: a create, a replay, a decision and an
// intake (new or redelivered) at most three, a claim at most two (the claim with the read of
// its approvals, then the attempt events with COMMIT), a read at most two, a token lookup
// (a token's first use) one, an authenticated create and an authenticated GET of a token
// already seen one each (the token's check rides with the request's statement, so that a
// revocation still holds at once),
// an attempt's record at most two (read and lock, then the writes with COMMIT), and a lease's
// renewal at most two (the guarded update with BEGIN, then COMMIT).
func TestRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := testdb.DSN(t, testdb.Postgres) + "&pool_max_conns=1"
	s, rt, err := postgres.OpenCounting(ctx, url)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	svc := &approval.Service{Store: s, Targeted: func(action string) bool { return action == "payout" }}
	secret, _, err := svc.CreateToken(ctx, tokenIssuer, approval.TokenSpec{Subject: "ci-bot", Role: approval.RoleRequester})
	if err != nil {
		t.Fatalf("create token: %v", err)
	}

	n := 0
	create := func(ctx context.Context) error {
		n++
		_, err := svc.Create(ctx, ciBot, createCommand(t, fmt.Sprintf("deploy-%d", n)))
		return err
	}
	replay := func(ctx context.Context) error {
		res, err := svc.Create(ctx, ciBot, createCommand(t, "deploy-1"))
		if err == nil && !res.Replayed {
			return fmt.Errorf("replay of deploy-1 created a new approval")
		}
		return err
	}
	// A retry reaching a process that did not answer the create takes the create's path.
	elsewhere := &approval.Service{Store: s}
	replayElsewhere := func(ctx context.Context) error {
		res, err := elsewhere.Create(ctx, ciBot, createCommand(t, "deploy-1"))
		if err == nil && !res.Replayed {
			return fmt.Errorf("replay of deploy-1 created a new approval")
		}
		return err
	}
	var first *approval.Approval
	get := func(ctx context.Context) error {
		a, err := s.Approval(ctx, first.ID)
		if err == nil && a.ID != first.ID {
			return fmt.Errorf("read %s, got %s", first.ID, a.ID)
		}
		return err
	}
	list := func(ctx context.Context) error {
		page, _, err := s.Approvals(ctx, approval.ApprovalFilter{Limit: 10})
		if err == nil && len(page) == 0 {
			return fmt.Errorf("list: no approval")
		}
		return err
	}
	voter := 0
	var decideTrips int64
	decide := func(ctx context.Context) error {
		voter++
		a, err := svc.Create(ctx, ciBot, createCommand(t, fmt.Sprintf("vote-%d", voter)))
		if err != nil {
			return err
		}
		// Counted with the token's check, which rides with BEGIN and the first read.
		before := rt.Count()
		ctx, _, err = svc.AuthenticateFirstTrip(ctx, secret)
		if err != nil {
			return err
		}
		_, err = svc.Decide(ctx, approval.Principal{Subject: "alice", Role: approval.RoleAdmin}, approval.DecideRequest{ApprovalID: a.Approval.ID, Approver: "alice", Verdict: approval.VerdictApprove, Cause: approval.HTTPCause("vote")})
		decideTrips = rt.Count() - before
		if err == nil && approval.PendingTokenCheck(ctx) != nil {
			return fmt.Errorf("decide: the token check did not run")
		}
		return err
	}
	deliveries := 0
	intake := func(ctx context.Context) error {
		deliveries++
		_, err := s.RecordInbox(ctx, inboxEvent(fmt.Sprintf("msg_%d", deliveries), approval.Now()))
		return err
	}
	redelivery := func(ctx context.Context) error {
		dup, err := s.RecordInbox(ctx, inboxEvent("msg_1", approval.Now()))
		if err == nil && !dup {
			return fmt.Errorf("redelivery of msg_1 stored a second event")
		}
		return err
	}
	// The first authentication also writes the token's last_used_at, in the background; Wait
	// lets it end inside the count of the run that caused it. The second run, within the
	// minute, must write nothing.
	authenticate := func(ctx context.Context) error {
		_, err := svc.Authenticate(ctx, secret)
		svc.Wait()
		return err
	}
	// An authenticated request as httpapi makes it: the token, known to the Service, is
	// checked in the request's own first round trip, so the whole request costs one.
	authenticated := func(op func(context.Context) error) func(context.Context) error {
		return func(ctx context.Context) error {
			ctx, _, err := svc.AuthenticateFirstTrip(ctx, secret)
			if err != nil {
				return err
			}
			if err := op(ctx); err != nil {
				return err
			}
			svc.Wait()
			if approval.PendingTokenCheck(ctx) != nil {
				return fmt.Errorf("the token check did not run")
			}
			return nil
		}
	}

	for _, c := range []struct {
		name string
		op   func(context.Context) error
		max  int64
	}{
		{"create", create, 3},
		{"replay", replay, 2},
		{"replay elsewhere", replayElsewhere, 3},
		{"get", get, 2},
		{"authenticate", authenticate, 1},
		{"authenticated create", authenticated(create), 1},
		{"authenticated replay", authenticated(replay), 1},
		{"authenticated get", authenticated(get), 1},
		{"authenticated list", authenticated(list), 1},
		{"intake", intake, 3},
		{"redelivery", redelivery, 3},
	} {
		// The first run prepares the statements on the connection.
		if err := c.op(ctx); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if c.name == "create" {
			a, _, err := s.Approvals(ctx, approval.ApprovalFilter{Limit: 1})
			if err != nil || len(a) == 0 {
				t.Fatalf("find the created approval: %v", err)
			}
			first = a[0]
		}
		// An intake's signal is sent at the end of its window, in a round trip of its own
		// (signalgate.go); one owed by an earlier run is sent now, outside the count.
		s.SettleSignals()
		before := rt.Count()
		if err := c.op(ctx); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got := rt.Count() - before
		t.Logf("%s: %d round trips", c.name, got)
		if got > c.max {
			t.Errorf("%s: got %d round trips, want at most %d", c.name, got, c.max)
		}
	}

	// A decision is counted alone, not with the create that makes its approval.
	for range 2 {
		if err := decide(ctx); err != nil {
			t.Fatalf("decide: %v", err)
		}
	}
	t.Logf("decide: %d round trips", decideTrips)
	if decideTrips > 2 {
		t.Errorf("decide: got %d round trips, want at most 2", decideTrips)
	}

	// A claim of one execution and its attempt's record, each counted alone: a success, and a
	// retry (which also notifies).
	var renewTrips int64
	attempt := func(o approval.AttemptOutcome) (claimTrips, finishTrips int64) {
		t.Helper()
		voter++
		cmd := createCommand(t, fmt.Sprintf("payout-%d", voter))
		decode := cmd.Decode
		cmd.Decode = func() (approval.CreateRequest, error) {
			req, err := decode()
			req.Action = "payout"
			return req, err
		}
		a, err := svc.Create(ctx, ciBot, cmd)
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		if _, err := svc.Decide(ctx, approval.Principal{Subject: "alice", Role: approval.RoleAdmin}, approval.DecideRequest{ApprovalID: a.Approval.ID, Approver: "alice", Verdict: approval.VerdictApprove, Cause: approval.HTTPCause("vote")}); err != nil {
			t.Fatalf("decide: %v", err)
		}
		before := rt.Count()
		claims, err := svc.ClaimExecutions(ctx, time.Minute, 1)
		if err != nil || len(claims) != 1 {
			t.Fatalf("claim: got %d claims, %v; want 1", len(claims), err)
		}
		claimTrips = rt.Count() - before
		before = rt.Count()
		if err := svc.RenewExecution(ctx, claims[0].Record.ID, claims[0].Attempt, time.Minute); err != nil {
			t.Fatalf("renew: %v", err)
		}
		renewTrips = rt.Count() - before
		before = rt.Count()
		if _, err := svc.FinishAttempt(ctx, claims[0].Record.ID, claims[0].Attempt, o); err != nil {
			t.Fatalf("finish attempt as %s: %v", o.Status, err)
		}
		return claimTrips, rt.Count() - before
	}
	retryAt := approval.Now().Add(time.Hour)
	for _, o := range []approval.AttemptOutcome{
		{Status: approval.ExecutionSucceeded, Result: []byte(`{"ok":true}`), Reason: "200 from target"},
		{Status: approval.ExecutionQueued, RetryAt: &retryAt, Error: "503", Reason: "503 from target"},
	} {
		attempt(o) // prepares the statements
		claimTrips, finishTrips := attempt(o)
		t.Logf("claim: %d round trips; finish attempt as %s: %d", claimTrips, o.Status, finishTrips)
		if claimTrips > 2 {
			t.Errorf("claim: got %d round trips, want at most 2", claimTrips)
		}
		t.Logf("renew a claim's lease: %d round trips", renewTrips)
		if renewTrips > 2 {
			t.Errorf("renew: got %d round trips, want at most 2", renewTrips)
		}
		if finishTrips > 2 {
			t.Errorf("finish attempt as %s: got %d round trips, want at most 2", o.Status, finishTrips)
		}
	}
}

// createCommand is a create under key by ci-bot, as httpapi sends it.
func createCommand(tb testing.TB, key string) approval.CreateCommand {
	tb.Helper()
	body := []byte(`{"action":"deploy","title":"Deploy api","approvers":["alice","bob"],"context":{"commit":"9f2c1e"}}`)
	var req approval.CreateRequest
	if err := json.Unmarshal(body, &req); err != nil {
		tb.Fatal(err)
	}
	return approval.CreateCommand{
		Key: key, Body: body, Decode: func() (approval.CreateRequest, error) { return req, nil }, Cause: approval.HTTPCause("create"),
		Respond: func(a *approval.Approval) (approval.StoredResponse, error) {
			return approval.StoredResponse{StatusCode: 201, Location: "/v1/approvals/" + a.ID, Body: []byte(`{}`)}, nil
		},
	}
}

// ciBot is the requester the tests create as.
var ciBot = approval.Principal{Subject: "ci-bot", Role: approval.RoleRequester}

// tokenIssuer is the admin the tests make their tokens as.
var tokenIssuer = approval.Principal{Subject: "test-admin", Role: approval.RoleAdmin}
