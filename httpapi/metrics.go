package httpapi

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
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

// newMetrics registers the server's metrics on reg. sources are the configured webhook
// sources, whose series start at zero; longPolls reads how many long-polls are waiting.
func newMetrics(reg prometheus.Registerer, store counter, log *slog.Logger, sources []Source, longPolls func() int64) *metrics {
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
		newStoreCollector(store, log))
	return m
}

func (m *metrics) observeRequest(route, method string, status int, d time.Duration) {
	m.requests.WithLabelValues(route, method, strconv.Itoa(status)).Inc()
	m.duration.WithLabelValues(route, method).Observe(d.Seconds())
}

// storeCollector reports the gauges read from the store at scrape time (approvals, inbox
// events and executions by status, stuck executions), so they are the database's truth across
// all replicas rather than this process's view. Each family is read separately: a failing
// query marks its own family invalid and the others are still reported.
type storeCollector struct {
	store      counter
	log        *slog.Logger
	approvals  *prometheus.Desc
	inbox      *prometheus.Desc
	executions *prometheus.Desc
	stuck      *prometheus.Desc
}

func newStoreCollector(store counter, log *slog.Logger) *storeCollector {
	return &storeCollector{
		store: store,
		log:   log,
		approvals: prometheus.NewDesc("approvald_approvals",
			"Approvals in the database, by status (read from the store on each scrape).",
			[]string{"status"}, nil),
		inbox: prometheus.NewDesc("approvald_inbox_events",
			"Stored webhook events, by processing status (read from the store on each scrape).",
			[]string{"status"}, nil),
		executions: prometheus.NewDesc("approvald_executions",
			"Executions of approved actions, by status (read from the store on each scrape).",
			[]string{"status"}, nil),
		stuck: prometheus.NewDesc("approvald_executions_stuck",
			"Executions still running past their lease: a runner died or hangs, and the lease recovery has not taken them over yet.",
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
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()

	if counts, err := c.store.ApprovalCounts(ctx); err != nil {
		c.invalid(ch, c.approvals, "approval counts", err)
	} else {
		for _, st := range approval.Statuses {
			ch <- prometheus.MustNewConstMetric(c.approvals, prometheus.GaugeValue, float64(counts[st]), string(st))
		}
	}

	if counts, err := c.store.InboxCounts(ctx); err != nil {
		c.invalid(ch, c.inbox, "inbox counts", err)
	} else {
		for _, st := range approval.InboxStatuses {
			ch <- prometheus.MustNewConstMetric(c.inbox, prometheus.GaugeValue, float64(counts[st]), string(st))
		}
	}

	if counts, stuck, err := c.store.ExecutionCounts(ctx); err != nil {
		c.invalid(ch, c.executions, "execution counts", err)
		c.invalid(ch, c.stuck, "execution counts", err)
	} else {
		for _, st := range approval.ExecutionStatuses {
			ch <- prometheus.MustNewConstMetric(c.executions, prometheus.GaugeValue, float64(counts[st]), string(st))
		}
		ch <- prometheus.MustNewConstMetric(c.stuck, prometheus.GaugeValue, float64(stuck))
	}
}

// invalid reports a family that could not be read; promhttp answers the scrape with the
// families that could and logs the error.
func (c *storeCollector) invalid(ch chan<- prometheus.Metric, desc *prometheus.Desc, what string, err error) {
	c.log.Warn("collect "+what, slog.Any("error", err))
	ch <- prometheus.NewInvalidMetric(desc, fmt.Errorf("%s: %w", what, err))
}
