package batch

// Queued returns how many calls wait for a batch, for tests that wait for calls to queue.
func Queued[Req, Res any](b *Batcher[Req, Res]) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}
