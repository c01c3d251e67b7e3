// Package worker holds the background work that runs inside every `approvald serve` replica:
// the sweeper (expiry, retention purge), the inbox processor that applies stored webhook
// events (InboxProcessor, with the built-in handlers of Handle), and the execution runner that
// calls each approved action's target (Runner, with the retry Policy). Each worker is a type
// with Run(ctx) that returns when ctx ends; all coordination between replicas goes through
// the store, never process memory.
package worker
