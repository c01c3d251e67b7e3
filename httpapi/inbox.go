package httpapi

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/approvald/approval"
	"github.com/approvald/approval/webhook"
)

// intakeTimeout bounds storing one delivery. The store write runs to its end even if the
// sender hangs up (within the request's deadline): a committed event is acknowledged as a
// duplicate on redelivery.
const intakeTimeout = 10 * time.Second

// keptHeaders are the delivery headers stored with an event: the ones that identify, sign and
// date it under each scheme, and its content type, so that an operator can see what was
// verified. Nothing else a sender or a proxy adds is kept.
var keptHeaders = []string{
	"webhook-id", "webhook-timestamp", "webhook-signature", // standard-webhooks
	"Stripe-Signature",                                           // stripe
	"X-GitHub-Delivery", "X-GitHub-Event", "X-Hub-Signature-256", // github
	"X-Slack-Signature", "X-Slack-Request-Timestamp", // slack interactions
	"Content-Type",
}

// maxEventTypeLength bounds a stored event type. Real types are short ("charge.refunded",
// "approval.decision"); anything longer or not printable ASCII is stored as "" and so ignored
// by the worker, while the body keeps whatever the sender meant.
const maxEventTypeLength = 255

// intakeAnswer is the answer to an accepted delivery: the stored event's id (for operators'
// GET /v1/inbox/{id}) and whether it was already stored.
type intakeAnswer struct {
	ID        string `json:"id,omitempty"`
	Duplicate bool   `json:"duplicate"`
}

// handleIntake is POST /v1/inbox/{source}: a signed webhook (docs/invariants.md, invariant 3).
// The signature is the authentication, so no bearer token is asked for. The delivery is
// verified over the raw body, stored under its (source, event id) and acknowledged only after
// the commit; a redelivery is acknowledged as a duplicate. Nothing is stored for a refused
// delivery, and no business work happens here: the inbox worker claims stored events.
func (s *Server) handleIntake(w http.ResponseWriter, r *http.Request) {
	src := s.sources[r.PathValue("source")]
	if src == nil {
		s.writeError(w, r, approval.Errorf(approval.ENOTFOUND, "no webhook source named %q", r.PathValue("source")))
		return
	}
	e, release, err := s.verifyDelivery(w, r, src)
	if err != nil {
		// A misconfigured verifier is our fault (500, logged by writeError), and a full body
		// budget is ours to relieve (503): neither is a refusal of the delivery.
		if code := approval.ErrorCode(err); code != approval.EINTERNAL && code != approval.EUNAVAILABLE {
			s.metrics.received.WithLabelValues(src.Name, receivedRejected).Inc()
			// The reason is caller-safe (it never holds a secret); the access line has the status.
			s.info(r).log.Info("webhook refused", slog.String("source", src.Name), slog.String("reason", approval.ErrorMessage(err)))
		}
		s.writeError(w, r, err)
		return
	}
	defer release() // the body is held until it is stored

	ctx, cancel := detached(r, intakeTimeout)
	defer cancel()
	eventID := e.EventID
	duplicate, err := s.store.RecordInbox(ctx, e)
	if err != nil {
		// Whatever went wrong, the sender must not take the event as delivered: a 503 makes
		// every provider retry. The cause is logged here, not shown.
		s.info(r).log.Error("store webhook event", slog.String("source", src.Name),
			slog.String("event_id", e.EventID), slog.Any("error", err))
		s.writeError(w, r, approval.Errorf(approval.EUNAVAILABLE, "the event could not be stored; retry later"))
		return
	}
	// On a duplicate the store has made e the event stored first: the answer names it.
	answer, result := intakeAnswer{ID: e.ID, Duplicate: duplicate}, receivedStored
	switch {
	case duplicate && e.EventID != eventID:
		// The body of a kept event under another id: under the github scheme, which signs
		// neither the id nor a time, someone resent a captured delivery (or the sender sent
		// the same body twice, which the scheme cannot tell apart). Answered as a redelivery.
		result = receivedReplay
		s.info(r).log.Warn("webhook replay", slog.String("source", src.Name),
			slog.String("event_id", eventID), slog.String("stored_event", e.ID),
			slog.String("stored_event_id", e.EventID))
	case duplicate:
		result = receivedDuplicate
	}
	s.metrics.received.WithLabelValues(src.Name, result).Inc()
	s.writeJSON(w, r, http.StatusOK, answer)
}

// verifyDelivery reads and verifies a delivery from src and returns the event to store, and
// the release of the body's place in the server's budget, to call once the event is stored.
// A body declared larger than MaxBody is refused before anything is read, and one that turns
// out larger is refused at MaxBody bytes, before any HMAC work: ETOOLARGE. Then the body's
// bytes (its Content-Length, or MaxBody when it declares none) are reserved from the budget
// of unauthenticated bodies before a byte is read: EUNAVAILABLE, with Retry-After, when the
// budget has no room. Verification errors are the Verifier's: EINVALID for a missing or
// malformed header, EUNAUTHORIZED for a bad signature or timestamp.
func (s *Server) verifyDelivery(w http.ResponseWriter, r *http.Request, src *Source) (*approval.InboxEvent, func(), error) {
	if r.ContentLength > src.MaxBody {
		w.Header().Set("Connection", "close") // what is left of the body is not read
		return nil, nil, approval.Errorf(approval.ETOOLARGE, "body is larger than %d bytes", src.MaxBody)
	}
	size := src.MaxBody
	if r.ContentLength >= 0 {
		size = r.ContentLength
	}
	release, ok := s.bodies.Reserve(size)
	if !ok {
		w.Header().Set("Connection", "close")
		return nil, nil, errBudget()
	}
	e, err := s.readDelivery(w, r, src, size)
	if err != nil {
		release()
		return nil, nil, err
	}
	return e, release, nil
}

// readDelivery reads a delivery of at most size bytes and verifies it.
func (s *Server) readDelivery(w http.ResponseWriter, r *http.Request, src *Source, size int64) (*approval.InboxEvent, error) {
	body, err := readAtMost(http.MaxBytesReader(w, r.Body, src.MaxBody), size)
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, approval.Errorf(approval.ETOOLARGE, "body is larger than %d bytes", src.MaxBody)
	} else if err != nil {
		return nil, approval.Errorf(approval.EINVALID, "body could not be read: %v", err)
	}
	now := s.now()
	d, err := src.Verifier.Verify(r.Header, body, now)
	if err != nil {
		return nil, err
	}
	return &approval.InboxEvent{
		ID:         approval.NewID("inb"),
		Source:     src.Name,
		EventID:    d.EventID,
		BodyHash:   d.BodyHash,
		Type:       eventType(src.Verifier.Scheme, r.Header, body),
		Headers:    keepHeaders(r.Header),
		Body:       body,
		ReceivedAt: now,
	}, nil
}

// readAtMost reads r to its end. Its buffer grows with what arrives, doubling from a few
// KiB up to size at most, so that a sender that declares a large body and sends it slowly
// holds only about what it has sent; the budget counts size. r must itself refuse more than
// the caller accepts (http.MaxBytesReader); the result is never nil.
func readAtMost(r io.Reader, size int64) ([]byte, error) {
	const first = 4 << 10
	buf := make([]byte, 0, min(max(size, 1), first))
	for {
		if len(buf) == cap(buf) {
			// Room for one byte past size, so that a body longer than declared (only a
			// chunked body can be) is seen by r's own limit rather than cut here.
			next := min(2*int64(cap(buf)), size+1)
			if next <= int64(cap(buf)) {
				next = int64(cap(buf)) + first
			}
			grown := make([]byte, len(buf), next)
			copy(grown, buf)
			buf = grown
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		} else if err != nil {
			return nil, err
		}
	}
}

// eventType reads the type that picks the event's handler: the top-level "type" of the JSON
// body for Standard Webhooks and Stripe, the X-GitHub-Event header for GitHub. It is ""
// when absent, unreadable or not a sane name; such events are stored and later ignored.
func eventType(scheme webhook.Scheme, h http.Header, body []byte) string {
	var typ string
	if scheme == webhook.SchemeGitHub {
		typ = h.Get("X-GitHub-Event")
	} else {
		var doc struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(body, &doc) != nil {
			return ""
		}
		typ = doc.Type
	}
	if len(typ) > maxEventTypeLength {
		return ""
	}
	for i := 0; i < len(typ); i++ {
		if typ[i] < 0x21 || typ[i] > 0x7e {
			return ""
		}
	}
	return typ
}

// keepHeaders returns the first value of each of keptHeaders that the delivery carries. A
// value that is not valid UTF-8 is left out: the headers are stored as text.
func keepHeaders(h http.Header) map[string]string {
	kept := make(map[string]string, len(keptHeaders))
	for _, name := range keptHeaders {
		if v := h.Get(name); v != "" && utf8.ValidString(v) {
			kept[name] = v
		}
	}
	return kept
}

// presentInboxEvent returns e in the shape of the API: times in UTC, {} rather than null
// headers, and with the body when withBody is set.
func presentInboxEvent(e *approval.InboxEvent, withBody bool) any {
	c := *e
	if c.Headers == nil {
		c.Headers = map[string]string{}
	}
	c.ReceivedAt = e.ReceivedAt.UTC()
	c.NextAttemptAt = utcPtr(e.NextAttemptAt)
	c.ProcessedAt = utcPtr(e.ProcessedAt)
	c.LastConflictAt = utcPtr(e.LastConflictAt)
	if !withBody {
		return &c
	}
	return &inboxEventDetail{InboxEvent: &c, Body: bodyText(e.Body), BodyBase64: bodyBase64(e.Body)}
}

// inboxEventDetail is the answer of GET /v1/inbox/{id}: the event with its body. The body is
// stored byte for byte, so it is shown as a JSON string of those bytes when they are valid
// UTF-8 (JSON deliveries always are), with body_base64 null; otherwise body is null and
// body_base64 holds the bytes in standard base64. Both are null once retention has purged
// the body. Lists leave both out.
type inboxEventDetail struct {
	*approval.InboxEvent
	Body       *string `json:"body"`
	BodyBase64 *string `json:"body_base64"`
}

// bodyText is the body as a string when it is valid UTF-8, nil otherwise or when purged.
func bodyText(b []byte) *string {
	if b == nil || !utf8.Valid(b) {
		return nil
	}
	s := string(b)
	return &s
}

// bodyBase64 is the body in base64 when it is not valid UTF-8, nil otherwise.
func bodyBase64(b []byte) *string {
	if b == nil || utf8.Valid(b) {
		return nil
	}
	s := base64.StdEncoding.EncodeToString(b)
	return &s
}

// inboxList is the answer of GET /v1/inbox.
type inboxList struct {
	Events     []any  `json:"events"`
	NextCursor string `json:"next_cursor"`
}

// handleListInbox is GET /v1/inbox?status=&source=&limit=&cursor=: stored events newest
// first, without their bodies. Operators and admins only.
func (s *Server) handleListInbox(w http.ResponseWriter, r *http.Request) {
	p, err := s.authenticate(r.Context(), r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	q := r.URL.Query()
	f := approval.InboxFilter{
		Status: approval.InboxStatus(q.Get("status")),
		Source: q.Get("source"),
		Cursor: q.Get("cursor"),
	}
	if f.Status != "" && !f.Status.Valid() {
		s.writeError(w, r, approval.Errorf(approval.EINVALID, "status %q is not one of pending, processed, ignored, stale, failed", f.Status))
		return
	}
	if f.Limit, err = parseLimit(q.Get("limit")); err != nil {
		s.writeError(w, r, err)
		return
	}
	events, next, err := s.svc.InboxEvents(r.Context(), p, f)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := inboxList{Events: make([]any, len(events)), NextCursor: next}
	for i, e := range events {
		out.Events[i] = presentInboxEvent(e, false)
	}
	s.writeJSON(w, r, http.StatusOK, out)
}

// handleGetInboxEvent is GET /v1/inbox/{id}: one event with its raw body, including how many
// redeliveries of its id carried a different body (conflicts). Operators and admins only.
func (s *Server) handleGetInboxEvent(w http.ResponseWriter, r *http.Request) {
	p, err := s.authenticate(r.Context(), r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	e, err := s.svc.InboxEvent(r.Context(), p, r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, presentInboxEvent(e, true))
}

// handleRetryInboxEvent is POST /v1/inbox/{id}/retry: a failed event goes back to pending,
// due now (409 for any other status). Service.RetryInbox lets operators and admins only.
func (s *Server) handleRetryInboxEvent(w http.ResponseWriter, r *http.Request) {
	p, err := s.authenticate(r.Context(), r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	id := r.PathValue("id")
	e, err := s.svc.RetryInbox(r.Context(), p, id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.info(r).log.Info("inbox event re-queued", slog.String("event", id), slog.String("operator", p.Subject))
	s.writeJSON(w, r, http.StatusOK, presentInboxEvent(e, false))
}

// sourceView is a configured webhook source as operators see it: never its secrets, only how
// many there are (two while a secret rotates).
type sourceView struct {
	Name      string   `json:"name"`
	Scheme    string   `json:"scheme"`
	Secrets   int      `json:"secrets"`
	Tolerance string   `json:"tolerance"`
	MaxBody   int64    `json:"max_body"`
	Handlers  []string `json:"handlers"`
	Path      string   `json:"path"`
}

// handleListSources is GET /v1/sources: the configured webhook sources, by name. Operators and
// admins only.
func (s *Server) handleListSources(w http.ResponseWriter, r *http.Request) {
	if _, err := s.authenticateOperator(r); err != nil {
		s.writeError(w, r, err)
		return
	}
	out := struct {
		Sources []sourceView `json:"sources"`
	}{Sources: make([]sourceView, 0, len(s.sourceOrder))}
	for _, src := range s.sourceOrder {
		tolerance := "none" // GitHub signs no timestamp
		if src.Verifier.Scheme != webhook.SchemeGitHub {
			tolerance = cmp.Or(src.Verifier.Tolerance, webhook.DefaultTolerance).String()
		}
		handlers := src.Handlers
		if handlers == nil {
			handlers = []string{}
		}
		out.Sources = append(out.Sources, sourceView{
			Name:      src.Name,
			Scheme:    string(src.Verifier.Scheme),
			Secrets:   len(src.Verifier.Secrets),
			Tolerance: tolerance,
			MaxBody:   src.MaxBody,
			Handlers:  handlers,
			Path:      "/v1/inbox/" + src.Name,
		})
	}
	s.writeJSON(w, r, http.StatusOK, out)
}

// parseLimit reads a page size: "" is the store's default (0), otherwise 1..MaxPageSize.
func parseLimit(raw string) (int, error) {
	if raw == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 1 || n > approval.MaxPageSize {
		return 0, approval.Errorf(approval.EINVALID, "limit %q must be an integer from 1 to %d", raw, approval.MaxPageSize)
	}
	return n, nil
}
