package worker

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
)

// batchSizes is the Service's ledger over a real store, noting the size of each batch.
type batchSizes struct {
	*approval.Service
	mu    sync.Mutex
	sizes []int
}

func (l *batchSizes) FinishAttempts(ctx context.Context, fs []approval.AttemptFinish) ([]approval.AttemptFinished, error) {
	l.mu.Lock()
	l.sizes = append(l.sizes, len(fs))
	l.mu.Unlock()
	return l.Service.FinishAttempts(ctx, fs)
}

// Outcomes handed to the recorder while it is busy go together, in one batch, and each
// attempt gets its own answer back.
func TestRecorder_BatchesWhatWaits(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		const n = 8
		s := testdb.Open(t, kind, nil)
		l := &batchSizes{Service: &approval.Service{Store: s}}
		r := &Runner{Store: s, Ledger: l, Concurrency: n}
		// The loop is not started yet: it stands for a recorder busy with an earlier batch.
		rec := &recorder{r: r, in: make(chan recording, n), room: make(chan struct{}, n), done: make(chan struct{})}
		var handed, answered sync.WaitGroup
		handed.Add(n)
		errs := make([]error, n)
		for i := range n {
			answered.Go(func() {
				// Executions that do not exist: the real ledger refuses each alone.
				_, errs[i] = rec.finish(approval.AttemptFinish{ID: fmt.Sprintf("exe_missing_%d", i), Attempt: 1,
					Outcome: approval.AttemptOutcome{Status: approval.ExecutionSucceeded}}, handed.Done)
			})
		}
		handed.Wait() // every outcome is in the recorder's hands
		go rec.loop()
		answered.Wait()
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
