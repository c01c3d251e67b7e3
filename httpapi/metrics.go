package httpapi

import (
	"context"
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
}

// The kinds of approvald_idempotency_conflicts_total.
const (
	conflictInFlight = "in_flight"
	conflictMismatch = "mismatch"
)

func newMetrics(reg prometheus.Registerer, store approval.Store, log *slog.Logger) *metrics {
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
	}
	// Start both kinds at zero so that rate() and alerts see the series before the first one.
	m.conflicts.WithLabelValues(conflictInFlight)
	m.conflicts.WithLabelValues(conflictMismatch)
	reg.MustRegister(m.requests, m.duration, m.replays, m.conflicts, &approvalsCollector{
		store: store,
		log:   log,
		desc: prometheus.NewDesc("approvald_approvals",
			"Approvals in the database, by status (read from the store on each scrape).",
			[]string{"status"}, nil),
	})
	return m
}

func (m *metrics) observeRequest(route, method string, status int, d time.Duration) {
	m.requests.WithLabelValues(route, method, strconv.Itoa(status)).Inc()
	m.duration.WithLabelValues(route, method).Observe(d.Seconds())
}

// approvalsCollector reports approvald_approvals from Store.ApprovalCounts at scrape time, so
// the gauge is the database's truth across all replicas rather than this process's view.
type approvalsCollector struct {
	store approval.Store
	log   *slog.Logger
	desc  *prometheus.Desc
}

// scrapeTimeout bounds the store query of one scrape.
const scrapeTimeout = 5 * time.Second

// approvalStatuses are reported on every scrape, zero included.
var approvalStatuses = []approval.Status{
	approval.StatusPending, approval.StatusApproved, approval.StatusRejected,
	approval.StatusExpired, approval.StatusCancelled,
}

func (c *approvalsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *approvalsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	counts, err := c.store.ApprovalCounts(ctx)
	if err != nil {
		c.log.Warn("collect approval counts", slog.Any("error", err))
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	for _, st := range approvalStatuses {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(counts[st]), string(st))
	}
}
