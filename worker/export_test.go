package worker

import (
	"context"
	"sync"
)

// ProcessOnce takes a batch of due events (up to Batch), handles them as Run does, and returns
// how many it took, so that tests can drive the processor a batch at a time.
func (p *InboxProcessor) ProcessOnce(ctx context.Context) (int, error) {
	return p.process(ctx, p.batch())
}

// RunOnce claims up to Batch executions, executes them with up to Concurrency calls at once,
// and returns how many it claimed once all are recorded. If ctx ends meanwhile, claims not
// yet sent are released and calls in flight are finished and recorded, as in Run.
func (r *Runner) RunOnce(ctx context.Context) (int, error) {
	if err := r.validate(); err != nil {
		return 0, err
	}
	claims, claimedAt, err := r.claim(ctx, r.batch())
	if err != nil {
		return 0, err
	}
	slots := make(chan struct{}, r.concurrency())
	rec := r.startRecorder()
	var wg sync.WaitGroup
	for _, c := range claims {
		wg.Go(func() { r.execute(ctx, c, claimedAt, slots, rec, func() {}) })
	}
	wg.Wait()
	rec.stop()
	return len(claims), nil
}
