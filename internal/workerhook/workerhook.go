// Package workerhook lets the tests of other packages drive a worker one round at a time
// without the worker exporting its rounds: package worker sets the hooks when it is
// initialised, and only packages of this module can import this one.
package workerhook

import "context"

// OutboxRunOnce claims up to a batch of the outbox's due messages, sends them, records each
// outcome and returns how many it claimed. outbox is a *worker.Outbox; worker sets the hook.
var OutboxRunOnce func(ctx context.Context, outbox any) (int, error)
