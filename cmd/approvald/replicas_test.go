package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/downstream"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/internal/wait"
)

// replicaConfig is the configuration of the replica tests: one action against url.
func replicaConfig(url, lease string, idempotent bool) string {
	return fmt.Sprintf(`
workers: {lease: %s, poll: 50ms}
actions:
  - name: pay
    url: %s
    secret: %q
    idempotent: %t
    timeout: 20s
    max_attempts: 5
    backoff: {initial: 50ms, max: 200ms, multiplier: 2}
`, lease, url, targetSecret, idempotent)
}

// Three replicas on one PostgreSQL database: 500 approvals created and approved through
// different replicas, round-robin, are each executed exactly once, whichever replica's runner
// claims them. The target does not honour keys, so a second call would show as a second
// effect.
func TestReplicas_OneEffectEach(t *testing.T) {
	t.Parallel()
	begun := time.Now()
	dsn := testdb.DSN(t, testdb.Postgres)
	ds := downstream.New(downstream.Options{Secrets: []string{targetSecret}})
	t.Cleanup(ds.Close)
	requester := createToken(t, dsn, "billing", "requester")
	alice := createToken(t, dsn, "alice", "approver")
	operator := createToken(t, dsn, "ops", "operator")
	opts := serveOptions{config: replicaConfig(ds.URL(), "5s", false)}
	replicas := []*server{startServeWith(t, dsn, opts), startServeWith(t, dsn, opts), startServeWith(t, dsn, opts)}

	const approvals = 500
	ids := make([]string, approvals)
	next := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range next {
				// Created through one replica, approved through the next.
				key := fmt.Sprintf("payout-%d", i)
				r, err := replicas[i%3].try("POST", "/v1/approvals", requester, key, `{"action": "pay", "title": "Payout", "approvers": ["alice"]}`, nil)
				if err != nil || r.status != http.StatusCreated {
					t.Errorf("create %s: got %d %s, %v; want 201", key, r.status, r.body, err)
					continue
				}
				var a approvalView
				r.decode(t, &a)
				ids[i] = a.ID
				r, err = replicas[(i+1)%3].try("POST", "/v1/approvals/"+a.ID+"/approve", alice, "", "{}", nil)
				if err != nil || r.status != http.StatusOK {
					t.Errorf("approve %s: got %d %s, %v; want 200", key, r.status, r.body, err)
				}
			}
		})
	}
	for i := range approvals {
		next <- i
	}
	close(next)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	wait.For(t, "every execution to succeed", func() error {
		if done := listExecutions(t, replicas[0], operator, "succeeded"); len(done) != approvals {
			return fmt.Errorf("got %d of %d executions succeeded; the downstream saw %d effects", len(done), approvals, ds.TotalEffects())
		}
		return nil
	})
	for i := range approvals {
		if n := ds.Effects(approval.DownstreamKey("billing", fmt.Sprintf("payout-%d", i))); n != 1 {
			t.Errorf("payout-%d: got %d effects, want 1", i, n)
		}
	}
	if n := ds.TotalEffects(); n != approvals {
		t.Errorf("got %d effects in all, want %d", n, approvals)
	}
	for _, r := range replicas {
		r.stop(t)
	}
	t.Logf("%d approvals through 3 replicas, each executed once, in %s (%d downstream requests)", approvals, time.Since(begun).Round(time.Millisecond), ds.Requests())
}

// A runner that stops (SIGSTOP: a long GC pause, a frozen VM) while the downstream holds its
// call loses its claim when the lease runs out; another replica takes the execution over and
// completes it; when the first wakes up (SIGCONT) its late outcome is refused by the fencing
// token (the attempt number): the execution keeps the second replica's outcome, and the
// idempotent downstream shows one effect.
func TestPausedWorker_Fenced(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		begun := time.Now()
		dsn := testdb.DSN(t, kind)
		ds := downstream.New(downstream.Options{HonourKeys: true, Secrets: []string{targetSecret}})
		t.Cleanup(ds.Close)
		requester := createToken(t, dsn, "billing", "requester")
		alice := createToken(t, dsn, "alice", "approver")
		opts := serveOptions{config: replicaConfig(ds.URL(), "500ms", true)}

		// The first replica alone, so that it is the one that claims.
		paused := startServeWith(t, dsn, opts)
		ds.SetDelay(2 * time.Second) // held well past the lease
		created := paused.do(t, "POST", "/v1/approvals", requester, "payout-1", `{"action": "pay", "title": "Payout", "approvers": ["alice"]}`)
		created.wantStatus(t, http.StatusCreated)
		var a approvalView
		created.decode(t, &a)
		paused.do(t, "POST", "/v1/approvals/"+a.ID+"/approve", alice, "", "{}").wantStatus(t, http.StatusOK)
		wait.Until(t, "the first replica's call to reach the downstream", func() bool { return ds.Waiting() == 1 })
		resumed := false
		defer func() {
			if !resumed { // a stopped process ignores the SIGKILL of the cleanup until continued
				paused.cmd.Process.Signal(syscall.SIGCONT)
			}
		}()
		// On SQLite the replicas share one file, and its write lock has no lease: a process
		// stopped inside a write transaction (a claim poll, a lease renewal) would stall every
		// writer of the file until it wakes, so the takeover could never happen. No fencing
		// token can help with that; it is why SQLite is for one process and PostgreSQL for
		// replicas. The test therefore stops the process at a moment it holds no write lock,
		// which is what it is about: the lease and the fencing, not SQLite's lock.
		for tries := 1; ; tries++ {
			if err := paused.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatalf("SIGSTOP: %v", err)
			}
			if kind != testdb.SQLite || !sqliteWriteLocked(t, dsn) {
				if tries > 1 {
					t.Logf("stopped the first replica outside a write transaction at the %d. try", tries)
				}
				break
			}
			if err := paused.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatalf("SIGCONT: %v", err)
			}
			if tries == 100 {
				t.Fatalf("the first replica held the SQLite write lock at %d stops in a row", tries)
			}
			time.Sleep(time.Millisecond) // let it finish its transaction
		}
		ds.SetDelay(0)

		taker := startServeWith(t, dsn, opts)
		a = waitApproval(t, taker, requester, a.ID, func(a approvalView) bool {
			return a.Execution != nil && a.Execution.Status == "succeeded"
		})
		if a.Execution.Attempts != 2 {
			t.Errorf("attempts: got %d, want 2 (the paused one, then the takeover)", a.Execution.Attempts)
		}
		taken := a.Execution

		// Let the downstream answer the paused call first: the late answer then waits in the
		// paused process's socket, and on waking the runner most likely reads it and tries to
		// record it (FinishAttempt, refused) before its overdue lease renewal (also refused) gets
		// a word in. Either write is fenced by the attempt number; which one comes first is up to
		// the scheduler, so both are accepted.
		wait.Until(t, "the downstream to answer the paused call", func() bool { return ds.Waiting() == 0 })
		if err := paused.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatalf("SIGCONT: %v", err)
		}
		resumed = true
		// The paused runner finds out on its next write, renewal or outcome, and logs it.
		wait.Until(t, "the resumed replica to find its claim lost", func() bool {
			return lostClaim.MatchString(paused.stderr.String())
		})
		t.Logf("the resumed replica logged %s", lostClaim.FindString(paused.stderr.String()))

		a = waitApproval(t, taker, requester, a.ID, func(approvalView) bool { return true })
		if a.Execution.Status != "succeeded" || a.Execution.Attempts != 2 || string(a.Execution.Result) != string(taken.Result) {
			t.Errorf("after the paused replica resumed: got execution %+v, want it unchanged: %+v", a.Execution, taken)
		}
		if n := ds.Effects(approval.DownstreamKey("billing", "payout-1")); n != 1 {
			t.Errorf("got %d effects, want 1", n)
		}
		var trail struct {
			Events []struct {
				Type  string `json:"type"`
				Cause struct {
					Attempt int `json:"attempt"`
				} `json:"cause"`
			} `json:"events"`
		}
		taker.do(t, "GET", "/v1/approvals/"+a.ID+"/events", requester, "", "").decode(t, &trail)
		outcomes := 0
		for _, e := range trail.Events {
			switch e.Type {
			case "execution.succeeded", "execution.failed", "execution.needs_review", "execution.retry_scheduled":
				outcomes++
				if e.Cause.Attempt != 2 {
					t.Errorf("event %s: got attempt %d, want 2", e.Type, e.Cause.Attempt)
				}
			}
		}
		if outcomes != 1 {
			t.Errorf("got %d attempt outcomes in the audit trail, want 1 (the takeover's)", outcomes)
		}
		paused.stop(t)
		taker.stop(t)
		t.Logf("paused worker fenced in %s", time.Since(begun).Round(time.Millisecond))
	})
}

// sqliteWriteLocked reports whether another connection holds the write lock of the SQLite
// database at dsn: it tries BEGIN IMMEDIATE without waiting, and rolls back if it got it.
func sqliteWriteLocked(t *testing.T, dsn string) bool {
	t.Helper()
	db, err := sql.Open("sqlite", dsn+"&_pragma=busy_timeout(0)")
	if err != nil {
		t.Fatalf("open %s: %v", dsn, err)
	}
	defer db.Close()
	ctx := context.Background()
	conn, err := db.Conn(ctx) // BEGIN and ROLLBACK must run on one connection
	if err != nil {
		t.Fatalf("connect %s: %v", dsn, err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		var serr *sqlite.Error
		if errors.As(err, &serr) && serr.Code()&0xff == sqlite3.SQLITE_BUSY {
			return true
		}
		t.Fatalf("BEGIN IMMEDIATE on %s: %v", dsn, err)
	}
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatalf("ROLLBACK on %s: %v", dsn, err)
	}
	return false
}

// lostClaim matches the runner's log line when a write of its attempt finds that a newer
// attempt owns the execution: at a lease renewal or when recording the outcome.
var lostClaim = regexp.MustCompile(`"msg":"(execution claim lost; abandoning the attempt|attempt outcome not recorded: a newer attempt owns the execution)"`)
