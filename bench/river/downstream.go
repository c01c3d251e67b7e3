package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// downstream is the no-op target both systems call: it answers 200 {} at once, counting
// requests and effects per Idempotency-Key so a run can prove it made exactly N calls.
//
// It has a gate. While the gate is closed, requests are counted on arrival and then held;
// Open releases them and every later request is answered at once. A run keeps the gate closed
// while it queues its N units of work, so that both systems start the timed phase in the same
// state: all N queued, the workers' first calls already sent and waiting.
type downstream struct {
	srv  *http.Server
	addr string
	done chan error // Serve's result

	gate     chan struct{} // closed by Open
	openOnce sync.Once

	conns atomic.Int64 // connections accepted: a client that does not reuse them opens many

	mu        sync.Mutex
	arrived   int            // requests received
	answered  int            // requests answered 200
	noKey     int            // requests without an Idempotency-Key
	keys      map[string]int // answered requests per key
	arrivedCh chan struct{}  // signalled (without blocking) on every arrival
}

// startDownstream listens on a free loopback port and serves until Close.
func startDownstream() (*downstream, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for downstream: %w", err)
	}
	d := &downstream{
		addr:      ln.Addr().String(),
		done:      make(chan error, 1),
		gate:      make(chan struct{}),
		keys:      make(map[string]int),
		arrivedCh: make(chan struct{}, 1),
	}
	d.srv = &http.Server{
		Handler:           d,
		ReadHeaderTimeout: 10 * time.Second,
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				d.conns.Add(1)
			}
		},
	}
	go func() { d.done <- d.srv.Serve(ln) }()
	return d, nil
}

// URL is where both systems send their calls.
func (d *downstream) URL() string { return "http://" + d.addr + "/noop" }

func (d *downstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Read the whole body, as a real target would before acting on it.
	if _, err := io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, 1<<20)); err != nil {
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	key := r.Header.Get("Idempotency-Key")

	d.mu.Lock()
	d.arrived++
	if key == "" {
		d.noKey++
	}
	d.mu.Unlock()
	select {
	case d.arrivedCh <- struct{}{}:
	default:
	}

	select {
	case <-d.gate:
	case <-r.Context().Done():
		return // the caller gave up or the server is closing: no answer, no effect
	}

	d.mu.Lock()
	d.answered++
	if key != "" {
		d.keys[key]++
	}
	d.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, "{}")
}

// WaitArrived waits until at least n requests have arrived, ctx ends, or no request has
// arrived for quiet; it returns how many arrived. The quiet bound is for a system that keeps
// fewer calls in flight than its configured concurrency: the run then starts with those.
func (d *downstream) WaitArrived(ctx context.Context, n int, quiet time.Duration) int {
	t := time.NewTimer(quiet)
	defer t.Stop()
	for {
		d.mu.Lock()
		got := d.arrived
		d.mu.Unlock()
		if got >= n {
			return got
		}
		select {
		case <-d.arrivedCh:
			t.Reset(quiet)
		case <-t.C:
			return got
		case <-ctx.Done():
			return got
		}
	}
}

// Open releases the held requests and lets every later one through at once.
func (d *downstream) Open() { d.openOnce.Do(func() { close(d.gate) }) }

// downstreamCounts is what the downstream saw.
type downstreamCounts struct {
	Arrived, Answered, NoKey int
	Keys                     int // distinct keys answered
	Repeated                 int // answers beyond the first for a key
	Conns                    int // connections the callers opened
}

// Counts returns what the downstream has seen so far.
func (d *downstream) Counts() downstreamCounts {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := downstreamCounts{Arrived: d.arrived, Answered: d.answered, NoKey: d.noKey, Keys: len(d.keys), Conns: int(d.conns.Load())}
	for _, n := range d.keys {
		c.Repeated += n - 1
	}
	return c
}

// Close opens the gate, so held requests end, and stops the server.
func (d *downstream) Close() error {
	d.Open()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := d.srv.Shutdown(ctx)
	<-d.done
	if err != nil {
		return fmt.Errorf("stop downstream: %w", err)
	}
	return nil
}
