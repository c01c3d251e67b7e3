package httpapi

import (
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/approvald/approval"
)

// Defaults of the limits on what clients may hold of a server at once (docs/security.md,
// "Memory under hostile load").
const (
	// DefaultMaxInflightBodyBytes is the default BodyBudget: the bodies read before their
	// sender is known (webhook deliveries, sign-in forms), all together.
	DefaultMaxInflightBodyBytes = 64 << 20
	// DefaultMaxInflightRequests leaves room for the thousand long-polls a server is measured
	// with (docs/operations.md, "Memory") beside its busy clients.
	DefaultMaxInflightRequests = 1536
	// DefaultMaxConnections bounds the open connections, each a goroutine and its buffers
	// (tens of KiB), above DefaultMaxInflightRequests so that a request past that limit can
	// still be read and answered 503.
	DefaultMaxConnections = 2048
)

// retryAfterLimit is the Retry-After of an answer refused by a limit: the requests in flight
// are short, except long-polls, so a second is enough for a slot to free.
const retryAfterLimit = time.Second

// BodyBudget bounds the bytes of the request bodies that a server reads before it knows who
// sent them: a request reserves the most its body may hold (its Content-Length, or its
// route's limit when it has none) before it reads a byte of it, and gives the reservation
// back when it is done with the body. A request that cannot reserve at once is answered 503
// with Retry-After, without its body being read, so that strangers holding connections open
// cannot make the server hold more than the budget in their bodies. Its methods are safe for
// concurrent use; a nil *BodyBudget grants every reservation.
type BodyBudget struct {
	max  int64
	used atomic.Int64
}

// NewBodyBudget returns a budget of max bytes.
func NewBodyBudget(max int64) *BodyBudget {
	return &BodyBudget{max: max}
}

// Reserve takes n bytes of the budget, at once or not at all: it never waits. On success the
// caller must call release, once, when it no longer holds the body; later calls do nothing.
func (b *BodyBudget) Reserve(n int64) (release func(), ok bool) {
	if b == nil {
		return func() {}, true
	}
	for {
		used := b.used.Load()
		if n > b.max-used {
			return nil, false
		}
		if b.used.CompareAndSwap(used, used+n) {
			break
		}
	}
	var once sync.Once
	return func() { once.Do(func() { b.used.Add(-n) }) }, true
}

// errBudget is the refusal of a body that the budget has no room for.
func errBudget() error {
	return &approval.Error{
		Code:       approval.EUNAVAILABLE,
		Message:    "the server is reading as many request bodies as it accepts at once; retry later",
		RetryAfter: retryAfterLimit,
	}
}

// LimitRequests returns h answering at most max requests at once. A request past the limit
// is answered 503 with Retry-After as problem+json, without its body being read, and its
// connection is closed after the answer.
func LimitRequests(h http.Handler, max int) http.Handler {
	var inflight atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if inflight.Add(1) > int64(max) {
			inflight.Add(-1)
			refuse(w, "the server is answering as many requests as it accepts at once; retry later")
			return
		}
		defer inflight.Add(-1)
		h.ServeHTTP(w, r)
	})
}

// refuse answers a request refused before any route ran it, as problem+json with a request
// id of its own, Retry-After, and Connection: close, so that net/http does not read what
// is left of its body to keep the connection.
func refuse(w http.ResponseWriter, detail string) {
	id := approval.NewID("req")
	body, _ := json.Marshal(problem{
		Type:      problemTypeBase + approval.EUNAVAILABLE,
		Title:     errorStatus[approval.EUNAVAILABLE].title,
		Status:    http.StatusServiceUnavailable,
		Detail:    detail,
		RequestID: id,
	})
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("X-Request-Id", id)
	h.Set("Retry-After", strconv.Itoa(int(retryAfterLimit/time.Second)))
	h.Set("Connection", "close")
	w.WriteHeader(http.StatusServiceUnavailable)
	w.Write(append(body, '\n'))
}

// LimitConnections returns ln holding at most max connections open at once. A connection
// accepted past the limit is answered at once with a 503, Retry-After and Connection: close,
// without its request being read, and closed; it costs no goroutine and no buffer. Wrap the
// listener before ServeProblems, so that this answer, which no handler writes, is not taken
// for one of net/http's own.
func LimitConnections(ln net.Listener, max int) net.Listener {
	return &limitListener{Listener: ln, max: int64(max)}
}

// limitListener is the listener of LimitConnections.
type limitListener struct {
	net.Listener
	max  int64
	open atomic.Int64
}

// overLimitAnswer is written on a connection past the limit. It is one short write on a
// connection that has sent nothing back yet, so it never waits for the client.
var overLimitAnswer = func() []byte {
	body, _ := json.Marshal(problem{
		Type:   problemTypeBase + approval.EUNAVAILABLE,
		Title:  errorStatus[approval.EUNAVAILABLE].title,
		Status: http.StatusServiceUnavailable,
		Detail: "the server has as many connections open as it accepts; retry later",
	})
	body = append(body, '\n')
	return []byte("HTTP/1.1 503 Service Unavailable\r\n" +
		"Content-Type: application/problem+json\r\n" +
		"Retry-After: " + strconv.Itoa(int(retryAfterLimit/time.Second)) + "\r\n" +
		"Connection: close\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + string(body))
}()

// overLimitWriteTimeout bounds the write of overLimitAnswer, which the kernel takes at once
// unless something is badly wrong.
const overLimitWriteTimeout = time.Second

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) <= l.max {
			return &limitConn{Conn: c, l: l}, nil
		}
		l.open.Add(-1)
		c.SetWriteDeadline(time.Now().Add(overLimitWriteTimeout))
		c.Write(overLimitAnswer)
		c.Close()
	}
}

// limitConn gives its place back when it is closed, once however often Close is called.
type limitConn struct {
	net.Conn
	l      *limitListener
	closed atomic.Bool
}

func (c *limitConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.l.open.Add(-1)
	}
	return c.Conn.Close()
}

// CloseWrite lets net/http half-close the connection, as it does on a bare TCP connection.
func (c *limitConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
