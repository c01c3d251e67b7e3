package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
)

// batchSizes is the Service's ledger over a real store, noting the size of each batch.
type batchSizes struct {
	*approval.Service
	mu    sync.Mutex
	sizes []int
}

func (l *batchSizes) RecordAttempts(ctx context.Context, b approval.AttemptBatch) (approval.AttemptsRecorded, error) {
	l.mu.Lock()
	l.sizes = append(l.sizes, len(b.Finishes)+len(b.Sends))
	l.mu.Unlock()
	return l.Service.RecordAttempts(ctx, b)
}

// Outcomes handed to the recorder while it is busy go together, in one batch, and each
// attempt gets its own answer back.
func TestRecorder_BatchesWhatWaits(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		const n = 8
		s := testdb.Open(t, kind, nil)
		l := &batchSizes{Service: &approval.Service{Store: s}}
		r := &Runner{Store: s, Ledger: l, Concurrency: n}
		// The loop is not started yet: it stands for a recorder busy with an earlier batch.
		rec := idleRecorder(r, n)
		answers := handMissing(rec, n)
		go rec.loop()
		errs := answers()
		rec.stop()

		if len(l.sizes) != 1 || l.sizes[0] != n {
			t.Errorf("got batches %v, want one of %d", l.sizes, n)
		}
		for i, err := range errs {
			if approval.ErrorCode(err) != approval.ENOTFOUND || !strings.Contains(err.Error(), fmt.Sprintf("exe_missing_%d ", i)) {
				t.Errorf("answer %d: got %v, want ENOTFOUND for exe_missing_%d", i, err, i)
			}
		}
	})
}

// idleRecorder is a recorder for r, holding up to n outcomes, whose loop is not started: it
// stands for one busy with an earlier batch. Its claims channel holds a claim too.
func idleRecorder(r *Runner, n int) *recorder {
	lane := make(chan struct{})
	close(lane) // no start lane: these tests hand it no starts
	return &recorder{r: r, in: make(chan recording, n), room: make(chan struct{}, n),
		starts: make(chan recording), lane: lane, claims: make(chan claimRequest, 1), done: make(chan struct{})}
}

// handMissing hands rec the outcomes of n executions that do not exist (the real ledger
// refuses each alone, ENOTFOUND naming exe_missing_i) and returns once all are in its hands,
// with a function that waits for their answers.
func handMissing(rec *recorder, n int) (answers func() []error) {
	var handed, answered sync.WaitGroup
	handed.Add(n)
	errs := make([]error, n)
	for i := range n {
		answered.Go(func() {
			_, errs[i] = rec.finish(approval.AttemptFinish{ID: fmt.Sprintf("exe_missing_%d", i), Attempt: 1,
				Outcome: approval.AttemptOutcome{Status: approval.ExecutionSucceeded}}, handed.Done)
		})
	}
	handed.Wait()
	return func() []error {
		answered.Wait()
		return errs
	}
}

// ledgerCalls is the Service's ledger over a real store that notes each call the recorder
// makes, and can make a record that claims too fail.
type ledgerCalls struct {
	*approval.Service
	failCombined error
	mu           sync.Mutex
	calls        []string
}

func (l *ledgerCalls) note(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, fmt.Sprintf(format, args...))
}

func (l *ledgerCalls) ClaimExecutions(ctx context.Context, lease time.Duration, limit int) ([]*approval.ExecutionClaim, error) {
	l.note("claim %d", limit)
	return l.Service.ClaimExecutions(ctx, lease, limit)
}

func (l *ledgerCalls) RecordAttempts(ctx context.Context, b approval.AttemptBatch) (approval.AttemptsRecorded, error) {
	if b.Claim == 0 {
		l.note("finish %d", len(b.Finishes))
		return l.Service.RecordAttempts(ctx, b)
	}
	l.note("finish %d and claim %d", len(b.Finishes), b.Claim)
	if l.failCombined != nil {
		return approval.AttemptsRecorded{}, l.failCombined
	}
	return l.Service.RecordAttempts(ctx, b)
}

// A claim Run asks for while outcomes wait goes with them, in one transaction; should that
// transaction fail, the outcomes are recorded alone and only the claim fails. Whichever of
// the two the recorder's loop takes first (select picks at random), it takes the other
// with it: each case runs several times.
func TestRecorder_ClaimsWithTheBatch(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		s := testdb.Open(t, kind, nil)
		for _, tc := range []struct {
			name  string
			fail  error
			calls []string
		}{
			{"together", nil, []string{"finish 3 and claim 5"}},
			{"claim failed", errors.New("the claim failed"), []string{"finish 3 and claim 5", "finish 3"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				for range 8 {
					const n = 3
					l := &ledgerCalls{Service: &approval.Service{Store: s}, failCombined: tc.fail}
					r := &Runner{Store: s, Ledger: l, Concurrency: n}
					// The loop is not started yet: it stands for a recorder busy with an
					// earlier batch, while outcomes and Run's claim wait for it.
					rec := idleRecorder(r, n)
					answers := handMissing(rec, n)
					claimed := make(chan claimAnswer, 1)
					rec.claims <- claimRequest{ctx: t.Context(), limit: 5, answer: claimed}
					go rec.loop()
					errs := answers()
					got := <-claimed
					rec.stop()

					if !slices.Equal(l.calls, tc.calls) {
						t.Fatalf("got ledger calls %q, want %q", l.calls, tc.calls)
					}
					if !errors.Is(got.err, tc.fail) || (tc.fail == nil) != (got.err == nil) || len(got.claims) != 0 {
						t.Fatalf("claim: got %d claims, %v; want none, error %v", len(got.claims), got.err, tc.fail)
					}
					for i, err := range errs {
						if approval.ErrorCode(err) != approval.ENOTFOUND {
							t.Fatalf("answer %d: got %v, want ENOTFOUND from the ledger", i, err)
						}
					}
				}
			})
		}
	})
}
