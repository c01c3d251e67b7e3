package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/approvald/approval"
)

// ServeProblems makes srv answer as problem+json the requests that net/http refuses itself,
// before any handler runs (docs/http-api.md, "What net/http answers itself"): a malformed
// request line or header (400), headers over MaxHeaderBytes (431), an unknown transfer coding
// (501), an unknown HTTP version (505), an unknown expectation (417). It returns ln wrapped:
// serve srv on the listener it returns, with srv.Serve, after this call and before Serve.
//
// net/http has no hook for those answers: it writes them straight on the connection. So the
// wrapped connection recognises them by when they are written, not only by what they say:
// a write is net/http's own when no handler has started on the connection since it was
// opened or last went idle. srv.Handler is wrapped to mark the start, srv.ConnState (chained)
// resets the mark when the connection goes idle, after the last byte of the previous
// response was written, and srv.ConnContext (chained) hands the connection to the handler.
// A handler's response is never touched. net/http writes each of those answers in one Write
// and closes the connection after it, so the rewrite replaces that Write whole.
//
// Wrap the connections net/http reads and writes: behind TLS, the *tls.Conn's, not the
// network's (approvald itself serves plain HTTP; TLS ends in front of it).
func ServeProblems(srv *http.Server, ln net.Listener) net.Listener {
	next := srv.Handler
	if next == nil {
		next = http.DefaultServeMux
	}
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := r.Context().Value(problemConnKey{}).(*problemConn); ok {
			c.served.Store(true)
		}
		next.ServeHTTP(w, r)
	})
	connState := srv.ConnState
	srv.ConnState = func(c net.Conn, state http.ConnState) {
		if pc, ok := c.(*problemConn); ok && state == http.StateIdle {
			pc.served.Store(false)
		}
		if connState != nil {
			connState(c, state)
		}
	}
	connContext := srv.ConnContext
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if connContext != nil {
			ctx = connContext(ctx, c)
		}
		if pc, ok := c.(*problemConn); ok {
			ctx = context.WithValue(ctx, problemConnKey{}, pc)
		}
		return ctx
	}
	return &problemListener{Listener: ln}
}

// problemConnKey is the context key of a request's *problemConn.
type problemConnKey struct{}

// problemListener wraps each accepted connection in a problemConn.
type problemListener struct{ net.Listener }

func (l *problemListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &problemConn{Conn: c}, nil
}

// problemConn rewrites net/http's own answers to problem+json. served is set while a handler
// runs or its response is being written, from its start until the connection next goes idle.
type problemConn struct {
	net.Conn
	served atomic.Bool
}

// Write passes p on unless no handler has been served since the connection opened or went
// idle and p is a whole HTTP/1.x answer with a 4xx or 5xx status: then only net/http can
// have written it, and it is answered as problem+json with the same status instead.
func (c *problemConn) Write(p []byte) (int, error) {
	if c.served.Load() {
		return c.Conn.Write(p)
	}
	answer, ok := ownAnswer(p)
	if !ok {
		return c.Conn.Write(p)
	}
	if _, err := c.Conn.Write(answer); err != nil {
		return 0, err
	}
	return len(p), nil
}

// CloseWrite lets net/http half-close the connection after a 431, as it does on a bare TCP
// connection, so that the client reads the answer before the reset.
func (c *problemConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// ownAnswerReasons are the details of net/http's answers, by status and by the text net/http
// sends (after "<code> <status text>: " when it has one); "" for any other text.
var ownAnswerReasons = map[int]map[string]string{
	http.StatusBadRequest: {
		"":                             "the request line or a header line is malformed (a header value with a control character, a line that is not a header)",
		"invalid header name":          "a header name has a character that is not allowed in a token",
		"missing required Host header": "HTTP/1.1 requires a Host header",
		"malformed Host header":        "the Host header is malformed",
		"too many Host headers":        "the request has more than one Host header",
	},
	http.StatusRequestHeaderFieldsTooLarge: {"": "the request line and headers are larger than the server accepts (1 MiB)"},
	http.StatusNotImplemented:              {"": "the transfer coding is not supported; only chunked is"},
	http.StatusHTTPVersionNotSupported:     {"": "the HTTP version is not supported; use HTTP/1.1 or HTTP/1.0"},
	http.StatusExpectationFailed:           {"": "the Expect header is not supported; only 100-continue is"},
}

// ownAnswer returns the problem+json answer that replaces p, an answer net/http wrote itself
// (status line, headers, blank line, an optional short text), or false when p is not one.
func ownAnswer(p []byte) ([]byte, bool) {
	head, body, ok := bytes.Cut(p, []byte("\r\n\r\n"))
	if !ok {
		return nil, false
	}
	statusLine, _, _ := bytes.Cut(head, []byte("\r\n"))
	rest, ok := bytes.CutPrefix(statusLine, []byte("HTTP/1.1 "))
	if !ok || len(rest) < 3 {
		return nil, false
	}
	code, err := strconv.Atoi(string(rest[:3]))
	if err != nil || code < 400 || code > 599 {
		return nil, false
	}
	reasons, ok := ownAnswerReasons[code]
	if !ok {
		return nil, false
	}
	// net/http's text is "<code> <status text>[: <detail>]"; the detail picks the reason.
	_, text, _ := bytes.Cut(body, []byte(": "))
	detail, ok := reasons[string(text)]
	if !ok {
		detail = reasons[""]
	}
	problemType := problemTypeBase + ownAnswerCode(code)
	doc, err := json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{problemType, http.StatusText(code), code, detail})
	if err != nil {
		return nil, false
	}
	var b bytes.Buffer
	b.Write(statusLine)
	b.WriteString("\r\nContent-Type: application/problem+json\r\nConnection: close\r\nContent-Length: ")
	b.WriteString(strconv.Itoa(len(doc) + 1))
	b.WriteString("\r\n\r\n")
	b.Write(doc)
	b.WriteByte('\n')
	return b.Bytes(), true
}

// ownAnswerCode is the problem code of one of net/http's answers: a malformed request is
// invalid like any other, oversized headers are too_large like an oversized body, and what
// the server does not implement is named by its status.
func ownAnswerCode(code int) string {
	switch code {
	case http.StatusBadRequest:
		return approval.EINVALID
	case http.StatusRequestHeaderFieldsTooLarge:
		return approval.ETOOLARGE
	case http.StatusNotImplemented:
		return "not_implemented"
	case http.StatusHTTPVersionNotSupported:
		return "http_version_not_supported"
	default:
		return "expectation_failed"
	}
}
