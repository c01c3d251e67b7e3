package storetest

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/approvald/approval"
)

// workLease is the lease the inbox and execution cases claim work with, as workers would.
const workLease = 30 * time.Second

// exerciseInbox covers InboxStore: invariant 3, one intake per event, and the claim, apply
// and retry cycle the inbox processor runs on it.
func exerciseInbox(t *testing.T, s suite) {
	s.run(t, "RecordOnce", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		// The raw body as the provider sent it: key order, white space and escapes included.
		body := "{\"type\": \"approval.decision\",\n  \"data\": {\"comment\": \"d\u00e9j\u00e0 vu \\u00e9\"}}\n"
		e := newInboxEvent(f.clock.Now(), "chat", "evt_1", approval.TypeApprovalDecision, body)
		if mustRecord(t, f.store, e) {
			t.Fatalf("first delivery of evt_1: got duplicate, want a new event")
		}
		got := mustInboxEvent(t, f.store, e.ID)
		if got.Source != "chat" || got.EventID != "evt_1" || got.Type != approval.TypeApprovalDecision {
			t.Fatalf("stored event: got (%s, %s, %s), want (chat, evt_1, %s)", got.Source, got.EventID, got.Type, approval.TypeApprovalDecision)
		}
		if !bytes.Equal(got.Body, e.Body) {
			t.Fatalf("stored body: got %q, want %q byte for byte", got.Body, e.Body)
		}
		if !maps.Equal(got.Headers, e.Headers) {
			t.Fatalf("stored headers: got %v, want %v", got.Headers, e.Headers)
		}
		wantTime(t, "received_at", got.ReceivedAt, e.ReceivedAt)
		if got.Status != approval.InboxPending || got.Attempts != 0 || got.Outcome != "" || got.ProcessedAt != nil {
			t.Fatalf("new event: got status %s, %d attempts, outcome %q, processed at %v; want pending, 0, none, nil", got.Status, got.Attempts, got.Outcome, got.ProcessedAt)
		}
		if got.NextAttemptAt == nil {
			t.Fatalf("new event: got no next attempt, want one due now (%v)", f.clock.Now())
		}
		wantTime(t, "next_attempt_at", *got.NextAttemptAt, f.clock.Now())
		wantNoConflict(t, got)

		// The provider redelivers days later with the same body: a duplicate, nothing stored.
		f.clock.Advance(72 * time.Hour)
		again := newInboxEvent(f.clock.Now(), "chat", "evt_1", approval.TypeApprovalDecision, body)
		freshID := again.ID
		if !mustRecord(t, f.store, again) {
			t.Fatalf("redelivery of evt_1: got a new event, want duplicate")
		}
		if again.ID != e.ID {
			t.Fatalf("redelivery of evt_1: got id %s, want the stored event's %s", again.ID, e.ID)
		}
		_, err := f.store.InboxEvent(ctx, freshID)
		wantCode(t, err, approval.ENOTFOUND)
		got = mustInboxEvent(t, f.store, e.ID)
		wantTime(t, "received_at after a redelivery", got.ReceivedAt, e.ReceivedAt)
		wantNoConflict(t, got)
		wantInboxList(t, f.store, approval.InboxFilter{Source: "chat"}, e)

		// Event ids are the provider's: the same id from another source is another event.
		other := newInboxEvent(f.clock.Now(), "github", "evt_1", "push", `{}`)
		if mustRecord(t, f.store, other) {
			t.Fatalf("evt_1 from another source: got duplicate, want a new event")
		}

		// A redelivery with a different body keeps the first body and is recorded for
		// operators, each time it happens.
		for i := 1; i <= 2; i++ {
			f.clock.Advance(time.Minute)
			forged := newInboxEvent(f.clock.Now(), "chat", "evt_1", approval.TypeApprovalDecision, fmt.Sprintf(`{"type": "approval.decision", "n": %d}`, i))
			if !mustRecord(t, f.store, forged) {
				t.Fatalf("evt_1 with another body: got a new event, want duplicate")
			}
			got = mustInboxEvent(t, f.store, e.ID)
			if !bytes.Equal(got.Body, e.Body) {
				t.Fatalf("body after a differing redelivery: got %q, want the first %q", got.Body, e.Body)
			}
			if got.Conflicts != i || got.LastConflictAt == nil {
				t.Fatalf("after %d differing redeliveries: got conflicts %d, last at %v; want %d and a time", i, got.Conflicts, got.LastConflictAt, i)
			}
			wantTime(t, "last_conflict_at", *got.LastConflictAt, f.clock.Now())
		}
		// The first body again is an ordinary duplicate, not a conflict.
		conflictAt := f.clock.Now()
		f.clock.Advance(time.Minute)
		if !mustRecord(t, f.store, newInboxEvent(f.clock.Now(), "chat", "evt_1", approval.TypeApprovalDecision, body)) {
			t.Fatalf("evt_1 with its first body: got a new event, want duplicate")
		}
		got = mustInboxEvent(t, f.store, e.ID)
		if got.Conflicts != 2 || got.LastConflictAt == nil {
			t.Fatalf("after an identical redelivery: got conflicts %d, last at %v; want 2 unchanged", got.Conflicts, got.LastConflictAt)
		}
		wantTime(t, "last_conflict_at after an identical redelivery", *got.LastConflictAt, conflictAt)
		if got.Status != approval.InboxPending || got.Attempts != 0 {
			t.Fatalf("after redeliveries: got status %s, %d attempts; want pending, 0", got.Status, got.Attempts)
		}
	})

	// A duplicate is answered with the event that was kept: RecordInbox makes the caller's
	// event the stored one, whatever has happened to it since, without a worker's lease token.
	s.run(t, "DuplicateIsTheStoredEvent", func(t *testing.T, f *fixture) {
		first := mustRecordNew(t, f.store, newInboxEvent(f.clock.Now(), "chat", "evt_1", approval.TypeApprovalDecision, `{"n": 1}`))
		claimed := mustClaimOneInbox(t, f.store, "evt_1")

		f.clock.Advance(time.Hour)
		again := newInboxEvent(f.clock.Now(), "chat", "evt_1", approval.TypeApprovalDecision, `{"n": 2}`)
		if !mustRecord(t, f.store, again) {
			t.Fatalf("redelivery of evt_1: got a new event, want duplicate")
		}
		if again.ID != first.ID || again.Source != "chat" || again.EventID != "evt_1" {
			t.Fatalf("duplicate: got event %s (%s, %s), want the stored %s (chat, evt_1)", again.ID, again.Source, again.EventID, first.ID)
		}
		wantTime(t, "received_at of the duplicate", again.ReceivedAt, first.ReceivedAt)
		if again.Status != approval.InboxPending || again.Attempts != 1 || !bytes.Equal(again.Body, first.Body) {
			t.Fatalf("duplicate of a claimed event: got status %s, %d attempts, body %q; want pending, 1, the first %q", again.Status, again.Attempts, again.Body, first.Body)
		}
		if again.Conflicts != 1 || again.LastConflictAt == nil {
			t.Fatalf("duplicate with another body: got conflicts %d, last at %v; want 1 and a time", again.Conflicts, again.LastConflictAt)
		}
		if again.LeaseToken != "" {
			t.Fatalf("duplicate of a claimed event: got lease token %q, want none (it is the worker's)", again.LeaseToken)
		}

		mustApplyInbox(t, f.store, claimed, approval.InboxAction{Kind: approval.ActionIgnore, Reason: "test"})
		later := newInboxEvent(f.clock.Now(), "chat", "evt_1", approval.TypeApprovalDecision, `{"n": 1}`)
		if !mustRecord(t, f.store, later) {
			t.Fatalf("redelivery of evt_1: got a new event, want duplicate")
		}
		if later.ID != first.ID || later.Status != approval.InboxIgnored || later.ProcessedAt == nil {
			t.Fatalf("duplicate of a finished event: got %s in status %s, processed at %v; want %s ignored with a time", later.ID, later.Status, later.ProcessedAt, first.ID)
		}
	})

	// A provider retrying aggressively, or several replicas behind a load balancer, store the
	// same delivery at once: exactly one of them stores it.
	s.run(t, "RecordRace", func(t *testing.T, f *fixture) {
		const racers = 50
		events := make([]*approval.InboxEvent, racers)
		for i := range events {
			events[i] = newInboxEvent(f.clock.Now(), "chat", "evt_race", approval.TypeApprovalDecision, `{"type": "approval.decision"}`)
		}
		winner := recordRace(t, f, events, "evt_race")
		wantInboxList(t, f.store, approval.InboxFilter{}, events[winner])
	})

	// The github scheme signs only the body, so the intake gives RecordInbox the body's hash
	// as a second key: the same body under a new delivery id is a duplicate of the event kept,
	// for as long as that event is kept, its body purged or not. Events without a hash (the
	// other schemes) are keyed on their id alone.
	s.run(t, "BodyHashReplay", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		const body = `{"action": "opened", "number": 7}`
		first := mustRecordNew(t, f.store, newGitHubEvent(f.clock.Now(), "gh", "del_1", body))

		f.clock.Advance(time.Minute)
		replay := newGitHubEvent(f.clock.Now(), "gh", "del_2", body)
		freshID := replay.ID
		if !mustRecord(t, f.store, replay) {
			t.Fatalf("the body of del_1 under del_2: got a new event, want duplicate")
		}
		if replay.ID != first.ID || replay.EventID != "del_1" {
			t.Fatalf("replay: got event %s (%s), want the stored %s (del_1)", replay.ID, replay.EventID, first.ID)
		}
		_, err := f.store.InboxEvent(ctx, freshID)
		wantCode(t, err, approval.ENOTFOUND)
		wantNoConflict(t, mustInboxEvent(t, f.store, first.ID))

		// Another body, and the same body from another source, are events of their own.
		other := mustRecordNew(t, f.store, newGitHubEvent(f.clock.Now(), "gh", "del_3", `{"action": "closed", "number": 7}`))
		f.clock.Advance(time.Second)
		elsewhere := mustRecordNew(t, f.store, newGitHubEvent(f.clock.Now(), "gh2", "del_1", body))
		f.clock.Advance(time.Second)
		// An id match wins over a hash match: del_3 redelivered with del_1's body is del_3,
		// counted as a conflict, not a replay of del_1.
		mixed := newGitHubEvent(f.clock.Now(), "gh", "del_3", body)
		if !mustRecord(t, f.store, mixed) || mixed.ID != other.ID || mixed.Conflicts != 1 {
			t.Fatalf("del_3 with del_1's body: got event %s with %d conflicts, want %s with 1", mixed.ID, mixed.Conflicts, other.ID)
		}

		// Without a hash (standard webhooks) the same body under two ids is two events.
		std1 := mustRecordNew(t, f.store, newInboxEvent(f.clock.Now(), "chat", "msg_1", "ping", body))
		f.clock.Advance(time.Second)
		std2 := mustRecordNew(t, f.store, newInboxEvent(f.clock.Now(), "chat", "msg_2", "ping", body))
		wantInboxList(t, f.store, approval.InboxFilter{}, std2, std1, elsewhere, other, first)

		// Handled, its body purged after a day: the hash stays, and so does the dedupe.
		claimed := mustClaimInbox(t, f.store, 10)
		if len(claimed) != 5 || claimed[0].ID != first.ID {
			t.Fatalf("claim inbox: got %d events %v, want 5, del_1 of gh first", len(claimed), eventIDs(claimed))
		}
		mustApplyInbox(t, f.store, claimed[0], approval.InboxAction{Kind: approval.ActionIgnore, Reason: "test"})
		f.clock.Advance(48 * time.Hour)
		if _, err := f.service().PurgeInbox(ctx, 30*24*time.Hour, 24*time.Hour, 100); err != nil {
			t.Fatalf("purge inbox: %v", err)
		}
		if got := mustInboxEvent(t, f.store, first.ID); got.Body != nil {
			t.Fatalf("del_1 after the body purge: got body %q, want none", got.Body)
		}
		late := newGitHubEvent(f.clock.Now(), "gh", "del_4", body)
		if !mustRecord(t, f.store, late) || late.ID != first.ID {
			t.Fatalf("the body of del_1 under del_4 after its body was purged: got event %s, want duplicate of %s", late.ID, first.ID)
		}

		// Once the event itself is purged, the body is accepted again: the documented limit.
		f.clock.Advance(31 * 24 * time.Hour)
		if _, err := f.service().PurgeInbox(ctx, 30*24*time.Hour, 24*time.Hour, 100); err != nil {
			t.Fatalf("purge inbox: %v", err)
		}
		_, err = f.store.InboxEvent(ctx, first.ID)
		wantCode(t, err, approval.ENOTFOUND)
		mustRecordNew(t, f.store, newGitHubEvent(f.clock.Now(), "gh", "del_5", body))
	})

	// A captured body replayed under many delivery ids at once stores one event.
	s.run(t, "BodyHashRace", func(t *testing.T, f *fixture) {
		const racers = 50
		events := make([]*approval.InboxEvent, racers)
		for i := range events {
			events[i] = newGitHubEvent(f.clock.Now(), "gh", fmt.Sprintf("del_%d", i), `{"action": "opened"}`)
		}
		winner := recordRace(t, f, events, "the body")
		for i := range racers {
			if events[i].ID != events[winner].ID {
				t.Fatalf("racer %d: got event %s, want the stored %s", i, events[i].ID, events[winner].ID)
			}
		}
		wantInboxList(t, f.store, approval.InboxFilter{}, events[winner])
	})

	s.run(t, "ClaimLease", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		var evs []*approval.InboxEvent
		for i := range 3 {
			evs = append(evs, mustRecordNew(t, f.store, newInboxEvent(f.clock.Now(), "chat", fmt.Sprintf("evt_%d", i), "ping", `{"n": 1}`)))
			f.clock.Advance(time.Second)
		}

		// Oldest first, up to the limit, each with its body, a lease token and an attempt.
		first := mustClaimInbox(t, f.store, 2)
		wantClaimed(t, "claim with limit 2", first, 1, evs[0], evs[1])
		if first[0].LeaseToken == first[1].LeaseToken {
			t.Fatalf("two claims share lease token %q", first[0].LeaseToken)
		}
		wantClaimed(t, "second claim", mustClaimInbox(t, f.store, 10), 1, evs[2])
		wantClaimed(t, "claim while every lease is live", mustClaimInbox(t, f.store, 10), 0)

		// A finished event is never claimed again, lease or not.
		mustApplyInbox(t, f.store, first[0], approval.InboxAction{Kind: approval.ActionIgnore, Reason: "no handler for ping"})

		f.clock.Advance(workLease - time.Microsecond)
		wantClaimed(t, "claim just before the leases expire", mustClaimInbox(t, f.store, 10), 0)
		f.clock.Advance(2 * time.Microsecond)
		taken := mustClaimInbox(t, f.store, 10)
		wantClaimed(t, "claim after the leases expired", taken, 2, evs[1], evs[2])
		if taken[0].LeaseToken == first[1].LeaseToken {
			t.Fatalf("takeover of %s: got the expired lease token %q again, want a new one", evs[1].ID, taken[0].LeaseToken)
		}

		// The worker whose lease expired has lost the event: its token applies nothing.
		_, err := f.service().ApplyInbox(ctx, first[1], approval.InboxAction{Kind: approval.ActionIgnore, Reason: "late"})
		wantCode(t, err, approval.ECONFLICT)
		got := mustInboxEvent(t, f.store, evs[1].ID)
		if got.Status != approval.InboxPending || got.Attempts != 2 || got.Outcome != "" {
			t.Fatalf("after a stale apply: got status %s, %d attempts, outcome %q; want pending, 2, none", got.Status, got.Attempts, got.Outcome)
		}
		done := mustApplyInbox(t, f.store, taken[0], approval.InboxAction{Kind: approval.ActionIgnore, Reason: "no handler for ping"})
		if done.Status != approval.InboxIgnored {
			t.Fatalf("apply by the new lease holder: got status %s, want %s", done.Status, approval.InboxIgnored)
		}
	})

	// ClaimApplyInbox takes the events a claim would (pending, due, no live lease), oldest
	// first, applies each as ApplyInbox would, in one transaction, marks each done with one
	// more attempt and no lease, and answers each as the store now holds it. An event a live
	// claim holds is left to its claimer; once that lease has run out, it is taken.
	s.run(t, "ClaimApply", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		a := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		mustRecordNew(t, f.store, newInboxEvent(f.clock.Now(), "chat", "evt_leased", "ping", `{}`))
		leased := mustClaimOneInbox(t, f.store, "evt_leased")
		f.clock.Advance(time.Second)
		actions := map[string]approval.InboxAction{
			"evt_1":      decideAction(a.ID, "alice", approval.VerdictApprove),
			"evt_2":      {Kind: approval.ActionIgnore, Reason: "no handler for ping"},
			"evt_3":      decideAction(a.ID, "bob", approval.VerdictReject),
			"evt_leased": {Kind: approval.ActionIgnore, Reason: "taken over"},
		}
		for _, id := range []string{"evt_1", "evt_2", "evt_3"} {
			mustRecordNew(t, f.store, newInboxEvent(f.clock.Now(), "chat", id, approval.TypeApprovalDecision, `{"n":1}`))
			f.clock.Advance(time.Second)
		}
		actionFor := func(e *approval.InboxEvent) approval.InboxAction { return actions[e.EventID] }
		done, err := f.service().ClaimApplyInbox(ctx, 10, actionFor)
		if err != nil {
			t.Fatalf("claim and apply: %v", err)
		}
		if got := eventIDs(done); !slices.Equal(got, []string{"chat/evt_1", "chat/evt_2", "chat/evt_3"}) {
			t.Fatalf("claim and apply: got %v, want evt_1, evt_2, evt_3 (evt_leased is held)", got)
		}
		// alice's approval decided it; bob's rejection came after, to a decided approval.
		wantState(t, mustApproval(t, f.store, a.ID), approval.StatusApproved, 2)
		wantEventTypes(t, f.store, a.ID, approval.EventCreated, approval.EventVoted, approval.EventApproved)
		wantStatus := []approval.InboxStatus{approval.InboxProcessed, approval.InboxIgnored, approval.InboxProcessed}
		for i, e := range done {
			got := mustInboxEvent(t, f.store, e.ID)
			if got.Status != wantStatus[i] || e.Status != got.Status || e.Outcome != got.Outcome || e.ApprovalID != got.ApprovalID ||
				e.Attempts != 1 || got.Attempts != 1 || got.LeaseToken != "" || e.NextAttemptAt != nil || got.NextAttemptAt != nil {
				t.Fatalf("%s: answered %+v, stored %+v; want status %s and attempt 1 in both, no lease", e.EventID, e, got, wantStatus[i])
			}
			if got.ProcessedAt == nil || e.ProcessedAt == nil {
				t.Fatalf("%s: processed at %v, answered %v; want both set", e.EventID, got.ProcessedAt, e.ProcessedAt)
			}
			wantTime(t, e.EventID+" processed_at", *e.ProcessedAt, *got.ProcessedAt)
			if string(e.Body) != `{"n":1}` {
				t.Fatalf("%s: answered body %q, want the event's", e.EventID, e.Body)
			}
		}
		if got := done[0].Outcome; !strings.Contains(got, "alice voted approve") {
			t.Fatalf("evt_1 outcome: got %q, want alice's vote", got)
		}
		if got := mustInboxEvent(t, f.store, leased.ID); got.Status != approval.InboxPending || got.Attempts != 1 || got.LeaseToken != leased.LeaseToken {
			t.Fatalf("evt_leased while its lease lives: got %+v, want it untouched", got)
		}

		// The lease has run out: the event is taken, and its claimer has lost it.
		f.clock.Advance(workLease)
		done, err = f.service().ClaimApplyInbox(ctx, 10, actionFor)
		if err != nil || len(done) != 1 || done[0].ID != leased.ID || done[0].Attempts != 2 || done[0].Status != approval.InboxIgnored {
			t.Fatalf("claim and apply after the lease: got %+v, %v; want evt_leased ignored at attempt 2", done, err)
		}
		_, err = f.service().ApplyInbox(ctx, leased, actions["evt_leased"])
		wantCode(t, err, approval.ECONFLICT)
		if done, err = f.service().ClaimApplyInbox(ctx, 10, actionFor); err != nil || len(done) != 0 {
			t.Fatalf("claim and apply with nothing due: got %v, %v; want nothing", eventIDs(done), err)
		}
		_, err = f.service().ClaimApplyInbox(ctx, 0, actionFor)
		wantCode(t, err, approval.EINVALID)
	})

	// The driver marks several events done at once, each with its own status, outcome and
	// approval, and only while every one is pending: one that is not fails the transaction,
	// which then marks none of them.
	s.run(t, "MarkDoneMany", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		a := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		var ids []string
		for _, id := range []string{"evt_1", "evt_2", "evt_3"} {
			ids = append(ids, mustRecordNew(t, f.store, newInboxEvent(f.clock.Now(), "chat", id, approval.TypeApprovalDecision, `{}`)).ID)
		}
		mark := func(marks ...approval.InboxMark) error {
			tx, err := f.store.Begin(ctx)
			if err != nil {
				return err
			}
			defer tx.Rollback(ctx)
			if err := tx.InboxMarkDoneMany(ctx, marks); err != nil {
				return err
			}
			return tx.Commit(ctx)
		}
		if err := mark(approval.InboxMark{ID: ids[2], Status: approval.InboxIgnored, Outcome: "first"}); err != nil {
			t.Fatalf("mark evt_3: %v", err)
		}
		// evt_3 is no longer pending: the whole write fails.
		err := mark(approval.InboxMark{ID: ids[0], Status: approval.InboxProcessed, Outcome: "x", ApprovalID: a.ID},
			approval.InboxMark{ID: ids[2], Status: approval.InboxProcessed, Outcome: "again"})
		if err == nil {
			t.Fatalf("mark a handled event again: got nil error, want the transaction to fail")
		}
		if got := mustInboxEvent(t, f.store, ids[0]); got.Status != approval.InboxPending || got.Outcome != "" {
			t.Fatalf("evt_1 after a failed mark: got %s %q, want pending", got.Status, got.Outcome)
		}
		if got := mustInboxEvent(t, f.store, ids[2]); got.Status != approval.InboxIgnored || got.Outcome != "first" {
			t.Fatalf("evt_3 after a failed mark: got %s %q, want ignored, first", got.Status, got.Outcome)
		}
		if err := mark(approval.InboxMark{ID: ids[1], Status: approval.InboxStale, Outcome: "older"},
			approval.InboxMark{ID: ids[0], Status: approval.InboxProcessed, Outcome: "alice voted", ApprovalID: a.ID, Attempted: true}); err != nil {
			t.Fatalf("mark evt_1 and evt_2: %v", err)
		}
		for i, want := range []approval.InboxMark{
			{Status: approval.InboxProcessed, Outcome: "alice voted", ApprovalID: a.ID, Attempted: true},
			{Status: approval.InboxStale, Outcome: "older"},
		} {
			got := mustInboxEvent(t, f.store, ids[i])
			if attempts := map[bool]int{true: 1}[want.Attempted]; got.Attempts != attempts {
				t.Fatalf("event %d after its mark: got %d attempts, want %d", i+1, got.Attempts, attempts)
			}
			if got.Status != want.Status || got.Outcome != want.Outcome || got.ApprovalID != want.ApprovalID ||
				got.ProcessedAt == nil || got.NextAttemptAt != nil || got.LeaseToken != "" {
				t.Fatalf("event %d after its mark: got %+v, want %+v, processed, no lease", i+1, got, want)
			}
		}
		if err := mark(); err != nil {
			t.Fatalf("mark nothing: %v", err)
		}
	})

	// ClaimApplyInbox is all or nothing: one event that cannot be applied applies none of them,
	// counts no attempt and leaves no lease, and the error names it.
	s.run(t, "ClaimApplyAllOrNothing", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		a := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		first := mustRecordNew(t, f.store, newInboxEvent(f.clock.Now(), "chat", "evt_1", approval.TypeApprovalDecision, `{}`))
		f.clock.Advance(time.Second)
		second := mustRecordNew(t, f.store, newInboxEvent(f.clock.Now(), "chat", "evt_2", approval.TypeApprovalDecision, `{}`))
		valid := map[string]approval.InboxAction{
			"evt_1": decideAction(a.ID, "alice", approval.VerdictApprove),
			"evt_2": {Kind: approval.ActionIgnore, Reason: "late"},
		}
		broken := func(e *approval.InboxEvent) approval.InboxAction {
			if e.EventID == "evt_2" {
				return approval.InboxAction{Kind: approval.ActionDecide} // no payload
			}
			return valid[e.EventID]
		}
		_, err := f.service().ClaimApplyInbox(ctx, 10, broken)
		wantCode(t, err, approval.EINVALID)
		if !strings.Contains(fmt.Sprint(err), second.ID) {
			t.Fatalf("claim and apply with an action that cannot apply: got %v, want an error naming %s", err, second.ID)
		}
		wantState(t, mustApproval(t, f.store, a.ID), approval.StatusPending, 1)
		wantEventTypes(t, f.store, a.ID, approval.EventCreated)
		for _, e := range []*approval.InboxEvent{first, second} {
			if got := mustInboxEvent(t, f.store, e.ID); got.Status != approval.InboxPending || got.Attempts != 0 || got.LeaseToken != "" {
				t.Fatalf("%s after a batch that failed: got %+v, want pending, no attempt, no lease", e.EventID, got)
			}
		}
		// The same events with actions that apply: both are.
		done, err := f.service().ClaimApplyInbox(ctx, 10, func(e *approval.InboxEvent) approval.InboxAction { return valid[e.EventID] })
		if err != nil || len(done) != 2 {
			t.Fatalf("claim and apply: got %v, %v; want both events", eventIDs(done), err)
		}
		wantState(t, mustApproval(t, f.store, a.ID), approval.StatusApproved, 2)
	})

	// A stale token must not decide: the decision and the event's outcome are one transaction.
	s.run(t, "LostLeaseAppliesNothing", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		a := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		mustRecordNew(t, f.store, newInboxEvent(f.clock.Now(), "chat", "evt_1", approval.TypeApprovalDecision, `{}`))
		lost := mustClaimOneInbox(t, f.store, "evt_1")
		f.clock.Advance(workLease + time.Second)
		holder := mustClaimOneInbox(t, f.store, "evt_1")

		_, err := f.service().ApplyInbox(ctx, lost, decideAction(a.ID, "alice", approval.VerdictApprove))
		wantCode(t, err, approval.ECONFLICT)
		wantState(t, mustApproval(t, f.store, a.ID), approval.StatusPending, 1)
		wantEventTypes(t, f.store, a.ID, approval.EventCreated)
		if got := mustInboxEvent(t, f.store, lost.ID); got.Status != approval.InboxPending {
			t.Fatalf("event after a stale apply: got status %s, want pending", got.Status)
		}

		// The holder of the live lease decides, once.
		wantInboxStatus(t, mustApplyInbox(t, f.store, holder, decideAction(a.ID, "alice", approval.VerdictApprove)), approval.InboxProcessed)
		wantState(t, mustApproval(t, f.store, a.ID), approval.StatusApproved, 2)
	})

	s.run(t, "ApplyDecide", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		a := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		e := mustRecordNew(t, f.store, newInboxEvent(f.clock.Now(), "chat", "evt_42", approval.TypeApprovalDecision, `{"verdict": "approve"}`))
		f.clock.Advance(time.Second)
		claimed := mustClaimOneInbox(t, f.store, "evt_42")
		f.clock.Advance(time.Second)

		action := decideAction(a.ID, "alice", approval.VerdictApprove)
		action.Decide.Comment = "from chat"
		got := mustApplyInbox(t, f.store, claimed, action)
		wantInboxStatus(t, got, approval.InboxProcessed)
		if got.Outcome == "" || got.ApprovalID != a.ID {
			t.Fatalf("processed decision: got outcome %q, approval %q; want an outcome and %s", got.Outcome, got.ApprovalID, a.ID)
		}
		if got.ProcessedAt == nil {
			t.Fatalf("processed decision: got no processed_at, want %v", f.clock.Now())
		}
		wantTime(t, "processed_at", *got.ProcessedAt, f.clock.Now())

		read := mustInboxEvent(t, f.store, e.ID)
		wantInboxStatus(t, read, approval.InboxProcessed)
		if read.Outcome != got.Outcome || read.ApprovalID != a.ID || read.Attempts != 1 || !bytes.Equal(read.Body, e.Body) {
			t.Fatalf("processed event read back: got outcome %q, approval %q, %d attempts, body %q; want %q, %s, 1, %q",
				read.Outcome, read.ApprovalID, read.Attempts, read.Body, got.Outcome, a.ID, e.Body)
		}

		// The vote is an ordinary vote, and its trail names the inbox event as its cause.
		ap := mustApproval(t, f.store, a.ID)
		wantState(t, ap, approval.StatusApproved, 2)
		if d, ok := ap.DecisionBy("alice"); !ok || d.Comment != "from chat" {
			t.Fatalf("alice's decision: got %+v, %v; want one with comment %q", d, ok, "from chat")
		}
		cause := approval.Cause{Kind: approval.CauseInbox, Source: "chat", EventID: "evt_42"}
		evs := wantEventTypes(t, f.store, a.ID, approval.EventCreated, approval.EventVoted, approval.EventApproved)
		wantEvent(t, evs[1], "alice", cause, f.clock.Now())
		wantEvent(t, evs[2], "alice", cause, f.clock.Now())

		// Applied once: the claim is spent, so a repeated apply changes nothing.
		_, err := f.service().ApplyInbox(ctx, claimed, action)
		wantCode(t, err, approval.ECONFLICT)
		wantEventTypes(t, f.store, a.ID, approval.EventCreated, approval.EventVoted, approval.EventApproved)
		f.clock.Advance(workLease + time.Second)
		wantClaimed(t, "claim after processing", mustClaimInbox(t, f.store, 10), 0)
	})

	// A chat button pressed by the wrong person, or too late, is answered like the API would
	// answer it (403, 409), so the event is done: processed, its outcome saying why, not an
	// error that a retry could change.
	s.run(t, "ApplyRefused", func(t *testing.T, f *fixture) {
		a := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		rejected := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		mustDecide(t, f.store, rejected.ID, "bob", approval.VerdictReject)

		for i, tc := range []struct {
			name   string
			action approval.InboxAction
		}{
			{"not an approver", decideAction(a.ID, "mallory", approval.VerdictApprove)},
			{"already rejected", decideAction(rejected.ID, "alice", approval.VerdictApprove)},
			{"the other verdict after voting", decideAction(rejected.ID, "bob", approval.VerdictApprove)},
			// 404 too: no retry can make a missing approval appear.
			{"no such approval", decideAction(approval.NewID("apr"), "alice", approval.VerdictApprove)},
			// What the input policy refuses cannot be fixed by a retry either (400).
			{"an escape in the comment", withComment(decideAction(a.ID, "alice", approval.VerdictApprove), "red \x1b[31m")},
			{"a comment over the limit", withComment(decideAction(a.ID, "alice", approval.VerdictApprove), strings.Repeat("c", approval.MaxCommentLength+1))},
			{"a newline in the approver", decideAction(a.ID, "alice\n", approval.VerdictApprove)},
		} {
			eventID := fmt.Sprintf("evt_%d", i)
			mustRecordNew(t, f.store, newInboxEvent(f.clock.Now(), "chat", eventID, approval.TypeApprovalDecision, `{}`))
			got, err := f.service().ApplyInbox(t.Context(), mustClaimOneInbox(t, f.store, eventID), tc.action)
			if err != nil {
				t.Fatalf("%s: apply inbox: got %v, want the event processed as refused", tc.name, err)
			}
			wantInboxStatus(t, got, approval.InboxProcessed)
			if !strings.HasPrefix(got.Outcome, "refused") {
				t.Fatalf("%s: got outcome %q, want one starting %q", tc.name, got.Outcome, "refused")
			}
		}
		wantState(t, mustApproval(t, f.store, a.ID), approval.StatusPending, 1)
		wantEventTypes(t, f.store, a.ID, approval.EventCreated)
		wantState(t, mustApproval(t, f.store, rejected.ID), approval.StatusRejected, 2)
		wantEventTypes(t, f.store, rejected.ID, approval.EventCreated, approval.EventVoted, approval.EventRejected)
	})

	s.run(t, "ApplyDecideByOperationKey", func(t *testing.T, f *fixture) {
		a := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		mustRecordNew(t, f.store, newInboxEvent(f.clock.Now(), "chat", "evt_1", approval.TypeApprovalDecision, `{}`))
		byKey := approval.InboxAction{Kind: approval.ActionDecide, Decide: &approval.DecideRequest{
			OperationKey: a.OperationKey, Approver: "alice", Verdict: approval.VerdictApprove,
		}}
		got := mustApplyInbox(t, f.store, mustClaimOneInbox(t, f.store, "evt_1"), byKey)
		wantInboxStatus(t, got, approval.InboxProcessed)
		if got.ApprovalID != a.ID {
			t.Fatalf("decided by operation key: got approval %q, want %s", got.ApprovalID, a.ID)
		}
		wantState(t, mustApproval(t, f.store, a.ID), approval.StatusApproved, 2)

		// A key two requesters used names no one approval: refused, neither touched.
		b := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		other := PendingApproval(t, f.clock.Now())
		other.Requester, other.OperationKey, other.Fingerprint = "deployer", b.OperationKey, "fp-deployer-"+b.OperationKey
		MustCreate(t, f.store, other)
		mustRecordNew(t, f.store, newInboxEvent(f.clock.Now(), "chat", "evt_2", approval.TypeApprovalDecision, `{}`))
		byKey.Decide = &approval.DecideRequest{OperationKey: b.OperationKey, Approver: "alice", Verdict: approval.VerdictApprove}
		got = mustApplyInbox(t, f.store, mustClaimOneInbox(t, f.store, "evt_2"), byKey)
		wantInboxStatus(t, got, approval.InboxProcessed)
		if !strings.HasPrefix(got.Outcome, "refused") {
			t.Fatalf("decision by an ambiguous key: got outcome %q, want one starting %q", got.Outcome, "refused")
		}
		wantState(t, mustApproval(t, f.store, b.ID), approval.StatusPending, 1)
		wantState(t, mustApproval(t, f.store, other.ID), approval.StatusPending, 1)
	})

	s.run(t, "ApplyIgnore", func(t *testing.T, f *fixture) {
		e := mustRecordNew(t, f.store, newInboxEvent(f.clock.Now(), "chat", "evt_1", "user.joined", `{}`))
		const reason = "no handler for type user.joined"
		got := mustApplyInbox(t, f.store, mustClaimOneInbox(t, f.store, "evt_1"), approval.InboxAction{Kind: approval.ActionIgnore, Reason: reason})
		wantInboxStatus(t, got, approval.InboxIgnored)
		if !strings.Contains(got.Outcome, reason) {
			t.Fatalf("ignored event: got outcome %q, want it to say %q", got.Outcome, reason)
		}
		wantInboxStatus(t, mustInboxEvent(t, f.store, e.ID), approval.InboxIgnored)
		f.clock.Advance(workLease + time.Second)
		wantClaimed(t, "claim after ignoring", mustClaimInbox(t, f.store, 10), 0)
	})

	// An execution.result event is applied only when it is newer (invariant 4); an older one
	// is the inbox status stale; one for an execution whose outcome approvald records from its
	// own call is refused.
	// A result PostgreSQL's jsonb cannot hold (a NUL) is refused by the input policy before
	// the store, on both stores alike: the event is processed as refused, not retried into
	// failed, and the execution is untouched.
	s.run(t, "ApplyResultRefusedByPolicy", func(t *testing.T, f *fixture) {
		a, rec := mustApprovedExecution(t, f)
		wantClaims(t, "claim", mustClaimExecutions(t, f.service(), 10), 1, rec)
		if _, err := f.service().FinishAttempt(t.Context(), rec.ID, 1, approval.AttemptOutcome{Status: approval.ExecutionRunning, Reason: "accepted"}); err != nil {
			t.Fatalf("finish attempt as accepted: %v", err)
		}
		for i, result := range []string{`{"note": "a\u0000b"}`, `{"s": "\udc00"}`, `{"a": 1, "a": 2}`} {
			eventID := fmt.Sprintf("res_%d", i)
			mustRecordNew(t, f.store, newInboxEvent(f.clock.Now(), "payments", eventID, approval.TypeExecutionResult, `{}`))
			got := mustApplyInbox(t, f.store, mustClaimOneInbox(t, f.store, eventID), approval.InboxAction{
				Kind: approval.ActionExecutionResult,
				Report: &approval.ExecutionReport{
					OperationKey: a.OperationKey, Status: approval.ExecutionSucceeded, Version: 1,
					Result: []byte(result), Actor: "payments",
				},
			})
			wantInboxStatus(t, got, approval.InboxProcessed)
			if !strings.HasPrefix(got.Outcome, "refused: ") {
				t.Fatalf("result %s: got outcome %q, want it refused", result, got.Outcome)
			}
		}
		if got := mustExecution(t, f.store, rec.ID); got.Status != approval.ExecutionRunning || got.AppliedVersion != 0 {
			t.Fatalf("execution after refused results: got %s, applied version %d; want running, 0", got.Status, got.AppliedVersion)
		}
	})

	s.run(t, "ApplyExecutionResult", func(t *testing.T, f *fixture) {
		// Two executions of one async target: a accepted, sync a synchronous success.
		a, rec := mustApprovedExecution(t, f)
		sync, syncRec := mustApprovedExecution(t, f)
		wantClaims(t, "claim", mustClaimExecutions(t, f.service(), 10), 1, rec, syncRec)
		if _, err := f.service().FinishAttempt(t.Context(), rec.ID, 1, approval.AttemptOutcome{Status: approval.ExecutionRunning, Reason: "accepted"}); err != nil {
			t.Fatalf("finish attempt as accepted: %v", err)
		}
		if _, err := f.service().FinishAttempt(t.Context(), syncRec.ID, 1, approval.AttemptOutcome{Status: approval.ExecutionSucceeded, Result: []byte(`{"sync": true}`), Reason: "200"}); err != nil {
			t.Fatalf("finish attempt as succeeded: %v", err)
		}
		reportOn := func(key, eventID string, version int64, status approval.ExecutionStatus) *approval.InboxEvent {
			t.Helper()
			mustRecordNew(t, f.store, newInboxEvent(f.clock.Now(), "payments", eventID, approval.TypeExecutionResult, `{}`))
			return mustApplyInbox(t, f.store, mustClaimOneInbox(t, f.store, eventID), approval.InboxAction{
				Kind: approval.ActionExecutionResult,
				Report: &approval.ExecutionReport{
					OperationKey: key, Status: status, Version: version,
					Result: []byte(fmt.Sprintf(`{"version": %d}`, version)), Actor: "payments",
				},
			})
		}
		report := func(eventID string, version int64, status approval.ExecutionStatus) *approval.InboxEvent {
			t.Helper()
			return reportOn(a.OperationKey, eventID, version, status)
		}

		f.clock.Advance(time.Second)
		refused := reportOn(sync.OperationKey, "res_sync", 1, approval.ExecutionFailed)
		wantInboxStatus(t, refused, approval.InboxProcessed)
		if !strings.HasPrefix(refused.Outcome, "refused: ") || !strings.Contains(refused.Outcome, "its own call to the target") {
			t.Fatalf("report on a synchronous success: got outcome %q, want it refused because approvald recorded the call", refused.Outcome)
		}
		wantExecution(t, mustExecution(t, f.store, syncRec.ID), approval.ExecutionSucceeded, 0, `{"sync": true}`)
		wantExecutionEvents(t, f.store, sync.ID, approval.EventExecutionAttempt, approval.EventExecutionSucceeded)

		f.clock.Advance(time.Second)
		wantInboxStatus(t, report("res_2", 2, approval.ExecutionSucceeded), approval.InboxProcessed)
		wantExecution(t, mustExecution(t, f.store, rec.ID), approval.ExecutionSucceeded, 2, `{"version": 2}`)

		f.clock.Advance(time.Second)
		stale := report("res_1", 1, approval.ExecutionFailed)
		wantInboxStatus(t, stale, approval.InboxStale)
		if stale.Outcome == "" {
			t.Fatalf("stale report: got no outcome, want one saying why")
		}
		wantExecution(t, mustExecution(t, f.store, rec.ID), approval.ExecutionSucceeded, 2, `{"version": 2}`)

		evs := wantExecutionEvents(t, f.store, a.ID, approval.EventExecutionAttempt, approval.EventExecutionAccepted,
			approval.EventExecutionReported, approval.EventExecutionReportStale)
		for i, eventID := range []string{"res_2", "res_1"} {
			c := evs[2+i].Cause
			if c.Kind != approval.CauseInbox || c.Source != "payments" || c.EventID != eventID {
				t.Fatalf("event %s: got cause %+v, want the inbox event payments/%s", evs[2+i].Type, c, eventID)
			}
		}
	})

	s.run(t, "FailAndRetry", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		e := mustRecordNew(t, f.store, newInboxEvent(f.clock.Now(), "chat", "evt_1", approval.TypeApprovalDecision, `{}`))
		first := mustClaimOneInbox(t, f.store, "evt_1")

		// A retry due before the lease would end: failing gives the lease back.
		retryAt := f.clock.Now().Add(5 * time.Second)
		if err := f.service().FailInbox(ctx, first, "database busy", &retryAt); err != nil {
			t.Fatalf("fail inbox with a retry: %v", err)
		}
		got := mustInboxEvent(t, f.store, e.ID)
		if got.Status != approval.InboxPending || got.LastError != "database busy" || got.Attempts != 1 || got.NextAttemptAt == nil {
			t.Fatalf("after a failed attempt with a retry: got %s, error %q, %d attempts, next %v; want pending, %q, 1, %v",
				got.Status, got.LastError, got.Attempts, got.NextAttemptAt, "database busy", retryAt)
		}
		wantTime(t, "next_attempt_at", *got.NextAttemptAt, retryAt)
		f.clock.Advance(5*time.Second - time.Microsecond)
		wantClaimed(t, "claim before the retry is due", mustClaimInbox(t, f.store, 10), 0)
		f.clock.Advance(time.Microsecond)
		second := mustClaimInbox(t, f.store, 10)
		wantClaimed(t, "claim when the retry is due", second, 2, e)

		// Fenced like ApplyInbox.
		err := f.service().FailInbox(ctx, first, "late", nil)
		wantCode(t, err, approval.ECONFLICT)

		// Without a retry it is failed, and stays failed.
		if err := f.service().FailInbox(ctx, second[0], "bad data", nil); err != nil {
			t.Fatalf("fail inbox for good: %v", err)
		}
		got = mustInboxEvent(t, f.store, e.ID)
		if got.Status != approval.InboxFailed || got.LastError != "bad data" {
			t.Fatalf("after a final failure: got %s, error %q; want failed, %q", got.Status, got.LastError, "bad data")
		}
		f.clock.Advance(workLease + time.Second)
		wantClaimed(t, "claim of a failed event", mustClaimInbox(t, f.store, 10), 0)

		// Only a failed event can be retried.
		other := mustRecordNew(t, f.store, newInboxEvent(f.clock.Now(), "chat", "evt_2", "ping", `{}`))
		_, err = f.service().RetryInbox(ctx, asAdmin("root"), other.ID)
		wantCode(t, err, approval.ECONFLICT)
		mustApplyInbox(t, f.store, mustClaimOneInbox(t, f.store, "evt_2"), approval.InboxAction{Kind: approval.ActionIgnore, Reason: "ping"})
		_, err = f.service().RetryInbox(ctx, asAdmin("root"), other.ID)
		wantCode(t, err, approval.ECONFLICT)
		_, err = f.service().RetryInbox(ctx, asAdmin("root"), approval.NewID("inb"))
		wantCode(t, err, approval.ENOTFOUND)

		f.clock.Advance(time.Minute)
		retried, err := f.service().RetryInbox(ctx, asAdmin("root"), e.ID)
		if err != nil {
			t.Fatalf("retry a failed event: %v", err)
		}
		if retried.Status != approval.InboxPending || retried.Attempts != 2 || retried.NextAttemptAt == nil {
			t.Fatalf("retried event: got %s, %d attempts, next %v; want pending, 2 kept, due now", retried.Status, retried.Attempts, retried.NextAttemptAt)
		}
		wantTime(t, "next_attempt_at of a retried event", *retried.NextAttemptAt, f.clock.Now())
		_, err = f.service().RetryInbox(ctx, asAdmin("root"), e.ID)
		wantCode(t, err, approval.ECONFLICT)
		wantClaimed(t, "claim after the retry", mustClaimInbox(t, f.store, 10), 3, e)
	})

	// Inbox processors on every replica claim at once, some claiming with a lease and some
	// taking events in the transaction that applies them: each event goes to exactly one.
	s.run(t, "ClaimRace", func(t *testing.T, f *fixture) {
		const events, claimers, batch = 40, 8, 3
		for i := range events {
			mustRecordNew(t, f.store, newInboxEvent(f.clock.Now(), "chat", fmt.Sprintf("evt_%d", i), "ping", `{}`))
		}
		claimed := make([][]*approval.InboxEvent, claimers)
		errs := make([]error, claimers)
		race(claimers, func(i int) {
			// Like the processor: claim batches until a pass finds nothing. Every other pass
			// claims at least one event, so no claimer needs more passes than there are events;
			// the bound keeps a store that hands out events again from looping for ever.
			for range events + 1 {
				var got []*approval.InboxEvent
				var err error
				if i%2 == 0 {
					got, err = f.service().ClaimInbox(t.Context(), workLease, batch)
				} else {
					got, err = f.service().ClaimApplyInbox(t.Context(), batch, func(*approval.InboxEvent) approval.InboxAction {
						return approval.InboxAction{Kind: approval.ActionIgnore, Reason: "race"}
					})
				}
				if err != nil {
					errs[i] = err
					return
				}
				if len(got) == 0 {
					return
				}
				claimed[i] = append(claimed[i], got...)
			}
		})
		seen := make(map[string]int)
		for i := range claimers {
			if errs[i] != nil {
				t.Fatalf("claimer %d: %v", i, errs[i])
			}
			for _, e := range claimed[i] {
				seen[e.ID]++
				if e.Attempts != 1 {
					t.Fatalf("claimer %d got %s at attempt %d, want 1", i, e.EventID, e.Attempts)
				}
			}
		}
		if len(seen) != events {
			t.Fatalf("claimers together: got %d distinct events, want %d", len(seen), events)
		}
		for id, n := range seen {
			if n != 1 {
				t.Fatalf("event %s: claimed %d times, want once", id, n)
			}
		}
		// What was taken to be applied is applied; what was claimed waits for its claimer.
		for i := range claimers {
			want := map[bool]approval.InboxStatus{true: approval.InboxPending, false: approval.InboxIgnored}[i%2 == 0]
			for _, e := range claimed[i] {
				if got := mustInboxEvent(t, f.store, e.ID); got.Status != want || got.Attempts != 1 {
					t.Fatalf("claimer %d's %s: got %s at attempt %d, want %s at 1", i, e.EventID, got.Status, got.Attempts, want)
				}
			}
		}
	})

	// Ids are kept as long as providers redeliver, bodies only as long as operators need them,
	// and nothing still to do is ever purged.
	s.run(t, "Purge", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		const day = 24 * time.Hour
		const keepIDs, keepBodies = 30 * day, 7 * day
		a := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		record := func(eventID string) *approval.InboxEvent {
			t.Helper()
			return mustRecordNew(t, f.store, newInboxEvent(f.clock.Now(), "chat", eventID, approval.TypeApprovalDecision, `{"event": "`+eventID+`"}`))
		}
		// Each event is recorded and driven to its status before the next is recorded, so each
		// claim finds only the event it is meant for.
		oldProcessed := record("old-processed")
		mustApplyInbox(t, f.store, mustClaimOneInbox(t, f.store, "old-processed"), decideAction(a.ID, "alice", approval.VerdictApprove))
		oldIgnored := record("old-ignored")
		mustApplyInbox(t, f.store, mustClaimOneInbox(t, f.store, "old-ignored"), approval.InboxAction{Kind: approval.ActionIgnore, Reason: "test"})
		// The vote approved a, whose action has no target: its caller reports the outcome,
		// and an older report through the inbox is stale.
		mustReport(t, f.service(), approval.ExecutionReport{ApprovalID: a.ID, Status: approval.ExecutionSucceeded, Version: 2, Actor: "ci-bot", Cause: approval.HTTPCause("report")}, true)
		oldStale := record("old-stale")
		stale := mustApplyInbox(t, f.store, mustClaimOneInbox(t, f.store, "old-stale"), approval.InboxAction{
			Kind:   approval.ActionExecutionResult,
			Report: &approval.ExecutionReport{ApprovalID: a.ID, Status: approval.ExecutionFailed, Version: 1, Actor: "chat"},
		})
		wantInboxStatus(t, stale, approval.InboxStale)
		// Nobody has handled a failed event: it stays, body and all, for an operator.
		oldFailed := record("old-failed")
		if err := f.service().FailInbox(ctx, mustClaimOneInbox(t, f.store, "old-failed"), "bad data", nil); err != nil {
			t.Fatalf("fail inbox: %v", err)
		}
		// Still to do, though not due for two months.
		oldPending := record("old-pending")
		later := f.clock.Now().Add(60 * day)
		if err := f.service().FailInbox(ctx, mustClaimOneInbox(t, f.store, "old-pending"), "try later", &later); err != nil {
			t.Fatalf("fail inbox with a retry: %v", err)
		}

		f.clock.Advance(20 * day)
		mid := record("mid")
		mustApplyInbox(t, f.store, mustClaimOneInbox(t, f.store, "mid"), approval.InboxAction{Kind: approval.ActionIgnore, Reason: "test"})
		f.clock.Advance(10*day + time.Hour)
		recent := record("recent")
		mustApplyInbox(t, f.store, mustClaimOneInbox(t, f.store, "recent"), approval.InboxAction{Kind: approval.ActionIgnore, Reason: "test"})

		// The limit holds: three old events are handled, at most two go per call.
		if _, err := f.service().PurgeInbox(ctx, keepIDs, keepBodies, 2); err != nil {
			t.Fatalf("purge inbox: %v", err)
		}
		left := 0
		for _, e := range []*approval.InboxEvent{oldProcessed, oldIgnored, oldStale} {
			if _, err := f.store.InboxEvent(ctx, e.ID); err == nil {
				left++
			}
		}
		if left == 0 {
			t.Fatalf("purge with limit 2: all 3 old handled events are gone, want at most 2 deleted")
		}
		for i := 0; ; i++ {
			n, err := f.service().PurgeInbox(ctx, keepIDs, keepBodies, 2)
			if err != nil {
				t.Fatalf("purge inbox: %v", err)
			} else if n == 0 {
				break
			} else if i == 10 {
				t.Fatalf("purge inbox: still purging after %d calls", i)
			}
		}

		for _, e := range []*approval.InboxEvent{oldProcessed, oldIgnored, oldStale} {
			_, err := f.store.InboxEvent(ctx, e.ID)
			wantCode(t, err, approval.ENOTFOUND)
		}
		got := mustInboxEvent(t, f.store, oldPending.ID)
		if got.Status != approval.InboxPending || !bytes.Equal(got.Body, oldPending.Body) {
			t.Fatalf("old pending event after purge: got %s with body %q, want pending with %q", got.Status, got.Body, oldPending.Body)
		}
		got = mustInboxEvent(t, f.store, oldFailed.ID)
		if got.Status != approval.InboxFailed || !bytes.Equal(got.Body, oldFailed.Body) {
			t.Fatalf("old failed event after purge: got %s with body %q, want failed with %q (an operator has yet to retry it)", got.Status, got.Body, oldFailed.Body)
		}
		// Once retried and handled it is purged like any other.
		if _, err := f.service().RetryInbox(ctx, asAdmin("root"), oldFailed.ID); err != nil {
			t.Fatalf("retry the failed event: %v", err)
		}
		mustApplyInbox(t, f.store, mustClaimOneInbox(t, f.store, "old-failed"), approval.InboxAction{Kind: approval.ActionIgnore, Reason: "test"})
		if n, err := f.service().PurgeInbox(ctx, keepIDs, keepBodies, 2); err != nil || n != 1 {
			t.Fatalf("purge after the retry: got %d, %v; want the retried event deleted", n, err)
		}
		_, err := f.store.InboxEvent(ctx, oldFailed.ID)
		wantCode(t, err, approval.ENOTFOUND)
		got = mustInboxEvent(t, f.store, mid.ID)
		if got.Status != approval.InboxIgnored || len(got.Body) != 0 {
			t.Fatalf("event older than keepBodies after purge: got %s with body %q, want ignored with no body", got.Status, got.Body)
		}
		if got = mustInboxEvent(t, f.store, recent.ID); !bytes.Equal(got.Body, recent.Body) {
			t.Fatalf("recent event after purge: got body %q, want %q", got.Body, recent.Body)
		}

		// A purged id is forgotten, so a (very late) redelivery is a new event; an id whose body
		// was cleared is still known.
		if mustRecord(t, f.store, newInboxEvent(f.clock.Now(), "chat", "old-processed", approval.TypeApprovalDecision, `{}`)) {
			t.Fatalf("redelivery of a purged id: got duplicate, want a new event")
		}
		if !mustRecord(t, f.store, newInboxEvent(f.clock.Now(), "chat", "mid", approval.TypeApprovalDecision, `{}`)) {
			t.Fatalf("redelivery of an id whose body was cleared: got a new event, want duplicate")
		}
	})

	s.run(t, "ListAndCount", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		record := func(source, eventID string) *approval.InboxEvent {
			t.Helper()
			return mustRecordNew(t, f.store, newInboxEvent(f.clock.Now(), source, eventID, "ping", `{"body": true}`))
		}
		// Received a second apart, except the last three, received together: pages must
		// still visit every event once. The finished ones come first, so that each claim finds
		// only the event it is meant for.
		ignored := record("github", "i1")
		mustApplyInbox(t, f.store, mustClaimOneInbox(t, f.store, "i1"), approval.InboxAction{Kind: approval.ActionIgnore, Reason: "test"})
		f.clock.Advance(time.Second)
		failed := record("chat", "f1")
		if err := f.service().FailInbox(ctx, mustClaimOneInbox(t, f.store, "f1"), "bad data", nil); err != nil {
			t.Fatalf("fail inbox: %v", err)
		}
		f.clock.Advance(time.Second)
		a := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		processed := record("chat", "d1")
		mustApplyInbox(t, f.store, mustClaimOneInbox(t, f.store, "d1"), decideAction(a.ID, "alice", approval.VerdictApprove))
		f.clock.Advance(time.Second)
		pending1 := record("chat", "p1")
		f.clock.Advance(time.Second)
		pending2, pending3, pending4 := record("github", "p2"), record("chat", "p3"), record("chat", "p4")
		all := inboxEvents(pending2, pending3, pending4, pending1, processed, failed, ignored)

		for _, tc := range []struct {
			name   string
			filter approval.InboxFilter
			want   []*approval.InboxEvent
		}{
			{"all", approval.InboxFilter{}, all},
			{"pending", approval.InboxFilter{Status: approval.InboxPending}, inboxEvents(pending2, pending3, pending4, pending1)},
			{"failed", approval.InboxFilter{Status: approval.InboxFailed}, inboxEvents(failed)},
			{"stale", approval.InboxFilter{Status: approval.InboxStale}, nil},
			{"source github", approval.InboxFilter{Source: "github"}, inboxEvents(pending2, ignored)},
			{"source chat, pending", approval.InboxFilter{Source: "chat", Status: approval.InboxPending}, inboxEvents(pending3, pending4, pending1)},
			{"unknown source", approval.InboxFilter{Source: "nobody"}, nil},
		} {
			wantInboxList(t, f.store, tc.filter, tc.want...)
			for _, limit := range []int{1, 2} {
				filter := tc.filter
				filter.Limit = limit
				wantNewestFirst(t, fmt.Sprintf("%s, %d per page", tc.name, limit), walkInboxPages(t, f.store, filter, len(tc.want)), tc.want)
			}
		}

		for _, cursor := range []string{"not a cursor!", "Zm9v"} {
			_, _, err := f.store.InboxEvents(ctx, approval.InboxFilter{Cursor: cursor})
			wantCode(t, err, approval.EINVALID)
		}

		counts, err := f.store.InboxCounts(ctx)
		if err != nil {
			t.Fatalf("inbox counts: %v", err)
		}
		want := map[approval.InboxStatus]int{approval.InboxPending: 4, approval.InboxProcessed: 1, approval.InboxIgnored: 1, approval.InboxFailed: 1}
		for _, st := range []approval.InboxStatus{approval.InboxPending, approval.InboxProcessed, approval.InboxIgnored, approval.InboxStale, approval.InboxFailed} {
			if counts[st] != want[st] {
				t.Fatalf("inbox counts: got %v, want %v", counts, want)
			}
		}
		wantBacklog(t, f.store)
	})
}

// newInboxEvent returns a delivery as the webhook intake stores it: verified, received at now,
// with a new id and the headers that matter.
func newInboxEvent(now time.Time, source, eventID, typ, body string) *approval.InboxEvent {
	return &approval.InboxEvent{
		ID:      approval.NewID("inb"),
		Source:  source,
		EventID: eventID,
		Type:    typ,
		Headers: map[string]string{
			"webhook-id":        eventID,
			"webhook-timestamp": fmt.Sprint(now.Unix()),
			"webhook-signature": "v1,c2lnbmF0dXJl",
		},
		Body:       []byte(body),
		ReceivedAt: now,
	}
}

// newGitHubEvent returns a github-scheme delivery as the intake stores it: keyed on its
// delivery id and on the SHA-256 of its body.
func newGitHubEvent(now time.Time, source, delivery, body string) *approval.InboxEvent {
	sum := sha256.Sum256([]byte(body))
	return &approval.InboxEvent{
		ID:         approval.NewID("inb"),
		Source:     source,
		EventID:    delivery,
		Type:       "pull_request",
		Headers:    map[string]string{"X-GitHub-Delivery": delivery, "X-GitHub-Event": "pull_request"},
		Body:       []byte(body),
		BodyHash:   sum[:],
		ReceivedAt: now,
	}
}

// decideAction is the action a handler computes from an approval.decision event. It leaves
// the cause to the store, which knows the event.
func decideAction(approvalID, approver string, verdict approval.Verdict) approval.InboxAction {
	return approval.InboxAction{Kind: approval.ActionDecide, Decide: &approval.DecideRequest{
		ApprovalID: approvalID, Approver: approver, Verdict: verdict,
	}}
}

func mustRecord(tb testing.TB, s approval.Store, e *approval.InboxEvent) (duplicate bool) {
	tb.Helper()
	dup, err := s.RecordInbox(tb.Context(), e)
	if err != nil {
		tb.Fatalf("record inbox %s/%s: %v", e.Source, e.EventID, err)
	}
	return dup
}

// mustRecordNew records e, which must not be a duplicate, and returns it.
func mustRecordNew(tb testing.TB, s approval.Store, e *approval.InboxEvent) *approval.InboxEvent {
	tb.Helper()
	if mustRecord(tb, s, e) {
		tb.Fatalf("record inbox %s/%s: got duplicate, want a new event", e.Source, e.EventID)
	}
	return e
}

func mustInboxEvent(tb testing.TB, s approval.Store, id string) *approval.InboxEvent {
	tb.Helper()
	e, err := s.InboxEvent(tb.Context(), id)
	if err != nil {
		tb.Fatalf("inbox event %s: %v", id, err)
	}
	return e
}

func mustClaimInbox(tb testing.TB, s approval.Store, limit int) []*approval.InboxEvent {
	tb.Helper()
	evs, err := rules(s).ClaimInbox(tb.Context(), workLease, limit)
	if err != nil {
		tb.Fatalf("claim inbox: %v", err)
	}
	return evs
}

// mustClaimOneInbox claims, expecting exactly the pending event with the given provider id
// to be due.
func mustClaimOneInbox(tb testing.TB, s approval.Store, eventID string) *approval.InboxEvent {
	tb.Helper()
	evs := mustClaimInbox(tb, s, 10)
	if len(evs) != 1 || evs[0].EventID != eventID {
		tb.Fatalf("claim inbox: got %d events %v, want %s alone", len(evs), eventIDs(evs), eventID)
	}
	return evs[0]
}

func mustApplyInbox(tb testing.TB, s approval.Store, e *approval.InboxEvent, a approval.InboxAction) *approval.InboxEvent {
	tb.Helper()
	got, err := rules(s).ApplyInbox(tb.Context(), e, a)
	if err != nil {
		tb.Fatalf("apply inbox %s: %v", e.EventID, err)
	}
	return got
}

// wantClaimed checks a claim: the events, oldest first, each at the given attempt with its
// body and a lease token.
func wantClaimed(tb testing.TB, what string, got []*approval.InboxEvent, attempts int, want ...*approval.InboxEvent) {
	tb.Helper()
	if len(got) != len(want) {
		tb.Fatalf("%s: got events %v, want %v", what, eventIDs(got), eventIDs(want))
	}
	for i, e := range got {
		if e.ID != want[i].ID {
			tb.Fatalf("%s: got events %v, want %v", what, eventIDs(got), eventIDs(want))
		}
		if e.Attempts != attempts || e.LeaseToken == "" || !bytes.Equal(e.Body, want[i].Body) {
			tb.Fatalf("%s: got %s at attempt %d, lease token %q, body %q; want attempt %d, a token, body %q",
				what, e.EventID, e.Attempts, e.LeaseToken, e.Body, attempts, want[i].Body)
		}
	}
}

func wantInboxStatus(tb testing.TB, e *approval.InboxEvent, status approval.InboxStatus) {
	tb.Helper()
	if e.Status != status {
		tb.Fatalf("event %s: got status %s (outcome %q, error %q), want %s", e.EventID, e.Status, e.Outcome, e.LastError, status)
	}
}

func wantNoConflict(tb testing.TB, e *approval.InboxEvent) {
	tb.Helper()
	if e.Conflicts != 0 || e.LastConflictAt != nil {
		tb.Fatalf("event %s: got conflicts %d, last at %v; want none", e.EventID, e.Conflicts, e.LastConflictAt)
	}
}

// wantInboxList checks one page of InboxEvents holding exactly want, newest first, without
// bodies.
func wantInboxList(tb testing.TB, s approval.Store, f approval.InboxFilter, want ...*approval.InboxEvent) {
	tb.Helper()
	got, next, err := s.InboxEvents(tb.Context(), f)
	if err != nil {
		tb.Fatalf("inbox events %+v: %v", f, err)
	}
	if next != "" {
		tb.Fatalf("inbox events %+v: got next cursor %q on the only page, want none", f, next)
	}
	wantNewestFirst(tb, fmt.Sprintf("inbox events %+v", f), got, want)
	for _, e := range got {
		if e.Body != nil {
			tb.Fatalf("listed event %s: got body %q, want none (lists leave bodies out)", e.EventID, e.Body)
		}
	}
}

// wantNewestFirst checks that got holds the events of want, newest received first. Events
// received at the same time may come in any order among themselves, each once.
func wantNewestFirst(tb testing.TB, what string, got, want []*approval.InboxEvent) {
	tb.Helper()
	want = slices.Clone(want)
	slices.SortStableFunc(want, func(a, b *approval.InboxEvent) int { return b.ReceivedAt.Compare(a.ReceivedAt) })
	ids := func(evs []*approval.InboxEvent) []string { return slices.Sorted(slices.Values(eventIDs(evs))) }
	if !slices.Equal(ids(got), ids(want)) {
		tb.Fatalf("%s: got events %v, want %v", what, eventIDs(got), eventIDs(want))
	}
	for i := range got {
		if !got[i].ReceivedAt.Equal(want[i].ReceivedAt) {
			tb.Fatalf("%s: got events %v, want newest first: %v", what, eventIDs(got), eventIDs(want))
		}
	}
}

// walkInboxPages follows cursors from the first page to the last, as walkPages does for
// approvals.
func walkInboxPages(tb testing.TB, s approval.Store, f approval.InboxFilter, want int) []*approval.InboxEvent {
	tb.Helper()
	var all []*approval.InboxEvent
	for {
		page, next, err := s.InboxEvents(tb.Context(), f)
		if err != nil {
			tb.Fatalf("inbox events %+v: %v", f, err)
		}
		all = append(all, page...)
		if next == "" {
			return all
		}
		if len(page) != f.Limit {
			tb.Fatalf("page after %q: got %d events and a cursor, want a full page of %d", f.Cursor, len(page), f.Limit)
		}
		if len(all) >= want {
			tb.Fatalf("pages of %d: got %d events and still a cursor, want %d in all and no cursor after the last", f.Limit, len(all), want)
		}
		f.Cursor = next
	}
}

func inboxEvents(evs ...*approval.InboxEvent) []*approval.InboxEvent { return evs }

// eventIDs names events by their provider ids, which the cases keep unique, for messages.
func eventIDs(evs []*approval.InboxEvent) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Source + "/" + e.EventID
	}
	return out
}

// withComment returns the decide action a with the comment.
func withComment(a approval.InboxAction, comment string) approval.InboxAction {
	d := *a.Decide
	d.Comment = comment
	a.Decide = &d
	return a
}

// recordRace records every event at once, one goroutine each behind a barrier, and returns
// the index of the one racer that stored its event: every other must get duplicate.
func recordRace(t *testing.T, f *fixture, events []*approval.InboxEvent, what string) int {
	t.Helper()
	racers := len(events)
	dups := make([]bool, racers)
	errs := make([]error, racers)
	race(racers, func(i int) {
		dups[i], errs[i] = f.store.RecordInbox(t.Context(), events[i])
	})
	winner := -1
	for i := range racers {
		if errs[i] != nil {
			t.Fatalf("racer %d: record inbox: %v", i, errs[i])
		}
		if !dups[i] {
			if winner >= 0 {
				t.Fatalf("racers %d and %d both stored %s", winner, i, what)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatalf("no racer stored %s: all %d got duplicate", what, racers)
	}
	return winner
}
