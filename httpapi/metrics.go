package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/approvald/approval"
)

// metrics are the server's Prometheus metrics.
type metrics struct {
	requests  *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	replays   prometheus.Counter
	conflicts *prometheus.CounterVec
	received  *prometheus.CounterVec // webhook deliveries, by source and result
}

// The results of approvald_inbox_received_total.
const (
	receivedStored    = "stored"
	receivedDuplicate = "duplicate"
	receivedReplay    = "replay"   // github scheme: a kept event's body under another delivery id
	receivedRejected  = "rejected" // refused before storing: 400, 401, 413 (not 503)
)

// The kinds of approvald_idempotency_conflicts_total.
const (
	conflictInFlight = "in_flight"
	conflictMismatch = "mismatch"
)

// newMetrics registers the server's metrics on reg, counts among them. sources are the
// configured webhook sources, whose series start at zero; longPolls reads how many long-polls
// are waiting.
func newMetrics(reg prometheus.Registerer, counts *storeCollector, sources []Source, longPolls func() int64) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "approvald_http_requests_total",
			Help: "HTTP requests answered, by route pattern, method and status code.",
		}, []string{"route", "method", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "approvald_http_request_duration_seconds",
			Help:    "Time to answer HTTP requests, by route pattern and method.",
			Buckets: prometheus.DefBuckets,
		}, []string{"route", "method"}),
		replays: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "approvald_idempotent_replays_total",
			Help: "Creates answered from an earlier request under the same Idempotency-Key.",
		}),
		conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "approvald_idempotency_conflicts_total",
			Help: "Creates refused because the key was in flight (409) or used for another request (422).",
		}, []string{"kind"}),
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "approvald_inbox_received_total",
			Help: "Webhook deliveries answered, by source and result: stored (new event), duplicate (event id already stored), replay (github scheme: the body of a kept event under another delivery id; nothing stored) or rejected (400, 401 or 413; nothing stored).",
		}, []string{"source", "result"}),
	}
	// Start every series at zero so that rate() and alerts see it before its first event.
	// Only configured sources are labels: a request naming another is a 404 and not counted,
	// so a client cannot grow the metrics without bound.
	m.conflicts.WithLabelValues(conflictInFlight)
	m.conflicts.WithLabelValues(conflictMismatch)
	for _, src := range sources {
		for _, result := range []string{receivedStored, receivedDuplicate, receivedReplay, receivedRejected} {
			m.received.WithLabelValues(src.Name, result)
		}
	}
	reg.MustRegister(m.requests, m.duration, m.replays, m.conflicts, m.received,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "approvald_http_long_polls",
			Help: "Long-polls (GET /v1/approvals/{id}?wait=) of this process waiting for a change.",
		}, func() float64 { return float64(longPolls()) }),
		counts)
	return m
}

func (m *metrics) observeRequest(route, method string, status int, d time.Duration) {
	m.requests.WithLabelValues(route, method, strconv.Itoa(status)).Inc()
	m.duration.WithLabelValues(route, method).Observe(d.Seconds())
}

// storeCollector reports the gauges read from the store (approvals, inbox events and
// executions by status, stuck executions), so they are the database's truth across all
// replicas rather than this process's view.
//
// A count of every row grows with the history (0.9 s a scrape at a million approvals), so a
// scrape reads only the backlog, the statuses where work waits (Store.Backlog: index ranges
// as long as the backlog). The other statuses, which only grow, are read in full by Run every
// interval and served from that read, whose age approvald_counts_age_seconds reports. Without
// Run (a server in a test) a scrape reads them itself.
type storeCollector struct {
	store    counter
	log      *slog.Logger
	interval time.Duration

	mu     sync.Mutex
	totals *totals // the last read of Run; nil while Run has none

	approvals  *prometheus.Desc
	inbox      *prometheus.Desc
	executions *prometheus.Desc
	stuck      *prometheus.Desc
	age        *prometheus.Desc
}

// totals are the counts of every status, as read at a time.
type totals struct {
	approvals  map[approval.Status]int
	inbox      map[approval.InboxStatus]int
	executions map[approval.ExecutionStatus]int
	errs       [3]error // of approvals, inbox and executions: a failed read marks its family
	at         time.Time
}

func newStoreCollector(store counter, log *slog.Logger, interval time.Duration) *storeCollector {
	return &storeCollector{
		store:    store,
		log:      log,
		interval: interval,
		approvals: prometheus.NewDesc("approvald_approvals",
			"Approvals in the database, by status (pending read at each scrape, the others every approvald_counts_age_seconds at most).",
			[]string{"status"}, nil),
		inbox: prometheus.NewDesc("approvald_inbox_events",
			"Stored webhook events, by processing status (pending and failed read at each scrape, the others every approvald_counts_age_seconds at most).",
			[]string{"status"}, nil),
		executions: prometheus.NewDesc("approvald_executions",
			"Executions of approved actions, by status (queued, running and needs_review read at each scrape, the others every approvald_counts_age_seconds at most).",
			[]string{"status"}, nil),
		stuck: prometheus.NewDesc("approvald_executions_stuck",
			"Executions still running past their lease: a runner died or hangs, and the lease recovery has not taken them over yet.",
			nil, nil),
		age: prometheus.NewDesc("approvald_counts_age_seconds",
			"Age of the counts of the statuses outside the backlog (approved, succeeded, processed...) in approvald_approvals, approvald_inbox_events and approvald_executions; the backlog's are read at each scrape.",
			nil, nil),
	}
}

// scrapeTimeout bounds the store queries of one scrape.
const scrapeTimeout = 5 * time.Second

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.approvals
	ch <- c.inbox
	ch <- c.executions
	ch <- c.stuck
	ch <- c.age
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()

	backlog, err := c.store.Backlog(ctx)
	if err != nil {
		for _, desc := range []*prometheus.Desc{c.approvals, c.inbox, c.executions, c.stuck} {
			c.invalid(ch, desc, "backlog counts", err)
		}
		return
	}
	c.mu.Lock()
	t := c.totals
	c.mu.Unlock()
	age := time.Duration(0)
	if t == nil {
		t = c.read(ctx)
	} else {
		age = time.Since(t.at)
	}

	if err := t.errs[0]; err != nil {
		c.invalid(ch, c.approvals, "approval counts", err)
	} else {
		gauges(ch, c.approvals, approval.Statuses, backlog.Approvals, t.approvals)
	}
	if err := t.errs[1]; err != nil {
		c.invalid(ch, c.inbox, "inbox counts", err)
	} else {
		gauges(ch, c.inbox, approval.InboxStatuses, backlog.Inbox, t.inbox)
	}
	if err := t.errs[2]; err != nil {
		c.invalid(ch, c.executions, "execution counts", err)
	} else {
		gauges(ch, c.executions, approval.ExecutionStatuses, backlog.Executions, t.executions)
	}
	ch <- prometheus.MustNewConstMetric(c.stuck, prometheus.GaugeValue, float64(backlog.Stuck))
	ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, age.Seconds())
}

// gauges sends one gauge per status: the backlog's count where the status is in it, the
// total's otherwise.
func gauges[S ~string](ch chan<- prometheus.Metric, desc *prometheus.Desc, statuses []S, backlog, total map[S]int) {
	for _, st := range statuses {
		n, ok := backlog[st]
		if !ok {
			n = total[st]
		}
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(n), string(st))
	}
}

// read counts every status of the three kinds now. Each kind is read separately: a failing
// query marks its own family invalid and the others are still reported.
func (c *storeCollector) read(ctx context.Context) *totals {
	t := &totals{at: time.Now()}
	t.approvals, t.errs[0] = c.store.ApprovalCounts(ctx)
	t.inbox, t.errs[1] = c.store.InboxCounts(ctx)
	t.executions, _, t.errs[2] = c.store.ExecutionCounts(ctx)
	return t
}

// run reads the totals now and then every interval until ctx ends. A read that fails is
// logged and leaves the last good one served (its age grows), or, with none, the scrapes
// reading for themselves.
func (c *storeCollector) run(ctx context.Context) {
	defer func() {
		c.mu.Lock()
		c.totals = nil
		c.mu.Unlock()
	}()
	tick := time.NewTicker(c.interval)
	defer tick.Stop()
	for {
		readCtx, cancel := context.WithTimeout(ctx, c.interval)
		t := c.read(readCtx)
		cancel()
		if err := errors.Join(t.errs[:]...); err != nil {
			if ctx.Err() != nil {
				return
			}
			c.log.Warn("read counts for /metrics", slog.Any("error", err))
		} else {
			c.mu.Lock()
			c.totals = t
			c.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// invalid reports a family that could not be read; promhttp answers the scrape with the
// families that could and logs the error.
func (c *storeCollector) invalid(ch chan<- prometheus.Metric, desc *prometheus.Desc, what string, err error) {
	c.log.Warn("collect "+what, slog.Any("error", err))
	ch <- prometheus.NewInvalidMetric(desc, fmt.Errorf("%s: %w", what, err))
}
