package storetest

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/approvald/approval"
)

// SuiteRouting is the routing of every case's store: alice on e-mail and chat, bob and the
// requester ci-bot on e-mail, olga the operator on e-mail, and ci-bot's decisions called back.
var SuiteRouting = approval.Routing{
	Channels: map[string][]string{
		"alice":  {approval.ChannelEmail, approval.ChannelChat},
		"bob":    {approval.ChannelEmail},
		"ci-bot": {approval.ChannelEmail},
		"olga":   {approval.ChannelEmail},
	},
	Operators: []string{"olga"},
	Callbacks: map[string]string{"ci-bot": "https://ci.example.com/approvald"},
	Emails: map[string]string{
		"alice": "alice@example.com", "bob": "bob@example.com", "ci-bot": "ci@example.com",
		"olga": "olga@example.com",
	},
}

func exerciseOutbox(t *testing.T, s suite) {
	s.run(t, "CreateQueuesOnePerApproverAndChannel", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		svc := f.service()
		cmd := createCommand(t, "deploy-1", `{"action":"deploy","title":"Deploy","approvers":["alice","bob","carol"]}`)
		var id string
		for i := range 10 { // a client retrying its create
			res, err := svc.Create(ctx, requester("ci-bot"), cmd)
			if err != nil {
				t.Fatalf("create %d: %v", i, err)
			}
			if i == 0 {
				id = res.Approval.ID
			}
		}
		msgs := mustOutbox(t, f.store, approval.OutboxFilter{})
		got := recipients(msgs)
		want := []string{"alice/chat/approval.requested", "alice/email/approval.requested", "bob/email/approval.requested"}
		if !slices.Equal(got, want) {
			t.Fatalf("messages: got %v, want %v (carol has no channel)", got, want)
		}
		for _, m := range msgs {
			if m.Kind != approval.OutboxNotification || m.ApprovalID != id || m.Status != approval.OutboxPending ||
				m.NextAttemptAt == nil || !m.NextAttemptAt.Equal(f.clock.Now()) || m.Attempts != 0 {
				t.Fatalf("message %+v: want a pending notification of %s due now", m, id)
			}
			if !strings.Contains(string(m.Payload), `"title":"Deploy"`) {
				t.Fatalf("payload %s: want the title", m.Payload)
			}
		}
	})

	s.run(t, "DecisionQueuesOutcome", func(t *testing.T, f *fixture) {
		a := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		mustDecide(t, f.store, a.ID, "alice", approval.VerdictReject)
		msgs := mustOutbox(t, f.store, approval.OutboxFilter{})
		// alice voted and knows; bob did not; ci-bot asked, and has a callback.
		want := []string{"bob/email/approval.rejected", "ci-bot/callback/approval.rejected", "ci-bot/email/approval.rejected"}
		if got := recipients(msgs); !slices.Equal(got, want) {
			t.Fatalf("messages: got %v, want %v", got, want)
		}
		cb := mustOutbox(t, f.store, approval.OutboxFilter{Kind: approval.OutboxCallback})
		if len(cb) != 1 || !strings.Contains(string(cb[0].Payload), `"url":"https://ci.example.com/approvald"`) ||
			!strings.Contains(string(cb[0].Payload), `"event_id":"evt_`) {
			t.Fatalf("callbacks: got %+v, want one to ci-bot's URL with an event id", cb)
		}
	})

	s.run(t, "ExpiryAndCancelQueueOutcome", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		svc := f.service()
		expiring := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		cancelled := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		if _, err := svc.Cancel(ctx, asAdmin("ci-bot"), cancelled.ID, approval.HTTPCause("cancel")); err != nil {
			t.Fatalf("cancel: %v", err)
		}
		f.clock.Advance(25 * time.Hour)
		if n, err := svc.ExpireDue(ctx, 10); err != nil || n != 1 {
			t.Fatalf("expire: got %d, %v; want 1", n, err)
		}
		for _, c := range []struct {
			id, event string
		}{{expiring.ID, approval.EventExpired}, {cancelled.ID, approval.EventCancelled}} {
			var got []string
			for _, m := range mustOutbox(t, f.store, approval.OutboxFilter{}) {
				if m.ApprovalID == c.id {
					got = append(got, m.Recipient+"/"+m.Channel+"/"+m.Event)
				}
			}
			sort.Strings(got)
			want := []string{"alice/chat/" + c.event, "alice/email/" + c.event, "bob/email/" + c.event,
				"ci-bot/callback/" + c.event, "ci-bot/email/" + c.event}
			if !slices.Equal(got, want) {
				t.Fatalf("messages of %s: got %v, want %v", c.id, got, want)
			}
		}
	})

	s.run(t, "NeedsReviewTellsOperators", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		svc := f.service()
		a := PendingApproval(t, f.clock.Now())
		a.Action = TargetedAction
		MustCreate(t, f.store, a)
		mustDecide(t, f.store, a.ID, "alice", approval.VerdictApprove)
		claims, err := svc.ClaimExecutions(ctx, time.Minute, 1)
		if err != nil || len(claims) != 1 {
			t.Fatalf("claim: got %d, %v", len(claims), err)
		}
		if _, err := svc.FinishAttempt(ctx, claims[0].Record.ID, claims[0].Attempt, approval.AttemptOutcome{
			Status: approval.ExecutionNeedsReview, Reason: "timeout", Error: "the call timed out",
		}); err != nil {
			t.Fatalf("finish: %v", err)
		}
		var got []string
		for _, m := range mustOutbox(t, f.store, approval.OutboxFilter{}) {
			if m.Event == approval.EventNeedsReview {
				got = append(got, m.Recipient+"/"+m.Channel)
				if !strings.Contains(string(m.Payload), "the call timed out") {
					t.Fatalf("payload %s: want the reason", m.Payload)
				}
			}
		}
		if !slices.Equal(got, []string{"olga/email"}) {
			t.Fatalf("needs_review messages: got %v, want olga/email", got)
		}
	})

	s.run(t, "ClaimFenceAndAttempts", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		svc := f.service()
		mustInsertOutbox(t, f, "only")
		first, err := svc.ClaimOutbox(ctx, time.Minute, 10)
		if err != nil || len(first) != 1 || first[0].Attempts != 1 || first[0].Status != approval.OutboxSending {
			t.Fatalf("claim: got %+v, %v; want one message at attempt 1", first, err)
		}
		if again, err := svc.ClaimOutbox(ctx, time.Minute, 10); err != nil || len(again) != 0 {
			t.Fatalf("claim while leased: got %d, %v; want none", len(again), err)
		}
		// The first worker stalls past its lease; a second takes over with attempt 2.
		f.clock.Advance(time.Minute)
		second, err := svc.ClaimOutbox(ctx, time.Minute, 10)
		if err != nil || len(second) != 1 || second[0].Attempts != 2 {
			t.Fatalf("claim after the lease: got %+v, %v; want attempt 2", second, err)
		}
		_, err = svc.FinishOutbox(ctx, first[0].ID, 1, approval.OutboxOutcome{Status: approval.OutboxSent})
		wantCode(t, err, approval.ECONFLICT)
		retryAt := f.clock.Now().Add(time.Second)
		m, err := svc.FinishOutbox(ctx, first[0].ID, 2, approval.OutboxOutcome{Status: approval.OutboxPending, Error: "421 try later", RetryAt: &retryAt})
		if err != nil || m.Status != approval.OutboxPending || !m.NextAttemptAt.Equal(retryAt) {
			t.Fatalf("retry: got %+v, %v", m, err)
		}
		if early, _ := svc.ClaimOutbox(ctx, time.Minute, 10); len(early) != 0 {
			t.Fatalf("claim before the retry is due: got %d, want none", len(early))
		}
		f.clock.Advance(time.Second)
		third, err := svc.ClaimOutbox(ctx, time.Minute, 10)
		if err != nil || len(third) != 1 || third[0].Attempts != 3 {
			t.Fatalf("claim of the retry: got %+v, %v", third, err)
		}
		if _, err := svc.FinishOutbox(ctx, m.ID, 3, approval.OutboxOutcome{Status: approval.OutboxSent}); err != nil {
			t.Fatalf("finish: %v", err)
		}
		got, attempts, err := f.store.OutboxMessage(ctx, m.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != approval.OutboxSent || got.SentAt == nil || !got.SentAt.Equal(f.clock.Now()) || got.LastError != "" || got.LeaseExpiresAt != nil {
			t.Fatalf("message: got %+v, want sent now", got)
		}
		var log []string
		for _, a := range attempts {
			log = append(log, fmt.Sprintf("%d:%s:%s:%t", a.Attempt, a.Outcome, a.Error, a.FinishedAt != nil))
		}
		want := []string{"1:::false", "2:retry:421 try later:true", "3:sent::true"}
		if !slices.Equal(log, want) {
			t.Fatalf("attempts: got %v, want %v", log, want)
		}
		_, _, err = f.store.OutboxMessage(ctx, "ntf_none")
		wantCode(t, err, approval.ENOTFOUND)
	})

	s.run(t, "FailedAndRetried", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		svc := f.service()
		mustInsertOutbox(t, f, "doomed")
		c, err := svc.ClaimOutbox(ctx, time.Minute, 1)
		if err != nil || len(c) != 1 {
			t.Fatalf("claim: %v", err)
		}
		_, err = svc.RetryOutbox(ctx, asAdmin("root"), c[0].ID)
		wantCode(t, err, approval.ECONFLICT)
		if _, err := svc.FinishOutbox(ctx, c[0].ID, 1, approval.OutboxOutcome{Status: approval.OutboxFailed, Error: "550 no such user"}); err != nil {
			t.Fatal(err)
		}
		failed := mustOutbox(t, f.store, approval.OutboxFilter{Status: approval.OutboxFailed})
		if len(failed) != 1 || failed[0].LastError != "550 no such user" {
			t.Fatalf("failed: got %+v", failed)
		}
		if m, err := svc.RetryOutbox(ctx, asAdmin("root"), c[0].ID); err != nil || m.Status != approval.OutboxPending {
			t.Fatalf("retry: got %+v, %v", m, err)
		}
		if c, err := svc.ClaimOutbox(ctx, time.Minute, 1); err != nil || len(c) != 1 || c[0].Attempts != 2 {
			t.Fatalf("claim after retry: got %+v, %v; want attempt 2", c, err)
		}
	})

	s.run(t, "UniquePerNaturalKeyUnderConcurrency", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		const racers = 50
		errs := make([]error, racers)
		race(racers, func(i int) {
			tx, err := f.store.Begin(ctx)
			if err != nil {
				errs[i] = err
				return
			}
			defer tx.Rollback(ctx)
			now := tx.Now()
			for _, key := range []string{"k1", "k2"} {
				m := &approval.OutboxMessage{
					ID: approval.NewID("ntf"), NaturalKey: key, Kind: approval.OutboxNotification,
					Recipient: "alice", Channel: approval.ChannelEmail, Event: "test", Payload: []byte(`{}`),
					Status: approval.OutboxPending, NextAttemptAt: &now, CreatedAt: now, UpdatedAt: now,
				}
				if errs[i] = tx.OutboxInsert(ctx, m); errs[i] != nil {
					return
				}
			}
			errs[i] = tx.Commit(ctx)
		})
		for i, err := range errs {
			if err != nil {
				t.Fatalf("racer %d: %v", i, err)
			}
		}
		if got := mustOutbox(t, f.store, approval.OutboxFilter{}); len(got) != 2 {
			t.Fatalf("messages: got %d, want 2 (one per natural key)", len(got))
		}
	})

	s.run(t, "ClaimRace", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		svc := f.service()
		const messages, racers = 40, 16
		for i := range messages {
			mustInsertOutbox(t, f, fmt.Sprint(i))
		}
		claimed := make([][]*approval.OutboxMessage, racers)
		errs := make([]error, racers)
		race(racers, func(i int) { claimed[i], errs[i] = svc.ClaimOutbox(ctx, time.Minute, 5) })
		seen := map[string]bool{}
		for i := range racers {
			if errs[i] != nil {
				t.Fatalf("racer %d: %v", i, errs[i])
			}
			for _, m := range claimed[i] {
				if seen[m.ID] {
					t.Fatalf("message %s claimed twice", m.ID)
				}
				seen[m.ID] = true
			}
		}
		if len(seen) != messages {
			t.Fatalf("claimed %d messages, want all %d", len(seen), messages)
		}
	})

	s.run(t, "ListFilters", func(t *testing.T, f *fixture) {
		ctx := t.Context()
		a := MustCreate(t, f.store, PendingApproval(t, f.clock.Now()))
		mustDecide(t, f.store, a.ID, "alice", approval.VerdictApprove)
		if got := mustOutbox(t, f.store, approval.OutboxFilter{Kind: approval.OutboxCallback}); len(got) != 1 {
			t.Fatalf("callbacks: got %d, want 1", len(got))
		}
		page1, next, err := f.store.OutboxMessages(ctx, approval.OutboxFilter{Limit: 1})
		if err != nil || len(page1) != 1 || next == "" {
			t.Fatalf("page 1: got %d, %q, %v", len(page1), next, err)
		}
		page2, _, err := f.store.OutboxMessages(ctx, approval.OutboxFilter{Limit: 1, Cursor: next})
		if err != nil || len(page2) != 1 || page2[0].ID == page1[0].ID {
			t.Fatalf("page 2: got %+v, %v", page2, err)
		}
		_, _, err = f.store.OutboxMessages(ctx, approval.OutboxFilter{Status: "lost"})
		wantCode(t, err, approval.EINVALID)
		_, _, err = f.store.OutboxMessages(ctx, approval.OutboxFilter{Kind: "pigeon"})
		wantCode(t, err, approval.EINVALID)
	})
}

// mustInsertOutbox inserts a pending notification due now under the natural key key.
func mustInsertOutbox(tb testing.TB, f *fixture, key string) {
	tb.Helper()
	ctx := tb.Context()
	tx, err := f.store.Begin(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	defer tx.Rollback(ctx)
	now := tx.Now()
	if err := tx.OutboxInsert(ctx, &approval.OutboxMessage{
		ID: approval.NewID("ntf"), NaturalKey: key, Kind: approval.OutboxNotification, Recipient: "alice",
		Channel: approval.ChannelEmail, Event: "test", Payload: []byte(`{}`), Status: approval.OutboxPending,
		NextAttemptAt: &now, CreatedAt: now, UpdatedAt: now,
	}); err != nil {
		tb.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		tb.Fatal(err)
	}
}

// mustOutbox lists every message matching f.
func mustOutbox(tb testing.TB, s approval.Store, f approval.OutboxFilter) []*approval.OutboxMessage {
	tb.Helper()
	f.Limit = approval.MaxPageSize
	list, _, err := s.OutboxMessages(tb.Context(), f)
	if err != nil {
		tb.Fatalf("list outbox: %v", err)
	}
	return list
}

// recipients returns "recipient/channel/event" of each message, sorted.
func recipients(msgs []*approval.OutboxMessage) []string {
	got := make([]string, len(msgs))
	for i, m := range msgs {
		got[i] = m.Recipient + "/" + m.Channel + "/" + m.Event
	}
	sort.Strings(got)
	return got
}
