package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/approvald/approval/internal/testdb"
)

// The sizes of the create crash proof: enough concurrent creates that the kill lands in the
// middle of some, small enough that a store's rounds take seconds on a loaded machine.
const (
	createClients      = 24  // clients sending creates at once
	createAcksPerRound = 100 // acknowledged creates before each kill
	createFanout       = 3   // clients retrying one key at once after a restart
)

// The crash proof of invariant 2 for creates (issue #8), on the real binary: a create commits
// its idempotency record, approval and stored response together or not at all, so a SIGKILL
// in the middle of creates leaves nothing that a retry has to wait for.
//
// In each round createClients clients send creates with keys of their own (the body depends
// only on the key), until createAcksPerRound have been acknowledged; then the process is
// killed with SIGKILL, while creates are in flight, and started again on the same database.
// After every restart:
//
//   - every create that was sent but not acknowledged, retried once with the identical
//     request, settles at once: 201, or a replay with Idempotent-Replayed: true; a 409 (the
//     key still held by an in-flight record the dead process left) fails the test;
//   - every key that settled, in any round, is retried by createFanout clients at once, and
//     each gets a replay of the same approval id; GET of that id is 200;
//   - the approvals in the database, listed page by page, are exactly one per settled key.
//
// APPROVALD_CRASH_CREATE_ROUNDS (default 3) sets how many crashes each store goes through.
func TestCrash_Creates(t *testing.T) {
	rounds := roundsFromEnv(t, "APPROVALD_CRASH_CREATE_ROUNDS", 3)
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		begun := time.Now()
		dsn := testdb.DSN(t, kind)
		requester := createToken(t, dsn, "ci-bot", "requester")
		admin := createToken(t, dsn, "root", "admin")

		settled := make(map[int]string) // key index -> approval id, for every key that settled
		next := 0                       // the index of the next new key
		var refusals []string           // per round, the unacknowledged keys whose retry answered 409
		conflicts := 0
		srv := startServe(t, dsn)
		for round := range rounds {
			acked, unacked := driveCreates(t, srv, requester, &next)
			for i, id := range acked {
				settled[i] = id
			}
			if t.Failed() {
				t.FailNow()
			}
			srv = startServe(t, dsn)
			retried, replays, refused := retryUnacked(t, srv, requester, unacked)
			for i, id := range retried {
				settled[i] = id
			}
			if len(refused) > 0 {
				conflicts += len(refused)
				refusals = append(refusals, fmt.Sprintf("round %d: %d of %d (%s)", round, len(refused), len(unacked), strings.Join(refused, ", ")))
			}
			checkSettled(t, srv, requester, admin, settled)
			t.Logf("round %d: %d creates acknowledged, %d in flight at the kill: %d settled on their retry (%d replays), %d answered 409",
				round, len(acked), len(unacked), len(retried), replays, len(refused))
			// The 409s are reported at the end; any other failure would only repeat itself.
			if t.Failed() {
				t.FailNow()
			}
		}
		srv.stop(t)
		if conflicts > 0 {
			t.Errorf("got %d unacknowledged keys answering 409 to their one retry after a restart, want 0: an in-flight record outlived the crash\n%s",
				conflicts, strings.Join(refusals, "\n"))
		}
		t.Logf("%s: %d rounds, %d keys settled, %d answered 409, in %s", kind, rounds, len(settled), conflicts, time.Since(begun).Round(time.Millisecond))
	})
}

// createKey and createBody make the create of key index i; the same i is the same request.
func createKey(i int) string { return fmt.Sprintf("create-%d", i) }

func createBody(i int) string {
	return fmt.Sprintf(`{"action": "deploy", "title": "Deploy build %d", "context": {"build": %d}, "approvers": ["alice"]}`, i, i)
}

// driveCreates sends new creates from createClients clients, starting at key index *next,
// until createAcksPerRound are acknowledged, then kills srv with SIGKILL. It returns the
// approval id of every acknowledged key, and the keys that were sent but got no answer.
func driveCreates(t *testing.T, srv *server, token string, next *int) (acked map[int]string, unacked []int) {
	t.Helper()
	acked = make(map[int]string)
	var (
		mu     sync.Mutex
		keys   atomic.Int64
		killed atomic.Bool // set just before the kill: an error after it is the kill's
		enough = make(chan struct{})
		once   sync.Once
		wg     sync.WaitGroup
	)
	keys.Store(int64(*next))
	for range createClients {
		wg.Go(func() {
			for !killed.Load() {
				i := int(keys.Add(1) - 1)
				resp, err := srv.try("POST", "/v1/approvals", token, createKey(i), createBody(i), nil)
				if err != nil {
					if !killed.Load() {
						t.Errorf("create %s before the kill: %v", createKey(i), err)
					}
					mu.Lock()
					unacked = append(unacked, i)
					mu.Unlock()
					return
				}
				id, ok := createAnswer(t, i, resp, false)
				if !ok {
					return
				}
				mu.Lock()
				acked[i] = id
				n := len(acked)
				mu.Unlock()
				if n >= createAcksPerRound {
					once.Do(func() { close(enough) })
				}
			}
		})
	}
	stopped := make(chan struct{}) // every client gave up: there will be no more acks
	go func() {
		wg.Wait()
		close(stopped)
	}()
	select {
	case <-enough:
	case <-stopped:
		t.Fatalf("the clients stopped after %d acknowledged creates, want %d before the kill", len(acked), createAcksPerRound)
	}
	killed.Store(true)
	if err := srv.cmd.Process.Kill(); err != nil {
		t.Fatalf("kill serve: %v\nstderr:\n%s", err, srv.stderr)
	}
	srv.waitKilled(t)
	<-stopped
	*next = int(keys.Load())
	slices.Sort(unacked)
	return acked, unacked
}

// retryUnacked retries each unacknowledged key once, all at once. It returns the approval id
// of every key that settled, how many of those answers were replays (the create had committed
// before the kill), and the keys that answered 409 instead.
func retryUnacked(t *testing.T, srv *server, token string, unacked []int) (settled map[int]string, replays int, refused []string) {
	t.Helper()
	settled = make(map[int]string)
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for _, i := range unacked {
		wg.Go(func() {
			resp, err := srv.try("POST", "/v1/approvals", token, createKey(i), createBody(i), nil)
			if err != nil {
				t.Errorf("retry %s after the restart: %v", createKey(i), err)
				return
			}
			if resp.status == http.StatusConflict {
				mu.Lock()
				refused = append(refused, fmt.Sprintf("%s: Retry-After %s", createKey(i), resp.header.Get("Retry-After")))
				mu.Unlock()
				return
			}
			if id, ok := createAnswer(t, i, resp, false); ok {
				mu.Lock()
				settled[i] = id
				if resp.header.Get("Idempotent-Replayed") == "true" {
					replays++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(refused)
	return settled, replays, refused
}

// checkSettled holds the database to the settled keys: each key, retried by createFanout
// clients at once, is a replay of its approval, which GET finds; and the approvals listed
// are exactly one per key.
func checkSettled(t *testing.T, srv *server, token, admin string, settled map[int]string) {
	t.Helper()
	work := make(chan int)
	var wg sync.WaitGroup
	for range createClients / createFanout {
		wg.Go(func() {
			for i := range work {
				checkReplays(t, srv, token, i, settled[i])
			}
		})
	}
	for i := range settled {
		work <- i
	}
	close(work)
	wg.Wait()

	byID := make(map[string]int, len(settled))
	for i, id := range settled {
		byID[id] = i
	}
	listed := listApprovals(t, srv, admin)
	seen := make(map[string]bool, len(listed))
	for _, a := range listed {
		i, ok := byID[a.ID]
		switch {
		case seen[a.ID]:
			t.Errorf("approval %s (%s) is listed twice", a.ID, a.OperationKey)
		case !ok:
			t.Errorf("approval %s under key %s: got an approval no settled key answered with", a.ID, a.OperationKey)
		case a.OperationKey != createKey(i):
			t.Errorf("approval %s: got key %s, want %s", a.ID, a.OperationKey, createKey(i))
		}
		seen[a.ID] = true
	}
	if got, want := len(listed), len(settled); got != want {
		t.Errorf("got %d approvals in the database, want %d (one per settled key)", got, want)
	}
}

// checkReplays sends the create of key index i from createFanout clients released at once
// and requires each answer to be a replay of approval id, then reads the approval.
func checkReplays(t *testing.T, srv *server, token string, i int, id string) {
	t.Helper()
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	for range createFanout {
		ready.Add(1)
		done.Go(func() {
			ready.Done()
			<-start
			resp, err := srv.try("POST", "/v1/approvals", token, createKey(i), createBody(i), nil)
			if err != nil {
				t.Errorf("replay %s: %v", createKey(i), err)
				return
			}
			if got, ok := createAnswer(t, i, resp, true); ok && got != id {
				t.Errorf("replay %s: got approval %s, want %s", createKey(i), got, id)
			}
		})
	}
	ready.Wait()
	close(start)
	done.Wait()

	resp, err := srv.try("GET", "/v1/approvals/"+url.PathEscape(id), token, "", "", nil)
	if err != nil {
		t.Errorf("GET approval %s of %s: %v", id, createKey(i), err)
		return
	}
	if resp.status != http.StatusOK {
		t.Errorf("GET approval %s of %s: got status %d, want 200; body %s", id, createKey(i), resp.status, resp.body)
	}
}

// createAnswer checks the answer to the create of key index i, and returns its approval id.
// An answer is a new approval (201) or a replay (200 or 201 with Idempotent-Replayed: true);
// with replay set only a replay will do. Anything else is reported and not ok.
func createAnswer(t *testing.T, i int, resp response, replay bool) (id string, ok bool) {
	t.Helper()
	replayed := resp.header.Get("Idempotent-Replayed") == "true"
	switch {
	case replay && !replayed:
		t.Errorf("create %s: got status %d without Idempotent-Replayed, want a replay; body %s", createKey(i), resp.status, resp.body)
		return "", false
	case resp.status == http.StatusCreated, resp.status == http.StatusOK && replayed:
	default:
		t.Errorf("create %s: got status %d (Idempotent-Replayed %q), want 201 or a replay; body %s",
			createKey(i), resp.status, resp.header.Get("Idempotent-Replayed"), resp.body)
		return "", false
	}
	var a approvalView
	if err := json.Unmarshal(resp.body, &a); err != nil {
		t.Errorf("create %s: decode %s: %v", createKey(i), resp.body, err)
		return "", false
	}
	if a.ID == "" || a.OperationKey != createKey(i) {
		t.Errorf("create %s: got approval %q under key %q, want an id under %s", createKey(i), a.ID, a.OperationKey, createKey(i))
		return "", false
	}
	return a.ID, true
}

// listApprovals returns every approval token may read, following the pages.
func listApprovals(t *testing.T, srv *server, token string) []approvalView {
	t.Helper()
	var all []approvalView
	cursor := ""
	for {
		var page struct {
			Approvals  []approvalView `json:"approvals"`
			NextCursor string         `json:"next_cursor"`
		}
		resp := srv.do(t, "GET", "/v1/approvals?limit=200&cursor="+url.QueryEscape(cursor), token, "", "")
		resp.wantStatus(t, http.StatusOK)
		resp.decode(t, &page)
		all = append(all, page.Approvals...)
		if page.NextCursor == "" {
			return all
		}
		cursor = page.NextCursor
	}
}
