package web

import (
	"fmt"
	"strings"

	"github.com/approvald/approval"
)

// trailItem is one event of an approval's audit trail as its page shows it: a sentence that
// says who did what and where ("alice approved in the browser"), the comment of a vote, and,
// behind a toggle, the cause's ids and the event's other details.
type trailItem struct {
	E       approval.Event
	Text    string
	Comment string
	Cause   string // the cause's ids in words: "request req_...", "webhook delivery ... from ..."
	Detail  []pair
}

// trailOf writes the events of an audit trail in words, oldest first.
func trailOf(events []approval.Event) []trailItem {
	out := make([]trailItem, len(events))
	for i, e := range events {
		it := trailItem{E: e, Text: eventText(e), Cause: causeText(e.Cause)}
		for _, p := range detailPairs(e.Detail) {
			switch p.Key {
			case "comment":
				it.Comment = p.Value
			case "verdict":
			case "counted_toward":
				if c, ok := e.Detail["counted_toward"].(map[string]any); ok {
					p.Key, p.Value = "counted toward", fmt.Sprintf("stage %v, %v", c["stage"], c["rule"])
				}
				it.Detail = append(it.Detail, p)
			default:
				it.Detail = append(it.Detail, p)
			}
		}
		out[i] = it
	}
	return out
}

// eventText says what an event was: the actor, what they did, and where (eventVia).
func eventText(e approval.Event) string {
	actor := e.Actor
	via := eventVia(e.Cause)
	say := func(what string) string { return strings.TrimSpace(actor + " " + what + " " + via) }
	switch e.Type {
	case approval.EventCreated:
		return say("asked for approval")
	case approval.EventVoted:
		switch approval.Verdict(fmt.Sprint(e.Detail["verdict"])) {
		case approval.VerdictApprove:
			return say("approved")
		case approval.VerdictReject:
			return say("rejected")
		}
		return say("voted")
	case approval.EventApproved:
		return "The request is approved: the approvals it needs are in"
	case approval.EventRejected:
		return "The request is rejected"
	case approval.EventExpired:
		return "The request expired before it was decided"
	case approval.EventCancelled:
		return say("cancelled the request")
	case approval.EventExecutionQueued:
		return "The execution is queued"
	case approval.EventExecutionAttempt:
		return "The runner calls the target" + attemptOf(e.Cause)
	case approval.EventExecutionRetry:
		return "The call failed" + attemptOf(e.Cause) + "; it is tried again later"
	case approval.EventExecutionSucceeded:
		return "The execution succeeded" + attemptOf(e.Cause)
	case approval.EventExecutionFailed:
		return "The execution failed" + attemptOf(e.Cause)
	case approval.EventExecutionNeedsReview:
		return "The execution needs review: its outcome is not known" + attemptOf(e.Cause)
	case approval.EventExecutionReleased:
		return "The runner gave the execution back as it stopped" + attemptOf(e.Cause)
	case approval.EventExecutionRetried:
		return say("queued the execution again")
	case approval.EventExecutionResolved:
		return say("recorded the execution's outcome")
	case approval.EventExecutionCancelled:
		return say("cancelled the execution")
	case approval.EventExecutionReported:
		return say("reported the execution's outcome")
	case approval.EventExecutionReportStale:
		return say("reported an older outcome, not applied")
	case approval.EventExecutionAccepted:
		return "The target accepted the call and reports its outcome later" + attemptOf(e.Cause)
	}
	return say(e.Type)
}

// eventVia says where a change was made, from its cause: "in the browser" (a request of the
// pages), "from the API", "from Slack" (an inbox delivery of the source slack), "by the
// sweeper"; nothing when the cause does not say (one recorded before its source was stored),
// so that the event reads "alice approved".
func eventVia(c approval.Cause) string {
	switch c.Kind {
	case approval.CauseHTTP, approval.CauseOperator:
		switch c.Source {
		case approval.SourceWeb:
			return "in the browser"
		case approval.SourceAPI:
			return "from the API"
		}
	case approval.CauseInbox:
		if c.Source != "" {
			return "from " + sourceName(c.Source)
		}
	case approval.CauseSweeper:
		return "by the sweeper"
	}
	return ""
}

// sourceName is an inbox source's name as people write it: the services approvald is often
// wired to by their own spelling, any other name as configured.
func sourceName(name string) string {
	if n, ok := knownSources[strings.ToLower(name)]; ok {
		return n
	}
	return name
}

var knownSources = map[string]string{
	"slack": "Slack", "github": "GitHub", "gitlab": "GitLab", "stripe": "Stripe",
	"teams": "Microsoft Teams", "pagerduty": "PagerDuty", "jira": "Jira", "chat": "chat",
}

// attemptOf names a worker's attempt: " (attempt 2)".
func attemptOf(c approval.Cause) string {
	if c.Kind == approval.CauseWorker && c.Attempt > 0 {
		return fmt.Sprintf(" (attempt %d)", c.Attempt)
	}
	return ""
}
