package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/web"
	"github.com/approvald/approval/webhook"
	"github.com/approvald/approval/worker"
)

// Chat posts notifications to Slack-compatible incoming webhooks: {"text": ..., "blocks":
// [...]}. The link goes to the approval's page; no message carries a button that decides.
type Chat struct {
	// URL returns the webhook of a person (their own, or their team's channel), "" when none.
	URL       func(person string) string
	PublicURL string
	Client    *http.Client // nil: a client with a 30s timeout
}

// Send posts m; see worker.Sender.
func (c *Chat) Send(ctx context.Context, m *approval.OutboxMessage) error {
	dest := ""
	if c.URL != nil {
		dest = c.URL(m.Recipient)
	}
	if dest == "" {
		return worker.Permanent(fmt.Errorf("%s has no chat webhook", m.Recipient))
	}
	var n approval.Notice
	if err := json.Unmarshal(m.Payload, &n); err != nil {
		return worker.Permanent(fmt.Errorf("decode notice of %s: %w", m.ID, err))
	}
	link := strings.TrimSuffix(c.PublicURL, "/") + web.ApprovalPath(n.ApprovalID)
	text := Subject(n)
	if details := Details(n); len(details) > 0 {
		text += "\n" + strings.Join(details, "\n")
	}
	body, err := json.Marshal(map[string]any{
		"text": text + "\n" + link,
		"blocks": []any{
			map[string]any{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": slackEscape(text)}},
			map[string]any{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": "<" + link + "|Open it in approvald>"}},
		},
	})
	if err != nil {
		return worker.Permanent(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, dest, bytes.NewReader(body))
	if err != nil {
		return worker.Permanent(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return post(client(c.Client), req)
}

// slackEscape escapes what Slack's mrkdwn gives meaning to.
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// Callback POSTs a decision to the URL its message names, signed the Standard Webhooks way:
// webhook-id is the event's id, the same on every resend, so a receiver deduplicates.
//
// Its client checks every address it connects to after the name is resolved
// (guardedClient): a callback whose host resolves to a loopback, private, link-local,
// unspecified, multicast or reserved address fails for good, unless AllowPrivate is set. It
// follows no redirects and uses no proxy.
type Callback struct {
	// Secret returns the "whsec_" secret a requester's callbacks are signed with; "" sends
	// them unsigned.
	Secret func(requester string) string
	// AllowPrivate lets callbacks reach non-public addresses (callbacks.allow_private): a
	// receiver on the same host or network, or tests on loopback.
	AllowPrivate bool
	Now          func() time.Time // the signature's timestamp; time.Now when nil

	clientOnce sync.Once
	client     *http.Client
}

// CallbackBody is what a callback POSTs.
type CallbackBody struct {
	Type      string          `json:"type"` // approval.approved, approval.rejected, approval.expired, approval.cancelled
	Timestamp time.Time       `json:"timestamp"`
	Data      approval.Notice `json:"data"`
}

// Send posts m; see worker.Sender. A 2xx is delivered; 408, 429 and 5xx are retried; any
// other answer is refused for good.
func (c *Callback) Send(ctx context.Context, m *approval.OutboxMessage) error {
	var n approval.Notice
	if err := json.Unmarshal(m.Payload, &n); err != nil || n.URL == "" || n.EventID == "" {
		return worker.Permanent(fmt.Errorf("callback %s has no URL or event id", m.ID))
	}
	dest := n.URL
	n.URL = ""
	body, err := json.Marshal(CallbackBody{Type: n.Event, Timestamp: n.At, Data: n})
	if err != nil {
		return worker.Permanent(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, dest, bytes.NewReader(body))
	if err != nil {
		return worker.Permanent(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "approvald")
	if secret := c.secret(n.Requester); secret != "" {
		now := time.Now
		if c.Now != nil {
			now = c.Now
		}
		h, err := webhook.SignStandard(secret, n.EventID, now(), body)
		if err != nil {
			return worker.Permanent(err)
		}
		for k, v := range h {
			req.Header[k] = v
		}
	} else {
		req.Header.Set("webhook-id", n.EventID)
	}
	c.clientOnce.Do(func() { c.client = guardedClient(c.AllowPrivate) })
	err = post(c.client, req)
	if errors.Is(err, ErrAddressRefused) {
		return worker.Permanent(err)
	}
	return err
}

func (c *Callback) secret(requester string) string {
	if c.Secret == nil {
		return ""
	}
	return c.Secret(requester)
}

// post sends req and classifies the answer.
func post(cl *http.Client, req *http.Request) error {
	resp, err := cl.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	switch s := resp.StatusCode; {
	case s >= 200 && s < 300:
		return nil
	case s == http.StatusRequestTimeout || s == http.StatusTooManyRequests || s >= 500:
		return fmt.Errorf("%s answered %s", req.URL.Redacted(), resp.Status)
	default:
		return worker.Permanent(fmt.Errorf("%s answered %s", req.URL.Redacted(), resp.Status))
	}
}

// client is cl, or a client of its own that follows no redirects: a redirected POST is not
// the call that was meant.
func client(cl *http.Client) *http.Client {
	if cl != nil {
		return cl
	}
	return &http.Client{
		Timeout:       30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
