// Package wait is the one helper of approvald's tests that waits in real time for a condition
// another goroutine or process makes true. It is for waits on what testing/synctest cannot
// see: a PostgreSQL server, a database connection pool, a loopback HTTP exchange or a child
// process (docs/testing.md, "Time"). Code on in-process timers is tested under synctest.
package wait

import (
	"errors"
	"testing"
	"time"
)

// Timeout bounds a wait. A condition the test makes true holds long before it; the deadline
// only turns a bug into a failure instead of a hung test, and is generous because the tests
// run with -race on a loaded two-core machine, some against child processes.
const Timeout = time.Minute

// The pause between two checks starts short, so that a condition that holds soon is seen
// soon, and grows to maxInterval, so that a long wait (a check may be an HTTP request to a
// child process) does not load the machine it waits on.
const (
	firstInterval = time.Millisecond
	maxInterval   = 50 * time.Millisecond
)

// errNotYet is what Until's check reports while its condition does not hold.
var errNotYet = errors.New("still not so")

// Until returns once cond holds, and fails the test with what it waited for after Timeout.
func Until(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	For(tb, what, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}

// For returns once check returns nil, and fails the test after Timeout with what it waited
// for and check's last error, which says how far from done it was ("got 3 of 5 sent").
func For(tb testing.TB, what string, check func() error) {
	tb.Helper()
	deadline := time.Now().Add(Timeout)
	pause := firstInterval
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("waited %s for %s: %v", Timeout, what, err)
		}
		time.Sleep(pause)
		pause = min(2*pause, maxInterval)
	}
}
