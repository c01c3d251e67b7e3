package httpapi_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/approvald/approval/httpapi"
)

// Many goroutines reserving at once from a start barrier never hold more than the budget
// together, and what they give back can be taken again; release is idempotent.
func TestBodyBudget(t *testing.T) {
	t.Parallel()
	const size, max, racers = 1000, 10_000, 64
	b := httpapi.NewBodyBudget(max)
	var held, peak atomic.Int64
	var granted atomic.Int64
	var releases []func()
	var mu sync.Mutex
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range racers {
		wg.Go(func() {
			<-start
			release, ok := b.Reserve(size)
			if !ok {
				return
			}
			granted.Add(1)
			now := held.Add(size)
			for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
			}
			mu.Lock()
			releases = append(releases, release)
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	if got := granted.Load(); got != max/size {
		t.Errorf("granted %d reservations of %d bytes in a budget of %d, want %d", got, size, max, max/size)
	}
	if got := b.InUse(); got != max {
		t.Errorf("in use: got %d, want %d", got, max)
	}
	if _, ok := b.Reserve(1); ok {
		t.Errorf("a full budget granted a byte more")
	}
	releases[0]()
	releases[0]() // a second release gives nothing back twice
	if got := b.InUse(); got != max-size {
		t.Errorf("in use after one release (twice): got %d, want %d", got, max-size)
	}
	if _, ok := b.Reserve(size + 1); ok {
		t.Errorf("granted more than was given back")
	}
	if _, ok := b.Reserve(size); !ok {
		t.Errorf("refused what was given back")
	}
	var nilBudget *httpapi.BodyBudget
	if release, ok := nilBudget.Reserve(1 << 40); !ok {
		t.Errorf("a nil budget refused a reservation")
	} else {
		release()
	}
}

// Requests past LimitRequests' limit are answered 503 with Retry-After as problem+json and a
// closed connection, while those within it run; once they finish, there is room again.
func TestLimitRequests(t *testing.T) {
	t.Parallel()
	const limit = 3
	entered := make(chan struct{}, limit)
	unblock := make(chan struct{})
	h := httpapi.LimitRequests(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-unblock
	}), limit)
	srv := httptest.NewServer(h)
	defer srv.Close()

	var wg sync.WaitGroup
	for range limit {
		wg.Go(func() {
			resp, err := http.Get(srv.URL)
			if err != nil {
				t.Errorf("held request: %v", err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("held request: status %d, want 200", resp.StatusCode)
			}
		})
	}
	for range limit {
		<-entered
	}
	resp, err := http.Post(srv.URL, "application/json", strings.NewReader(`{"big": "body"}`))
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	json.NewDecoder(resp.Body).Decode(&p)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" ||
		resp.Header.Get("Content-Type") != "application/problem+json" || !resp.Close || p.Status != 503 || p.Detail == "" {
		t.Errorf("past the limit: got %d, Retry-After %q, %s, close %v, %+v; want 503, 1, problem+json, closed, a detail",
			resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("Content-Type"), resp.Close, p)
	}
	close(unblock)
	wg.Wait()
	entered = make(chan struct{}, 1)
	resp, err = http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("after the held requests: status %d, want 200", resp.StatusCode)
	}
}

// A connection past LimitConnections' limit gets a 503 with Retry-After and is closed,
// without any handler running; a connection closed gives its place back.
func TestLimitConnections(t *testing.T) {
	t.Parallel()
	const limit = 2
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var served atomic.Int64
	closed := make(chan struct{}, limit)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served.Add(1) }),
		ConnState: func(_ net.Conn, state http.ConnState) {
			if state == http.StateClosed {
				closed <- struct{}{}
			}
		},
	}
	limited := httpapi.LimitConnections(ln, limit)
	go srv.Serve(httpapi.ServeProblems(srv, limited))
	defer srv.Close()

	// A request on a connection proves it was accepted (and counted) before the next dial.
	get := func(c net.Conn) *http.Response {
		t.Helper()
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("read answer: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	var held []net.Conn
	for range limit {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if resp := get(c); resp.StatusCode != http.StatusOK {
			t.Fatalf("within the limit: status %d, want 200", resp.StatusCode)
		}
		held = append(held, c)
	}
	over, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	resp, err := http.ReadResponse(bufio.NewReader(over), nil)
	if err != nil {
		t.Fatalf("past the limit: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" || !resp.Close ||
		resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(body), "connections") {
		t.Errorf("past the limit: got %d, Retry-After %q, close %v, %s %s; want 503, 1, closed, problem+json about connections",
			resp.StatusCode, resp.Header.Get("Retry-After"), resp.Close, resp.Header.Get("Content-Type"), body)
	}
	if got := served.Load(); got != limit {
		t.Errorf("handler ran %d times, want %d (none for the connection past the limit)", got, limit)
	}

	held[0].Close()
	<-closed // the server has closed its side: the place is free
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if resp := get(c); resp.StatusCode != http.StatusOK {
		t.Errorf("after a connection closed: status %d, want 200", resp.StatusCode)
	}
}
