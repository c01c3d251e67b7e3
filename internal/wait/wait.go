// Package wait is the one helper of approvald's tests that waits in real time for a condition
// another goroutine or process makes true. It is for waits on what testing/synctest cannot
// see: a PostgreSQL server, a database connection pool, a loopback HTTP exchange or a child
// process (docs/testing.md, "Time"). Code on in-process timers is tested under synctest.
package wait

import (
	"testing"
	"time"
)

// Timeout bounds a wait. A condition the test makes true holds long before it; the deadline
// only turns a bug into a failure instead of a hung test, and is generous because the tests
// run with -race on a loaded machine.
const Timeout = 30 * time.Second

// interval is how long a wait sleeps between two checks of its condition.
const interval = time.Millisecond

// Until returns once cond holds, checking it every millisecond, and fails the test with what
// it waited for after Timeout.
func Until(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(Timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("waited %s for %s: still not so", Timeout, what)
		}
		time.Sleep(interval)
	}
}
