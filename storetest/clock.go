package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/approvald/approval"
)

// exerciseClock covers Store.DatabaseTime and what approval.ClockWatch makes of it: a
// process whose clock runs ahead of the database's claims no work, so it cannot take over a
// lease that has not ended by the database's clock.
func exerciseClock(t *testing.T, s suite) {
	s.run(t, "DatabaseTime", func(t *testing.T, f *fixture) {
		before := time.Now()
		at, err := f.store.DatabaseTime(t.Context())
		after := time.Now()
		if err != nil {
			t.Fatalf("database time: %v", err)
		}
		// The database runs on this machine: its clock is this machine's, whatever the
		// store's Now says.
		if at.Before(before.Add(-time.Second)) || at.After(after.Add(time.Second)) {
			t.Fatalf("database time: got %s, want between %s and %s", at, before, after)
		}
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if _, err := f.store.DatabaseTime(ctx); err == nil {
			t.Fatal("database time on an ended context: got nil error, want one")
		}
	})

	// A replica's clock jumps a minute ahead while another's claim is live: without the
	// watch it takes the execution over as if the lease had ended; with it, it claims
	// nothing until its clock agrees again.
	s.run(t, "OffsetHoldsBackTakeover", func(t *testing.T, f *fixture) {
		f.clock.Set(time.Now().Truncate(time.Microsecond))
		svc := f.service()
		_, rec := mustApprovedExecution(t, f)
		if claims := mustClaimExecutions(t, svc, 1); len(claims) != 1 || claims[0].Record.ID != rec.ID {
			t.Fatalf("first claim: got %d claims, want %s", len(claims), rec.ID)
		}
		watch := &approval.ClockWatch{Store: f.store, Now: f.clock.Now, Bound: workLease / 20}
		svc.Clock = watch
		// The fake clock stands still while the machine's runs: catch up before the
		// reading meant to agree (seconds at most, well within the lease).
		f.clock.Set(time.Now().Truncate(time.Microsecond))
		if err := watch.Measure(t.Context()); err != nil {
			t.Fatalf("measure: %v", err)
		}
		if err := watch.Check(); err != nil {
			t.Fatalf("clocks agreeing: got %v, want nil", err)
		}
		if claims := mustClaimExecutions(t, svc, 1); len(claims) != 0 {
			t.Fatalf("claim within the lease: got %d claims, want none", len(claims))
		}

		f.clock.Advance(2 * workLease)
		if err := watch.Measure(t.Context()); err != nil {
			t.Fatalf("measure: %v", err)
		}
		if offset, _, _ := watch.Offset(); offset > -workLease {
			t.Fatalf("offset after the jump: got %s, want about -%s", offset, 2*workLease)
		}
		_, err := svc.ClaimExecutions(t.Context(), workLease, 1)
		if wantCode(t, err, approval.EUNAVAILABLE); !approval.IsClockOffset(err) {
			t.Fatalf("claim with the clock ahead: got %v, want a clock offset refusal", err)
		}
		for name, claim := range map[string]func() error{
			"inbox":  func() error { _, err := svc.ClaimInbox(t.Context(), workLease, 1); return err },
			"outbox": func() error { _, err := svc.ClaimOutbox(t.Context(), workLease, 1); return err },
			"apply inbox": func() error {
				_, err := svc.ClaimApplyInbox(t.Context(), 1, func(*approval.InboxEvent) approval.InboxAction { return approval.InboxAction{} })
				return err
			},
		} {
			if err := claim(); !approval.IsClockOffset(err) {
				t.Errorf("%s claim with the clock ahead: got %v, want a clock offset refusal", name, err)
			}
		}
		// FinishAndClaim records what it is given and claims nothing.
		if _, claims, err := svc.FinishAndClaim(t.Context(), nil, workLease, 1); err != nil || len(claims) != 0 {
			t.Fatalf("finish and claim with the clock ahead: got %d claims, %v; want none, nil", len(claims), err)
		}
		if got := mustExecution(t, f.store, rec.ID); got.Attempts != 1 {
			t.Fatalf("execution after the refused claims: got %d attempts, want 1 (not taken over)", got.Attempts)
		}

		// Without the watch the same clock takes the live claim over: what the watch prevents.
		// The first claim never marked its call started, so the takeover is Abandoned.
		svc.Clock = nil
		claims := mustClaimExecutions(t, svc, 1)
		if len(claims) != 1 || claims[0].Record.ID != rec.ID || !claims[0].Abandoned || claims[0].Attempt != 2 {
			t.Fatalf("claim with the clock ahead and no watch: got %+v, want %s taken over as attempt 2", claims, rec.ID)
		}
	})
}
