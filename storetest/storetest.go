// Package storetest is the conformance suite every approval.Store implementation must pass.
// It is the executable form of the doc comments on approval.Store and of the invariants in
// docs/invariants.md that rest on the store: one terminal decision (1), one approval per
// operation (2), one intake per event (3), no step backwards (4), one effect per approved
// action (5), durable state only (6), every transition explaining itself (7) and every
// message sent, a crash costing at most one resend with the same identity (8).
//
// A store package wires it in one test:
//
//	func TestConformance(t *testing.T) {
//		storetest.Exercise(t, func(t *testing.T, o storetest.Options) approval.Store {
//			return testdb.OpenWith(t, testdb.SQLite, testdb.Options{Now: o.Now})
//		})
//	}
//
// A change of store behaviour extends this suite, not one store's own tests.
package storetest

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/fakeclock"
)

// Options are the settings Exercise asks open to give the store of each case.
type Options struct {
	// Now is the store's clock: a fake clock (internal/fakeclock) the case moves by hand, so no case waits for real time
	// to pass.
	Now func() time.Time
}

// Exercise runs every case of the suite as a parallel subtest. Each case gets a fresh, empty
// store from open, set up with the Options it is given.
func Exercise(t *testing.T, open func(t *testing.T, o Options) approval.Store) {
	t.Helper()
	s := suite{open: open}
	for _, group := range []struct {
		name     string
		exercise func(t *testing.T, s suite)
	}{
		{"Idempotency", exerciseIdempotency},
		{"Decide", exerciseDecide},
		{"Race", exerciseRace},
		{"VotesAtOnce", exerciseVotesAtOnce},
		{"Approvals", exerciseList},
		{"ApprovalFilters", exerciseListFilters},
		{"Asks", exerciseAsks},
		{"Audit", exerciseAudit},
		{"Tokens", exerciseTokens},
		{"TokenCheck", exerciseTokenCheck},
		{"Inbox", exerciseInbox},
		{"Executions", exerciseExecutions},
		{"Notifier", exerciseNotifier},
		{"Outbox", exerciseOutbox},
		{"Signin", exerciseSignin},
		{"Addresses", exerciseAddresses},
		{"Sessions", exerciseSessions},
		{"Tx", exerciseTx},
		{"Clock", exerciseClock},
		{"Incarnation", exerciseIncarnation},
	} {
		t.Run(group.name, func(t *testing.T) {
			t.Parallel()
			group.exercise(t, s)
		})
	}
}

// suite opens a fresh store for each case.
type suite struct {
	open func(t *testing.T, o Options) approval.Store
}

// fixture is what one case works with: its own store, the clock that store reads and the
// routing of the case's rules.
type fixture struct {
	store   approval.Store
	clock   *fakeclock.Clock
	routing approval.Routing
}

// service returns the rules over the case's store, on the case's clock and routing, with
// TargetedAction the one action that has a downstream target.
func (f *fixture) service() *approval.Service {
	return &approval.Service{Store: f.store, Now: f.clock.Now, Retention: Retention, Targeted: targeted, Routing: f.routing}
}

// rules returns the rules of a case on the suite's routing (SuiteRouting), over s, for the
// helpers given a store.
func rules(s approval.Store) *approval.Service {
	return &approval.Service{Store: s, Targeted: targeted, Routing: SuiteRouting}
}

// asAdmin is subject acting with an admin token, whom every Service operation lets through:
// the suite is about the statements, the permission rules have their own test in the root.
func asAdmin(subject string) approval.Principal {
	return approval.Principal{Subject: subject, Role: approval.RoleAdmin}
}

// start is where every case's clock begins. It is microsecond-aligned, like the stores, so a
// time the suite computes equals the time a store reads back; the case about precision moves
// the clock off the microsecond on purpose.
var start = time.Date(2030, time.January, 2, 3, 4, 5, 123456000, time.UTC)

// run runs fn as a parallel subtest on a fresh store.
func (s suite) run(t *testing.T, name string, fn func(t *testing.T, f *fixture)) {
	t.Helper()
	s.runRouted(t, name, SuiteRouting, fn)
}

// runRouted is run with rules whose Routing is r.
func (s suite) runRouted(t *testing.T, name string, r approval.Routing, fn func(t *testing.T, f *fixture)) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		t.Parallel()
		clock := fakeclock.New(start)
		fn(t, &fixture{store: s.open(t, Options{Now: clock.Now}), clock: clock, routing: r})
	})
}

// TargetedAction is the action with a downstream target that cases use: approving an approval
// for it queues an execution, while approving one for an action without a target (such as
// PendingApproval's "deploy") records the execution as not_configured.
const TargetedAction = "payout"

// otherTargetedAction also has a target, for the cases about two targeted actions.
const otherTargetedAction = "refund"

func targeted(action string) bool { return action == TargetedAction || action == otherTargetedAction }

// Retention is how long after a create its retry gets the original answer, as configured by
// default.
const Retention = 24 * time.Hour

// PendingApproval returns a valid approval, ready for CreateApproval, made by requester
// "ci-bot" at now under a fresh operation key: action "deploy", approvers alice and bob, one
// approval required, expiring a day after now. Cases change fields before creating it.
func PendingApproval(tb testing.TB, now time.Time) *approval.Approval {
	tb.Helper()
	key := approval.NewID("op")
	a, err := approval.NewApproval(approval.CreateRequest{
		Action:    "deploy",
		Title:     "Deploy api v1.42 to prod",
		Context:   json.RawMessage(`{"commit":"9f2c1e","env":"prod"}`),
		Approvers: []string{"alice", "bob"},
	}, "ci-bot", key, "fp-"+key, now)
	if err != nil {
		tb.Fatalf("new approval: %v", err)
	}
	return a
}

// MustCreate creates a as the service does, in one InsertApproval that must find the key
// free, with cause HTTPCause("create-"+a.OperationKey).
// It returns the approval as the store reads it back.
func MustCreate(tb testing.TB, s approval.Store, a *approval.Approval) *approval.Approval {
	tb.Helper()
	if h, err := s.InsertApproval(tb.Context(), a, createCause(a), nil); err != nil {
		tb.Fatalf("insert approval %s: %v", a.OperationKey, err)
	} else if h != nil {
		tb.Fatalf("insert approval %s: got the key held (fingerprint %s), want it free", a.OperationKey, h.Fingerprint)
	}
	return mustApproval(tb, s, a.ID)
}

// ResponseFor renders the answer to the create of a, as the Service's Respond would: the
// answer a replay must repeat. The body ends in a new line.
func ResponseFor(a *approval.Approval) approval.StoredResponse {
	// Every field the API shows, times in UTC, as httpapi renders it: a replay rendered from
	// the stored approval (Approval.AsCreated) must come out byte for byte the same.
	c := *a
	c.CreatedAt, c.ExpiresAt, c.DecidedAt = c.CreatedAt.UTC(), c.ExpiresAt.UTC(), nil
	body, err := json.Marshal(&c)
	if err != nil {
		panic(fmt.Sprintf("render %s: %v", a.ID, err))
	}
	return approval.StoredResponse{StatusCode: 201, Location: "/v1/approvals/" + a.ID, Body: append(body, '\n')}
}

func createCause(a *approval.Approval) approval.Cause {
	return approval.HTTPCause("create-" + a.OperationKey)
}

func mustApproval(tb testing.TB, s approval.Store, id string) *approval.Approval {
	tb.Helper()
	a, err := s.Approval(tb.Context(), id)
	if err != nil {
		tb.Fatalf("approval %s: %v", id, err)
	}
	return a
}

func mustDecide(tb testing.TB, s approval.Store, id, approver string, verdict approval.Verdict) *approval.Approval {
	tb.Helper()
	a, err := rules(s).Decide(tb.Context(), asAdmin(approver), approval.DecideRequest{
		ApprovalID: id, Approver: approver, Verdict: verdict, Cause: voteCause(approver),
	})
	if err != nil {
		tb.Fatalf("%s votes %s on %s: %v", approver, verdict, id, err)
	}
	return a
}

func voteCause(approver string) approval.Cause { return approval.HTTPCause("vote-" + approver) }

func mustEvents(tb testing.TB, s approval.Store, id string) []approval.Event {
	tb.Helper()
	evs, err := s.Events(tb.Context(), id)
	if err != nil {
		tb.Fatalf("events of %s: %v", id, err)
	}
	return evs
}

// wantEventTypes checks the types of an approval's audit trail, oldest first, and that the
// trail is numbered 1..n.
func wantEventTypes(tb testing.TB, s approval.Store, id string, want ...string) []approval.Event {
	tb.Helper()
	evs := mustEvents(tb, s, id)
	got := make([]string, len(evs))
	for i, ev := range evs {
		got[i] = ev.Type
		if ev.Seq != int64(i+1) {
			tb.Errorf("event %d (%s) of %s: got seq %d, want %d", i, ev.Type, id, ev.Seq, i+1)
		}
	}
	if !slices.Equal(got, want) {
		tb.Fatalf("events of %s: got %v, want %v", id, got, want)
	}
	return evs
}

// wantCode checks err's approval error code and returns the *approval.Error ("" means no
// error).
func wantCode(tb testing.TB, err error, code string) *approval.Error {
	tb.Helper()
	if got := approval.ErrorCode(err); got != code {
		tb.Fatalf("error code: got %q (%v), want %q", got, err, code)
	}
	return approval.AsError(err)
}

// wantConflict checks that err is ECONFLICT carrying the approval in the given status and
// version: the state the caller lost against.
func wantConflict(tb testing.TB, err error, status approval.Status, version int64) *approval.Approval {
	tb.Helper()
	e := wantCode(tb, err, approval.ECONFLICT)
	if e.Approval == nil {
		tb.Fatalf("conflict %v: got no approval, want the current approval (%s, version %d)", err, status, version)
	}
	if e.Approval.Status != status || e.Approval.Version != version {
		tb.Fatalf("conflict carries: got %s version %d, want %s version %d", e.Approval.Status, e.Approval.Version, status, version)
	}
	return e.Approval
}

// wantState checks an approval's status and version.
func wantState(tb testing.TB, a *approval.Approval, status approval.Status, version int64) {
	tb.Helper()
	if a.Status != status || a.Version != version {
		tb.Fatalf("approval %s: got %s version %d, want %s version %d", a.ID, a.Status, a.Version, status, version)
	}
}

// wantTime checks a stored time against the time it was made from, at store precision.
func wantTime(tb testing.TB, what string, got, want time.Time) {
	tb.Helper()
	if want = want.Truncate(approval.Precision); !got.Equal(want) {
		tb.Fatalf("%s: got %v, want %v", what, got, want)
	}
}

// race runs fn(0) .. fn(n-1) in n goroutines released together by closing one channel, and
// returns when all have returned. That is how every race in the suite is forced: no sleeps.
func race(n int, fn func(i int)) {
	startGun := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-startGun
			fn(i)
		})
	}
	close(startGun)
	wg.Wait()
}
