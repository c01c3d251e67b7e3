package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The call River's workers make is the call approvald's runner makes for an approved action
// (docs/http-api.md, "Execution targets"): POST {"approval": {...}} with the operation key as
// Idempotency-Key and a Standard Webhooks signature made with the target's secret. Only the
// body's values differ; its shape and size are those of an approvald approval.

// callBody is what both systems send: the approval that was approved.
type callBody struct {
	Approval json.RawMessage `json:"approval"`
}

// benchApproval returns an approval like the one approvald sends for the i-th unit of a run,
// so River's workers sign and send a body of the same shape and size.
func benchApproval(key string, i int, now time.Time) (json.RawMessage, error) {
	at := now.UTC().Format(time.RFC3339Nano)
	a := map[string]any{
		"id":                 fmt.Sprintf("01JBENCH%018d", i),
		"operation_key":      key,
		"action":             benchAction,
		"title":              benchTitle(i),
		"context":            benchContext(i),
		"requester":          requesterSubject,
		"approvers":          []string{approverSubject},
		"required_approvals": 1,
		"status":             "approved",
		"decisions":          []map[string]any{{"approver": approverSubject, "verdict": "approve", "comment": "", "at": at}},
		"decided_at":         at,
		"expires_at":         now.Add(24 * time.Hour).UTC().Format(time.RFC3339Nano),
		"created_at":         at,
		"version":            2,
		"execution":          map[string]any{"id": fmt.Sprintf("01JEXEC%019d", i), "status": "running", "attempts": 1, "last_error": "", "result": nil, "updated_at": at},
	}
	b, err := json.Marshal(a)
	if err != nil {
		return nil, fmt.Errorf("encode approval: %w", err)
	}
	return b, nil
}

// The approval fields both sides use for unit i.
const (
	benchAction      = "noop"
	requesterSubject = "bench"
	approverSubject  = "alice"
	operatorSubject  = "ops"
)

func benchTitle(i int) string { return "Benchmark call " + strconv.Itoa(i) }

func benchContext(i int) map[string]any { return map[string]any{"n": i, "note": "no-op"} }

// benchSecret is the target secret both systems sign with, in Standard Webhooks form.
var benchSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("approvald-bench-river-secret-32b"))

// caller makes the downstream call. It is safe for concurrent use.
type caller struct {
	client *http.Client
	url    string
	key    []byte // the decoded secret
}

// newCaller returns a caller whose keep-alive pool holds a connection per worker, so that
// workers reuse connections instead of opening one per call.
func newCaller(url string, workers int) (*caller, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(benchSecret, "whsec_"))
	if err != nil {
		return nil, fmt.Errorf("decode secret: %w", err)
	}
	return &caller{client: &http.Client{Transport: keepAliveTransport(workers)}, url: url, key: key}, nil
}

// Call POSTs the approval to the target and returns the response body, or an error unless
// the target answers 2xx.
func (c *caller) Call(ctx context.Context, msgID, key string, approval json.RawMessage) ([]byte, error) {
	body, err := json.Marshal(callBody{Approval: approval})
	if err != nil {
		return nil, fmt.Errorf("encode call body: %w", err)
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	mac := hmac.New(sha256.New, c.key)
	fmt.Fprintf(mac, "%s.%s.", msgID, ts)
	mac.Write(body)

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("webhook-id", msgID)
	req.Header.Set("webhook-timestamp", ts)
	req.Header.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("call target: %w", err)
	}
	defer resp.Body.Close()
	// Read the whole body: approvald keeps it as the execution's result, and a drained body
	// lets the connection be reused.
	result, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("read target response: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("target answered %s", resp.Status)
	}
	return result, nil
}

// Close releases idle connections.
func (c *caller) Close() { c.client.CloseIdleConnections() }
