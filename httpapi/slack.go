package httpapi

import (
	"errors"
	"log/slog"
	"net/http"

	"github.com/approvald/approval"
	"github.com/approvald/approval/webhook"
)

// DefaultMaxSlackBody bounds an interaction's body. Slack's block_actions payload carries the
// message clicked, blocks and all; approvald's messages keep it to a few KiB.
const DefaultMaxSlackBody = 64 << 10

// handleSlackInteraction is POST /v1/slack/interactions: a click of a button of approvald's
// Slack messages, or a submission of its reject form (docs/slack.md). As a webhook delivery
// is, it is verified over the raw body (Slack's signature with the signing secret, the
// timestamp within five minutes) after the size check and before any parsing, stored in the
// inbox under its identity (source slack, the interaction's trigger_id) in one transaction,
// and acknowledged with an empty 200, which Slack takes as done: the inbox worker applies it
// and answers the person through the outbox. A body that is not an interaction approvald
// asks for is refused (400) and nothing is stored.
func (s *Server) handleSlackInteraction(w http.ResponseWriter, r *http.Request) {
	if s.slackSecret == "" {
		s.writeError(w, r, approval.Errorf(approval.ENOTFOUND, "Slack is not configured"))
		return
	}
	if r.ContentLength > DefaultMaxSlackBody {
		w.Header().Set("Connection", "close")
		s.refuseSlack(w, r, approval.Errorf(approval.ETOOLARGE, "body is larger than %d bytes", DefaultMaxSlackBody))
		return
	}
	size := int64(DefaultMaxSlackBody)
	if r.ContentLength >= 0 {
		size = r.ContentLength
	}
	release, ok := s.bodies.Reserve(size)
	if !ok {
		w.Header().Set("Connection", "close")
		s.writeError(w, r, errBudget())
		return
	}
	defer release()
	body, err := readAtMost(http.MaxBytesReader(w, r.Body, DefaultMaxSlackBody), size)
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		s.refuseSlack(w, r, approval.Errorf(approval.ETOOLARGE, "body is larger than %d bytes", DefaultMaxSlackBody))
		return
	} else if err != nil {
		s.refuseSlack(w, r, approval.Errorf(approval.EINVALID, "body could not be read: %v", err))
		return
	}
	if err := webhook.VerifySlack(r.Header, body, s.slackSecret); err != nil {
		s.refuseSlack(w, r, err)
		return
	}
	typ, eventID, _, err := webhook.ParseSlackInteraction(body)
	if err != nil {
		s.refuseSlack(w, r, err)
		return
	}
	e := &approval.InboxEvent{
		ID: approval.NewID("inb"), Source: approval.SourceSlack, EventID: eventID, Type: typ,
		Headers: keepHeaders(r.Header), Body: body, ReceivedAt: s.now(),
	}
	ctx, cancel := detached(r, intakeTimeout)
	defer cancel()
	duplicate, err := s.store.RecordInbox(ctx, e)
	if err != nil {
		s.info(r).log.Error("store slack interaction", slog.String("event_id", eventID), slog.Any("error", err))
		s.writeError(w, r, approval.Errorf(approval.EUNAVAILABLE, "the interaction could not be stored; retry later"))
		return
	}
	result := receivedStored
	if duplicate {
		result = receivedDuplicate
	}
	s.metrics.received.WithLabelValues(approval.SourceSlack, result).Inc()
	w.WriteHeader(http.StatusOK) // an empty 200: Slack shows nothing, and closes the form
}

// refuseSlack answers a refused interaction, counted and logged as a refused delivery is.
func (s *Server) refuseSlack(w http.ResponseWriter, r *http.Request, err error) {
	if code := approval.ErrorCode(err); code != approval.EINTERNAL {
		s.metrics.received.WithLabelValues(approval.SourceSlack, receivedRejected).Inc()
		s.info(r).log.Info("slack interaction refused", slog.String("reason", approval.ErrorMessage(err)))
	}
	s.writeError(w, r, err)
}
