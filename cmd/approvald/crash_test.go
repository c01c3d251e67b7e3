package main

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/failpoint"
	"github.com/approvald/approval/internal/downstream"
	"github.com/approvald/approval/internal/testdb"
)

// targetSecret signs the runner's calls; the reference downstream checks every one.
const targetSecret = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"

// A target kind is what the downstream promises about repeated calls.
type targetKind struct {
	name       string
	idempotent bool // honours Idempotency-Key, and approvald is told so
	lookup     bool // has a lookup URL approvald may ask
}

var targetKinds = []targetKind{
	{name: "idempotent", idempotent: true},
	{name: "plain"}, // neither: an uncertain call can only go to an operator
	{name: "lookup", lookup: true},
}

// The workers' lease and poll in the crash proof: a dead process's claim is taken over
// between crashLease and crashLease+crashPoll after its last renewal. The lease is long
// enough that a live process starved of CPU by the rest of the suite (two cores, dozens of
// processes) keeps its claim: a call cut short by its lease is the lookup's one blind spot
// (docs/invariants.md, invariant 5), and at 750 ms a loaded run hit it.
const (
	crashLease = "1500ms"
	crashPoll  = "100ms"
)

// crashRounds is how many crashes each (failpoint, target kind) sequence goes through
// (24 sequences over the two stores, so 72 crashes in all by default; more for a soak):
// APPROVALD_CRASH_ROUNDS, 3 by default, as the other crash proofs. Every round is the same
// scenario with the crash at the same point, so further rounds only sample more schedules of
// the same code: three put every sequence's later rounds on a database with earlier crashes'
// history and keep the test command quick; a soak (APPROVALD_CRASH_ROUNDS=50) samples more.
func crashRounds(t *testing.T) int {
	return roundsFromEnv(t, "APPROVALD_CRASH_ROUNDS", 3)
}

// roundsFromEnv is how many crash rounds a test goes through: the environment variable name,
// or def when it is unset.
func roundsFromEnv(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a whole number >= 1", name, v)
	}
	return n
}

// The crash proof of invariant 5 (issue #4), on the real binary: the process kills itself
// with SIGKILL at each failpoint of the execution path, is restarted without it, and the
// DOWNSTREAM, not our tables, is asked what happened. For each failpoint and target kind a
// sequence of rounds runs on a database of its own: create an approval, approve it, the
// process dies at the point, a fresh process finishes the work, and the approver's client
// retries its approve as a client whose answer never came would. Then:
//
//   - idempotent target: exactly one effect per approved operation, none lost;
//   - plain target: never two effects for one key, every execution whose effect the runner
//     cannot know is in needs_review (listed by GET /v1/executions?status=needs_review), and
//     none whose call never started (execution.before-send) is;
//   - target with a lookup URL: exactly one effect per operation and nothing in needs_review.
//
// The sequences run at once (as subtests started from goroutines, which the -parallel limit
// does not throttle): each spends most of its time waiting for a lease to expire. Its 24
// sequences and their processes are load enough: it runs alone (see crashParallel).
func TestCrash_OneEffect(t *testing.T) {
	rounds := crashRounds(t)
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		begun := time.Now()
		var wg sync.WaitGroup
		points := 0
		for _, point := range failpoint.Known {
			if strings.HasPrefix(point, "outbox.") || strings.HasPrefix(point, "slack.") {
				continue // the outbox and Slack have crash proofs of their own (crash_outbox_test.go, slack_e2e_test.go)
			}
			points++
			for _, target := range targetKinds {
				wg.Go(func() {
					t.Run(point+"/"+target.name, func(t *testing.T) {
						crashSequence(t, kind, point, target, rounds)
					})
				})
			}
		}
		wg.Wait()
		t.Logf("%s: %d failpoints x %d target kinds x %d rounds in %s", kind, points, len(targetKinds), rounds, time.Since(begun).Round(time.Millisecond))
	})
}

// crashParallel marks a crash proof that may run beside the package's other parallel tests:
// it keeps one serve process per store alive at a time, which mostly waits for a lease to
// end, so it neither starves what runs beside it nor needs the machine to itself. The
// -parallel limit (GOMAXPROCS by default: 2 on the development machine) bounds how many of
// the per-store subtests run at once. TestCrash_OneEffect (24 sequences at once) and
// TestCrash_Creates (two dozen clients) are not such proofs: beside other tests a live
// process's lease could lapse under them (docs/invariants.md, invariant 5), so they run
// alone, one after the other.
func crashParallel(t *testing.T) {
	t.Parallel()
}

// crashRound is what one round left behind.
type crashRound struct {
	key, approvalID, executionID, status string
}

func crashSequence(t *testing.T, kind, point string, target targetKind, rounds int) {
	dsn := testdb.DSN(t, kind)
	ds := downstream.New(downstream.Options{HonourKeys: target.idempotent, Secrets: []string{targetSecret}})
	t.Cleanup(ds.Close)
	lookup := ""
	if target.lookup {
		lookup = "lookup_url: " + ds.LookupURL()
	}
	// A short lease, so that a dead process's claim is recovered quickly, but not so short
	// that a loaded machine lets a live process's claim lapse; retries (which a crash never
	// causes by itself) back off briefly.
	config := fmt.Sprintf(`
workers: {lease: %s, poll: %s}
actions:
  - name: pay
    url: %s
    secret: %q
    idempotent: %t
    %s
    timeout: 5s
    max_attempts: 5
    backoff: {initial: 50ms, max: 200ms, multiplier: 2}
`, crashLease, crashPoll, ds.URL(), targetSecret, target.idempotent, lookup)
	armed := serveOptions{config: config, env: []string{failpoint.EnvVar + "=" + point + "=crash"}}
	healthy := serveOptions{config: config}

	requester := createToken(t, dsn, "billing", "requester")
	alice := createToken(t, dsn, "alice", "approver")
	operator := createToken(t, dsn, "ops", "operator")

	results := make([]crashRound, rounds)
	for i := range rounds {
		r := &results[i]
		r.key = fmt.Sprintf("refund-%d", i)

		doomed := startServeWith(t, dsn, armed)
		created := doomed.do(t, "POST", "/v1/approvals", requester, r.key,
			`{"action": "pay", "title": "Refund order", "approvers": ["alice"]}`)
		created.wantStatus(t, http.StatusCreated)
		var a approvalView
		created.decode(t, &a)
		r.approvalID = a.ID
		// The answer may or may not come: approval.after-commit dies before writing it, and
		// the runner, woken by the commit, may reach its point first.
		if resp, err := doomed.try("POST", "/v1/approvals/"+a.ID+"/approve", alice, "", "{}", nil); err == nil {
			resp.wantStatus(t, http.StatusOK)
		}
		doomed.waitKilled(t)
		if i == 0 && !strings.Contains(doomed.stderr.String(), `"msg":"failpoints armed`) {
			t.Errorf("a process with failpoints armed did not say so\nstderr:\n%s", doomed.stderr)
		}

		healer := startServeWith(t, dsn, healthy)
		// The approver's retry: the vote is already in, so it is repeated, not recorded again.
		again := healer.do(t, "POST", "/v1/approvals/"+a.ID+"/approve", alice, "", "{}")
		again.wantStatus(t, http.StatusOK)
		a = waitApproval(t, healer, requester, a.ID, func(a approvalView) bool {
			return a.Execution != nil && slices.Contains([]string{"succeeded", "failed", "needs_review"}, a.Execution.Status)
		})
		if a.Status != "approved" || len(a.Decisions) != 1 {
			t.Fatalf("round %d: got approval %s with %d decisions, want approved with 1", i, a.Status, len(a.Decisions))
		}
		r.executionID, r.status = a.Execution.ID, a.Execution.Status

		// The last round's process stays up for the operator's view below.
		if i < rounds-1 {
			healer.stop(t)
			continue
		}
		review := listExecutions(t, healer, operator, "needs_review")
		checkCrashOutcome(t, point, target, ds, results, review)
		healer.stop(t)
	}
}

// checkCrashOutcome holds the rounds' outcomes, as the downstream saw them, to the promise
// each target kind gets.
func checkCrashOutcome(t *testing.T, point string, target targetKind, ds *downstream.Server, results []crashRound, review []executionView) {
	t.Helper()
	inReview := make(map[string]bool)
	for _, e := range review {
		inReview[e.ID] = true
	}
	statuses := make(map[string]int)
	for i, r := range results {
		statuses[r.status]++
		effects := ds.Effects(approval.DownstreamKey("billing", r.key))
		if inReview[r.executionID] != (r.status == "needs_review") {
			t.Errorf("round %d: execution %s is %s, but GET /v1/executions?status=needs_review lists it: %t", i, r.executionID, r.status, inReview[r.executionID])
		}
		switch {
		case target.idempotent || target.lookup:
			if effects != 1 || r.status != "succeeded" {
				t.Errorf("round %d (%s): got %d effects and execution %s, want exactly 1 effect and succeeded", i, r.key, effects, r.status)
			}
		default:
			// Never two effects; a succeeded execution had its one effect; anything the runner
			// could not know about waits for an operator rather than being guessed.
			switch {
			case effects > 1:
				t.Errorf("round %d (%s): got %d effects, want at most 1", i, r.key, effects)
			case r.status == "succeeded" && effects != 1:
				t.Errorf("round %d (%s): succeeded with %d effects, want 1", i, r.key, effects)
			case r.status != "succeeded" && r.status != "needs_review":
				t.Errorf("round %d (%s): got execution %s with %d effects, want succeeded or needs_review", i, r.key, r.status, effects)
			}
		}
		// Where the point leaves no doubt, the outcome is exact. Before the send the call has
		// not started, and the record says so: the next process sends it as an ordinary
		// attempt, so nothing never sent waits for an operator. After the send the call may
		// have reached the target, and only the target could tell. (After
		// execution.after-record the outcome is recorded before the crash, but it need not be
		// "succeeded": on a loaded machine the process's own lease may lapse during the call.)
		switch {
		case point == "execution.before-send" && (r.status != "succeeded" || effects != 1):
			t.Errorf("round %d (%s) at %s: got execution %s with %d effects, want succeeded with 1: the call never started", i, r.key, point, r.status, effects)
		case !target.idempotent && !target.lookup && point == "execution.after-send" && r.status != "needs_review":
			t.Errorf("round %d (%s) at %s: got execution %s, want needs_review", i, r.key, point, r.status)
		}
	}
	if (target.idempotent || target.lookup) && len(review) != 0 {
		t.Errorf("got %d executions in needs_review, want none", len(review))
	}
	if extra := len(ds.Keys()) - len(results); extra > 0 {
		t.Errorf("downstream saw %d keys that no round made", extra)
	}
	t.Logf("%d rounds: executions %v, %d effects in all, %d requests, %d lookups", len(results), statuses, ds.TotalEffects(), ds.Requests(), ds.Lookups())
}

// listExecutions returns every execution in status, following the pages.
func listExecutions(t *testing.T, srv *server, token, status string) []executionView {
	t.Helper()
	var all []executionView
	cursor := ""
	for {
		var page struct {
			Executions []executionView `json:"executions"`
			NextCursor string          `json:"next_cursor"`
		}
		resp := srv.do(t, "GET", "/v1/executions?limit=200&status="+status+"&cursor="+cursor, token, "", "")
		resp.wantStatus(t, http.StatusOK)
		resp.decode(t, &page)
		all = append(all, page.Executions...)
		if page.NextCursor == "" {
			return all
		}
		cursor = page.NextCursor
	}
}

// waitKilled waits for the process to die of SIGKILL, as a crash failpoint makes it.
func (s *server) waitKilled(t *testing.T) {
	t.Helper()
	select {
	case <-s.exited:
	case <-time.After(exitTimeout):
		t.Fatalf("serve did not crash within %s\nstderr:\n%s", exitTimeout, s.stderr)
	}
	var exit *exec.ExitError
	if !errors.As(s.waitErr, &exit) {
		t.Fatalf("serve: got exit %v, want death by SIGKILL\nstderr:\n%s", s.waitErr, s.stderr)
	}
	if ws, ok := exit.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("serve: got %v, want death by SIGKILL\nstderr:\n%s", s.waitErr, s.stderr)
	}
}
