package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// CreateApproval asks for an approval of the operation named by operationKey
// (deploy-prod-1042, refund-order-9281: the operation, not the attempt). The key is sent as
// Idempotency-Key on every attempt, so retrying is safe: the server makes one approval per
// key and answers a repeat with the stored response, marked as a replay. The client retries
// network errors, 429, 5xx, and the 409 with Retry-After that a create gets when the database
// cut a lock wait short; a later run of the same caller with the same key finds the same
// approval the same way. A different request under a key already used is a 422 *Error
// (CodeMismatch), returned at once.
func (c *Client) CreateApproval(ctx context.Context, operationKey string, r CreateRequest) (*CreateResult, error) {
	if operationKey == "" {
		return nil, errors.New("approvald client: create: the operation key is empty")
	}
	wire := struct {
		CreateRequest
		ExpiresIn string `json:"expires_in,omitempty"`
	}{CreateRequest: r}
	if r.ExpiresIn > 0 {
		wire.ExpiresIn = r.ExpiresIn.String()
	}
	body, err := jsonBody(wire)
	if err != nil {
		return nil, err
	}
	if !isPrintableASCII(operationKey) {
		return nil, fmt.Errorf("approvald client: create: the operation key %q is not printable ASCII", operationKey)
	}
	// Quoted as an RFC 8941 string, so that a key with a comma is one key, not a list. For
	// printable ASCII, strconv.Quote escapes exactly '"' and '\', as RFC 8941 does.
	key := strconv.Quote(operationKey)
	var a Approval
	resp, err := c.call(ctx, request{
		method: http.MethodPost, path: "/v1/approvals", body: body,
		header:        http.Header{"Idempotency-Key": {key}},
		mode:          repeatable,
		retryConflict: true,
	}, &a)
	if err != nil {
		return nil, err
	}
	return &CreateResult{
		Approval: &a,
		Replayed: resp.header.Get("Idempotent-Replayed") == "true",
		Attempts: resp.attempts,
	}, nil
}

// Get returns the approval with the id.
func (c *Client) Get(ctx context.Context, id string) (*Approval, error) {
	var a Approval
	if _, err := c.call(ctx, request{method: http.MethodGet, path: "/v1/approvals/" + pathID(id)}, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

// MaxLongPoll is the longest wait the server grants one long-poll.
const MaxLongPoll = 60 * time.Second

// Watch long-polls the approval (GET /v1/approvals/{id}?wait=&version=): it returns as soon
// as the approval's version is greater than version, or after wait (at most MaxLongPoll)
// with the approval unchanged. Version 0 returns at once.
func (c *Client) Watch(ctx context.Context, id string, version int64, wait time.Duration) (*Approval, error) {
	wait = min(max(wait, time.Second), MaxLongPoll)
	q := url.Values{"wait": {strconv.Itoa(int(wait / time.Second))}, "version": {strconv.FormatInt(version, 10)}}
	var a Approval
	if _, err := c.call(ctx, request{method: http.MethodGet, path: "/v1/approvals/" + pathID(id), query: q}, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

// WaitForDecision blocks until the approval is decided (approved, rejected, expired or
// cancelled) and returns it, or returns the context's error when ctx ends first. It is a
// chain of long-polls, each woken by the server on the approval's next change, so a decision
// is seen within moments and an idle wait costs one request a minute. onChange, if not nil,
// is called with the approval as first read and after every change (a vote), including the
// last.
func (c *Client) WaitForDecision(ctx context.Context, id string, onChange func(*Approval)) (*Approval, error) {
	var version int64
	for {
		a, err := c.Watch(ctx, id, version, MaxLongPoll)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
		if a.Version > version && onChange != nil {
			onChange(a)
		}
		if a.Decided() {
			return a, nil
		}
		version = a.Version
	}
}

// List returns the approvals the token may see, newest first, fetching pages as the
// iteration goes. An error ends the iteration.
//
//	for a, err := range c.List(ctx, client.ListOptions{Status: client.StatusPending}) {
//		if err != nil { ... }
//	}
func (c *Client) List(ctx context.Context, o ListOptions) iter.Seq2[*Approval, error] {
	q := url.Values{}
	setQuery(q, "status", o.Status)
	setQuery(q, "approver", o.Approver)
	if o.Waiting {
		q.Set("waiting", "true")
	}
	setLimit(q, o.Limit)
	return pages[*Approval](ctx, c, "/v1/approvals", q, "approvals")
}

// Approve votes approve, as the token's subject, with an optional comment. Retrying is safe:
// the server answers a repeat of the same vote with the approval and changes nothing
// (docs/http-api.md, "POST /v1/approvals/{id}/approve and /reject"), so a vote whose answer
// was lost is sent again.
func (c *Client) Approve(ctx context.Context, id, comment string) (*Approval, error) {
	return c.vote(ctx, id, "approve", comment)
}

// Reject votes reject, as the token's subject; one rejection rejects the approval. Retrying
// is safe for the reason given at Approve.
func (c *Client) Reject(ctx context.Context, id, comment string) (*Approval, error) {
	return c.vote(ctx, id, "reject", comment)
}

func (c *Client) vote(ctx context.Context, id, verdict, comment string) (*Approval, error) {
	body, err := jsonBody(map[string]string{"comment": comment})
	if err != nil {
		return nil, err
	}
	var a Approval
	if _, err := c.call(ctx, request{
		method: http.MethodPost, path: "/v1/approvals/" + pathID(id) + "/" + verdict, body: body, mode: repeatable,
	}, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

// Cancel cancels a pending approval the token's subject requested. Retrying is safe: a
// repeat after a lost answer finds the approval cancelled and is answered 409 with it, which
// Cancel, having retried, reports as the success it was. Without a retry a 409 is returned
// as *Error, its Approval the approval as it is.
func (c *Client) Cancel(ctx context.Context, id string) (*Approval, error) {
	var a Approval
	if _, err := c.call(ctx, request{method: http.MethodPost, path: "/v1/approvals/" + pathID(id) + "/cancel", mode: repeatable}, &a); err != nil {
		var e *Error
		if errors.As(err, &e) && e.Status == http.StatusConflict && e.Approval != nil &&
			e.Approval.Status == StatusCancelled && e.retried {
			return e.Approval, nil
		}
		return nil, err
	}
	return &a, nil
}

// Events returns the approval's audit trail, oldest first.
func (c *Client) Events(ctx context.Context, id string) ([]Event, error) {
	var out struct {
		Events []Event `json:"events"`
	}
	if _, err := c.call(ctx, request{method: http.MethodGet, path: "/v1/approvals/" + pathID(id) + "/events"}, &out); err != nil {
		return nil, err
	}
	return out.Events, nil
}

// ReportExecution reports the outcome of an approved action the caller carried out (or an
// asynchronous target's outcome). Retrying is safe: reports are ordered by their version,
// and a repeat of one already applied changes nothing but is recorded as stale; so after a
// lost answer the result may say Applied false for a report the first attempt applied. The
// approval in the result shows the execution as it stands.
func (c *Client) ReportExecution(ctx context.Context, id string, r Report) (*ReportResult, error) {
	body, err := jsonBody(r)
	if err != nil {
		return nil, err
	}
	var out ReportResult
	if _, err := c.call(ctx, request{
		method: http.MethodPost, path: "/v1/approvals/" + pathID(id) + "/execution", body: body, mode: repeatable,
	}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// pages iterates over a paged listing whose items are under field.
func pages[T any](ctx context.Context, c *Client, path string, q url.Values, field string) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		var zero T
		cursor := ""
		for {
			pq := url.Values{}
			for k, v := range q {
				pq[k] = v
			}
			setQuery(pq, "cursor", cursor)
			var page map[string]json.RawMessage
			if _, err := c.call(ctx, request{method: http.MethodGet, path: path, query: pq}, &page); err != nil {
				yield(zero, err)
				return
			}
			var items []T
			if err := unmarshal(page[field], &items); err != nil {
				yield(zero, fmt.Errorf("approvald client: GET %s: decode %s: %w", path, field, err))
				return
			}
			for _, it := range items {
				if !yield(it, nil) {
					return
				}
			}
			if err := unmarshal(page["next_cursor"], &cursor); err != nil || cursor == "" {
				return
			}
		}
	}
}

func setQuery(q url.Values, k, v string) {
	if v != "" {
		q.Set(k, v)
	}
}

func setLimit(q url.Values, n int) {
	if n > 0 {
		q.Set("limit", strconv.Itoa(n))
	}
}

func isPrintableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// unmarshal is json.Unmarshal that leaves v alone when the member was absent.
func unmarshal(raw json.RawMessage, v any) error {
	if len(raw) == 0 {
		return nil
	}
	return json.Unmarshal(raw, v)
}
