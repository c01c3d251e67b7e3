// Package batch gathers calls that arrive at the same moment into one batch, so that a store
// writes them with one statement and one commit instead of one each (docs/architecture.md,
// "Creates, intakes and reads in batches").
//
// It batches naturally, with no timer: a call that finds fewer than Concurrent batches
// running starts one at once with whatever is waiting, so a lone caller is never held back;
// calls that arrive while every slot is busy queue, and the next batch to start takes them
// all (up to Max). The busier the store, the bigger its batches, and the fewer commits each
// call costs. Batches run in the goroutine of the call that took the slot, one after the
// other while calls are queued; once that call's own result is in, a new goroutine takes the
// slot over, so a caller goes back to its work as soon as its result is in and the batch it
// was running ends.
package batch

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// Call is one caller's item in a batch: Run sets Res or Err of each call it is given.
type Call[Req, Res any] struct {
	Req Req
	Res Res
	Err error
}

// Batcher runs calls in batches through its run function.
type Batcher[Req, Res any] struct {
	run        func([]*Call[Req, Res])
	max        int
	concurrent int

	mu      sync.Mutex
	queue   []*waiting[Req, Res]
	running int // batches running, at most concurrent

	batches, calls atomic.Uint64 // run so far, for Stats
}

// Stats counts what a Batcher has run: its batches and the calls in them. Calls over
// Batches is the mean batch size.
type Stats struct {
	Batches, Calls uint64
}

// Stats returns what b has run so far.
func (b *Batcher[Req, Res]) Stats() Stats {
	return Stats{Batches: b.batches.Load(), Calls: b.calls.Load()}
}

// Waiting returns how many calls are queued for a batch that has not started yet.
func (b *Batcher[Req, Res]) Waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

type waiting[Req, Res any] struct {
	call Call[Req, Res]
	done chan struct{}
}

// New returns a Batcher that runs at most concurrent batches at once, of at most max calls
// each, through run. run must set the Res or the Err of every call it is given; it is never
// given an empty batch.
func New[Req, Res any](concurrent, max int, run func([]*Call[Req, Res])) *Batcher[Req, Res] {
	if concurrent < 1 || max < 1 {
		panic("batch: concurrent and max must be at least 1")
	}
	return &Batcher[Req, Res]{run: run, max: max, concurrent: concurrent}
}

// Do runs req in the next batch and returns its result. It waits for that batch whatever
// happens to the caller meanwhile: once queued, a call is written or failed with its batch.
func (b *Batcher[Req, Res]) Do(req Req) (Res, error) {
	w := &waiting[Req, Res]{call: Call[Req, Res]{Req: req}, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, w)
	lead := b.running < b.concurrent
	if lead {
		b.running++
	}
	b.mu.Unlock()
	if lead {
		b.lead(w)
	}
	<-w.done
	return w.call.Res, w.call.Err
}

// lead runs batches in a slot this goroutine holds, until the queue is empty or the batch
// holding own is done; queued calls left then go on in a new goroutine.
func (b *Batcher[Req, Res]) lead(own *waiting[Req, Res]) {
	for {
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.running--
			b.mu.Unlock()
			return
		}
		if own != nil && isDone(own) {
			b.mu.Unlock()
			go b.lead(nil)
			return
		}
		n := min(len(b.queue), b.max)
		batch := make([]*waiting[Req, Res], n)
		copy(batch, b.queue)
		b.queue = append(b.queue[:0], b.queue[n:]...)
		b.mu.Unlock()
		b.runBatch(batch)
	}
}

// runBatch runs one batch and releases its callers. A panic in run fails the batch's calls
// with an error that carries it and its stack, rather than going on: it may be in a
// goroutine of the batcher's own, where nothing would recover it and the process would die.
func (b *Batcher[Req, Res]) runBatch(batch []*waiting[Req, Res]) {
	b.batches.Add(1)
	b.calls.Add(uint64(len(batch)))
	calls := make([]*Call[Req, Res], len(batch))
	for i, w := range batch {
		calls[i] = &w.call
	}
	finished := false
	defer func() {
		if !finished {
			err := fmt.Errorf("batch: run panicked: %v\n%s", recover(), debug.Stack())
			for _, w := range batch {
				w.call.Err = err
				close(w.done)
			}
		}
	}()
	b.run(calls)
	finished = true
	for _, w := range batch {
		close(w.done)
	}
}

func isDone[Req, Res any](w *waiting[Req, Res]) bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// EachAlone returns a run for New that runs write over each batch, on a context of its own
// bounded by timeout (a batch works for callers who may have gone, and each of them waits
// for it to end). When the batch fails with an error that alone says is a refusal of the
// whole batch with nothing of it done (the database refused one call's content, or a
// deadlock), it runs write again over each call alone, so that one call's failure is its
// own. write may also fail a call of its own accord (its content checked before the batch is
// sent), setting its Err. Any other error (the connection lost, when the batch may or may
// not have taken effect) is every call's.
func EachAlone[Req, Res any](timeout time.Duration, write func(context.Context, []*Call[Req, Res]) error, alone func(error) bool) func([]*Call[Req, Res]) {
	return func(calls []*Call[Req, Res]) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		err := write(ctx, calls)
		switch {
		case err == nil:
		case len(calls) > 1 && alone(err):
			for _, c := range calls {
				c.Err = nil
				if err := write(ctx, []*Call[Req, Res]{c}); err != nil {
					c.Err = err
				}
			}
		default:
			for _, c := range calls {
				c.Err = err
			}
		}
	}
}
