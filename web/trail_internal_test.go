package web

import (
	"testing"

	"github.com/approvald/approval"
)

// TestEventText: each cause is said in words: the pages, the API, an inbox source (Slack by
// its own spelling), the runner and the sweeper.
func TestEventText(t *testing.T) {
	t.Parallel()
	vote := func(verdict string, c approval.Cause) approval.Event {
		return approval.Event{Type: approval.EventVoted, Actor: "alice", Cause: c, Detail: map[string]any{"verdict": verdict}}
	}
	web := approval.HTTPCause("req_1")
	web.Source = causeSource
	for _, c := range []struct {
		e    approval.Event
		want string
	}{
		{vote("approve", web), "alice approved in the browser"},
		{vote("reject", approval.Cause{Kind: approval.CauseHTTP, RequestID: "req_2", Source: approval.SourceAPI}), "alice rejected from the API"},
		{vote("approve", approval.Cause{Kind: approval.CauseInbox, Source: "slack", EventID: "evt_1"}), "alice approved from Slack"},
		{vote("approve", approval.Cause{Kind: approval.CauseInbox, Source: "chatops", EventID: "evt_2"}), "alice approved from chatops"},
		{approval.Event{Type: approval.EventExpired, Actor: approval.ActorSystem, Cause: approval.SweeperCause()}, "The request expired before it was decided"},
		{approval.Event{Type: approval.EventExecutionAttempt, Actor: "system", Cause: approval.Cause{Kind: approval.CauseWorker, Attempt: 2}}, "The runner calls the target (attempt 2)"},
		{approval.Event{Type: approval.EventExecutionRetried, Actor: "olga", Cause: approval.Cause{Kind: approval.CauseOperator, Operator: "olga", Source: causeSource}}, "olga queued the execution again in the browser"},
		{approval.Event{Type: "custom.thing", Actor: "bob", Cause: approval.Cause{Kind: approval.CauseHTTP, RequestID: "req_3", Source: approval.SourceAPI}}, "bob custom.thing from the API"},
		// Recorded before the source of a cause was stored: who and what, no door.
		{vote("approve", approval.HTTPCause("req_4")), "alice approved"},
		{vote("reject", approval.Cause{Kind: approval.CauseInbox, EventID: "evt_3"}), "alice rejected"},
		{vote("approve", approval.Cause{}), "alice approved"},
		{approval.Event{Type: approval.EventCancelled, Actor: "ci-bot", Cause: approval.HTTPCause("req_5")}, "ci-bot cancelled the request"},
		{approval.Event{Type: approval.EventExecutionRetried, Actor: "olga", Cause: approval.Cause{Kind: approval.CauseOperator, Operator: "olga"}}, "olga queued the execution again"},
	} {
		if got := eventText(c.e); got != c.want {
			t.Errorf("eventText(%s, %+v) = %q, want %q", c.e.Type, c.e.Cause, got, c.want)
		}
	}
}
