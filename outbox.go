package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The outbox holds what approvald tells people and callers: notifications of approvals that
// wait for someone or were decided, e-mailed sign-in links, and decision callbacks. A message
// is inserted in the same transaction as the change that causes it, so a committed change
// always has its messages and a rolled back one has none; the outbox worker sends them later,
// claiming each with a lease and recording every attempt fenced by its number, as the
// execution runner does (docs/notifications.md).

// OutboxKind is what an outbox message is.
type OutboxKind string

// The outbox kinds.
const (
	OutboxNotification OutboxKind = "notification" // to a person: something waits for them or was decided
	OutboxSignin       OutboxKind = "signin"       // an e-mailed sign-in link
	OutboxCallback     OutboxKind = "callback"     // a decision's signed POST to the requester's URL
)

// Valid reports whether k is a known kind.
func (k OutboxKind) Valid() bool { return slices.Contains(OutboxKinds, k) }

// OutboxStatus is where an outbox message is in its delivery.
type OutboxStatus string

// The outbox statuses: pending (due at NextAttemptAt), sending (claimed by a worker until its
// lease ends), sent, failed (out of attempts, or refused for good: an operator's to look at).
const (
	OutboxPending OutboxStatus = "pending"
	OutboxSending OutboxStatus = "sending"
	OutboxSent    OutboxStatus = "sent"
	OutboxFailed  OutboxStatus = "failed"
)

// Valid reports whether s is a known status.
func (s OutboxStatus) Valid() bool { return slices.Contains(OutboxStatuses, s) }

// The outbox's kinds and statuses, what a listing's filters accept.
var (
	OutboxKinds    = []OutboxKind{OutboxNotification, OutboxSignin, OutboxCallback}
	OutboxStatuses = []OutboxStatus{OutboxPending, OutboxSending, OutboxSent, OutboxFailed}
)

// The channels a message goes out on.
const (
	ChannelEmail    = "email"
	ChannelChat     = "chat"
	ChannelCallback = "callback"
)

// EventNeedsReview is the notification event of an execution handed to operators.
const EventNeedsReview = EventExecutionNeedsReview

// TopicOutbox is the Notifier topic of a message that became due (inserted, or re-queued).
const TopicOutbox = "outbox"

// OutboxMessage is one message to send.
type OutboxMessage struct {
	ID string `json:"id"` // ntf_..., sig_... or cbk_...; stable across resends (the Message-ID, the webhook-id)
	// NaturalKey is unique among all messages: (approval, recipient, channel, event) for a
	// notification, the event's id for a callback, the token for a sign-in link. A second
	// insert under the same key inserts nothing, so whatever queues a message twice (a
	// retried transaction, two racing ones) queues it once.
	NaturalKey     string          `json:"natural_key"`
	Kind           OutboxKind      `json:"kind"`
	ApprovalID     string          `json:"approval_id,omitempty"`
	Recipient      string          `json:"recipient"` // a person's name, or the requester of a callback
	Channel        string          `json:"channel"`
	Event          string          `json:"event"` // approval.requested, approval.approved, ..., execution.needs_review, signin
	Payload        json.RawMessage `json:"payload"`
	Status         OutboxStatus    `json:"status"`
	Attempts       int             `json:"attempts"`
	NextAttemptAt  *time.Time      `json:"next_attempt_at"`
	LeaseExpiresAt *time.Time      `json:"lease_expires_at"`
	LastError      string          `json:"last_error"`
	CreatedAt      time.Time       `json:"created_at"`
	UpdatedAt      time.Time       `json:"updated_at"`
	SentAt         *time.Time      `json:"sent_at"`
}

// OutboxAttempt is one attempt to send a message, as operators see it.
type OutboxAttempt struct {
	Attempt    int        `json:"attempt"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"` // nil: still running, or its worker died
	Outcome    string     `json:"outcome"`     // sent, retry, failed; "" while unfinished
	Error      string     `json:"error"`
}

// Notice is the payload of a notification and of a callback: what happened to which
// approval. The sender renders it; the page link is made from ApprovalID.
type Notice struct {
	EventID      string    `json:"event_id"` // the callback's webhook-id; the same for every channel of one event
	Event        string    `json:"event"`
	ApprovalID   string    `json:"approval_id"`
	OperationKey string    `json:"operation_key"`
	Action       string    `json:"action"`
	Title        string    `json:"title"`
	Requester    string    `json:"requester"`
	Approvers    []string  `json:"approvers,omitempty"`
	Status       Status    `json:"status"`
	Actor        string    `json:"actor,omitempty"`  // who decided or cancelled
	Reason       string    `json:"reason,omitempty"` // why an execution needs review
	ExpiresAt    time.Time `json:"expires_at"`
	At           time.Time `json:"at"`
	URL          string    `json:"url,omitempty"` // a callback's destination
	// Policy is the approval's progress under its policy when the notice was queued, for a
	// notice that asks for a vote (EventRequested, EventStageStarted, EventReminder) on an
	// approval created under a policy.
	Policy *PolicyStatus `json:"policy,omitempty"`
	// Round numbers a reminder within its stage, from 1.
	Round int `json:"round,omitempty"`
	// LinkOnly: the approval's policy has chat_decisions: false, so a chat message carries
	// the link to the page and no buttons.
	LinkOnly bool `json:"link_only,omitempty"`
}

// Signin is the payload of a sign-in link: the token in the clear until the mail is sent
// (the store keeps only its hash in signin_tokens), its expiry, and the page it returns to.
type Signin struct {
	Token     string    `json:"token,omitempty"`
	ExpiresAt time.Time `json:"expires_at"`
	// Next is the page the link returns to once used, as RequestSignin was given it; ""
	// for the pages' default.
	Next string `json:"next,omitempty"`
}

// The notification events besides the approval's own events.
const (
	EventRequested = "approval.requested" // a new approval waits for the recipient
)

// Routing says who is told what, and how: the channels each person is notified on, the
// operators told of executions needing review, and the requesters whose decisions are
// called back. Replicas must share it, as they share actions: the transaction that causes a
// message decides, with this, which messages it queues.
type Routing struct {
	// Channels are the channels (ChannelEmail, ChannelChat) each person is notified on. A
	// person without any is not notified.
	Channels map[string][]string
	// Operators are told, on their channels, when an execution needs review.
	Operators []string
	// Callbacks are the URLs each requester's decisions are POSTed to, when the approval
	// names none itself.
	Callbacks map[string]string
	// Emails are the people's e-mail addresses (person to address), by which a person may
	// ask for a sign-in link.
	Emails map[string]string
	// ProviderEmails lets a person whom Emails names no address for be told by e-mail at the
	// address their identity provider verified at their last OIDC sign-in, which the store
	// keeps (Service.RecordEmail). Emails wins where it names one. Set when there is both an
	// SMTP server and OIDC sign-in.
	ProviderEmails bool
	// CallbackOrigins are the origins a callback_url given on create may name, each
	// "scheme://host:port" as CallbackOrigin writes it; a callback_url must match one on all
	// three. Empty: no callback_url is accepted.
	CallbackOrigins []string
	// CallbackHTTPLoopback lets a callback_url use plain http when its host is loopback
	// (localhost, 127.0.0.0/8, ::1); any other callback_url must be https.
	CallbackHTTPLoopback bool
	// Slack, when set, notifies on ChannelSlack those whose Channels name it, updates the
	// messages of an approval when it ends, and posts every approval in Slack.Channel.
	Slack *SlackRouting
}

// CallbackOrigin returns the origin of an absolute http or https URL as the allow-list
// compares it: "scheme://host:port", the scheme and host in lower case, the host without a
// trailing dot, the port in decimal, the scheme's default (80, 443) when the URL names none.
// It refuses a port that is not 1 to 65535, and a URL with a user name or password.
func CallbackOrigin(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || u.Host == "" || u.Opaque != "" {
		return "", fmt.Errorf("%q is not an absolute URL such as https://ci.example.com/approvald", raw)
	}
	if u.User != nil {
		return "", errors.New("it must not carry a user name or password")
	}
	scheme := strings.ToLower(u.Scheme)
	port := u.Port()
	switch {
	case scheme != "http" && scheme != "https":
		return "", fmt.Errorf("it has the scheme %q; it must be https", u.Scheme)
	case port == "" && strings.HasSuffix(u.Host, ":"):
		return "", errors.New("its port is empty; name one from 1 to 65535, or none for the scheme's default")
	case port == "" && scheme == "https":
		port = "443"
	case port == "":
		port = "80"
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("its port %q is not a port from 1 to 65535", port)
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if host == "" {
		return "", fmt.Errorf("%q has no host", raw)
	}
	return scheme + "://" + net.JoinHostPort(host, strconv.Itoa(n)), nil
}

// CheckCallbackURL checks a callback_url given on create against the operators' allow-list,
// so that approvald cannot be made to POST to an address the operators did not open to it
// (an internal service, a metadata endpoint, another port of an allowed host). Where the
// allowed name resolves to is checked again when the callback is sent (notify.Callback).
// EINVALID names what is wrong.
func (r Routing) CheckCallbackURL(raw string) error {
	origin, err := CallbackOrigin(raw)
	if err != nil {
		return Errorf(EINVALID, "callback_url: %v", err)
	}
	u, _ := url.Parse(raw) // CallbackOrigin parsed it
	if u.Fragment != "" {
		return Errorf(EINVALID, "callback_url must not have a fragment")
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	loopback := host == "localhost"
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		loopback = true
	}
	if strings.EqualFold(u.Scheme, "http") && (!loopback || !r.CallbackHTTPLoopback) {
		return Errorf(EINVALID, "callback_url must use https (plain http is allowed only to a loopback host, when callbacks.allow_http_loopback is set)")
	}
	if !slices.Contains(r.CallbackOrigins, origin) {
		return Errorf(EINVALID, "callback_url's origin %s is not in callbacks.allowed_origins (scheme, host and port must match an entry); ask an operator to allow it", origin)
	}
	return nil
}

// notices returns the notification messages of n for the recipients, one per recipient and
// channel, each unique per (approval, recipient, channel, event).
// stored holds the provider's addresses of those the configuration names none for
// (providerEmails).
// keyEvent stands for the event in the keys: the event itself, or with what tells one such
// notice of an approval from another (EventReminder + "/stage/round").
func (r Routing) notices(n Notice, keyEvent string, recipients []string, stored map[string]string) []*OutboxMessage {
	var msgs []*OutboxMessage
	seen := map[string]bool{}
	for _, person := range recipients {
		if seen[person] {
			continue
		}
		seen[person] = true
		for _, ch := range r.channels(person, stored) {
			if ch == ChannelSlack && !asks(n.Event) {
				continue // Slack's messages are updated instead (slackUpdate)
			}
			msgs = append(msgs, &OutboxMessage{
				ID: NewID("ntf"), NaturalKey: NotificationKey(n.ApprovalID, person, ch, keyEvent),
				Kind: OutboxNotification, ApprovalID: n.ApprovalID, Recipient: person, Channel: ch,
				Event: n.Event,
			})
		}
	}
	return msgs
}

// slackUpdate is the message that updates every Slack message of n's approval after n: when
// n ends it, or is a vote that left it pending (EventVoted); nil otherwise, or when Slack is
// not configured. keyEvent stands for the event in its key (one update per outcome, one per
// vote). Updates are idempotent.
func (r Routing) slackUpdate(n Notice, keyEvent string) *OutboxMessage {
	switch n.Event {
	case EventApproved, EventRejected, EventExpired, EventCancelled, EventVoted:
	default:
		return nil
	}
	if r.Slack == nil {
		return nil
	}
	return &OutboxMessage{
		ID: NewID("ntf"), NaturalKey: NotificationKey(n.ApprovalID, SlackEveryMessage, ChannelSlack, keyEvent),
		Kind: OutboxNotification, ApprovalID: n.ApprovalID, Recipient: SlackEveryMessage, Channel: ChannelSlack, Event: n.Event,
	}
}

// queueSlackProgress queues, in tx, the update of every Slack message of a after a vote that
// left it pending, when Slack is configured: one per vote (its key names the number of
// votes), which shows the approval as it is when it is sent (notify.Slack keeps an older
// progress from overwriting a newer one or the outcome).
func queueSlackProgress(ctx context.Context, tx Tx, r Routing, a *Approval) error {
	n := Notice{Event: EventVoted, ApprovalID: a.ID, OperationKey: a.OperationKey, Action: a.Action, Title: a.Title,
		Requester: a.Requester, Status: a.Status, ExpiresAt: a.ExpiresAt, At: tx.Now()}
	m := r.slackUpdate(n, EventVoted+"/"+strconv.Itoa(len(a.Decisions)))
	if m == nil {
		return nil
	}
	return insertNotices(ctx, tx, n, "", []*OutboxMessage{m})
}

// NotificationKey is the natural key of a notification.
func NotificationKey(approvalID, recipient, channel, event string) string {
	return strings.Join([]string{"notification", approvalID, recipient, channel, event}, "\x1f")
}

// CallbackKey is the natural key of a callback: its event's id.
func CallbackKey(eventID string) string { return "callback\x1f" + eventID }

// OutboxFilter selects messages for OutboxMessages.
type OutboxFilter struct {
	Status OutboxStatus // "" for any
	Kind   OutboxKind   // "" for any
	Limit  int
	Cursor string
}

// Check validates the filter of OutboxMessages and returns its page size.
func (f OutboxFilter) Check() (int, error) {
	if f.Status != "" && !f.Status.Valid() {
		return 0, Errorf(EINVALID, "unknown outbox status %q; use pending, sending, sent or failed", f.Status)
	}
	if f.Kind != "" && !f.Kind.Valid() {
		return 0, Errorf(EINVALID, "unknown outbox kind %q; use notification, signin or callback", f.Kind)
	}
	return PageLimit(f.Limit)
}

// OutboxStore is the outbox's part of the driver contract: the operators' reads. Queueing,
// claiming and recording are Tx statements under the Service's rules (Service.Routing says
// what they queue).
type OutboxStore interface {
	// OutboxMessage returns one message with its attempts, oldest first, or ENOTFOUND.
	OutboxMessage(ctx context.Context, id string) (*OutboxMessage, []OutboxAttempt, error)
	// OutboxMessages lists messages newest first (created_at, then id, descending) and the
	// cursor of the next page.
	OutboxMessages(ctx context.Context, f OutboxFilter) ([]*OutboxMessage, string, error)

	// PersonEmails returns the e-mail addresses identity providers verified for the persons
	// (Service.RecordEmail), person to address; persons without one are absent. One statement.
	PersonEmails(ctx context.Context, persons []string) (map[string]string, error)
	// PersonsByEmail returns the persons whose stored address is email, compared without
	// case, by name.
	PersonsByEmail(ctx context.Context, email string) ([]string, error)
}

// OutboxOutcome is how a worker's attempt at a message ended.
type OutboxOutcome struct {
	// Status is OutboxSent, OutboxPending (a retry at RetryAt) or OutboxFailed.
	Status  OutboxStatus
	Error   string
	RetryAt *time.Time
}

// queueNotices inserts n's notifications to the recipients, and its callback when the
// approval has a callback URL, in tx, and signals the outbox worker.
func queueNotices(ctx context.Context, tx Tx, r Routing, n Notice, recipients []string) error {
	return queueNoticesKeyed(ctx, tx, r, n, n.Event, recipients)
}

// queueNoticesKeyed is queueNotices with the notifications' keys naming keyEvent for the
// event (Routing.notices). Only a decision is called back.
func queueNoticesKeyed(ctx context.Context, tx Tx, r Routing, n Notice, keyEvent string, recipients []string) error {
	// The approval's own callback_url (in n.URL) overrides the requester's configured one.
	callback := n.URL
	if callback == "" {
		callback = r.Callbacks[n.Requester]
	}
	n.URL = ""
	stored, err := providerEmails(ctx, r, tx.PersonEmailGetMany, recipients)
	if err != nil {
		return err
	}
	msgs := r.notices(n, keyEvent, recipients, stored)
	if m := r.slackUpdate(n, keyEvent); m != nil {
		msgs = append(msgs, m)
	}
	if callback != "" && !asks(n.Event) && n.Event != EventNeedsReview {
		msgs = append(msgs, &OutboxMessage{
			ID: NewID("cbk"), NaturalKey: CallbackKey(n.EventID), Kind: OutboxCallback,
			ApprovalID: n.ApprovalID, Recipient: n.Requester, Channel: ChannelCallback, Event: n.Event,
		})
	}
	return insertNotices(ctx, tx, n, callback, msgs)
}

// insertNotices stores msgs, each with n as its payload (a callback's with the URL callback),
// due now, and signals the outbox; nothing when msgs is empty.
func insertNotices(ctx context.Context, tx Tx, n Notice, callback string, msgs []*OutboxMessage) error {
	if len(msgs) == 0 {
		return nil
	}
	now := tx.Now()
	for _, m := range msgs {
		n := n
		if m.Kind == OutboxCallback {
			n.URL = callback
		}
		payload, err := json.Marshal(n)
		if err != nil {
			return Errorf(EINTERNAL, "encode notice: %v", err)
		}
		m.Payload, m.Status, m.NextAttemptAt, m.CreatedAt, m.UpdatedAt = payload, OutboxPending, &now, now, now
		if err := tx.OutboxInsert(ctx, m); err != nil {
			return err
		}
	}
	return tx.Notify(ctx, TopicOutbox)
}

// decisionNotice is the notice of a's final outcome, by actor, at now. Its event id names the
// approval and the outcome, which happens once: every resend of its callback carries it.
func decisionNotice(a *Approval, event, actor string, now time.Time) Notice {
	return Notice{
		EventID: "evt_" + strings.TrimPrefix(a.ID, "apr_") + "_" + strings.TrimPrefix(event, "approval."),
		Event:   event, ApprovalID: a.ID, OperationKey: a.OperationKey, Action: a.Action, Title: a.Title,
		Requester: a.Requester, Approvers: a.Approvers, Status: a.Status, Actor: actor,
		ExpiresAt: a.ExpiresAt, At: now, URL: a.CallbackURL,
	}
}

// decisionRecipients are the people told of a's final outcome: the requester and the
// approvers who have not voted (those who did know).
func decisionRecipients(a *Approval) []string {
	people := []string{a.Requester}
	for _, p := range a.Approvers {
		if _, voted := a.DecisionBy(p); !voted {
			people = append(people, p)
		}
	}
	return people
}

// asks reports whether event is one of a notice asking for a vote.
func asks(event string) bool {
	return event == EventRequested || event == EventStageStarted || event == EventReminder
}

// createNotices returns the messages of a new approval: one notification per approver and
// channel; under a policy, per person of its first stage (members says who is in a group).
// They are written with the approval, by Store.InsertApproval. stored holds the provider's
// addresses of the approvers the configuration names none for (providerEmails).
func createNotices(r Routing, a *Approval, members Members, stored map[string]string) ([]*OutboxMessage, error) {
	recipients := a.Approvers
	var p Progress
	if a.Resolved != nil {
		members = membersOrNone(members)
		p = Tally(a.Resolved.Stages, members, a.Requester, nil)
		recipients = stageRecipients(a, p, members)
	}
	n := askNotice(a, EventRequested, p, a.CreatedAt)
	msgs := r.notices(n, n.Event, recipients, stored)
	if sr := r.Slack; sr != nil && sr.Channel != "" {
		to := "#" + sr.Channel
		msgs = append(msgs, &OutboxMessage{
			ID: NewID("ntf"), NaturalKey: NotificationKey(a.ID, to, ChannelSlack, n.Event),
			Kind: OutboxNotification, ApprovalID: a.ID, Recipient: to, Channel: ChannelSlack, Event: n.Event,
		})
	}
	if len(msgs) == 0 {
		return nil, nil
	}
	payload, err := json.Marshal(n)
	if err != nil {
		return nil, Errorf(EINTERNAL, "encode notice: %v", err)
	}
	for _, m := range msgs {
		at := a.CreatedAt
		m.Payload, m.Status, m.NextAttemptAt, m.CreatedAt, m.UpdatedAt = payload, OutboxPending, &at, at, at
	}
	return msgs, nil
}

// ClaimOutbox claims up to limit due messages for a worker (EINVALID unless lease and limit
// are positive): pending ones whose next attempt is due, and sending ones whose lease has
// expired (their worker died). Each becomes sending, attempts+1, leased until now+lease, and
// its attempt is logged as started; the new attempt number is the claim's fencing token.
// Workers on every replica may claim at once and take disjoint messages.
func (s *Service) ClaimOutbox(ctx context.Context, lease time.Duration, limit int) ([]*OutboxMessage, error) {
	return claimDue(ctx, s, lease, limit, func(tx Tx, leaseEnd time.Time) ([]*OutboxMessage, error) {
		return tx.OutboxClaimDue(ctx, limit, leaseEnd)
	})
}

// FinishOutbox records how attempt of message id ended, only while attempt still holds it
// (the message is sending and attempts is attempt): ECONFLICT otherwise, since a newer
// attempt took it over after this one's lease ran out, and its result must not overwrite the
// newer one's. ENOTFOUND for an unknown message. The attempt's log row records the outcome in
// the same transaction. A retry signals TopicOutbox.
func (s *Service) FinishOutbox(ctx context.Context, id string, attempt int, o OutboxOutcome) (*OutboxMessage, error) {
	switch o.Status {
	case OutboxSent, OutboxFailed:
	case OutboxPending:
		if o.RetryAt == nil {
			return nil, Errorf(EINVALID, "a retry needs a time to retry at")
		}
	default:
		return nil, Errorf(EINVALID, "an attempt cannot end in status %q", o.Status)
	}
	tx, err := s.Store.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)

	m, err := tx.OutboxGetForUpdate(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := holds("outbox message", id, attempt, m.Attempts, m.Status == OutboxSending); err != nil {
		return nil, err
	}
	now := tx.Now()
	m.Status, m.LastError, m.NextAttemptAt, m.LeaseExpiresAt, m.UpdatedAt = o.Status, o.Error, nil, nil, now
	outcome := "retry"
	switch o.Status {
	case OutboxSent:
		m.SentAt, outcome = &now, "sent"
		if m.Kind == OutboxSignin {
			// The link is in the mail now; the outbox keeps no usable token.
			m.Payload = redactSignin(m.Payload)
		}
	case OutboxFailed:
		outcome = "failed"
	case OutboxPending:
		at := o.RetryAt.UTC().Truncate(Precision)
		m.NextAttemptAt = &at
	}
	if err := tx.OutboxUpdateIfAttempt(ctx, m, attempt); err != nil {
		return nil, err
	}
	if err := tx.OutboxAttemptFinish(ctx, id, attempt, outcome, o.Error); err != nil {
		return nil, err
	}
	if o.Status == OutboxPending {
		if err := tx.Notify(ctx, TopicOutbox); err != nil {
			return nil, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	return m, nil
}

// RetryOutbox puts a failed message back in the queue for the operator p: pending, due now,
// its attempts kept (so every attempt number stays a unique fence). EFORBIDDEN, before
// anything else, unless p may operate (Principal.MayOperate); ECONFLICT unless it is failed;
// ENOTFOUND for an unknown message.
func (s *Service) RetryOutbox(ctx context.Context, p Principal, id string) (*OutboxMessage, error) {
	if err := mayOperate(p); err != nil {
		return nil, err
	}
	tx, err := s.Store.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)
	m, err := tx.OutboxGetForUpdate(ctx, id)
	if err != nil {
		return nil, err
	}
	if m.Status != OutboxFailed {
		return nil, Errorf(ECONFLICT, "outbox message %s is %s; only a failed message can be retried", id, m.Status)
	}
	now := tx.Now()
	m.Status, m.NextAttemptAt, m.UpdatedAt = OutboxPending, &now, now
	if err := tx.OutboxUpdateIfStatus(ctx, m, OutboxFailed); err != nil {
		return nil, err
	}
	if err := tx.Notify(ctx, TopicOutbox); err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	return m, nil
}

// Redacted returns m as operators may see it: a sign-in link's payload without its token,
// which would sign its reader in as the recipient; any other message as it is.
func (m *OutboxMessage) Redacted() *OutboxMessage {
	if m.Kind != OutboxSignin {
		return m
	}
	c := *m
	c.Payload = redactSignin(m.Payload)
	return &c
}

// redactSignin removes the token from a sign-in payload.
func redactSignin(payload json.RawMessage) json.RawMessage {
	var s Signin
	if json.Unmarshal(payload, &s) != nil {
		return json.RawMessage(`{}`)
	}
	s.Token = ""
	b, _ := json.Marshal(s)
	return b
}
