package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/approvald/approval/webhook"
)

// requestTimeout bounds one request of the load: the server answers in milliseconds, or it
// is stuck and the step must still end.
const requestTimeout = 30 * time.Second

// ErrNotLoopback is returned for a server address that is not on the loopback interface:
// the load is only ever sent to this machine.
var ErrNotLoopback = errors.New("not a loopback address")

// Client sends the API requests of the scenarios to one approvald server on loopback.
type Client struct {
	base string
	http *http.Client
}

// NewClient returns a client of the server at baseURL (http://127.0.0.1:PORT) that keeps up
// to conns idle connections to it, so that conns concurrent clients reuse their connections
// instead of opening one per request (Go's default keeps two). It refuses, and its dialer
// refuses to connect to, any address that is not loopback.
func NewClient(baseURL string, conns int) (*Client, error) {
	if err := CheckLoopback(baseURL); err != nil {
		return nil, err
	}
	dialer := &net.Dialer{
		Timeout: 5 * time.Second,
		// The check above reads the name; this one the address actually dialled, so that a
		// name resolving elsewhere cannot take the load off the machine.
		Control: func(network, address string, _ syscall.RawConn) error {
			host, _, err := net.SplitHostPort(address)
			if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
				return fmt.Errorf("dial %s: %w", address, ErrNotLoopback)
			}
			return nil
		},
	}
	transport := &http.Transport{
		Proxy:               nil,
		DialContext:         dialer.DialContext,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
	}
	return &Client{
		base: strings.TrimSuffix(baseURL, "/"),
		http: &http.Client{Transport: transport, Timeout: requestTimeout},
	}, nil
}

// CheckLoopback returns nil when rawURL is an http URL whose host is localhost or a loopback
// IP address, and an error wrapping ErrNotLoopback (or saying what is wrong) otherwise.
func CheckLoopback(rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("server url: %w", err)
	}
	if u.Scheme != "http" || u.Host == "" {
		return fmt.Errorf("server url %q: must be http://HOST:PORT", rawURL)
	}
	if !LoopbackHost(u.Hostname()) {
		return fmt.Errorf("server url %q: %w", rawURL, ErrNotLoopback)
	}
	return nil
}

// LoopbackHost reports whether host is localhost or a loopback IP address.
func LoopbackHost(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || ip != nil && ip.IsLoopback()
}

// Close closes the idle connections.
func (c *Client) Close() {
	c.http.CloseIdleConnections()
}

// created is the answer to a create.
type created struct {
	body     []byte // the approval as JSON
	replayed bool   // Idempotent-Replayed: true
}

// Create posts an approval under key and returns the answer, which must be 201.
func (c *Client) Create(ctx context.Context, token, key string, body []byte) (created, error) {
	resp, respBody, err := c.do(ctx, http.MethodPost, "/v1/approvals", token, key, body)
	if err != nil {
		return created{}, err
	}
	if resp.StatusCode != http.StatusCreated {
		return created{}, statusError("create", resp, respBody)
	}
	return created{body: respBody, replayed: resp.Header.Get("Idempotent-Replayed") == "true"}, nil
}

// Get reads an approval, which must answer 200.
func (c *Client) Get(ctx context.Context, token, id string) error {
	resp, body, err := c.do(ctx, http.MethodGet, "/v1/approvals/"+id, token, "", nil)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return statusError("get", resp, body)
	}
	return nil
}

// Approve votes approve on an approval, which must answer 200 with the approval approved.
func (c *Client) Approve(ctx context.Context, token, id string) error {
	return c.vote(ctx, token, id, true)
}

// Vote approves the approval id with token's holder; it must answer 200, the approval
// approved or still pending for other votes.
func (c *Client) Vote(ctx context.Context, token, id string) error {
	return c.vote(ctx, token, id, false)
}

func (c *Client) vote(ctx context.Context, token, id string, deciding bool) error {
	resp, body, err := c.do(ctx, http.MethodPost, "/v1/approvals/"+id+"/approve", token, "", []byte(`{"comment":"bench"}`))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || deciding && !bytes.Contains(body, []byte(`"status":"approved"`)) {
		return statusError("approve", resp, body)
	}
	return nil
}

// Deliver posts a webhook event to src, signed now under the Standard Webhooks scheme with
// id as its webhook-id; the inbox must answer 200 (a redelivery too).
func (c *Client) Deliver(ctx context.Context, src Source, id string, body []byte) error {
	h, err := webhook.SignStandard(src.Secret, id, time.Now(), body)
	if err != nil {
		return err
	}
	h.Set("Content-Type", "application/json")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/inbox/"+url.PathEscape(src.Name), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header = h
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	respBody, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("deliver: read answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return statusError("deliver", resp, respBody)
	}
	return nil
}

// do sends one request and reads the whole answer, so that the connection is reused.
func (c *Client) do(ctx context.Context, method, path, token, key string, body []byte) (*http.Response, []byte, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, r)
	if err != nil {
		return nil, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	respBody, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	return resp, respBody, nil
}

// statusError describes an unexpected answer, with the start of its body.
func statusError(what string, resp *http.Response, body []byte) error {
	const max = 200
	if len(body) > max {
		body = append(body[:max:max], "..."...)
	}
	return fmt.Errorf("%s: got %d %s", what, resp.StatusCode, bytes.TrimSpace(body))
}

// List reads a page of GET /v1/approvals?query, which must answer 200, and returns its
// next_cursor and how many approvals it held.
func (c *Client) List(ctx context.Context, token, query string) (next string, n int, err error) {
	resp, body, err := c.do(ctx, http.MethodGet, "/v1/approvals?"+query, token, "", nil)
	if err != nil {
		return "", 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return "", 0, statusError("list", resp, body)
	}
	var page struct {
		Approvals  []json.RawMessage `json:"approvals"`
		NextCursor string            `json:"next_cursor"`
	}
	if err := json.Unmarshal(body, &page); err != nil {
		return "", 0, fmt.Errorf("list: decode the page: %w", err)
	}
	return page.NextCursor, len(page.Approvals), nil
}

// LongPoll waits up to wait for approval id to pass version, which must answer 200.
func (c *Client) LongPoll(ctx context.Context, token, id string, version int64, wait time.Duration) error {
	q := "?wait=" + url.QueryEscape(wait.String()) + "&version=" + strconv.FormatInt(version, 10)
	resp, body, err := c.do(ctx, http.MethodGet, "/v1/approvals/"+url.PathEscape(id)+q, token, "", nil)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return statusError("long-poll", resp, body)
	}
	return nil
}

// Gauge reads the value of an unlabelled metric from the server's /metrics.
func (c *Client) Gauge(ctx context.Context, name string) (float64, error) {
	resp, body, err := c.do(ctx, http.MethodGet, "/metrics", "", "", nil)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, statusError("metrics", resp, body)
	}
	for line := range strings.SplitSeq(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("metrics: no %s", name)
}
