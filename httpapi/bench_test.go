package httpapi_test

import (
	"bytes"
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/httpapi"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/webhook"
)

// BenchmarkCreate measures a create with a new Idempotency-Key each time: authentication,
// validation, the idempotency claim and the approval's transaction, through a loopback server
// and a keep-alive client.
func BenchmarkCreate(b *testing.B) {
	benchEachStore(b, func(b *testing.B, f *fixture, token string) {
		body := createBody("Benchmark", "alice", "bob")
		for i := 0; b.Loop(); i++ {
			resp := f.create(token, "bench-"+strconv.Itoa(i), body)
			if resp.status != http.StatusCreated {
				b.Fatalf("create: got %d %s", resp.status, resp.body)
			}
		}
	})
}

// BenchmarkReplay measures a retry of a completed create: the stored answer repeated.
func BenchmarkReplay(b *testing.B) {
	benchEachStore(b, func(b *testing.B, f *fixture, token string) {
		body := createBody("Benchmark", "alice", "bob")
		f.mustCreate(token, "bench-replay", body)
		for b.Loop() {
			resp := f.create(token, "bench-replay", body)
			if resp.status != http.StatusCreated || resp.header.Get("Idempotent-Replayed") != "true" {
				b.Fatalf("replay: got %d %s", resp.status, resp.body)
			}
		}
	})
}

// benchEachStore runs fn once per store kind, reporting requests per second next to ns/op.
func benchEachStore(b *testing.B, fn func(b *testing.B, f *fixture, token string)) {
	for _, kind := range []string{testdb.SQLite, testdb.Postgres} {
		b.Run(kind, func(b *testing.B) {
			f := setup(b, kind, func(c *httpapi.Config) { c.Logger = nil })
			token := f.token("bench-bot", approval.RoleRequester)
			b.ReportAllocs()
			fn(b, f, token)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
		})
	}
}

// BenchmarkIntake measures webhook intake: one Standard Webhooks delivery at a time, each
// with a new id, signed by the sender, posted over loopback, verified, stored and acknowledged.
// It reports events/s and the 99th percentile of the request latency seen by the sender.
func BenchmarkIntake(b *testing.B) {
	for _, kind := range []string{testdb.SQLite, testdb.Postgres} {
		b.Run(kind, func(b *testing.B) {
			f := intakeSetup(b, kind, func(c *httpapi.Config) { c.Logger = nil })
			var took []time.Duration
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				h, err := webhook.SignStandard(chatNewSecret, "msg_bench_"+strconv.Itoa(i), f.clock.Now(), decisionBody)
				if err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				resp := f.deliver("chat", h, decisionBody)
				took = append(took, time.Since(start))
				if resp.status != http.StatusOK || !bytes.Contains(resp.body, []byte(`"duplicate":false`)) {
					b.Fatalf("delivery: got %d %s", resp.status, resp.body)
				}
			}
			reportLatency(b, took)
		})
	}
}

// BenchmarkPlainInsert is the floor under BenchmarkIntake: the same event row stored by
// Store.RecordInbox directly, with no HTTP and no verification.
func BenchmarkPlainInsert(b *testing.B) {
	for _, kind := range []string{testdb.SQLite, testdb.Postgres} {
		b.Run(kind, func(b *testing.B) {
			f := intakeSetup(b, kind, func(c *httpapi.Config) { c.Logger = nil })
			h := signStandard(b, chatNewSecret, "msg_plain", f.clock.Now(), decisionBody)
			headers := map[string]string{}
			for name := range h {
				headers[strings.ToLower(name)] = h.Get(name)
			}
			ctx := context.Background()
			var took []time.Duration
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				e := &approval.InboxEvent{
					ID:         approval.NewID("inb"),
					Source:     "chat",
					EventID:    "msg_plain_" + strconv.Itoa(i),
					Type:       approval.TypeApprovalDecision,
					Headers:    headers,
					Body:       decisionBody,
					ReceivedAt: f.clock.Now(),
				}
				start := time.Now()
				duplicate, err := f.store.RecordInbox(ctx, e)
				took = append(took, time.Since(start))
				if err != nil || duplicate {
					b.Fatalf("record inbox: got duplicate %v, error %v", duplicate, err)
				}
			}
			reportLatency(b, took)
		})
	}
}

// reportLatency reports events per second and the 99th percentile of took in milliseconds.
func reportLatency(b *testing.B, took []time.Duration) {
	b.ReportMetric(float64(len(took))/b.Elapsed().Seconds(), "events/s")
	if len(took) == 0 {
		return
	}
	slices.Sort(took)
	p99 := took[(len(took)*99+99)/100-1]
	b.ReportMetric(float64(p99)/float64(time.Millisecond), "p99-ms")
}
