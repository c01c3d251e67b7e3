package signal_test

import (
	"slices"
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
				topic := "inbox"
				if i%4 == 1 {
					topic = "approvals/apr_" + string(rune('a'+i))
				}
				ch, stop := h.Subscribe(topic)
				h.Signal("inbox", "approvals", "approvals/apr_b")
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

// A signal on a key wakes that key's subscribers and the whole topic's, not the other keys';
// a signal on the topic wakes them all; another topic wakes none of them.
func TestHub_Keys(t *testing.T) {
	t.Parallel()
	h := signal.NewHub()
	defer h.Close()
	subs := map[string]<-chan struct{}{}
	for _, topic := range []string{"approvals/apr_a", "approvals/apr_b", "approvals", "inbox"} {
		ch, stop := h.Subscribe(topic)
		defer stop()
		subs[topic] = ch
	}
	for _, tc := range []struct {
		signal string
		woken  []string
	}{
		{"approvals/apr_a", []string{"approvals/apr_a", "approvals"}},
		{"approvals/apr_b", []string{"approvals/apr_b", "approvals"}},
		{"approvals/apr_c", []string{"approvals"}},
		{"approvals", []string{"approvals/apr_a", "approvals/apr_b", "approvals"}},
		{"inbox", []string{"inbox"}},
		{"executions", nil},
		{"inbox/x", []string{"inbox"}},
	} {
		h.Signal(tc.signal)
		for topic, ch := range subs {
			want := slices.Contains(tc.woken, topic)
			select {
			case <-ch:
				if !want {
					t.Errorf("signal %s: subscriber of %s woken, want not", tc.signal, topic)
				}
			default:
				if want {
					t.Errorf("signal %s: subscriber of %s not woken, want woken", tc.signal, topic)
				}
			}
		}
	}
}

// Ending one key's subscription leaves the topic's other subscribers subscribed.
func TestHub_UnsubscribeKey(t *testing.T) {
	t.Parallel()
	h := signal.NewHub()
	defer h.Close()
	a, stopA := h.Subscribe("approvals/apr_a")
	b, stopB := h.Subscribe("approvals/apr_a")
	defer stopB()
	stopA()
	stopA() // twice is harmless
	h.Signal("approvals/apr_a")
	select {
	case <-a:
		t.Fatal("ended subscription: woken, want not")
	default:
	}
	select {
	case <-b:
	default:
		t.Fatal("remaining subscription of the same key: not woken, want woken")
	}
}
