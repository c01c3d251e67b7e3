// Package worker holds the background work that runs inside every `approvald serve` replica:
// the sweeper (expiry, lease recovery, retention purge), and later the inbox processor, the
// execution runner and the notifier. Each worker is a type with Run(ctx) that returns when ctx
// ends; all coordination between replicas goes through the store, never process memory.
package worker
