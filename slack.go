package approval

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Slack is a channel of its own (docs/slack.md): an approval that waits for a person is a
// direct message with Approve and Reject buttons (and a post in the configured channel), a
// click is an interaction Slack signs and approvald keeps in the inbox before it answers, and
// its application casts the vote by the same rules as the API's, with the inbox event as the
// cause. A decision, an expiry or a cancel updates every message of the approval. Posts,
// updates and the answers to clicks all go through the outbox.

// The names the Slack channel uses in the inbox and the outbox.
const (
	// ChannelSlack is the outbox channel of Slack's messages.
	ChannelSlack = "slack"
	// SourceSlack is the inbox source of Slack's interactions; no webhook source may use it.
	SourceSlack = "slack"
	// TypeSlackBlockActions is the inbox type of a button's click.
	TypeSlackBlockActions = "slack.block_actions"
	// TypeSlackViewSubmission is the inbox type of the reject form's submission.
	TypeSlackViewSubmission = "slack.view_submission"
	// EventSlackReply is the outbox event of an answer to an interaction: an ephemeral
	// message to the person who clicked, or the reject form opened for them.
	EventSlackReply = "slack.reply"
	// SlackEveryMessage is the recipient of an update: every message of the approval.
	SlackEveryMessage = "*"
)

// SlackRouting is the Slack part of Routing.
type SlackRouting struct {
	// Users are the Slack user ids the configuration names (person to user id). A person
	// without one is found by their address in Emails and remembered (Service.SlackUser).
	Users map[string]string
	// Emails are the addresses the configuration names (person to address), by which a
	// person without a configured Slack user is looked up in Slack.
	Emails map[string]string
	// Channel is a channel id every approval is also posted in, "" for none.
	Channel string
}

// SlackMessage is a message posted in Slack for an outbox notification: its conversation
// and its ts, which chat.update names it by.
type SlackMessage struct {
	OutboxID   string    `json:"outbox_id"`
	ApprovalID string    `json:"approval_id"`
	Recipient  string    `json:"recipient"` // a person, or "#" and the channel id
	Channel    string    `json:"channel"`
	TS         string    `json:"ts"`
	PostedAt   time.Time `json:"posted_at"`
}

// SlackInteraction is what a click or the reject form's submission asks, as read from the
// payload Slack signed.
type SlackInteraction struct {
	User       string  // the Slack user id of whoever clicked
	ApprovalID string  // from the button's value, or the form's private metadata
	Verdict    Verdict // approve or reject
	Comment    string
	// AskComment is the Reject button's click: it opens the form asking for a comment,
	// whose submission votes.
	AskComment  bool
	ResponseURL string // where the answer to the click goes
	TriggerID   string // opens the form, for three seconds
	// LookedUp says the inbox worker already asked Slack who User is (SlackLookupError):
	// a user still no person's is answered as unknown rather than looked up again.
	LookedUp bool
}

// SlackLookupError is what applying an interaction returns when its Slack user is nobody's
// that approvald knows yet, and a person's address may still name them: the worker asks Slack
// for the user's address outside any transaction (users.info), remembers whose it is
// (Service.RecordSlackUserByEmail), and applies the interaction again with LookedUp set.
type SlackLookupError struct {
	User string
}

func (e *SlackLookupError) Error() string {
	return fmt.Sprintf("slack user %s is not known yet: look up their address", e.User)
}

// SlackReply is the payload of an EventSlackReply message.
type SlackReply struct {
	ResponseURL string `json:"response_url,omitempty"`
	Text        string `json:"text,omitempty"`
	// Form, when set, is the reject form to open with TriggerID, for ApprovalID.
	Form       bool   `json:"form,omitempty"`
	TriggerID  string `json:"trigger_id,omitempty"`
	ApprovalID string `json:"approval_id"`
	Title      string `json:"title,omitempty"`
}

// SlackUser returns person's Slack user id: the configured one, else the one stored when
// their address was looked up (RecordSlackUser), else "".
func (s *Service) SlackUser(ctx context.Context, person string) (string, error) {
	if sr := s.Routing.Slack; sr != nil && sr.Users[person] != "" {
		return sr.Users[person], nil
	}
	return inTx(ctx, s, func(tx Tx) (string, error) { return tx.SlackUserGet(ctx, person) })
}

// SlackEmail returns the configured address person is looked up in Slack by, "" when none.
func (s *Service) SlackEmail(person string) string {
	if sr := s.Routing.Slack; sr != nil {
		return sr.Emails[person]
	}
	return ""
}

// RecordSlackUser remembers userID as person's Slack user, found by their address.
func (s *Service) RecordSlackUser(ctx context.Context, person, userID string) error {
	_, err := inTx(ctx, s, func(tx Tx) (struct{}, error) { return struct{}{}, tx.SlackUserUpsert(ctx, person, userID) })
	return err
}

// RecordSlackUserByEmail remembers userID, whose Slack profile has the address email, as the
// Slack user of the person whose configured address it is (compared without case, as
// addresses are everywhere) and who has no configured Slack user, and returns that person;
// "" when no person, or several, have that address, and nothing is stored then.
func (s *Service) RecordSlackUserByEmail(ctx context.Context, userID, email string) (string, error) {
	sr := s.Routing.Slack
	if sr == nil || userID == "" || email == "" {
		return "", nil
	}
	if err := CheckText("slack user", userID); err != nil {
		return "", err
	}
	var persons []string
	for p, addr := range sr.Emails {
		if sr.Users[p] == "" && strings.EqualFold(addr, email) {
			persons = append(persons, p)
		}
	}
	if len(persons) != 1 {
		return "", nil
	}
	return persons[0], s.RecordSlackUser(ctx, persons[0], userID)
}

// SlackMessage returns the message recorded for the notification outboxID, or ENOTFOUND.
func (s *Service) SlackMessage(ctx context.Context, outboxID string) (SlackMessage, error) {
	return inTx(ctx, s, func(tx Tx) (SlackMessage, error) { return tx.SlackMessageGet(ctx, outboxID) })
}

// RecordSlackMessage records a message posted for a notification; a notification's first
// record stands.
func (s *Service) RecordSlackMessage(ctx context.Context, m SlackMessage) error {
	_, err := inTx(ctx, s, func(tx Tx) (struct{}, error) { return struct{}{}, tx.SlackMessageInsert(ctx, m) })
	return err
}

// SlackThread is an approval as its Slack messages show it, and those messages.
type SlackThread struct {
	Approval *Approval
	// Policy is the approval's progress under its policy, with the groups as they are now;
	// nil for an approval that keeps none.
	Policy   *PolicyStatus
	Messages []SlackMessage
}

// SlackThread returns the approval approvalID and every message posted for it, read in one
// transaction: what an update must change, and into what.
func (s *Service) SlackThread(ctx context.Context, approvalID string) (SlackThread, error) {
	return inTx(ctx, s, func(tx Tx) (SlackThread, error) {
		msgs, err := tx.SlackMessageGetMany(ctx, approvalID)
		if err != nil {
			return SlackThread{}, err
		}
		a, err := s.Store.Approval(ctx, approvalID)
		if err != nil {
			return SlackThread{}, err
		}
		return SlackThread{Approval: a, Policy: a.PolicyStatus(s.Members), Messages: msgs}, nil
	})
}

// SlackMessages returns the messages posted for an approval, for operators.
func (s *Service) SlackMessages(ctx context.Context, approvalID string) ([]SlackMessage, error) {
	return inTx(ctx, s, func(tx Tx) ([]SlackMessage, error) { return tx.SlackMessageGetMany(ctx, approvalID) })
}

// slackPerson returns the person whose Slack user is userID: the one the configuration
// names, else the one whose looked-up user it is; "" when nobody, or several, are.
func (s *Service) slackPerson(ctx context.Context, tx Tx, userID string) (string, error) {
	sr := s.Routing.Slack
	if sr == nil || userID == "" {
		return "", nil
	}
	var configured []string
	for p, u := range sr.Users {
		if u == userID {
			configured = append(configured, p)
		}
	}
	if len(configured) > 0 {
		if len(configured) > 1 {
			return "", nil
		}
		return configured[0], nil
	}
	persons, err := tx.SlackUserPersons(ctx, userID)
	if err != nil || len(persons) != 1 {
		return "", err
	}
	if u := sr.Users[persons[0]]; u != "" && u != userID {
		return "", nil // the configuration names another user for them now
	}
	return persons[0], nil
}

// slackLookupMayFind reports whether an unknown Slack user may still be found by address: a
// person has a configured address and no configured Slack user.
func (s *Service) slackLookupMayFind() bool {
	sr := s.Routing.Slack
	if sr == nil {
		return false
	}
	for p := range sr.Emails {
		if sr.Users[p] == "" {
			return true
		}
	}
	return false
}

// applySlack applies an interaction of the inbox event cur, locked in tx, and queues its
// answer to the person who clicked: the vote goes through decide, the one path of a vote,
// for the person the Slack user is; an unknown user, an approval decided only on its page,
// or a vote the rules refuse changes nothing and is answered with why.
func (s *Service) applySlack(ctx context.Context, tx Tx, cur *InboxEvent, in SlackInteraction, cause Cause) (InboxStatus, string, string, error) {
	reply := SlackReply{ResponseURL: in.ResponseURL, ApprovalID: in.ApprovalID}
	person, err := s.slackPerson(ctx, tx, in.User)
	if err != nil {
		return "", "", "", err
	}
	finish := func(outcome string) (InboxStatus, string, string, error) {
		if err := queueSlackReply(ctx, tx, cur.ID, cmp.Or(person, in.User), reply); err != nil {
			return "", "", "", err
		}
		return InboxProcessed, outcome, in.ApprovalID, nil
	}
	if person == "" {
		if !in.LookedUp && in.User != "" && s.slackLookupMayFind() {
			return "", "", "", &SlackLookupError{User: in.User}
		}
		reply.Text = "approvald does not know your Slack account, so your click changed nothing: no person has your Slack user id or your Slack address. Ask an operator to add your Slack user id to people[].slack."
		return finish(fmt.Sprintf("refused: Slack user %s is not a known person", in.User))
	}
	a, err := tx.ApprovalGetForUpdate(ctx, in.ApprovalID)
	if e := AsError(err); e != nil && e.Code == ENOTFOUND {
		reply.Text = "This approval does not exist."
		return finish(fmt.Sprintf("refused: approval %s not found", in.ApprovalID))
	} else if err != nil {
		return "", "", "", err
	}
	reply.Title = a.Title
	if a.Resolved != nil && a.Resolved.NoChatDecisions {
		reply.Text = fmt.Sprintf("“%s” is decided on its page after signing in, not in Slack; your click changed nothing.", a.Title)
		return finish(fmt.Sprintf("refused: policy %s decides approval %s on its page only (chat_decisions: false)", a.Resolved.Policy, a.ID))
	}
	if in.AskComment {
		if a.Status.Terminal() {
			reply.Text = terminalAnswer(a)
			return finish(fmt.Sprintf("refused: approval %s is already %s", a.ID, a.Status))
		}
		reply.Form, reply.TriggerID = true, in.TriggerID
		return finish(fmt.Sprintf("approval %s: the reject form opened for %s", a.ID, person))
	}
	d := DecideRequest{ApprovalID: in.ApprovalID, Approver: person, Verdict: in.Verdict, Comment: in.Comment, Cause: cause}
	res, err := s.decide(ctx, tx, d)
	if err != nil {
		return "", "", "", err
	}
	if res.refusal != nil {
		if !refusedByRules(res.refusal) {
			return "", "", "", res.refusal
		}
		reply.Text = refusalAnswer(res, d)
		return finish("refused: " + res.refusal.Message)
	}
	reply.Text = voteAnswer(res, d)
	return finish(DecisionOutcome(res.approval, d, res.repeat))
}

// queueSlackReply queues the answer to the interaction of inbox event eventID.
func queueSlackReply(ctx context.Context, tx Tx, eventID, recipient string, r SlackReply) error {
	payload, err := json.Marshal(r)
	if err != nil {
		return Errorf(EINTERNAL, "encode slack reply: %v", err)
	}
	now := tx.Now()
	m := &OutboxMessage{
		ID: NewID("ntf"), NaturalKey: "slack-reply\x1f" + eventID, Kind: OutboxNotification,
		ApprovalID: r.ApprovalID, Recipient: recipient, Channel: ChannelSlack, Event: EventSlackReply,
		Payload: payload, Status: OutboxPending, NextAttemptAt: &now, CreatedAt: now, UpdatedAt: now,
	}
	if err := tx.OutboxInsert(ctx, m); err != nil {
		return err
	}
	return tx.Notify(ctx, TopicOutbox)
}

// slackTime is how an answer names a time.
func slackTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") }

// terminalAnswer says truthfully how a, no longer pending, ended: who decided it, and when.
func terminalAnswer(a *Approval) string {
	at := ""
	if a.DecidedAt != nil {
		at = " at " + slackTime(*a.DecidedAt)
	}
	switch a.Status {
	case StatusApproved, StatusRejected:
		if by := decider(a); by != "" {
			return fmt.Sprintf("“%s” was already %s by %s%s.", a.Title, a.Status, by, at)
		}
	}
	return fmt.Sprintf("“%s” was already %s%s.", a.Title, a.Status, at)
}

// decider is the person whose vote made a approved or rejected: the last approve, or the
// reject.
func decider(a *Approval) string {
	want := VerdictApprove
	if a.Status == StatusRejected {
		want = VerdictReject
	}
	for i := len(a.Decisions) - 1; i >= 0; i-- {
		if a.Decisions[i].Verdict == want {
			return a.Decisions[i].Approver
		}
	}
	return ""
}

// verbed is a verdict as a past tense.
func verbed(v Verdict) string {
	if v == VerdictReject {
		return "rejected"
	}
	return "approved"
}

// voteAnswer is the answer to a vote the rules accepted.
func voteAnswer(res decided, d DecideRequest) string {
	a := res.approval
	if res.repeat {
		prev, _ := a.DecisionBy(d.Approver)
		return fmt.Sprintf("You already %s “%s” at %s; nothing changed.", verbed(prev.Verdict), a.Title, slackTime(prev.At))
	}
	if a.Status.Terminal() {
		return fmt.Sprintf("You %s “%s”: it is %s.", verbed(d.Verdict), a.Title, a.Status)
	}
	return fmt.Sprintf("You approved “%s”; it still waits for other approvers.", a.Title)
}

// refusalAnswer is the answer to a vote the rules refused: nothing changed, and why.
func refusalAnswer(res decided, d DecideRequest) string {
	a, e := res.approval, res.refusal
	switch {
	case a != nil && e.Code == ECONFLICT:
		if prev, ok := a.DecisionBy(d.Approver); ok {
			return fmt.Sprintf("You already %s “%s” at %s; a vote cannot be changed.", verbed(prev.Verdict), a.Title, slackTime(prev.At))
		}
		if a.Status.Terminal() {
			return terminalAnswer(a)
		}
	case e.Code == ENOTFOUND:
		return "This approval does not exist."
	case e.Code == EFORBIDDEN:
		return "You may not vote on this approval, so your click changed nothing: " + e.Message + "."
	}
	return "Your vote was not recorded: " + e.Message + "."
}
