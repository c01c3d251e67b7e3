package webhook

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"

	"github.com/slack-go/slack"

	"github.com/approvald/approval"
)

// The identifiers approvald gives the parts of its Slack messages and form, by which an
// interaction says what was clicked (docs/slack.md).
const (
	SlackApproveAction = "approvald_approve" // the Approve button; its value is the approval id
	SlackRejectAction  = "approvald_reject"  // the Reject button, which opens the form
	SlackRejectForm    = "approvald_reject"  // the form's callback_id
	SlackCommentBlock  = "comment"           // the form's input block and its element
)

// SlackFormMetadata is the private metadata of the reject form: what its submission votes
// on, and where its answer goes.
type SlackFormMetadata struct {
	ApprovalID  string `json:"approval_id"`
	ResponseURL string `json:"response_url,omitempty"`
}

// VerifySlack checks Slack's signature of an interaction: X-Slack-Signature is the HMAC-SHA256
// of "v0:" + X-Slack-Request-Timestamp + ":" + the raw body under the signing secret,
// compared in constant time, and the timestamp is within five minutes of now
// (slack.NewSecretsVerifier). EUNAUTHORIZED for a bad signature or timestamp, EINVALID for
// missing headers.
func VerifySlack(h http.Header, body []byte, secret string) error {
	if h.Get("X-Slack-Signature") == "" || h.Get("X-Slack-Request-Timestamp") == "" {
		return approval.Errorf(approval.EINVALID, "missing X-Slack-Signature or X-Slack-Request-Timestamp header")
	}
	v, err := slack.NewSecretsVerifier(h, secret)
	switch {
	case errors.Is(err, slack.ErrExpiredTimestamp):
		return approval.Errorf(approval.EUNAUTHORIZED, "X-Slack-Request-Timestamp is more than five minutes from now")
	case err != nil:
		return approval.Errorf(approval.EUNAUTHORIZED, "the Slack signature headers are malformed")
	}
	if _, err := v.Write(body); err != nil {
		return approval.Errorf(approval.EINTERNAL, "hash the body: %v", err)
	}
	if v.Ensure() != nil {
		return approval.Errorf(approval.EUNAUTHORIZED, "the Slack signature does not match the body")
	}
	return nil
}

// ParseSlackInteraction reads an interaction's body (a form whose payload field is JSON) and
// returns its inbox type, its identity (which a second delivery of the same interaction
// shares, and no other interaction does: Slack's trigger_id, one per click or submission)
// and what it asks. EINVALID for anything but a click of approvald's buttons or a
// submission of its reject form.
func ParseSlackInteraction(body []byte) (typ, eventID string, in approval.SlackInteraction, err error) {
	form, err := url.ParseQuery(string(body))
	if err != nil || form.Get("payload") == "" {
		return "", "", in, approval.Errorf(approval.EINVALID, "the body is not a form with a payload field")
	}
	var cb slack.InteractionCallback
	if err := json.Unmarshal([]byte(form.Get("payload")), &cb); err != nil {
		return "", "", in, approval.Errorf(approval.EINVALID, "the payload is not an interaction: %v", err)
	}
	if cb.User.ID == "" || cb.TriggerID == "" {
		return "", "", in, approval.Errorf(approval.EINVALID, "the interaction names no user or trigger_id")
	}
	in.User, in.TriggerID = cb.User.ID, cb.TriggerID
	switch cb.Type {
	case slack.InteractionTypeBlockActions:
		if len(cb.ActionCallback.BlockActions) != 1 {
			return "", "", in, approval.Errorf(approval.EINVALID, "a click carries one action; this carries %d", len(cb.ActionCallback.BlockActions))
		}
		a := cb.ActionCallback.BlockActions[0]
		switch a.ActionID {
		case SlackApproveAction:
			in.Verdict = approval.VerdictApprove
		case SlackRejectAction:
			in.Verdict, in.AskComment = approval.VerdictReject, true
		default:
			return "", "", in, approval.Errorf(approval.EINVALID, "action %q is not one of approvald's buttons", a.ActionID)
		}
		in.ApprovalID, in.ResponseURL = a.Value, cb.ResponseURL
		typ = approval.TypeSlackBlockActions
	case slack.InteractionTypeViewSubmission:
		if cb.View.CallbackID != SlackRejectForm {
			return "", "", in, approval.Errorf(approval.EINVALID, "view %q is not approvald's reject form", cb.View.CallbackID)
		}
		var md SlackFormMetadata
		if err := json.Unmarshal([]byte(cb.View.PrivateMetadata), &md); err != nil {
			return "", "", in, approval.Errorf(approval.EINVALID, "the form's private metadata is unreadable")
		}
		in.ApprovalID, in.ResponseURL, in.Verdict = md.ApprovalID, md.ResponseURL, approval.VerdictReject
		if cb.View.State != nil {
			in.Comment = cb.View.State.Values[SlackCommentBlock][SlackCommentBlock].Value
		}
		typ = approval.TypeSlackViewSubmission
	default:
		return "", "", in, approval.Errorf(approval.EINVALID, "interactions of type %q are not taken", cb.Type)
	}
	if in.ApprovalID == "" {
		return "", "", in, approval.Errorf(approval.EINVALID, "the interaction names no approval")
	}
	return typ, string(cb.Type) + ":" + cb.TriggerID, in, nil
}
