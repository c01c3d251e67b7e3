// Package loadtest measures approvald under concurrent load over real HTTP, beside baselines
// run on the same database in the same run: a plain one-row INSERT and a primary-key SELECT
// of a row the size of an approval, on connections opened exactly as the store opens its own.
// A shared, noisy machine moves absolute figures from one run to the next; a scenario's ratio
// to its baseline, measured minutes apart at the same concurrency, moves much less.
//
// A run sweeps client counts; at each count it runs every scenario as a step: a warm-up, then
// a timed phase bounded by a duration and by a count of requests, with every latency kept for
// the percentiles. Requests go to loopback addresses only.
package loadtest

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// MaxStepRequests bounds the requests one step starts, warm-up included, whatever its
// duration: a step keeps every latency in memory (8 bytes each).
const MaxStepRequests = 1 << 22

// opGrace is how long a request started before the end of a step may take before its context
// is cancelled: long enough never to cut a slow answer under load, short enough that a step
// always ends.
const opGrace = 30 * time.Second

// Op is one request of a step. i numbers the requests of the step from 0, across all its
// clients, so that an op can name a new key or pick an entry of a prepared pool.
type Op func(ctx context.Context, i int) error

// Step is one scenario at one concurrency.
type Step struct {
	Clients  int           // concurrent clients, each sending one request at a time
	Warmup   time.Duration // requests started before it are not measured
	Duration time.Duration // the timed phase, after the warm-up
	// Limit bounds the requests the step starts, warm-up included (a pool of pending
	// approvals can be decided once each); 0 means MaxStepRequests.
	Limit int
}

// Measurement is what a step measured in its timed phase.
type Measurement struct {
	Requests   int             // requests started in the timed phase that succeeded
	Errors     int             // requests that failed, warm-up included
	FirstError error           // the first of them, for the progress line
	Elapsed    time.Duration   // from the end of the warm-up to the last measured answer
	Latencies  []time.Duration // of the measured requests, sorted
	// Exhausted reports that the step ran out of Limit before its duration was up, so it
	// was measured over a shorter time.
	Exhausted bool
}

// Rate returns the measured requests per second.
func (m Measurement) Rate() float64 {
	if m.Requests == 0 || m.Elapsed <= 0 {
		return 0
	}
	return float64(m.Requests) / m.Elapsed.Seconds()
}

// Percentile returns the latency below which a fraction q (0.5, 0.99, 0.999) of the measured
// requests fall, by the nearest-rank method; 0 without requests.
func (m Measurement) Percentile(q float64) time.Duration {
	n := len(m.Latencies)
	if n == 0 {
		return 0
	}
	rank := int(float64(n)*q + 0.9999999) // ceil, robust to q*n being an integer
	return m.Latencies[min(max(rank, 1), n)-1]
}

// Measure runs op from s.Clients goroutines, each sending its next request when the last one
// is answered, until s.Warmup+s.Duration has passed, s.Limit requests have started or ctx
// ends. A request counts when it started after the warm-up; one still in flight when the
// time is up is waited for and counted, so Elapsed runs to the last answer. Should no request
// begun after the warm-up have been answered by then, the clients go on until one is
// (within opGrace).
func Measure(ctx context.Context, s Step, op Op) Measurement {
	limit := s.Limit
	if limit <= 0 || limit > MaxStepRequests {
		limit = MaxStepRequests
	}
	start := time.Now()
	from := start.Add(s.Warmup)
	end := from.Add(s.Duration)
	hardEnd := end.Add(opGrace)
	opCtx, cancel := context.WithDeadline(ctx, hardEnd)
	defer cancel()

	var (
		next      atomic.Int64
		exhausted atomic.Bool
		answered  atomic.Bool // some request that began after the warm-up was answered
		wg        sync.WaitGroup
		mu        sync.Mutex
		total     Measurement
		last      time.Time
	)
	for range max(s.Clients, 1) {
		wg.Go(func() {
			var (
				took     []time.Duration
				errs     int
				firstErr error
				lastDone time.Time
			)
			// Past end, clients go on only until a request that began after the warm-up
			// has been answered, so that a step whose requests all began in the warm-up
			// (on a very slow machine) still measures one.
			for ctx.Err() == nil && (time.Now().Before(end) || !answered.Load() && time.Now().Before(hardEnd)) {
				i := int(next.Add(1) - 1)
				if i >= limit {
					if time.Now().Before(end) {
						exhausted.Store(true)
					}
					break
				}
				began := time.Now()
				err := op(opCtx, i)
				done := time.Now()
				if !began.Before(from) {
					answered.Store(true)
				}
				if err != nil {
					if errs++; firstErr == nil {
						firstErr = err
					}
					continue
				}
				if began.Before(from) {
					continue
				}
				took = append(took, done.Sub(began))
				lastDone = done
			}
			mu.Lock()
			defer mu.Unlock()
			total.Latencies = append(total.Latencies, took...)
			total.Errors += errs
			if total.FirstError == nil {
				total.FirstError = firstErr
			}
			if lastDone.After(last) {
				last = lastDone
			}
		})
	}
	wg.Wait()
	slices.Sort(total.Latencies)
	total.Requests = len(total.Latencies)
	if total.Requests > 0 {
		total.Elapsed = last.Sub(from)
	}
	total.Exhausted = exhausted.Load()
	return total
}
