package httpapi

import (
	"net/http"

	"github.com/approvald/approval"
)

// outboxList is the answer to GET /v1/outbox.
type outboxList struct {
	Messages   []*approval.OutboxMessage `json:"messages"`
	NextCursor string                    `json:"next_cursor"`
}

// outboxDetail is the answer to GET /v1/outbox/{id}: the message and every attempt.
type outboxDetail struct {
	*approval.OutboxMessage
	AttemptLog []approval.OutboxAttempt `json:"attempt_log"`
	// SlackMessages are, for a Slack message, what it posted (its one post) or updated
	// (every message of the approval), with their ts.
	SlackMessages []approval.SlackMessage `json:"slack_messages,omitempty"`
}

// handleListOutbox is GET /v1/outbox?status=&kind=&limit=&cursor=, newest first. Operators
// and admins only.
func (s *Server) handleListOutbox(w http.ResponseWriter, r *http.Request) {
	p, err := s.authenticate(r.Context(), r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	q := r.URL.Query()
	f := approval.OutboxFilter{Status: approval.OutboxStatus(q.Get("status")), Kind: approval.OutboxKind(q.Get("kind")), Cursor: q.Get("cursor")}
	if f.Limit, err = parseLimit(q.Get("limit")); err != nil {
		s.writeError(w, r, err)
		return
	}
	list, next, err := s.svc.OutboxMessages(r.Context(), p, f)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	for i, m := range list {
		list[i] = m.Redacted()
	}
	s.writeJSON(w, r, http.StatusOK, outboxList{Messages: list, NextCursor: next})
}

// handleGetOutbox is GET /v1/outbox/{id}: one message with its attempts. Operators and
// admins only.
func (s *Server) handleGetOutbox(w http.ResponseWriter, r *http.Request) {
	p, err := s.authenticate(r.Context(), r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	m, attempts, err := s.svc.OutboxMessage(r.Context(), p, r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	d := outboxDetail{OutboxMessage: m.Redacted(), AttemptLog: attempts}
	if m.Channel == approval.ChannelSlack && m.Event != approval.EventSlackReply {
		if d.SlackMessages, err = s.slackMessages(r, m); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	s.writeJSON(w, r, http.StatusOK, d)
}

// slackMessages are the Slack messages m posted or, for an update, changed.
func (s *Server) slackMessages(r *http.Request, m *approval.OutboxMessage) ([]approval.SlackMessage, error) {
	if m.Recipient == approval.SlackEveryMessage {
		msgs, err := s.svc.SlackMessages(r.Context(), m.ApprovalID)
		for i := range msgs {
			msgs[i].PostedAt = msgs[i].PostedAt.UTC()
		}
		return msgs, err
	}
	sm, err := s.svc.SlackMessage(r.Context(), m.ID)
	if approval.ErrorCode(err) == approval.ENOTFOUND {
		return nil, nil // not posted yet
	}
	if err != nil {
		return nil, err
	}
	sm.PostedAt = sm.PostedAt.UTC()
	return []approval.SlackMessage{sm}, nil
}

// handleRetryOutbox is POST /v1/outbox/{id}/retry: a failed message is queued again
// (Service.RetryOutbox refuses a caller who may not operate).
func (s *Server) handleRetryOutbox(w http.ResponseWriter, r *http.Request) {
	p, err := s.authenticate(r.Context(), r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	m, err := s.svc.RetryOutbox(r.Context(), p, r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, m.Redacted())
}
