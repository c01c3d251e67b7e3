// Package batch gathers calls that arrive at the same moment into one batch, so that a store
// writes them with one statement and one commit instead of one each (docs/architecture.md,
// "Creates, intakes and reads in batches").
//
// It batches naturally, with no timer: a call that finds fewer than Concurrent batches
// running starts one at once with whatever is waiting, so a lone caller is never held back;
// calls that arrive while every slot is busy queue, and the next batch to start takes them
// all (up to Max). The busier the store, the bigger its batches, and the fewer commits each
// call costs. Batches run in a goroutine that holds a slot, one after the other while calls
// are queued, so that a caller whose context ends goes back at once, whatever its batch is
// doing (docs/operations.md, "Deadlines").
package batch

import (
	"context"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Call is one caller's item in a batch: Run sets Res or Err of each call it is given.
// Deadline is the caller's context's deadline, zero when it has none: the batch works for
// its calls until the latest of them (EachAlone).
type Call[Req, Res any] struct {
	Req      Req
	Res      Res
	Err      error
	Deadline time.Time
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
	ctx  context.Context
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

// Do runs req in the next batch and returns its result. A call whose ctx ends before its
// batch starts is not run; one whose ctx ends while its batch runs returns ctx's error at
// once, and its batch goes on without it: what the batch did is then learnt by reading again
// (a create's key replays its outcome).
func (b *Batcher[Req, Res]) Do(ctx context.Context, req Req) (Res, error) {
	w := &waiting[Req, Res]{ctx: ctx, call: Call[Req, Res]{Req: req}, done: make(chan struct{})}
	w.call.Deadline, _ = ctx.Deadline()
	var zero Res
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	b.mu.Lock()
	b.queue = append(b.queue, w)
	lead := b.running < b.concurrent
	if lead {
		b.running++
	}
	b.mu.Unlock()
	if lead {
		go b.lead()
	}
	select {
	case <-w.done:
		return w.call.Res, w.call.Err
	case <-ctx.Done():
	}
	b.mu.Lock()
	if i := slices.Index(b.queue, w); i >= 0 {
		b.queue = slices.Delete(b.queue, i, i+1) // not started: it never will be
	}
	b.mu.Unlock()
	if isDone(w) { // the batch ended as the context did: its answer is the truth
		return w.call.Res, w.call.Err
	}
	return zero, ctx.Err()
}

// lead runs batches in a slot this goroutine holds, until the queue is empty. Calls whose
// context ended while they were queued are dropped from the batch, unrun.
func (b *Batcher[Req, Res]) lead() {
	for {
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.running--
			b.mu.Unlock()
			return
		}
		n := min(len(b.queue), b.max)
		batch := make([]*waiting[Req, Res], 0, n)
		for _, w := range b.queue[:n] {
			if err := w.ctx.Err(); err != nil {
				w.call.Err = err
				close(w.done)
				continue
			}
			batch = append(batch, w)
		}
		b.queue = append(b.queue[:0], b.queue[n:]...)
		b.mu.Unlock()
		if len(batch) > 0 {
			b.runBatch(batch)
		}
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
// (a batch works for callers who may have gone): it ends at the latest deadline among the
// batch's calls, and never later than timeout from the batch's start. When the batch fails
// with an error that alone says is a refusal of the whole batch with nothing of it done (the
// database refused one call's content, or a deadlock), it runs write again over each call
// alone, within that call's own deadline, so that one call's failure is its own. write may
// also fail a call of its own accord (its content checked before the batch is sent), setting
// its Err. Any other error (the connection lost, when the batch may or may not have taken
// effect) is every call's.
func EachAlone[Req, Res any](timeout time.Duration, write func(context.Context, []*Call[Req, Res]) error, alone func(error) bool) func([]*Call[Req, Res]) {
	return func(calls []*Call[Req, Res]) {
		ctx, cancel := context.WithDeadline(context.Background(), Deadline(calls, time.Now().Add(timeout)))
		defer cancel()
		err := write(ctx, calls)
		switch {
		case err == nil:
		case len(calls) > 1 && alone(err):
			for _, c := range calls {
				c.Err = nil
				if err := writeAlone(ctx, c, write); err != nil {
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

// writeAlone runs write over c alone, within c's deadline.
func writeAlone[Req, Res any](ctx context.Context, c *Call[Req, Res], write func(context.Context, []*Call[Req, Res]) error) error {
	if !c.Deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, c.Deadline)
		defer cancel()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return write(ctx, []*Call[Req, Res]{c})
}

// Deadline returns the deadline of a batch of calls: the latest of theirs, and limit when it
// is earlier or when a call has none.
func Deadline[Req, Res any](calls []*Call[Req, Res], limit time.Time) time.Time {
	var latest time.Time
	for _, c := range calls {
		if c.Deadline.IsZero() {
			return limit
		}
		if c.Deadline.After(latest) {
			latest = c.Deadline
		}
	}
	if latest.IsZero() || latest.After(limit) {
		return limit
	}
	return latest
}
