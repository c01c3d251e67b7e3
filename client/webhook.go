package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/approvald/approval/webhook"
)

// SignStandardWebhook signs a webhook for approvald's intake (POST /v1/inbox/{source} of a
// standard-webhooks source) and returns the webhook-id, webhook-timestamp and
// webhook-signature headers to send with body. secret is the source's "whsec_..." secret; id
// is the event's id, the same on every redelivery of one event, since approvald deduplicates
// by it; timestamp is the send time (time.Now()), which must be within the source's
// tolerance when it arrives.
func SignStandardWebhook(secret, id string, timestamp time.Time, body []byte) (http.Header, error) {
	return webhook.SignStandard(secret, id, timestamp, body)
}

// ExecutionCall is a verified call from approvald's execution runner to a target.
type ExecutionCall struct {
	// Key is the Idempotency-Key, the same on every attempt of the execution: a target that
	// has already done the operation under this key must not do it again. It names the
	// requester and the operation key ("ci-bot/deploy-prod-1042"; docs/http-api.md, "The
	// call"), since two requesters may use one operation key for two operations: deduplicate
	// on Key, not on Approval.OperationKey.
	Key string
	// MessageID is the webhook-id: the execution id and attempt number, different per
	// attempt.
	MessageID string
	// Timestamp is the signed send time.
	Timestamp time.Time
	// Approval is the approved approval the call carries out.
	Approval *Approval
}

// ErrSignature is returned, wrapped, by VerifyExecution for a call that is not signed with
// the secret, is signed too long ago or too far ahead (more than 5 minutes), or lacks the
// headers: answer such a call 401 and do nothing.
var ErrSignature = errors.New("execution call signature refused")

// VerifyExecution checks a call from approvald's execution runner (docs/http-api.md, "The
// call") against the action's "whsec_..." secret, over the raw body, and returns what it
// carries. The check is the Standard Webhooks one approvald's own intake uses: HMAC-SHA256
// of "id.timestamp.body", compared in constant time, with a timestamp within 5 minutes of
// now.
func VerifyExecution(secret string, header http.Header, body []byte) (*ExecutionCall, error) {
	v := webhook.Verifier{Scheme: webhook.SchemeStandard, Secrets: []string{secret}}
	if err := v.Validate(); err != nil {
		return nil, fmt.Errorf("verify execution: %w", err)
	}
	d, err := v.Verify(header, body, time.Now())
	if err != nil {
		return nil, fmt.Errorf("verify execution: %w: %w", ErrSignature, err)
	}
	var msg struct {
		Approval *Approval `json:"approval"`
	}
	if err := json.Unmarshal(body, &msg); err != nil || msg.Approval == nil {
		return nil, fmt.Errorf("verify execution: the body is not {\"approval\": {...}}")
	}
	return &ExecutionCall{
		Key:       header.Get("Idempotency-Key"),
		MessageID: d.EventID,
		Timestamp: d.Timestamp,
		Approval:  msg.Approval,
	}, nil
}
