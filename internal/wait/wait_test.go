package wait_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/approvald/approval/internal/wait"
)

// Until and For return once another goroutine makes their condition true.
func TestUntil(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	const goroutines = 16
	for range goroutines {
		go n.Add(1)
	}
	wait.Until(t, "every goroutine to count", func() bool { return n.Load() == goroutines })
	wait.For(t, "every goroutine to count", func() error {
		if got := n.Load(); got != goroutines {
			return fmt.Errorf("got %d, want %d", got, goroutines)
		}
		return nil
	})
}
