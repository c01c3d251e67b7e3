package client

import (
	"context"
	"iter"
	"net/http"
	"net/url"
)

// The operator calls need an operator or admin token. Their POSTs are not idempotent: a
// repeat of a retry, resolve or cancel that took effect is refused with 409, since the
// execution is no longer in a state that allows it. So they are sent again only when the
// first request cannot have been acted on (no connection was made, or 429 or 503); after
// any other failure the caller reads the execution to see whether it took effect.

// ListExecutions returns executions, newest first, fetching pages as the iteration goes.
// Status "needs_review" is the operator's work list.
func (c *Client) ListExecutions(ctx context.Context, o ExecutionListOptions) iter.Seq2[*ExecutionRecord, error] {
	q := url.Values{}
	setQuery(q, "status", o.Status)
	setLimit(q, o.Limit)
	return pages[*ExecutionRecord](ctx, c, "/v1/executions", q, "executions")
}

// GetExecution returns one execution.
func (c *Client) GetExecution(ctx context.Context, id string) (*ExecutionRecord, error) {
	var e ExecutionRecord
	if _, err := c.call(ctx, request{method: http.MethodGet, path: "/v1/executions/" + pathID(id)}, &e); err != nil {
		return nil, err
	}
	return &e, nil
}

// RetryExecution queues a failed, needs_review or cancelled execution (or an accepted
// asynchronous one whose report never came) again, with the same operation key.
func (c *Client) RetryExecution(ctx context.Context, id string) (*ExecutionRecord, error) {
	return c.executionAction(ctx, id, "retry", nil)
}

// ResolveExecution records what really happened to a needs_review or failed execution:
// outcome is "succeeded" or "failed", and note (required) says how the operator knows.
func (c *Client) ResolveExecution(ctx context.Context, id, outcome, note string) (*ExecutionRecord, error) {
	body, err := jsonBody(map[string]string{"outcome": outcome, "note": note})
	if err != nil {
		return nil, err
	}
	return c.executionAction(ctx, id, "resolve", body)
}

// CancelExecution keeps a queued execution from running.
func (c *Client) CancelExecution(ctx context.Context, id string) (*ExecutionRecord, error) {
	return c.executionAction(ctx, id, "cancel", nil)
}

func (c *Client) executionAction(ctx context.Context, id, action string, body []byte) (*ExecutionRecord, error) {
	var e ExecutionRecord
	if _, err := c.call(ctx, request{
		method: http.MethodPost, path: "/v1/executions/" + pathID(id) + "/" + action, body: body, mode: unsentOnly,
	}, &e); err != nil {
		return nil, err
	}
	return &e, nil
}

// ListInbox returns stored webhook events, newest first, without their bodies.
func (c *Client) ListInbox(ctx context.Context, o InboxListOptions) iter.Seq2[*InboxEvent, error] {
	q := url.Values{}
	setQuery(q, "status", o.Status)
	setQuery(q, "source", o.Source)
	setLimit(q, o.Limit)
	return pages[*InboxEvent](ctx, c, "/v1/inbox", q, "events")
}

// GetInboxEvent returns one stored webhook event with its verified headers and raw body.
func (c *Client) GetInboxEvent(ctx context.Context, id string) (*InboxEvent, error) {
	var e InboxEvent
	if _, err := c.call(ctx, request{method: http.MethodGet, path: "/v1/inbox/" + pathID(id)}, &e); err != nil {
		return nil, err
	}
	return &e, nil
}

// RetryInboxEvent puts a failed webhook event back in the queue.
func (c *Client) RetryInboxEvent(ctx context.Context, id string) (*InboxEvent, error) {
	var e InboxEvent
	if _, err := c.call(ctx, request{
		method: http.MethodPost, path: "/v1/inbox/" + pathID(id) + "/retry", mode: unsentOnly,
	}, &e); err != nil {
		return nil, err
	}
	return &e, nil
}
