// Command failover drives approvald through a failover of its PostgreSQL primary (issue 36,
// "PostgreSQL failover") and counts what survived. scripts/failover sets up the primary, its
// synchronous standby and `approvald serve` on a multi-host URL, and runs this.
//
// Clients create approvals, each under an Idempotency-Key of its own, and every key is sent
// again with the identical body until it gets a definite answer (2xx, or a 4xx other than 409
// and 429); a share of the approvals they create are then approved, each vote also sent until
// it is answered 200. Meanwhile, after -before, the program runs -prepare if given (scripts/
// failover holds the standby back with it), then -kill (the primary stops), waits -gap, runs
// -promote (the standby becomes the primary), and goes on until -after has passed since the
// first create answered on the new primary. Then it holds every acknowledged create and vote
// to the new primary, read with SQL over -check-url and through the API:
//
//   - lost: an acknowledged approval that is not there, or an acknowledged vote whose approval
//     is not approved;
//   - duplicated: an operation key with a second approval, or with another approval than the
//     one acknowledged; an approval with more than one vote recorded; a replay of an
//     acknowledged key that names another approval or is not a replay.
//
// It prints the figures and exits 1 when anything acknowledged was lost or duplicated, a key
// never got a definite answer, or no create succeeded on the new primary.
//
// Usage:
//
//	go run ./bench/failover -server http://127.0.0.1:PORT -kill CMD -promote CMD -check-url URL
//
// The tokens come from the environment: FAILOVER_REQUESTER_TOKEN (role requester, subject
// -requester) and FAILOVER_APPROVER_TOKEN (role approver, subject "alice", the approvals'
// one approver).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/approvald/approval/internal/loadtest"
)

func main() {
	code, err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "failover:", err)
	}
	os.Exit(code)
}

// options are the command's flags.
type options struct {
	server    string
	checkURL  string
	prepare   string
	kill      string
	promote   string
	requester string // the requester token's subject
	clients   int
	voteEvery int
	before    time.Duration
	gap       time.Duration
	after     time.Duration
	settle    time.Duration
	backoff   time.Duration
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("failover", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.server, "server", "", "approvald's `URL` (http://127.0.0.1:PORT, loopback only; required)")
	fs.StringVar(&o.checkURL, "check-url", "", "postgres:// `URL` of the new primary, for the final check (required)")
	fs.StringVar(&o.prepare, "prepare", "", "shell `COMMAND` run under load right before -kill, outside the timeline (e.g. holding the standby back)")
	fs.StringVar(&o.kill, "kill", "", "shell `COMMAND` that stops the primary (required)")
	fs.StringVar(&o.promote, "promote", "", "shell `COMMAND` that promotes the standby (required)")
	fs.StringVar(&o.requester, "requester", "failover-bot", "the requester token's `SUBJECT`")
	fs.IntVar(&o.clients, "clients", 12, "`N` clients creating at once")
	fs.IntVar(&o.voteEvery, "vote-every", 4, "approve every `N`th acknowledged create (0: no votes)")
	fs.DurationVar(&o.before, "before", 5*time.Second, "load before the kill")
	fs.DurationVar(&o.gap, "gap", 2*time.Second, "time from the kill to the promotion")
	fs.DurationVar(&o.after, "after", 5*time.Second, "load after the first create acknowledged by the new primary")
	fs.DurationVar(&o.settle, "settle", 60*time.Second, "how long one key or vote may take to get a definite answer")
	fs.DurationVar(&o.backoff, "backoff", 50*time.Millisecond, "pause before sending a request again")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for name, v := range map[string]string{"server": o.server, "check-url": o.checkURL, "kill": o.kill, "promote": o.promote} {
		if v == "" {
			return o, fmt.Errorf("-%s is required", name)
		}
	}
	if err := loadtest.CheckLoopback(o.server); err != nil {
		return o, err
	}
	if o.clients < 1 {
		return o, errors.New("-clients must be at least 1")
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) (int, error) {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return 2, err
	}
	requesterToken, approverToken := os.Getenv("FAILOVER_REQUESTER_TOKEN"), os.Getenv("FAILOVER_APPROVER_TOKEN")
	if requesterToken == "" || (o.voteEvery > 0 && approverToken == "") {
		return 2, errors.New("FAILOVER_REQUESTER_TOKEN and FAILOVER_APPROVER_TOKEN must be set")
	}
	d := newDriver(o, requesterToken, approverToken)
	if err := d.load(ctx, stderr); err != nil {
		return 1, err
	}
	v, err := d.verify(ctx)
	if err != nil {
		return 1, err
	}
	r := d.report(v)
	r.print(stdout)
	if !r.ok() {
		return 1, nil
	}
	return 0, nil
}

// driver sends the load and keeps what was acknowledged.
type driver struct {
	o                        options
	requesterToken, approver string
	http                     *http.Client
	prefix                   string // every key of this run starts with it
	next                     atomic.Int64

	// When the kill and the promotion began and ended, set before the load's second phase;
	// killedAt is killed for the clients.
	killing, killed, promoting, promoted time.Time
	killedAt                             atomic.Int64
	firstOnNew                           atomic.Int64 // unix nanoseconds of the first create acknowledged after the kill

	sent, retries atomic.Int64
	// Requests whose first attempts failed and which turned out to have taken effect: creates
	// settled by a replay, votes answered already_voted.
	replayedLate, votedLate atomic.Int64

	mu        sync.Mutex
	acked     map[string]string // key -> approval id
	votes     map[string]bool   // approval id -> vote acknowledged
	unsettled []string
	notReady  readiness
}

func newDriver(o options, requesterToken, approverToken string) *driver {
	return &driver{
		o:              o,
		requesterToken: requesterToken,
		approver:       approverToken,
		http:           &http.Client{Timeout: 35 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: o.clients * 2}},
		prefix:         fmt.Sprintf("failover-%d-", time.Now().UnixNano()),
		acked:          make(map[string]string),
		votes:          make(map[string]bool),
	}
}

// load runs the clients through the kill and the promotion, and returns once every client
// has settled its last key after the load's end.
func (d *driver) load(ctx context.Context, log io.Writer) error {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range d.o.clients {
		wg.Go(func() { d.client(ctx, stop) })
	}
	readyCtx, stopReady := context.WithCancel(ctx)
	readyDone := make(chan struct{})
	go func() {
		defer close(readyDone)
		d.notReady.watch(readyCtx, d.http, d.o.server)
	}()
	defer func() {
		stopReady()
		<-readyDone
	}()

	time.Sleep(d.o.before)
	if d.o.prepare != "" {
		if err := shell(ctx, d.o.prepare, log); err != nil {
			close(stop)
			wg.Wait()
			return fmt.Errorf("prepare: %w", err)
		}
	}
	fmt.Fprintf(log, "failover: %d creates acknowledged; stopping the primary\n", d.ackedCount())
	d.killing = time.Now()
	if err := shell(ctx, d.o.kill, log); err != nil {
		close(stop)
		wg.Wait()
		return fmt.Errorf("kill: %w", err)
	}
	// The primary is gone once the command returns: a create sent after this cannot be
	// answered by it.
	d.killed = time.Now()
	d.killedAt.Store(d.killed.UnixNano())
	time.Sleep(d.o.gap)
	fmt.Fprintln(log, "failover: promoting the standby")
	d.promoting = time.Now()
	if err := shell(ctx, d.o.promote, log); err != nil {
		close(stop)
		wg.Wait()
		return fmt.Errorf("promote: %w", err)
	}
	d.promoted = time.Now()
	deadline := time.Now().Add(d.o.settle)
	for d.firstOnNew.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if d.firstOnNew.Load() != 0 {
		fmt.Fprintln(log, "failover: the new primary acknowledged a create; loading on")
		time.Sleep(d.o.after)
	}
	close(stop)
	wg.Wait()
	return nil
}

func (d *driver) ackedCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.acked)
}

// client creates under new keys until stop is closed, each key until it settles, and votes
// on every voteEvery-th approval it created.
func (d *driver) client(ctx context.Context, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		n := d.next.Add(1)
		key := fmt.Sprintf("%s%d", d.prefix, n)
		id, ok := d.create(ctx, key, createBody(n))
		if !ok {
			continue
		}
		if d.o.voteEvery > 0 && n%int64(d.o.voteEvery) == 0 {
			d.approve(ctx, id)
		}
	}
}

func createBody(n int64) []byte {
	return fmt.Appendf(nil, `{"action": "deploy", "title": "Failover %d", "context": {"n": %d}, "approvers": ["alice"]}`, n, n)
}

// answer is one HTTP exchange: a status and a body, or err when none came.
type answer struct {
	status   int
	body     []byte
	replayed bool
	err      error
}

// definite reports whether the answer settles the request: sending it again would get the
// same answer. No answer, 409 (a lock wait cut short), 429 and 5xx do not.
func (a answer) definite() bool {
	return a.err == nil && a.status != http.StatusConflict && a.status != http.StatusTooManyRequests && a.status < 500
}

func (d *driver) send(ctx context.Context, method, path, token, key string, body []byte) answer {
	d.sent.Add(1)
	req, err := http.NewRequestWithContext(ctx, method, d.o.server+path, bytes.NewReader(body))
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := d.http.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, body: b, replayed: resp.Header.Get("Idempotent-Replayed") == "true", err: err}
}

// until sends a request again, after d.o.backoff, until its answer is definite or settle has
// passed; sent is when the answer's request was sent, and again whether it was not the first.
func (d *driver) until(what string, try func() answer) (a answer, sent time.Time, again, ok bool) {
	deadline := time.Now().Add(d.o.settle)
	for attempt := 0; ; attempt++ {
		sent = time.Now()
		a = try()
		if a.definite() {
			return a, sent, attempt > 0, true
		}
		if time.Now().After(deadline) {
			d.mu.Lock()
			d.unsettled = append(d.unsettled, fmt.Sprintf("%s: last answer %d %v", what, a.status, a.err))
			d.mu.Unlock()
			return a, sent, attempt > 0, false
		}
		d.retries.Add(1)
		time.Sleep(d.o.backoff)
	}
}

// create sends the create of key until it settles and returns the approval's id.
func (d *driver) create(ctx context.Context, key string, body []byte) (string, bool) {
	a, sent, again, ok := d.until("create "+key, func() answer {
		return d.send(ctx, http.MethodPost, "/v1/approvals", d.requesterToken, key, body)
	})
	if !ok {
		return "", false
	}
	id, err := approvalID(a)
	if err != nil {
		d.mu.Lock()
		d.unsettled = append(d.unsettled, fmt.Sprintf("create %s: %v", key, err))
		d.mu.Unlock()
		return "", false
	}
	if again && a.replayed {
		d.replayedLate.Add(1)
	}
	if k := d.killedAt.Load(); k != 0 && sent.UnixNano() > k {
		d.firstOnNew.CompareAndSwap(0, time.Now().UnixNano())
	}
	d.mu.Lock()
	d.acked[key] = id
	d.mu.Unlock()
	return id, true
}

// approve votes approve on id until the vote settles.
func (d *driver) approve(ctx context.Context, id string) {
	a, _, again, ok := d.until("approve "+id, func() answer {
		return d.send(ctx, http.MethodPost, "/v1/approvals/"+id+"/approve", d.approver, "", nil)
	})
	if !ok {
		return
	}
	var got struct {
		Status       string
		AlreadyVoted bool `json:"already_voted"`
	}
	if a.status != http.StatusOK || json.Unmarshal(a.body, &got) != nil || got.Status != "approved" {
		d.mu.Lock()
		d.unsettled = append(d.unsettled, fmt.Sprintf("approve %s: %d %s", id, a.status, bytes.TrimSpace(a.body)))
		d.mu.Unlock()
		return
	}
	if again && got.AlreadyVoted {
		d.votedLate.Add(1)
	}
	d.mu.Lock()
	d.votes[id] = true
	d.mu.Unlock()
}

// approvalID is the id of the approval a create answered with, which must be 201 or a 200
// replay.
func approvalID(a answer) (string, error) {
	if a.status != http.StatusCreated && a.status != http.StatusOK {
		return "", fmt.Errorf("answered %d: %s", a.status, bytes.TrimSpace(a.body))
	}
	var got struct{ ID string }
	if err := json.Unmarshal(a.body, &got); err != nil || got.ID == "" {
		return "", fmt.Errorf("answered %d without an approval id: %s", a.status, a.body)
	}
	return got.ID, nil
}

// readiness records when /readyz first failed and when it last recovered.
type readiness struct {
	mu              sync.Mutex
	firstDown, upAt time.Time
	down            bool
}

func (r *readiness) watch(ctx context.Context, client *http.Client, server string) {
	for ctx.Err() == nil {
		ok := false
		if req, err := http.NewRequestWithContext(ctx, http.MethodGet, server+"/readyz", nil); err == nil {
			if resp, err := client.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				ok = resp.StatusCode == http.StatusOK
			}
		}
		r.mu.Lock()
		switch {
		case !ok && !r.down && ctx.Err() == nil:
			r.down = true
			if r.firstDown.IsZero() {
				r.firstDown = time.Now()
			}
		case ok && r.down:
			r.down = false
			r.upAt = time.Now()
		}
		r.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func shell(ctx context.Context, command string, log io.Writer) error {
	cmd := exec.CommandContext(ctx, "bash", "-c", command)
	cmd.Stdout, cmd.Stderr = log, log
	return cmd.Run()
}

// verification is what the new primary holds of the acknowledged work.
type verification struct {
	rows           map[string][]string // operation key -> approval ids, of this run's keys
	statuses       map[string]string   // approval id -> status
	voteEvents     map[string]int      // approval id -> approval.voted events
	replayMismatch []string            // acknowledged keys whose replay did not name their approval
}

// verify reads the run's approvals from the new primary and replays every acknowledged create
// through the API.
func (d *driver) verify(ctx context.Context) (verification, error) {
	v := verification{rows: map[string][]string{}, statuses: map[string]string{}, voteEvents: map[string]int{}}
	conn, err := pgx.Connect(ctx, d.o.checkURL)
	if err != nil {
		return v, fmt.Errorf("connect to the new primary: %w", err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `
		SELECT a.operation_key, a.id, a.status,
			(SELECT count(*) FROM events e WHERE e.approval_id = a.id AND e.type = 'approval.voted')
		FROM approvals a WHERE a.requester = $1 AND starts_with(a.operation_key, $2)`, d.o.requester, d.prefix)
	if err != nil {
		return v, fmt.Errorf("read approvals: %w", err)
	}
	for rows.Next() {
		var key, id, status string
		var voted int
		if err := rows.Scan(&key, &id, &status, &voted); err != nil {
			return v, fmt.Errorf("read approvals: %w", err)
		}
		v.rows[key] = append(v.rows[key], id)
		v.statuses[id] = status
		v.voteEvents[id] = voted
	}
	if err := rows.Err(); err != nil {
		return v, fmt.Errorf("read approvals: %w", err)
	}

	// Every acknowledged key again, a few at a time: each must replay its approval.
	d.mu.Lock()
	keys := make(map[string]string, len(d.acked))
	for k, id := range d.acked {
		keys[k] = id
	}
	d.mu.Unlock()
	work := make(chan string)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for key := range work {
				var n int64
				fmt.Sscanf(strings.TrimPrefix(key, d.prefix), "%d", &n)
				a := d.send(ctx, http.MethodPost, "/v1/approvals", d.requesterToken, key, createBody(n))
				id, err := approvalID(a)
				if err != nil || id != keys[key] || !a.replayed {
					mu.Lock()
					v.replayMismatch = append(v.replayMismatch, fmt.Sprintf("%s: acknowledged %s, replay answered %d %q replayed=%v", key, keys[key], a.status, id, a.replayed))
					mu.Unlock()
				}
			}
		})
	}
	for k := range keys {
		work <- k
	}
	close(work)
	wg.Wait()
	return v, nil
}

// result is the run's figures. The durations are from the moment the primary was told to
// stop.
type result struct {
	acked, votes, lost, votesLost, duplicated int
	replayMismatches                          int
	sent, retries, replayedLate, votedLate    int64
	unsettled                                 []string
	stopTook, promotionAt, promotionTook      time.Duration
	first                                     time.Duration // the first create acknowledged by the new primary
	noneOnNew                                 bool
	readyDown, readyUp                        time.Duration // readyUp 0 if /readyz never recovered
	details                                   []string
}

func (d *driver) report(v verification) result {
	d.mu.Lock()
	defer d.mu.Unlock()
	r := result{
		acked: len(d.acked), votes: len(d.votes), sent: d.sent.Load(), retries: d.retries.Load(),
		replayedLate: d.replayedLate.Load(), votedLate: d.votedLate.Load(), unsettled: d.unsettled,
		stopTook: d.killed.Sub(d.killing), promotionAt: d.promoting.Sub(d.killing), promotionTook: d.promoted.Sub(d.promoting),
	}
	for key, id := range d.acked {
		ids := v.rows[key]
		found := false
		for _, got := range ids {
			if got == id {
				found = true
			} else {
				r.duplicated++
				r.details = append(r.details, fmt.Sprintf("duplicated: key %s acknowledged as %s also has %s", key, id, got))
			}
		}
		if !found {
			r.lost++
			r.details = append(r.details, fmt.Sprintf("lost: key %s acknowledged as %s is not on the new primary", key, id))
		}
	}
	for key, ids := range v.rows {
		if _, ok := d.acked[key]; !ok {
			r.details = append(r.details, fmt.Sprintf("unacknowledged key %s has approvals %v", key, ids))
		}
	}
	for id := range d.votes {
		if v.statuses[id] != "approved" {
			r.votesLost++
			r.details = append(r.details, fmt.Sprintf("lost: the acknowledged vote on %s, which is %q", id, v.statuses[id]))
		}
	}
	for id, n := range v.voteEvents {
		if n > 1 {
			r.duplicated++
			r.details = append(r.details, fmt.Sprintf("duplicated: %s has %d votes recorded", id, n))
		}
	}
	r.replayMismatches = len(v.replayMismatch)
	for _, m := range v.replayMismatch {
		r.details = append(r.details, "replay: "+m)
	}
	if first := d.firstOnNew.Load(); first != 0 {
		r.first = time.Unix(0, first).Sub(d.killing)
	} else {
		r.noneOnNew = true
	}
	d.notReady.mu.Lock()
	if !d.notReady.firstDown.IsZero() {
		r.readyDown = d.notReady.firstDown.Sub(d.killing)
	}
	if !d.notReady.upAt.IsZero() && !d.notReady.down {
		r.readyUp = d.notReady.upAt.Sub(d.killing)
	}
	d.notReady.mu.Unlock()
	return r
}

// ok reports whether everything acknowledged survived once and the new primary took over.
func (r result) ok() bool {
	return r.lost == 0 && r.votesLost == 0 && r.duplicated == 0 && r.replayMismatches == 0 &&
		len(r.unsettled) == 0 && !r.noneOnNew
}

func (r result) print(w io.Writer) {
	fmt.Fprintf(w, "acknowledged:      %d creates, %d votes\n", r.acked, r.votes)
	fmt.Fprintf(w, "lost:              %d creates, %d votes\n", r.lost, r.votesLost)
	fmt.Fprintf(w, "duplicated:        %d\n", r.duplicated)
	fmt.Fprintf(w, "replays that did not name the acknowledged approval: %d\n", r.replayMismatches)
	fmt.Fprintf(w, "unsettled:         %d\n", len(r.unsettled))
	fmt.Fprintf(w, "requests:          %d sent, %d of them again after no definite answer\n", r.sent, r.retries)
	fmt.Fprintf(w, "in flight at the failover, found done when sent again: %d creates (replayed), %d votes (already_voted)\n",
		r.replayedLate, r.votedLate)
	fmt.Fprintf(w, "timeline (s from the stop): primary gone %.2f, promotion %.2f to %.2f\n",
		r.stopTook.Seconds(), r.promotionAt.Seconds(), (r.promotionAt + r.promotionTook).Seconds())
	if r.noneOnNew {
		fmt.Fprintln(w, "first success on the new primary: none")
	} else {
		fmt.Fprintf(w, "first success on the new primary: %.2f s after the promotion began (%.2f s after the stop)\n",
			(r.first - r.promotionAt).Seconds(), r.first.Seconds())
	}
	switch {
	case r.readyDown == 0 && r.readyUp == 0:
		fmt.Fprintln(w, "/readyz: never failed")
	case r.readyUp == 0:
		fmt.Fprintf(w, "/readyz: 503 from %.2f s after the stop, not ready again\n", r.readyDown.Seconds())
	default:
		fmt.Fprintf(w, "/readyz: 503 from %.2f s to %.2f s after the stop\n", r.readyDown.Seconds(), r.readyUp.Seconds())
	}
	for _, u := range r.unsettled {
		fmt.Fprintln(w, "unsettled: "+u)
	}
	for _, line := range r.details {
		fmt.Fprintln(w, line)
	}
	if r.ok() {
		fmt.Fprintln(w, "PASS: nothing acknowledged was lost or duplicated")
	} else {
		fmt.Fprintln(w, "FAIL")
	}
}
