package loadtest

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/approvald/approval"
)

// Scenarios and baselines, by name.
const (
	// Create posts an approval under a new Idempotency-Key each time.
	Create = "create"
	// Replay repeats a completed create, same key and body, from a pool: the stored answer
	// comes back with Idempotent-Replayed: true.
	Replay = "replay"
	// Get reads an approval of a pool by id.
	Get = "get"
	// Storm sends each new key from every client at once: one create and clients-1 requests
	// that wait for its commit and replay it. Every answer for a key must name one approval.
	Storm = "storm"
	// Decide approves pending approvals prepared before the step, each once.
	Decide = "decide"
	// CreatePolicy posts an approval of PolicyAction, which a two-rule policy (two groups,
	// one vote each) governs: the server picks the policy, evaluates its CEL condition and
	// resolves its rules at the create.
	CreatePolicy = "create-policy"
	// DecidePolicy approves, each once, approvals of PolicyAction on which the other
	// approver's vote already met one rule: the vote meets the other, the tally over the
	// rules approves it.
	DecidePolicy = "decide-policy"
	// Intake delivers Standard Webhooks-signed events to the inbox, one in ten a redelivery
	// of an event sent a little earlier.
	Intake = "intake"
	// Execute approves pending approvals of an action with a downstream target and waits,
	// for each, until the target has been called: the time from the vote to the effect.
	Execute = "execute"
	// Insert is the baseline of the writes: one row the size of an approval inserted in a
	// transaction of its own.
	Insert = "insert"
	// Select is the baseline of the reads: one such row read by primary key.
	Select = "select"
	// List reads the first page of GET /v1/approvals (limit 50), in turn unfiltered, by
	// status, by approver, and as the requester (whose listing is limited to what it sees).
	List = "list"
	// ListDeep reads the same pages from a cursor far down the listing: at DeepCursorAt when
	// the run sets it (a seeded database), otherwise where walking deepWalkPages pages of 200
	// ends.
	ListDeep = "list-deep"
)

// Scenarios lists every scenario and baseline in the order a sweep step runs them: each
// baseline just before the scenarios compared with it, so that they run under the same load
// from the rest of the machine.
var Scenarios = []string{Insert, Create, CreatePolicy, Replay, Storm, Decide, DecidePolicy, Intake, Execute, Select, Get, List, ListDeep}

// BaselineOf returns the baseline a scenario is compared with, or "" for a baseline.
func BaselineOf(scenario string) string {
	switch scenario {
	case Create, CreatePolicy, Replay, Storm, Decide, DecidePolicy, Intake, Execute:
		return Insert
	case Get, List, ListDeep:
		return Select
	}
	return ""
}

// DefaultPool is how many approvals replay and get cycle over, and how many rows select does.
const DefaultPool = 256

// prepareWorkers is how many clients prepare pools, whatever the step's count: enough to
// overlap the round trips, few enough not to queue on the store.
const prepareWorkers = 8

// prepareTimeout bounds preparing a pool: creating approvals before a step is not timed, but
// it must end.
const prepareTimeout = 10 * time.Minute

// Approver is a user who decides: the name listed in approvals and their token.
type Approver struct {
	Name  string
	Token string
}

// Config describes a run.
type Config struct {
	Store     string  // labels the results: "sqlite", "postgres"
	Server    string  // where the server runs, for the report
	InProcess bool    // the server runs in this process (its memory is in the peak RSS)
	API       *Client // the server under load

	Requester string // a requester's token: creates every approval
	// Lister is a token that lists every approval (an admin's or an operator's), for the
	// unfiltered and filtered pages of list and list-deep; "" lists as the requester only.
	Lister        string
	Approver      Approver // listed first in every approval; decides in the decide scenario
	OtherApprover string   // listed second
	// OtherApproverToken is OtherApprover's token: decide-policy's approvals get their
	// first vote with it.
	OtherApproverToken string
	// PolicyAction is the action a two-rule policy governs, one rule met by Approver, the
	// other by OtherApprover: create-policy and decide-policy need it.
	PolicyAction string

	Rows Rows // the baseline table on the server's database; nil runs no baseline

	// Source is the webhook source intake delivers to; intake needs it.
	Source *Source
	// Target is the downstream system of ExecAction, which execute waits on; execute needs
	// both.
	Target     *Target
	ExecAction string

	Scenarios []string // which to run, in any order; Scenarios order is kept
	Clients   []int    // the sweep of concurrencies
	Warmup    time.Duration
	Duration  time.Duration
	Pool      int // approvals replay and get cycle over; 0 means DefaultPool

	// DeepCursorAt, when set, is the creation time list-deep's cursor points at.
	DeepCursorAt time.Time
	// LongPolls is how many long-polls (GET /v1/approvals/{id}?wait=) are held open on the
	// server from before the first step to the end of the run.
	LongPolls int
	// ServerPID, when set, is the server's process: its peak RSS is read after each step.
	ServerPID int
	// Checkpoints, when set, reads how many checkpoints the database server has been asked
	// for so far (PostgreSQL's, when the WAL outgrew max_wal_size): it is read before and
	// after each step, since a step that meets one runs slower than its baseline did.
	Checkpoints func(context.Context) (int64, error)

	Progress io.Writer // one line per step and per preparation; nil discards them
}

// Run sweeps cfg.Clients, and at each count runs each scenario of cfg.Scenarios as a step,
// then computes each scenario's ratio to its baseline at the same count. It stops at the
// first error that is not a failed request (failed requests are counted, not fatal).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	r := &runner{cfg: cfg, progress: cfg.Progress, rates: make(map[string]float64)}
	if r.progress == nil {
		r.progress = io.Discard
	}
	if r.cfg.Pool <= 0 {
		r.cfg.Pool = DefaultPool
	}
	var b [4]byte
	rand.Read(b[:])
	r.prefix = "bench-" + hex.EncodeToString(b[:]) + "-"
	report := &Report{
		Store:     cfg.Store,
		Server:    cfg.Server,
		InProcess: cfg.InProcess,
		Clients:   cfg.Clients,
		Warmup:    cfg.Warmup.String(),
		Duration:  cfg.Duration.String(),
		Started:   time.Now().UTC(),
	}
	if err := r.probe(ctx); err != nil {
		return nil, err
	}
	if cfg.LongPolls > 0 {
		stop, err := r.parkLongPolls(ctx, cfg.LongPolls)
		if err != nil {
			return nil, err
		}
		defer stop()
		report.LongPolls = cfg.LongPolls
	}
	report.ServerPID = cfg.ServerPID
	for _, clients := range cfg.Clients {
		for _, name := range Scenarios {
			if !slices.Contains(cfg.Scenarios, name) {
				continue
			}
			res, err := r.step(ctx, name, clients)
			if err != nil {
				return nil, fmt.Errorf("%s at %d clients: %w", name, clients, err)
			}
			report.Results = append(report.Results, res)
		}
	}
	report.finish()
	return report, nil
}

// runner holds what the steps of a run share: the pools they prepare once.
type runner struct {
	cfg      Config
	progress io.Writer
	prefix   string // of every key and row id of the run, so that runs never collide

	rowBody    []byte             // a baseline row's body: as long as an approval
	deepCursor string             // list-deep's, once prepared
	watched    string             // the approval the long-polls wait on
	pool       []pooled           // approvals for replay and get
	rows       []string           // row ids for select
	rates      map[string]float64 // requests/s measured so far, by "scenario/clients"
	batches    int                // of pending approvals prepared so far
}

// pooled is an approval of the pool, with the key and body that created it.
type pooled struct {
	id, key string
	body    []byte
}

// probe creates one approval: it checks the tokens before anything is timed, and its size
// is the size of a baseline row.
func (r *runner) probe(ctx context.Context) error {
	body := r.body(0, defaultAction)
	c, err := r.cfg.API.Create(ctx, r.cfg.Requester, r.prefix+"probe", body)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	r.rowBody = make([]byte, len(c.body))
	rand.Read(r.rowBody)
	return nil
}

// step prepares what the scenario needs, then measures it at clients.
func (r *runner) step(ctx context.Context, name string, clients int) (Result, error) {
	s := Step{Clients: clients, Warmup: r.cfg.Warmup, Duration: r.cfg.Duration}
	var op Op
	var pending []pooled // decide's and execute's pending approvals
	api, requester := r.cfg.API, r.cfg.Requester
	action := defaultAction // of decide's and execute's pending approvals
	switch name {
	case Create:
		prefix := r.prefix + "create-c" + strconv.Itoa(clients) + "-"
		op = func(ctx context.Context, i int) error {
			c, err := api.Create(ctx, requester, prefix+strconv.Itoa(i), r.body(i, defaultAction))
			if err == nil && c.replayed {
				err = errors.New("create: a new key was answered as a replay")
			}
			return err
		}
	case Replay:
		if err := r.preparePool(ctx); err != nil {
			return Result{}, err
		}
		op = func(ctx context.Context, i int) error {
			p := r.pool[i%len(r.pool)]
			c, err := api.Create(ctx, requester, p.key, p.body)
			if err == nil && !c.replayed {
				err = errors.New("replay: answered without Idempotent-Replayed: true")
			}
			return err
		}
	case Get:
		if err := r.preparePool(ctx); err != nil {
			return Result{}, err
		}
		op = func(ctx context.Context, i int) error {
			return api.Get(ctx, requester, r.pool[i%len(r.pool)].id)
		}
	case Storm:
		prefix := r.prefix + "storm-c" + strconv.Itoa(clients) + "-"
		var ids sync.Map // key -> the approval every answer under it must name
		op = func(ctx context.Context, i int) error {
			round := i / clients // clients requests in a row share a key, and so run at once
			key := prefix + strconv.Itoa(round)
			c, err := api.Create(ctx, requester, key, r.body(round, defaultAction))
			if err != nil {
				return err
			}
			id, err := approvalID(c.body)
			if err != nil {
				return err
			}
			if first, loaded := ids.LoadOrStore(key, id); loaded && first != id {
				return fmt.Errorf("storm: key %s answered with two approvals, %s and %s", key, first, id)
			}
			return nil
		}
	case CreatePolicy:
		if r.cfg.PolicyAction == "" {
			return Result{}, errors.New("create-policy needs an action under a policy")
		}
		prefix := r.prefix + "create-policy-c" + strconv.Itoa(clients) + "-"
		op = func(ctx context.Context, i int) error {
			c, err := api.Create(ctx, requester, prefix+strconv.Itoa(i), r.body(i, r.cfg.PolicyAction))
			if err == nil && c.replayed {
				err = errors.New("create-policy: a new key was answered as a replay")
			}
			return err
		}
	case Decide, DecidePolicy, Execute:
		if name == DecidePolicy {
			if r.cfg.PolicyAction == "" || r.cfg.OtherApproverToken == "" {
				return Result{}, errors.New("decide-policy needs an action under a policy and the other approver's token")
			}
			action = r.cfg.PolicyAction
		}
		if name == Execute {
			if r.cfg.Target == nil || r.cfg.ExecAction == "" {
				return Result{}, errors.New("execute needs a downstream target")
			}
			action = r.cfg.ExecAction
		}
		var err error
		if pending, err = r.preparePending(ctx, clients, 0, name, action); err != nil {
			return Result{}, err
		}
		s.Limit = len(pending)
		op = r.decideOp(name, &pending)
	case Intake:
		if r.cfg.Source == nil {
			return Result{}, errors.New("intake needs a webhook source")
		}
		prefix := r.prefix + "intake-c" + strconv.Itoa(clients) + "-"
		src := *r.cfg.Source
		op = func(ctx context.Context, i int) error {
			n := i
			if i%10 == 9 {
				n = i - 5 // a redelivery of an event sent a few requests before
			}
			id := prefix + strconv.Itoa(n)
			return api.Deliver(ctx, src, id, eventBody(id, n))
		}
	case List, ListDeep:
		cursor := ""
		if name == ListDeep {
			var err error
			if cursor, err = r.prepareDeepCursor(ctx); err != nil {
				return Result{}, err
			}
		}
		pages := r.listPages(cursor)
		op = func(ctx context.Context, i int) error {
			p := pages[i%len(pages)]
			_, _, err := api.List(ctx, p.token, p.query)
			return err
		}
	case Insert:
		prefix := r.prefix + "insert-c" + strconv.Itoa(clients) + "-"
		op = func(ctx context.Context, i int) error {
			return r.cfg.Rows.Insert(ctx, prefix+strconv.Itoa(i), r.rowBody)
		}
	case Select:
		if err := r.prepareRows(ctx); err != nil {
			return Result{}, err
		}
		op = func(ctx context.Context, i int) error {
			return r.cfg.Rows.Select(ctx, r.rows[i%len(r.rows)])
		}
	default:
		return Result{}, fmt.Errorf("unknown scenario %q", name)
	}

	var before int64
	if r.cfg.Checkpoints != nil {
		var err error
		if before, err = r.cfg.Checkpoints(ctx); err != nil {
			return Result{}, fmt.Errorf("the database's checkpoints: %w", err)
		}
	}
	m := Measure(ctx, s, op)
	var err error
	if m.Exhausted && (name == Decide || name == DecidePolicy || name == Execute) && ctx.Err() == nil {
		// Decides outran the estimate: measure again, once, with enough for the rate seen.
		fmt.Fprintf(r.progress, "bench: %s %s clients=%d ran out of its %d pending approvals after %.2fs; preparing more to measure again\n",
			r.cfg.Store, name, clients, s.Limit, m.Elapsed.Seconds())
		if pending, err = r.preparePending(ctx, clients, max(r.pendingFor(m.Rate()), 4*s.Limit), name, action); err != nil {
			return Result{}, err
		}
		s.Limit = len(pending)
		first := m
		m = Measure(ctx, s, op)
		m.Errors += first.Errors
		if m.FirstError == nil {
			m.FirstError = first.FirstError
		}
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	r.rates[name+"/"+strconv.Itoa(clients)] = m.Rate()
	res := newResult(r.cfg.Store, name, clients, m)
	if r.cfg.ServerPID != 0 {
		if res.ServerPeakRSSBytes, err = ProcessPeakRSS(r.cfg.ServerPID); err != nil {
			return Result{}, fmt.Errorf("the server's peak RSS: %w", err)
		}
	}
	if r.cfg.Checkpoints != nil {
		after, err := r.cfg.Checkpoints(ctx)
		if err != nil {
			return Result{}, fmt.Errorf("the database's checkpoints: %w", err)
		}
		n := int(after - before)
		res.Checkpoints = &n
	}
	if name == Intake {
		waiting, err := r.cfg.API.Gauge(ctx, `approvald_inbox_events{status="pending"}`)
		if err != nil {
			return Result{}, fmt.Errorf("the inbox's backlog: %w", err)
		}
		n := int(waiting)
		res.InboxWaiting = &n
	}
	line := fmt.Sprintf("bench: %s %-6s clients=%-3d %7d requests in %5.2fs, %9.1f/s, p50 %7.2f ms, p99 %7.2f ms, %d errors",
		r.cfg.Store, name, clients, res.Requests, res.Seconds, res.RequestsPerSecond, res.P50Ms, res.P99Ms, res.Errors)
	if res.InboxWaiting != nil {
		line += fmt.Sprintf(", %d events waiting to be applied", *res.InboxWaiting)
	}
	if res.Checkpoints != nil && *res.Checkpoints > 0 {
		line += fmt.Sprintf(", %d checkpoints requested", *res.Checkpoints)
	}
	if m.Exhausted {
		line += fmt.Sprintf(" (ran out of its %d prepared approvals)", s.Limit)
	}
	if m.FirstError != nil {
		line += "; first error: " + m.FirstError.Error()
	}
	fmt.Fprintln(r.progress, line)
	return res, nil
}

// decideOp approves the pending approvals, each once; for execute it also waits until the
// target has been called for the approval's operation key. pending is read through its
// pointer, so that a second measurement sees the approvals prepared for it.
func (r *runner) decideOp(name string, pending *[]pooled) Op {
	api, approver := r.cfg.API, r.cfg.Approver.Token
	if name == Decide || name == DecidePolicy {
		return func(ctx context.Context, i int) error {
			return api.Approve(ctx, approver, (*pending)[i].id)
		}
	}
	target := r.cfg.Target
	return func(ctx context.Context, i int) error {
		p := (*pending)[i]
		called, forget := target.Expect(p.key)
		defer forget()
		if err := api.Approve(ctx, approver, p.id); err != nil {
			return err
		}
		select {
		case <-called:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("execute: the target was not called for %s: %w", p.key, ctx.Err())
		}
	}
}

// eventBody is the body of an intake delivery: an event of a type no handler takes (the
// inbox stores it and marks it ignored), about as large as an approval.
func eventBody(id string, n int) []byte {
	return fmt.Appendf(nil, `{"type":"bench.event","id":%q,"data":{"sequence":%d,`+
		`"service":"api","environment":"prod","pipeline":"https://ci.example.com/api/pipelines/%d",`+
		`"change":"Bump the payment client and rotate the read replica pool"}}`, id, n, 100000+n)
}

// preparePool creates the pool of approvals replay and get use, once per run.
func (r *runner) preparePool(ctx context.Context) error {
	if r.pool != nil {
		return nil
	}
	start := time.Now()
	pool := make([]pooled, r.cfg.Pool)
	err := r.prepare(ctx, len(pool), prepareWorkers, func(ctx context.Context, i int) error {
		p := pooled{key: r.prefix + "pool-" + strconv.Itoa(i), body: r.body(i, defaultAction)}
		c, err := r.cfg.API.Create(ctx, r.cfg.Requester, p.key, p.body)
		if err != nil {
			return err
		}
		if p.id, err = approvalID(c.body); err != nil {
			return err
		}
		pool[i] = p
		return nil
	})
	if err != nil {
		return fmt.Errorf("prepare the pool of approvals: %w", err)
	}
	r.pool = pool
	fmt.Fprintf(r.progress, "bench: %s prepared a pool of %d approvals for replay and get in %.1fs\n", r.cfg.Store, len(pool), time.Since(start).Seconds())
	return nil
}

// preparePending creates pending approvals for one decide step: need of them, or when need
// is 0, enough for the whole step at twice the fastest write rate seen so far (a first batch's
// creates, the creates and the decides measured before), since a decide is a write much like
// a create. Should the step still run out, it is measured again with more.
func (r *runner) preparePending(ctx context.Context, clients, need int, scenario, action string) ([]pooled, error) {
	r.batches++ // every batch its own keys: a key used before would be answered as a replay
	prefix := r.prefix + "pending-" + strconv.Itoa(r.batches) + "-"
	var ids []pooled
	create := func(n int) error {
		from, batch := len(ids), make([]pooled, n)
		err := r.prepare(ctx, n, prepareWorkers, func(ctx context.Context, i int) error {
			p := pooled{key: prefix + strconv.Itoa(from+i), body: r.body(from+i, action)}
			c, err := r.cfg.API.Create(ctx, r.cfg.Requester, p.key, p.body)
			if err != nil {
				return err
			}
			if p.id, err = approvalID(c.body); err != nil {
				return err
			}
			batch[i] = p
			if scenario == DecidePolicy {
				// The other rule's vote, so that the timed one decides.
				return r.cfg.API.Vote(ctx, r.cfg.OtherApproverToken, p.id)
			}
			return nil
		})
		ids = append(ids, batch...)
		return err
	}
	start := time.Now()
	if need == 0 {
		first := max(50, 25*clients)
		if err := create(first); err != nil {
			return nil, fmt.Errorf("prepare pending approvals: %w", err)
		}
		rate := float64(first) / time.Since(start).Seconds()
		for key, seen := range r.rates {
			if strings.HasPrefix(key, scenario+"/") || key == Create+"/"+strconv.Itoa(clients) {
				rate = max(rate, seen)
			}
		}
		need = r.pendingFor(rate)
	}
	if need > len(ids) {
		if err := create(need - len(ids)); err != nil {
			return nil, fmt.Errorf("prepare pending approvals: %w", err)
		}
	}
	fmt.Fprintf(r.progress, "bench: %s prepared %d pending approvals for %s at %d clients in %.1fs\n", r.cfg.Store, len(ids), scenario, clients, time.Since(start).Seconds())
	return ids, nil
}

// pendingFor returns how many pending approvals a decide step needs at rate decides per
// second, with a margin of two.
func (r *runner) pendingFor(rate float64) int {
	return min(int(2*rate*(r.cfg.Warmup+r.cfg.Duration).Seconds())+1, MaxStepRequests)
}

// prepareRows inserts the rows select reads, once per run.
func (r *runner) prepareRows(ctx context.Context) error {
	if r.rows != nil {
		return nil
	}
	rows := make([]string, r.cfg.Pool)
	for i := range rows {
		rows[i] = r.prefix + "row-" + strconv.Itoa(i)
	}
	if err := r.prepare(ctx, len(rows), prepareWorkers, func(ctx context.Context, i int) error {
		return r.cfg.Rows.Insert(ctx, rows[i], r.rowBody)
	}); err != nil {
		return fmt.Errorf("prepare the rows of select: %w", err)
	}
	r.rows = rows
	return nil
}

// prepare runs op n times (i from 0 to n-1) from workers goroutines, untimed, and fails on
// the first failed request.
func (r *runner) prepare(ctx context.Context, n, workers int, op Op) error {
	m := Measure(ctx, Step{Clients: workers, Duration: prepareTimeout, Limit: n}, op)
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case m.FirstError != nil:
		return fmt.Errorf("%d of %d failed, the first: %w", m.Errors, n, m.FirstError)
	case m.Requests != n:
		return fmt.Errorf("%d of %d done in %s", m.Requests, n, prepareTimeout)
	}
	return nil
}

// approvalBody is the body of a create: a realistic approval, with a context of about 200
// bytes and the approvers given (none: the policy names them). n varies the title and the
// context.
func approvalBody(n int, action string, approvers ...string) []byte {
	commit := sha1.Sum(strconv.AppendInt(nil, int64(n), 10))
	b := fmt.Appendf(nil, `{"action":%q,"title":"Deploy api v1.%d to prod",`+
		`"context":{"commit":"%x","service":"api","environment":"prod",`+
		`"pipeline":"https://ci.example.com/api/pipelines/%d","change":"Bump the payment client and rotate the read replica pool"}`,
		action, n, commit, 100000+n)
	if len(approvers) > 0 {
		list, _ := json.Marshal(approvers)
		b = append(append(b, `,"approvers":`...), list...)
	}
	return append(b, '}')
}

// defaultAction is the action of the approvals of every scenario but execute: one without a
// downstream target, so approving it queues no call.
const defaultAction = "deploy"

// body is approvalBody with the run's approvers.
// An approval of PolicyAction names no approvers: its policy does.
func (r *runner) body(n int, action string) []byte {
	if action != "" && action == r.cfg.PolicyAction {
		return approvalBody(n, action)
	}
	return approvalBody(n, action, r.cfg.Approver.Name, r.cfg.OtherApprover)
}

// approvalID reads the id of an approval answered by the API.
func approvalID(body []byte) (string, error) {
	var a struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body, &a); err != nil || a.ID == "" {
		return "", fmt.Errorf("no approval id in %.200s", body)
	}
	return a.ID, nil
}

// listPage is one of the pages list and list-deep read in turn.
type listPage struct{ token, query string }

// deepWalkPages is how many pages of 200 list-deep walks for its cursor on a database that
// was not seeded.
const deepWalkPages = 25

// listPages returns the pages list (cursor "") and list-deep read: unfiltered, by status and
// by approver with the lister's token, and the requester's own view.
func (r *runner) listPages(cursor string) []listPage {
	lister := r.cfg.Lister
	if lister == "" {
		lister = r.cfg.Requester
	}
	tail := ""
	if cursor != "" {
		tail = "&cursor=" + url.QueryEscape(cursor)
	}
	return []listPage{
		{lister, "limit=50" + tail},
		{lister, "limit=50&status=approved" + tail},
		{lister, "limit=50&approver=" + url.QueryEscape(r.cfg.Approver.Name) + tail},
		{r.cfg.Requester, "limit=50" + tail},
	}
}

// prepareDeepCursor returns a cursor far down the listing, once per run: at DeepCursorAt, or
// where walking deepWalkPages pages of 200 newest first ends (the last page's own position
// when the listing is shorter).
func (r *runner) prepareDeepCursor(ctx context.Context) (string, error) {
	if r.deepCursor != "" {
		return r.deepCursor, nil
	}
	if !r.cfg.DeepCursorAt.IsZero() {
		// Any id sorts below "~": the page starts with the newest approval created before
		// DeepCursorAt.
		r.deepCursor = approval.EncodeCursor(r.cfg.DeepCursorAt, "apr_~")
		return r.deepCursor, nil
	}
	lister := r.cfg.Lister
	if lister == "" {
		lister = r.cfg.Requester
	}
	// Pages of 200; a listing shorter than that (a small run) in pages of 10.
	cursor, depth := "", 0
	for _, size := range []int{200, 10} {
		depth = 0
		for range deepWalkPages {
			q := "limit=" + strconv.Itoa(size)
			if cursor != "" {
				q += "&cursor=" + url.QueryEscape(cursor)
			}
			next, n, err := r.cfg.API.List(ctx, lister, q)
			if err != nil {
				return "", fmt.Errorf("walk to a deep cursor: %w", err)
			}
			depth += n
			if next == "" {
				break
			}
			cursor = next
		}
		if cursor != "" {
			break
		}
	}
	if cursor == "" {
		return "", errors.New("walk to a deep cursor: the listing has a single page of 10")
	}
	fmt.Fprintf(r.progress, "bench: %s list-deep starts %d approvals down\n", r.cfg.Store, depth)
	r.deepCursor = cursor
	return cursor, nil
}

// longPollWait is how long each parked long-poll asks the server to wait: under the load
// client's request timeout, and renewed as soon as it ends.
const longPollWait = 20 * time.Second

// parkLongPolls creates an approval nobody decides and holds n long-polls open on it until
// the returned function is called. It returns once the server counts all n as waiting
// (approvald_http_long_polls on /metrics).
func (r *runner) parkLongPolls(ctx context.Context, n int) (stop func(), err error) {
	c, err := r.cfg.API.Create(ctx, r.cfg.Requester, r.prefix+"watched", r.body(-1, defaultAction))
	if err != nil {
		return nil, fmt.Errorf("long-polls: create the watched approval: %w", err)
	}
	if r.watched, err = approvalID(c.body); err != nil {
		return nil, err
	}
	polls, err := NewClient(r.cfg.API.base, n)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	failures := make(chan error, 1)
	for range n {
		wg.Go(func() {
			for pctx.Err() == nil {
				if err := polls.LongPoll(pctx, r.cfg.Requester, r.watched, 1, longPollWait); err != nil && pctx.Err() == nil {
					select {
					case failures <- err:
					default:
					}
					return
				}
			}
		})
	}
	stop = func() {
		cancel()
		wg.Wait()
		polls.Close()
	}
	start := time.Now()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		waiting, err := r.cfg.API.Gauge(ctx, "approvald_http_long_polls")
		if err != nil {
			stop()
			return nil, fmt.Errorf("long-polls: %w", err)
		}
		if int(waiting) >= n {
			break
		}
		select {
		case err := <-failures:
			stop()
			return nil, fmt.Errorf("long-polls: %w", err)
		case <-tick.C:
		case <-ctx.Done():
			stop()
			return nil, ctx.Err()
		}
		if time.Since(start) > time.Minute {
			stop()
			return nil, fmt.Errorf("long-polls: the server counts %d of %d waiting after a minute", int(waiting), n)
		}
	}
	fmt.Fprintf(r.progress, "bench: %s %d long-polls waiting on the server (in %.1fs)\n", r.cfg.Store, n, time.Since(start).Seconds())
	return stop, nil
}
