package batch_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/approvald/approval/internal/batch"
)

// double is a run that answers each call with twice its request and records the batches.
type double struct {
	mu      sync.Mutex
	batches [][]int
	hold    chan struct{} // when set, the first batch waits for it to close
	started chan struct{} // closed when the first batch starts
	once    sync.Once
}

func (d *double) run(calls []*batch.Call[int, int]) {
	d.once.Do(func() {
		if d.started != nil {
			close(d.started)
		}
		if d.hold != nil {
			<-d.hold
		}
	})
	reqs := make([]int, len(calls))
	for i, c := range calls {
		reqs[i] = c.Req
		c.Res = 2 * c.Req
	}
	d.mu.Lock()
	d.batches = append(d.batches, reqs)
	d.mu.Unlock()
}

func TestLoneCallRunsAtOnce(t *testing.T) {
	d := &double{}
	b := batch.New(2, 8, d.run)
	for i := range 3 {
		res, err := b.Do(context.Background(), i)
		if err != nil || res != 2*i {
			t.Fatalf("Do(%d) = %d, %v; want %d, nil", i, res, err, 2*i)
		}
	}
	if len(d.batches) != 3 {
		t.Fatalf("batches = %v; want three batches of one", d.batches)
	}
}

// TestCallsQueuedBehindABatchShareTheNext holds the only slot with a first call, queues
// many calls behind it, and checks that they are run in batches of at most max, each call
// once, with its own answer.
func TestCallsQueuedBehindABatchShareTheNext(t *testing.T) {
	// Under synctest: every goroutine of the test blocks on the batcher's channels, so
	// synctest.Wait tells when all calls are queued.
	synctest.Test(t, func(t *testing.T) {
		const calls, max = 50, 16
		d := &double{hold: make(chan struct{}), started: make(chan struct{})}
		b := batch.New(1, max, d.run)

		results := make([]int, calls+1)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // the first call takes the slot and blocks in its batch
			defer wg.Done()
			results[0], _ = b.Do(context.Background(), 0)
		}()
		<-d.started

		var queued sync.WaitGroup
		for i := 1; i <= calls; i++ {
			wg.Add(1)
			queued.Add(1)
			go func() {
				defer wg.Done()
				queued.Done()
				res, err := b.Do(context.Background(), i)
				if err != nil {
					t.Errorf("Do(%d): %v", i, err)
				}
				results[i] = res
			}()
		}
		queued.Wait()
		// Every goroutine has started; once all are blocked, each is in the queue: they cannot
		// run (the slot is held).
		synctest.Wait()
		if got := batch.Queued(b); got != calls {
			t.Fatalf("calls queued behind the held batch: got %d, want %d", got, calls)
		}
		close(d.hold)
		wg.Wait()

		for i, r := range results {
			if r != 2*i {
				t.Errorf("result of %d = %d; want %d", i, r, 2*i)
			}
		}
		seen := map[int]bool{}
		for _, batch := range d.batches {
			if len(batch) > max {
				t.Errorf("a batch of %d; max is %d", len(batch), max)
			}
			for _, r := range batch {
				if seen[r] {
					t.Errorf("call %d ran twice", r)
				}
				seen[r] = true
			}
		}
		if len(seen) != calls+1 {
			t.Errorf("%d calls ran; want %d", len(seen), calls+1)
		}
		// 1 (the first) + 50 queued in batches of at most 16: 1 + 4 batches.
		if len(d.batches) != 5 {
			t.Errorf("batches = %d (%v); want 5: the queued calls share batches", len(d.batches), d.batches)
		}
	})
}

func TestPanicFailsTheBatchNotTheProcess(t *testing.T) {
	b := batch.New(1, 4, func(calls []*batch.Call[int, int]) {
		if calls[0].Req == 13 {
			panic("thirteen")
		}
		for _, c := range calls {
			c.Res = c.Req
		}
	})
	if _, err := b.Do(context.Background(), 13); err == nil || !strings.Contains(err.Error(), "thirteen") {
		t.Fatalf("Do(13) error = %v; want the panic", err)
	}
	if res, err := b.Do(context.Background(), 1); err != nil || res != 1 {
		t.Fatalf("after a panic, Do(1) = %d, %v; want 1, nil", res, err)
	}
}

// TestEachAlone: a batch refused whole is run again call by call, so that only the call
// that caused the refusal fails; any other error fails every call, and is not retried.
func TestEachAlone(t *testing.T) {
	refused := errors.New("refused: a call is negative")
	lost := errors.New("connection lost")
	var runs [][]int
	write := func(fail error) func(context.Context, []*batch.Call[int, int]) error {
		return func(ctx context.Context, calls []*batch.Call[int, int]) error {
			if _, ok := ctx.Deadline(); !ok {
				t.Fatal("write: the context has no deadline")
			}
			reqs := make([]int, len(calls))
			for i, c := range calls {
				reqs[i] = c.Req
			}
			runs = append(runs, reqs)
			for _, c := range calls {
				if c.Req < 0 {
					return fail
				}
			}
			for _, c := range calls {
				c.Res = 2 * c.Req
			}
			return nil
		}
	}
	calls := func(reqs ...int) []*batch.Call[int, int] {
		out := make([]*batch.Call[int, int], len(reqs))
		for i, r := range reqs {
			out[i] = &batch.Call[int, int]{Req: r}
		}
		return out
	}
	isRefused := func(err error) bool { return errors.Is(err, refused) }

	cs := calls(1, -2, 3)
	batch.EachAlone(time.Minute, write(refused), isRefused)(cs)
	if fmt.Sprint(runs) != "[[1 -2 3] [1] [-2] [3]]" {
		t.Fatalf("runs: got %v, want the batch then each call alone", runs)
	}
	for i, want := range []struct {
		res int
		err error
	}{{2, nil}, {0, refused}, {6, nil}} {
		if cs[i].Res != want.res || !errors.Is(cs[i].Err, want.err) {
			t.Fatalf("call %d: got %d, %v; want %d, %v", i, cs[i].Res, cs[i].Err, want.res, want.err)
		}
	}

	runs = nil
	cs = calls(1, -2, 3)
	batch.EachAlone(time.Minute, write(lost), isRefused)(cs)
	if len(runs) != 1 {
		t.Fatalf("runs after a lost connection: got %v, want the batch alone", runs)
	}
	for i, c := range cs {
		if !errors.Is(c.Err, lost) {
			t.Fatalf("call %d after a lost connection: got %v, want %v", i, c.Err, lost)
		}
	}
}

// TestCallerWhoseContextEndsReturnsAtOnce: a caller whose deadline passes while its batch is
// held returns the context's error then, not when the batch ends; the batch goes on.
func TestCallerWhoseContextEndsReturnsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &double{hold: make(chan struct{}), started: make(chan struct{})}
		b := batch.New(1, 8, d.run)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		errc := make(chan error, 1)
		go func() {
			_, err := b.Do(ctx, 7)
			errc <- err
		}()
		<-d.started
		err := <-errc
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Do with a held batch: got %v, want %v", err, context.DeadlineExceeded)
		}
		if got := time.Since(start); got != time.Second {
			t.Fatalf("Do returned after %v; want its deadline, 1s", got)
		}
		close(d.hold)
		synctest.Wait()
		if fmt.Sprint(d.batches) != "[[7]]" {
			t.Fatalf("batches: got %v, want the held batch to go on and end", d.batches)
		}
	})
}

// TestQueuedCallWhoseContextEndedIsNotRun: a call whose context ends while it waits behind
// a held batch leaves the queue and is never run; the calls queued with it are.
func TestQueuedCallWhoseContextEndedIsNotRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &double{hold: make(chan struct{}), started: make(chan struct{})}
		b := batch.New(1, 8, d.run)
		var wg sync.WaitGroup
		wg.Add(3)
		go func() { defer wg.Done(); b.Do(context.Background(), 1) }()
		<-d.started
		ctx, cancel := context.WithCancel(context.Background())
		var gone error
		go func() { defer wg.Done(); _, gone = b.Do(ctx, 2) }()
		go func() { defer wg.Done(); b.Do(context.Background(), 3) }()
		synctest.Wait()
		if got := batch.Queued(b); got != 2 {
			t.Fatalf("queued behind the held batch: got %d, want 2", got)
		}
		cancel()
		synctest.Wait()
		if got := batch.Queued(b); got != 1 {
			t.Fatalf("queued once a caller's context ended: got %d, want 1", got)
		}
		close(d.hold)
		wg.Wait()
		if !errors.Is(gone, context.Canceled) {
			t.Fatalf("the cancelled call: got %v, want %v", gone, context.Canceled)
		}
		if fmt.Sprint(d.batches) != "[[1] [3]]" {
			t.Fatalf("batches: got %v, want [[1] [3]]: the cancelled call never runs", d.batches)
		}
	})
}

// TestExpiredCallIsDroppedFromItsBatch: a call whose context ended before its batch started
// is failed with that error and not given to run, even when no one saw it end (its caller
// is blocked elsewhere, or the batch was taken first).
func TestExpiredCallIsDroppedFromItsBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var seen [][]int
		b := batch.New(1, 8, func(calls []*batch.Call[int, int]) {
			var reqs []int
			for _, c := range calls {
				reqs = append(reqs, c.Req)
				c.Res = c.Req
			}
			seen = append(seen, reqs)
		})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := b.Do(ctx, 1); !errors.Is(err, context.Canceled) {
			t.Fatalf("Do with an ended context: got %v, want %v", err, context.Canceled)
		}
		if len(seen) != 0 {
			t.Fatalf("batches: got %v, want none", seen)
		}
	})
}

// TestDeadline: a batch works until the latest deadline among its calls, within the limit;
// a call with no deadline gives it the limit.
func TestDeadline(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(secs ...int) []*batch.Call[int, int] {
		var out []*batch.Call[int, int]
		for _, s := range secs {
			c := &batch.Call[int, int]{}
			if s >= 0 {
				c.Deadline = base.Add(time.Duration(s) * time.Second)
			}
			out = append(out, c)
		}
		return out
	}
	limit := base.Add(30 * time.Second)
	for _, tc := range []struct {
		calls []*batch.Call[int, int]
		want  time.Time
	}{
		{at(2, 5, 3), base.Add(5 * time.Second)},
		{at(2, 40), limit},
		{at(2, -1), limit},
		{at(), limit},
	} {
		if got := batch.Deadline(tc.calls, limit); !got.Equal(tc.want) {
			t.Errorf("Deadline of %d calls: got %v, want %v", len(tc.calls), got.Sub(base), tc.want.Sub(base))
		}
	}
}

// TestEachAloneKeepsToTheDeadlines: the batch's context ends at its calls' latest deadline,
// not timeout later; run alone after a refusal, a call gets its own deadline.
func TestEachAloneKeepsToTheDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		refused := errors.New("refused")
		now := time.Now()
		var deadlines []time.Duration
		write := func(ctx context.Context, calls []*batch.Call[int, int]) error {
			d, _ := ctx.Deadline()
			deadlines = append(deadlines, d.Sub(now))
			if len(calls) > 1 {
				return refused
			}
			return nil
		}
		calls := []*batch.Call[int, int]{{Deadline: now.Add(time.Second)}, {Deadline: now.Add(2 * time.Second)}}
		batch.EachAlone(time.Minute, write, func(err error) bool { return errors.Is(err, refused) })(calls)
		if fmt.Sprint(deadlines) != "[2s 1s 2s]" {
			t.Fatalf("deadlines of the batch, then each call alone: got %v, want [2s 1s 2s]", deadlines)
		}
	})
}
