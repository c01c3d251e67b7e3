package main

import (
	"context"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	var ls []time.Duration
	for i := 1; i <= 100; i++ {
		ls = append(ls, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{0.50, 50 * time.Millisecond}, {0.99, 99 * time.Millisecond}, {1, 100 * time.Millisecond}, {0, time.Millisecond}} {
		if got := percentile(ls, tc.p); got != tc.want {
			t.Errorf("percentile(1..100ms, %v): got %v, want %v", tc.p, got, tc.want)
		}
	}
	if got := percentile(nil, 0.5); got != 0 {
		t.Errorf("percentile(nil): got %v, want 0", got)
	}
}

func TestMedian(t *testing.T) {
	runs := []runResult{
		{System: "s", N: 10, Elapsed: 3 * time.Second, P50: 1},
		{System: "s", N: 10, Elapsed: 9 * time.Second, P50: 3},
		{System: "s", N: 10, Elapsed: 1 * time.Second, P50: 2},
	}
	m := median(runs)
	if m.Elapsed != 3*time.Second || m.P50 != 2 {
		t.Errorf("median: got elapsed %v p50 %v, want 3s and 2", m.Elapsed, m.P50)
	}
}

// The gate holds calls until Open, and the downstream counts one answer per key.
func TestDownstreamGate(t *testing.T) {
	d, err := startDownstream()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c, err := newCaller(d.URL(), 4)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	ctx := context.Background()
	errs := make(chan error, 3)
	for _, key := range []string{"a", "b", "c"} {
		go func() {
			_, err := c.Call(ctx, "msg_"+key, key, []byte(`{}`))
			errs <- err
		}()
	}
	if got := d.WaitArrived(ctx, 3, 10*time.Second); got != 3 {
		t.Fatalf("arrived: got %d, want 3", got)
	}
	if got := d.Counts().Answered; got != 0 {
		t.Fatalf("answered before Open: got %d, want 0", got)
	}
	d.Open()
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatalf("call: %v", err)
		}
	}
	if _, err := c.Call(ctx, "msg_a2", "a", []byte(`{}`)); err != nil {
		t.Fatalf("call after Open: %v", err)
	}
	got := d.Counts()
	if got.Conns < 1 || got.Conns > 3 {
		t.Errorf("connections: got %d, want 1 to 3 (one per concurrent call, then reused)", got.Conns)
	}
	got.Conns = 0
	want := downstreamCounts{Arrived: 4, Answered: 4, Keys: 3, Repeated: 1}
	if got != want {
		t.Errorf("counts: got %+v, want %+v", got, want)
	}
}
