package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack"

	"github.com/approvald/approval"
	"github.com/approvald/approval/failpoint"
	"github.com/approvald/approval/web"
	"github.com/approvald/approval/webhook"
	"github.com/approvald/approval/worker"
)

// FailpointSlackAfterPost sits between Slack's acceptance of a post and its record
// (docs/operations.md, docs/slack.md): the window in which a crash leaves a post whose
// outcome the next attempt must look up.
const FailpointSlackAfterPost = "slack.after-post"

// slackMetadataType is the event_type of the metadata every post carries: its notification's
// id, by which an attempt whose outcome is uncertain finds a post made before it.
const slackMetadataType = "approvald_notification"

// Slack sends the outbox's Slack messages through Slack's Web API (docs/slack.md): a post of
// a notice asking for a vote, in the person's direct messages or the configured channel, with
// the Approve and Reject buttons; the update of every message of an approval once it ends;
// and the answer to an interaction, ephemeral through its response_url, or the reject form.
//
// chat.postMessage has no idempotency key, so each post carries its notification's id in
// its metadata, and a later attempt of the same notification (the one before may have died
// after Slack accepted it) first looks for it: in the record of posts, then in the
// conversation's history. Updates are idempotent. A 429 holds back every call of that
// method until its Retry-After has passed.
type Slack struct {
	Client *slack.Client
	// HTTP posts the answers to response_url (nil: a client of its own).
	HTTP *http.Client
	// Rules resolves people and records messages (an *approval.Service).
	Rules SlackRules
	// PublicURL is where the pages are, for the link to an approval.
	PublicURL string
	// ResponseOrigins are the origins a response_url may have besides https://hooks.slack.com
	// (the fake Slack of tests): a response_url is taken from the body Slack signed, but is
	// still a URL approvald will POST to.
	ResponseOrigins []string
	Failpoints      *failpoint.Set
	Now             func() time.Time // time.Now when nil

	mu      sync.Mutex
	limited map[string]time.Time // method -> until when Slack asked not to call it
	unknown map[string]time.Time // Slack user -> until when "no person" stands (LookupSlackUser)
	team    *slackTeam           // the app's own workspace (auth.test), once known
}

// slackTeam is the workspace the app is installed in, and its Enterprise Grid organisation
// ("" outside one).
type slackTeam struct{ id, enterprise string }

// member reports whether u may stand for a person: a user of the app's own workspace or of
// its organisation, not deleted, not a bot and not a stranger. A user of another
// organisation reaches the app's messages through a channel shared with it (Slack Connect),
// and that organisation decides the address its profile shows: it must never make them one
// of the app's people.
func (t *slackTeam) member(u *slack.User) bool {
	if u.Deleted || u.IsBot || u.IsStranger {
		return false
	}
	return u.TeamID == t.id || (t.enterprise != "" && u.Enterprise.EnterpriseID == t.enterprise)
}

// ownTeam returns the app's own workspace, asking Slack (auth.test) the first time.
func (s *Slack) ownTeam(ctx context.Context) (*slackTeam, error) {
	s.mu.Lock()
	t := s.team
	s.mu.Unlock()
	if t != nil {
		return t, nil
	}
	err := s.call(ctx, "auth.test", func() error {
		r, err := s.Client.AuthTestContext(ctx)
		if err == nil {
			t = &slackTeam{id: r.TeamID, enterprise: r.EnterpriseID}
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if t.id == "" {
		return nil, worker.Permanent(errors.New("auth.test: Slack named no team for the bot token"))
	}
	s.mu.Lock()
	s.team = t
	s.mu.Unlock()
	return t, nil
}

// unknownUserFor is how long LookupSlackUser's answer that a Slack user is no person's
// stands, and maxUnknownUsers how many such answers are kept at once.
const (
	unknownUserFor  = 10 * time.Minute
	maxUnknownUsers = 10000
)

// maxFollowRounds bounds the rounds of follow: each round after the first is one more change
// of the approval while its messages were being updated.
const maxFollowRounds = 5

// SlackRules is what Slack needs of the Service.
type SlackRules interface {
	SlackUser(ctx context.Context, person string) (string, error)
	SlackEmail(person string) string
	RecordSlackUser(ctx context.Context, person, userID string) error
	SlackMessage(ctx context.Context, outboxID string) (approval.SlackMessage, error)
	RecordSlackMessage(ctx context.Context, m approval.SlackMessage) error
	SlackThread(ctx context.Context, approvalID string) (approval.SlackThread, error)
	RecordSlackUserByEmail(ctx context.Context, userID, email string) (string, error)
}

// Send sends m; see worker.Sender.
func (s *Slack) Send(ctx context.Context, m *approval.OutboxMessage) error {
	if m.Event == approval.EventSlackReply {
		var r approval.SlackReply
		if err := json.Unmarshal(m.Payload, &r); err != nil {
			return worker.Permanent(fmt.Errorf("decode slack reply of %s: %w", m.ID, err))
		}
		if r.Form {
			return s.openForm(ctx, r)
		}
		return s.answer(ctx, r)
	}
	var n approval.Notice
	if err := json.Unmarshal(m.Payload, &n); err != nil {
		return worker.Permanent(fmt.Errorf("decode notice of %s: %w", m.ID, err))
	}
	if m.Recipient == approval.SlackEveryMessage {
		return s.updateAll(ctx, n.ApprovalID)
	}
	return s.post(ctx, m, n)
}

// post posts the notice n of m, unless an earlier attempt did.
func (s *Slack) post(ctx context.Context, m *approval.OutboxMessage, n approval.Notice) error {
	if _, err := s.Rules.SlackMessage(ctx, m.ID); err == nil {
		return nil // recorded by an attempt whose own outcome was lost
	} else if approval.ErrorCode(err) != approval.ENOTFOUND {
		return err
	}
	channel, err := s.conversation(ctx, m.Recipient)
	if err != nil {
		return err
	}
	if m.Attempts > 1 {
		// An attempt before this one may have posted and died before recording it.
		found, err := s.findPost(ctx, channel, m)
		if err != nil {
			return err
		}
		if found != nil {
			return s.record(ctx, m, n, *found, "")
		}
	}
	t, err := s.Rules.SlackThread(ctx, n.ApprovalID)
	if err != nil {
		return err
	}
	text, blocks := s.message(t, n)
	var posted approval.SlackMessage
	err = s.call(ctx, "chat.postMessage", func() error {
		ch, ts, err := s.Client.PostMessageContext(ctx, channel,
			slack.MsgOptionText(text, false), slack.MsgOptionBlocks(blocks...),
			slack.MsgOptionMetadata(slack.SlackMetadata{EventType: slackMetadataType,
				EventPayload: map[string]any{"notification_id": m.ID, "approval_id": n.ApprovalID}}))
		posted = approval.SlackMessage{Channel: ch, TS: ts}
		return err
	})
	if err != nil {
		return err
	}
	if err := s.Failpoints.Inject(FailpointSlackAfterPost); err != nil {
		return err
	}
	return s.record(ctx, m, n, posted, shown(text, blocks))
}

// record records the post of m, which showed what (shown; "" when unknown: a post an
// earlier attempt made), then makes it follow the approval: a vote or the end that came
// meanwhile queued an update that may have read the messages before this one was recorded.
func (s *Slack) record(ctx context.Context, m *approval.OutboxMessage, n approval.Notice, posted approval.SlackMessage, what string) error {
	posted.OutboxID, posted.ApprovalID, posted.Recipient = m.ID, n.ApprovalID, m.Recipient
	if err := s.Rules.RecordSlackMessage(ctx, posted); err != nil {
		return err
	}
	return s.follow(ctx, n.ApprovalID, what, func(*approval.Approval) approval.Notice { return n },
		func(approval.SlackThread) []approval.SlackMessage { return []approval.SlackMessage{posted} })
}

// conversation returns the conversation a notification to recipient goes to: the channel of
// "#C...", else the direct messages with the person's Slack user.
func (s *Slack) conversation(ctx context.Context, recipient string) (string, error) {
	if ch, ok := strings.CutPrefix(recipient, "#"); ok {
		return ch, nil
	}
	user, err := s.user(ctx, recipient)
	if err != nil {
		return "", err
	}
	var channel string
	err = s.call(ctx, "conversations.open", func() error {
		c, _, _, err := s.Client.OpenConversationContext(ctx, &slack.OpenConversationParameters{Users: []string{user}})
		if c != nil {
			channel = c.ID
		}
		return err
	})
	return channel, err
}

// user returns person's Slack user: the configured or remembered one, else the one Slack
// finds by their address, which is then remembered.
func (s *Slack) user(ctx context.Context, person string) (string, error) {
	user, err := s.Rules.SlackUser(ctx, person)
	if err != nil || user != "" {
		return user, err
	}
	email := s.Rules.SlackEmail(person)
	if email == "" {
		return "", worker.Permanent(fmt.Errorf("%s has no Slack user: set people[].slack, or an e-mail address to look them up by", person))
	}
	team, err := s.ownTeam(ctx)
	if err != nil {
		return "", err
	}
	err = s.call(ctx, "users.lookupByEmail", func() error {
		u, err := s.Client.GetUserByEmailContext(ctx, email)
		if u != nil && team.member(u) {
			user = u.ID
		}
		return err
	})
	if err != nil {
		return "", err
	}
	if user == "" {
		return "", worker.Permanent(fmt.Errorf("users.lookupByEmail: the Slack user with %s's address is not of the app's workspace", person))
	}
	return user, s.Rules.RecordSlackUser(ctx, person, user)
}

// LookupSlackUser finds the person whose Slack user a click came from, when no person is
// known as that user (approval.SlackLookupError): it asks Slack for the user's address
// (users.info, which shows it with the scope users:read.email) outside any transaction, and
// remembers the person with that address as that user (Rules.RecordSlackUserByEmail), if the
// user is a member of the app's own workspace (slackTeam.member). found is false when no
// person has the address, or Slack knows no such user, or the user is not a member; that
// answer stands for unknownUserFor (SlackUserUnknown), so that more clicks of the same user
// do not ask Slack again. An error is Slack failing (unreachable, a 5xx, a 429, a refusal
// such as missing_scope, a member's address not shown for want of users:read.email): the
// click is then applied later or fails for an operator, never answered as unknown for it.
func (s *Slack) LookupSlackUser(ctx context.Context, userID string) (found bool, err error) {
	team, err := s.ownTeam(ctx)
	if err != nil {
		return false, err
	}
	var u *slack.User
	err = s.call(ctx, "users.info", func() error {
		var err error
		u, err = s.Client.GetUserInfoContext(ctx, userID)
		return err
	})
	var se slack.SlackErrorResponse
	switch {
	case errors.As(err, &se) && (se.Err == "user_not_found" || se.Err == "users_not_found"):
		u = nil
	case err != nil:
		return false, err
	}
	person := ""
	if u != nil && team.member(u) {
		if u.Profile.Email == "" {
			// Slack shows the address only with users:read.email: without it every clicker
			// would be nobody, and the click must not be answered so.
			return false, worker.Permanent(fmt.Errorf("users.info shows no address for Slack user %s: the app needs the users:read.email scope", userID))
		}
		if person, err = s.Rules.RecordSlackUserByEmail(ctx, userID, u.Profile.Email); err != nil {
			return false, err
		}
	}
	if person == "" {
		s.rememberUnknown(userID)
	}
	return person != "", nil
}

// SlackUserUnknown reports whether LookupSlackUser found no person for userID less than
// unknownUserFor ago.
func (s *Slack) SlackUserUnknown(userID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unknown[userID].After(s.now())
}

// rememberUnknown remembers for unknownUserFor that userID is no person's, keeping at most
// maxUnknownUsers such answers: the ones that have run out go first, then all of them.
func (s *Slack) rememberUnknown(userID string) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.unknown) >= maxUnknownUsers {
		maps.DeleteFunc(s.unknown, func(_ string, until time.Time) bool { return !until.After(now) })
		if len(s.unknown) >= maxUnknownUsers {
			clear(s.unknown)
		}
	}
	if s.unknown == nil {
		s.unknown = map[string]time.Time{}
	}
	s.unknown[userID] = now.Add(unknownUserFor)
}

// findPost looks for the post of m in channel's history since m was queued.
func (s *Slack) findPost(ctx context.Context, channel string, m *approval.OutboxMessage) (*approval.SlackMessage, error) {
	oldest := fmt.Sprintf("%d.000000", m.CreatedAt.Add(-time.Minute).Unix())
	cursor := ""
	for {
		var page *slack.GetConversationHistoryResponse
		err := s.call(ctx, "conversations.history", func() (err error) {
			page, err = s.Client.GetConversationHistoryContext(ctx, &slack.GetConversationHistoryParameters{
				ChannelID: channel, Oldest: oldest, Cursor: cursor, Limit: 200, IncludeAllMetadata: true,
			})
			return err
		})
		if err != nil {
			return nil, err
		}
		for _, msg := range page.Messages {
			if msg.Metadata.EventType == slackMetadataType && msg.Metadata.EventPayload["notification_id"] == m.ID {
				return &approval.SlackMessage{Channel: channel, TS: msg.Timestamp}, nil
			}
		}
		if !page.HasMore || page.ResponseMetaData.NextCursor == "" {
			return nil, nil
		}
		cursor = page.ResponseMetaData.NextCursor
	}
}

// updateAll updates every message of an approval to show it as it is: its progress after a
// vote, how it ended after its end.
func (s *Slack) updateAll(ctx context.Context, approvalID string) error {
	return s.follow(ctx, approvalID, "", noticeOf, func(t approval.SlackThread) []approval.SlackMessage { return t.Messages })
}

// follow makes the messages that which picks show the approval as it is (rendered from the
// notice that notice makes of it), and then reads it
// again: when it changed meanwhile, what was written may be older than what another update
// wrote before it (the outbox sends messages concurrently, and Slack keeps the last update),
// so it writes again, until what it read before writing is what it reads after. So the last
// write to a message is followed by a read that shows the same, and no older progress stays
// over a newer one or over the outcome. what is what the messages show already ("" when
// unknown): the first round writes only when the approval differs from it.
func (s *Slack) follow(ctx context.Context, approvalID, what string, notice func(*approval.Approval) approval.Notice,
	which func(approval.SlackThread) []approval.SlackMessage) error {
	for round := 0; ; round++ {
		t, err := s.Rules.SlackThread(ctx, approvalID)
		if err != nil {
			return err
		}
		text, blocks := s.message(t, notice(t.Approval))
		now := shown(text, blocks)
		if now == what {
			return nil
		}
		if round == maxFollowRounds {
			return fmt.Errorf("approval %s changed %d times while its Slack messages were updated; trying again", approvalID, round)
		}
		var errs []error
		for _, m := range which(t) {
			if err := s.update(ctx, m, text, blocks); err != nil {
				errs = append(errs, err)
			}
		}
		if err := errors.Join(errs...); err != nil {
			return err
		}
		what = now
	}
}

// noticeOf is the notice a message about a is rendered from when no notice asks for it.
func noticeOf(a *approval.Approval) approval.Notice {
	n := approval.Notice{ApprovalID: a.ID, Title: a.Title, Requester: a.Requester, Action: a.Action, Status: a.Status, ExpiresAt: a.ExpiresAt}
	if a.Resolved != nil {
		n.LinkOnly = a.Resolved.NoChatDecisions
	}
	return n
}

// shown is what a message of text and blocks shows, to compare with another.
func shown(text string, blocks []slack.Block) string {
	b, _ := json.Marshal(blocks)
	return text + "\x00" + string(b)
}

// update makes one message show text and blocks.
func (s *Slack) update(ctx context.Context, m approval.SlackMessage, text string, blocks []slack.Block) error {
	err := s.call(ctx, "chat.update", func() error {
		_, _, _, err := s.Client.UpdateMessageContext(ctx, m.Channel, m.TS, slack.MsgOptionText(text, false), slack.MsgOptionBlocks(blocks...))
		return err
	})
	var se slack.SlackErrorResponse
	if errors.As(err, &se) && (se.Err == "message_not_found" || se.Err == "channel_not_found") {
		return nil // deleted in Slack: nothing left to update
	}
	return err
}

// message is the text and blocks of a message about t's approval, asked by n: the title, the
// requester, the action, the context, the progress and the expiry with the link and, while it
// waits and its policy lets chat decide, the buttons; once it has ended, its outcome instead.
// The progress is the approval's as t read it, not as n was queued with.
func (s *Slack) message(t approval.SlackThread, n approval.Notice) (string, []slack.Block) {
	a := t.Approval
	link := strings.TrimSuffix(s.PublicURL, "/") + web.ApprovalPath(a.ID)
	md := func(t string) *slack.TextBlockObject {
		return slack.NewTextBlockObject(slack.MarkdownType, t, false, false)
	}
	lines := []string{
		fmt.Sprintf("*%s*", slackEscape(a.Title)),
		fmt.Sprintf("Requested by %s · action `%s`", slackEscape(a.Requester), slackEscape(a.Action)),
	}
	if c := contextSummary(a.Context); c != "" {
		lines = append(lines, c)
	}
	text := fmt.Sprintf("%s: %s (requested by %s)", a.Status, a.Title, a.Requester)
	var status string
	if a.Status.Terminal() {
		status = fmt.Sprintf("*%s*", outcomeLine(a))
	} else {
		text = Subject(n)
		switch {
		case t.Policy != nil:
			lines = append(lines, slackEscape(t.Policy.StageLine()+": "+t.Policy.ProgressLine()))
		case a.Resolved == nil:
			lines = append(lines, slackEscape(progressLine(a)))
		}
		status = "Expires " + a.ExpiresAt.UTC().Format("2006-01-02 15:04 UTC")
	}
	blocks := []slack.Block{
		slack.NewSectionBlock(md(strings.Join(lines, "\n")), nil, nil),
		slack.NewContextBlock("", md(status+" · <"+link+"|Open it in approvald>")),
	}
	if !a.Status.Terminal() && !n.LinkOnly && !(a.Resolved != nil && a.Resolved.NoChatDecisions) {
		approve := slack.NewButtonBlockElement(webhook.SlackApproveAction, a.ID, slack.NewTextBlockObject(slack.PlainTextType, "Approve", false, false))
		approve.Style = slack.StylePrimary
		reject := slack.NewButtonBlockElement(webhook.SlackRejectAction, a.ID, slack.NewTextBlockObject(slack.PlainTextType, "Reject", false, false))
		reject.Style = slack.StyleDanger
		blocks = append(blocks, slack.NewActionBlock("approvald_vote", approve, reject))
	}
	return text, blocks
}

// progressLine is the progress of a pending approval that keeps no policy: "1 of 2
// approvals (alice)".
func progressLine(a *approval.Approval) string {
	var by []string
	for _, d := range a.Decisions {
		if d.Verdict == approval.VerdictApprove {
			by = append(by, d.Approver)
		}
	}
	line := fmt.Sprintf("%d of %d approvals", a.Approvals(), a.RequiredApprovals)
	if len(by) > 0 {
		line += " (" + strings.Join(by, ", ") + ")"
	}
	return line
}

// outcomeLine says how a ended: who, when.
func outcomeLine(a *approval.Approval) string {
	at := ""
	if a.DecidedAt != nil {
		at = " at " + a.DecidedAt.UTC().Format("2006-01-02 15:04 UTC")
	}
	by := ""
	for i := len(a.Decisions) - 1; i >= 0 && by == ""; i-- {
		d := a.Decisions[i]
		if (a.Status == approval.StatusApproved && d.Verdict == approval.VerdictApprove) ||
			(a.Status == approval.StatusRejected && d.Verdict == approval.VerdictReject) {
			by = " by " + d.Approver
		}
	}
	return fmt.Sprintf("%s%s%s", strings.ToUpper(string(a.Status[:1]))+string(a.Status[1:]), by, at)
}

// contextSummary is a readable summary of an approval's context: its top-level fields in
// name order, "name: value", each shortened, at most eight.
func contextSummary(raw json.RawMessage) string {
	var fields map[string]json.RawMessage
	if json.Unmarshal(raw, &fields) != nil || len(fields) == 0 {
		return ""
	}
	var lines []string
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		if len(lines) == 8 {
			lines = append(lines, fmt.Sprintf("… and %d more", len(fields)-8))
			break
		}
		v := string(fields[k])
		var str string
		if json.Unmarshal(fields[k], &str) == nil {
			v = str
		}
		if r := []rune(v); len(r) > 80 {
			v = string(r[:79]) + "…"
		}
		lines = append(lines, fmt.Sprintf("%s: %s", slackEscape(k), slackEscape(v)))
	}
	return strings.Join(lines, "\n")
}

// openForm opens the reject form for the person who clicked Reject.
func (s *Slack) openForm(ctx context.Context, r approval.SlackReply) error {
	md, _ := json.Marshal(webhook.SlackFormMetadata{ApprovalID: r.ApprovalID, ResponseURL: r.ResponseURL})
	input := slack.NewPlainTextInputBlockElement(slack.NewTextBlockObject(slack.PlainTextType, "Why reject it?", false, false), webhook.SlackCommentBlock)
	input.Multiline = true
	view := slack.ModalViewRequest{
		Type:  slack.VTModal,
		Title: slack.NewTextBlockObject(slack.PlainTextType, "Reject", false, false),
		Blocks: slack.Blocks{BlockSet: []slack.Block{
			slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, "*"+slackEscape(r.Title)+"*", false, false), nil, nil),
			slack.NewInputBlock(webhook.SlackCommentBlock, slack.NewTextBlockObject(slack.PlainTextType, "Comment", false, false), nil, input),
		}},
		Submit:          slack.NewTextBlockObject(slack.PlainTextType, "Reject", false, false),
		Close:           slack.NewTextBlockObject(slack.PlainTextType, "Cancel", false, false),
		PrivateMetadata: string(md),
		CallbackID:      webhook.SlackRejectForm,
	}
	err := s.call(ctx, "views.open", func() error {
		_, err := s.Client.OpenViewContext(ctx, r.TriggerID, view)
		return err
	})
	var se slack.SlackErrorResponse
	if errors.As(err, &se) && (se.Err == "expired_trigger_id" || se.Err == "invalid_trigger_id") {
		// Three seconds have passed: the person clicks again.
		return worker.Permanent(fmt.Errorf("views.open: %s (the click is older than Slack's three seconds)", se.Err))
	}
	return err
}

// answer posts an ephemeral answer to the person who clicked, through the interaction's
// response_url.
func (s *Slack) answer(ctx context.Context, r approval.SlackReply) error {
	if r.ResponseURL == "" {
		return nil // a form submitted without one: the person sees the form close
	}
	if !s.responseAllowed(r.ResponseURL) {
		return worker.Permanent(fmt.Errorf("response_url %s is not Slack's", r.ResponseURL))
	}
	cl := s.HTTP
	if cl == nil {
		cl = client(nil)
	}
	return s.call(ctx, "response_url", func() error {
		return slack.PostWebhookCustomHTTPContext(ctx, r.ResponseURL, cl, &slack.WebhookMessage{
			Text: r.Text, ResponseType: slack.ResponseTypeEphemeral, ReplaceOriginal: false,
		})
	})
}

// responseAllowed reports whether approvald may POST an answer to u: https on
// hooks.slack.com, or one of ResponseOrigins.
func (s *Slack) responseAllowed(u string) bool {
	p, err := url.Parse(u)
	if err != nil || p.User != nil {
		return false
	}
	if p.Scheme == "https" && p.Host == "hooks.slack.com" {
		return true
	}
	return slices.Contains(s.ResponseOrigins, p.Scheme+"://"+p.Host)
}

// call runs one call of a Web API method, unless Slack asked to hold that method back: a
// 429's Retry-After holds the method until then, and the message is retried no sooner.
// Slack's own refusals (an error answer such as channel_not_found, not_authed) will not
// change on a retry and fail the message.
func (s *Slack) call(ctx context.Context, method string, fn func() error) error {
	now := s.now()
	s.mu.Lock()
	until := s.limited[method]
	s.mu.Unlock()
	if until.After(now) {
		return worker.RetryAt(fmt.Errorf("%s: rate limited by Slack until %s", method, until.Format(time.RFC3339)), until)
	}
	err := fn()
	var rl *slack.RateLimitedError
	var se slack.SlackErrorResponse
	switch {
	case err == nil:
		return nil
	case errors.As(err, &rl):
		until := s.now().Add(rl.RetryAfter)
		s.mu.Lock()
		if s.limited == nil {
			s.limited = map[string]time.Time{}
		}
		s.limited[method] = until
		s.mu.Unlock()
		return worker.RetryAt(fmt.Errorf("%s: %w", method, err), until)
	case errors.As(err, &se) && !retryableSlackError(se.Err):
		// Wrapped, not quoted: the callers tell the answers apart (message_not_found).
		return worker.Permanent(fmt.Errorf("%s: Slack answered %w", method, err))
	}
	return fmt.Errorf("%s: %w", method, err)
}

// retryableSlackError reports whether Slack's error answer may change on a retry.
func retryableSlackError(code string) bool {
	switch code {
	case "internal_error", "fatal_error", "service_unavailable", "request_timeout", "ratelimited":
		return true
	}
	return false
}

func (s *Slack) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}
