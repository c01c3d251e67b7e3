package fakeclock_test

import (
	"sync"
	"testing"
	"time"

	"github.com/approvald/approval/internal/fakeclock"
)

func TestClock(t *testing.T) {
	t.Parallel()
	start := time.Date(2030, time.January, 2, 3, 4, 5, 0, time.UTC)
	c := fakeclock.New(start)
	if got := c.Now(); !got.Equal(start) {
		t.Fatalf("Now: got %v, want %v", got, start)
	}
	c.Advance(time.Hour)
	if got, want := c.Now(), start.Add(time.Hour); !got.Equal(want) {
		t.Fatalf("Now after Advance: got %v, want %v", got, want)
	}
	c.Set(start)
	if got := c.Now(); !got.Equal(start) {
		t.Fatalf("Now after Set: got %v, want %v", got, start)
	}
}

// Advances racing with reads all count.
func TestClockConcurrent(t *testing.T) {
	t.Parallel()
	start := time.Date(2030, time.January, 2, 3, 4, 5, 0, time.UTC)
	c := fakeclock.New(start)
	const n = 64
	begin := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			<-begin
			c.Advance(time.Second)
			_ = c.Now()
		})
	}
	close(begin)
	wg.Wait()
	if got, want := c.Now(), start.Add(n*time.Second); !got.Equal(want) {
		t.Fatalf("Now after %d concurrent advances: got %v, want %v", n, got, want)
	}
}
