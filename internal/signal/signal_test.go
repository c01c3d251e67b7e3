package signal_test

import (
	"sync"
	"testing"

	"github.com/approvald/approval/internal/signal"
)

// Signals, subscriptions and their ends race Close from many goroutines released at once:
// no send may reach a closed channel (which would panic), and every channel still subscribed
// is closed once Close has returned (an ended subscription's channel stays open).
func TestHub_CloseRacesSignals(t *testing.T) {
	t.Parallel()
	for range 50 {
		h := signal.NewHub()
		const n = 16
		start := make(chan struct{})
		chans := make(chan (<-chan struct{}), n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				ch, stop := h.Subscribe("inbox")
				h.Signal("inbox", "approvals")
				if i%2 == 0 {
					stop()
					return
				}
				chans <- ch
			})
		}
		wg.Go(func() {
			<-start
			h.Close()
		})
		close(start)
		wg.Wait()
		close(chans)
		h.Close() // a second Close is harmless
		h.Signal("inbox")
		for ch := range chans {
			// A channel holds at most the one signal it was last sent, then reads closed.
			for i := 0; ; i++ {
				_, ok := <-ch
				if !ok {
					break
				}
				if i > 0 {
					t.Fatal("subscription: more than one buffered signal, want at most one")
				}
			}
		}
	}
}
