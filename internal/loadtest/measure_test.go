package loadtest_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/approvald/approval/internal/loadtest"
)

func TestMeasurement_Percentile(t *testing.T) {
	t.Parallel()
	var m loadtest.Measurement
	for i := 1; i <= 1000; i++ {
		m.Latencies = append(m.Latencies, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Millisecond}, {0.99, 990 * time.Millisecond}, {0.999, 999 * time.Millisecond}, {1, time.Second}} {
		if got := m.Percentile(c.q); got != c.want {
			t.Errorf("Percentile(%v): got %v, want %v", c.q, got, c.want)
		}
	}
	if got := (loadtest.Measurement{}).Percentile(0.99); got != 0 {
		t.Errorf("Percentile of nothing: got %v, want 0", got)
	}
}

// A step that runs out of its limit stops there, long before its duration, with every index
// used once and the shortfall reported; failed requests are counted apart.
func TestMeasure_Limit(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := make(map[int]int)
	m := loadtest.Measure(context.Background(), loadtest.Step{Clients: 4, Duration: time.Hour, Limit: 100}, func(ctx context.Context, i int) error {
		mu.Lock()
		defer mu.Unlock()
		seen[i]++
		if i%10 == 0 {
			return errors.New("refused")
		}
		return nil
	})
	if m.Requests != 90 || m.Errors != 10 || m.FirstError == nil || !m.Exhausted {
		t.Errorf("got %d requests, %d errors (first %v), exhausted %v; want 90, 10, an error, true", m.Requests, m.Errors, m.FirstError, m.Exhausted)
	}
	if len(seen) != 100 {
		t.Errorf("got %d distinct indexes, want 100", len(seen))
	}
	for i, n := range seen {
		if i < 0 || i >= 100 || n != 1 {
			t.Errorf("index %d: used %d times, want once, within 0-99", i, n)
		}
	}
	if len(m.Latencies) != m.Requests || m.Elapsed <= 0 {
		t.Errorf("got %d latencies over %v, want %d over some time", len(m.Latencies), m.Elapsed, m.Requests)
	}
}

// Requests started during the warm-up are not measured.
func TestMeasure_Warmup(t *testing.T) {
	t.Parallel()
	m := loadtest.Measure(context.Background(), loadtest.Step{Clients: 1, Warmup: time.Hour, Duration: time.Hour, Limit: 5}, func(ctx context.Context, i int) error {
		return nil
	})
	if m.Requests != 0 || m.Rate() != 0 || !m.Exhausted {
		t.Errorf("got %d requests at %.1f/s, exhausted %v; want none measured, exhausted", m.Requests, m.Rate(), m.Exhausted)
	}
}

// A step whose requests all began in the warm-up and ended after its duration (a very slow
// machine) goes on until it has measured one.
func TestMeasure_SlowerThanTheStep(t *testing.T) {
	t.Parallel()
	m := loadtest.Measure(context.Background(), loadtest.Step{Clients: 2, Warmup: time.Millisecond, Duration: time.Millisecond}, func(ctx context.Context, i int) error {
		time.Sleep(20 * time.Millisecond)
		return nil
	})
	if m.Requests == 0 || m.Rate() <= 0 {
		t.Errorf("got %d requests at %.1f/s, want some", m.Requests, m.Rate())
	}
}

func TestCheckLoopback(t *testing.T) {
	t.Parallel()
	for url, ok := range map[string]bool{
		"http://127.0.0.1:8080":   true,
		"http://localhost:8080/":  true,
		"http://[::1]:8080":       true,
		"http://10.0.0.1:8080":    false,
		"http://example.com":      false,
		"https://127.0.0.1:8080":  false,
		"127.0.0.1:8080":          false,
		"http://127.0.0.1.nip.io": false,
	} {
		err := loadtest.CheckLoopback(url)
		if (err == nil) != ok {
			t.Errorf("CheckLoopback(%q): got %v, want ok %v", url, err, ok)
		}
	}
}
