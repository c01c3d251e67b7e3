package httpapi_test

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/approvald/approval"
	"github.com/approvald/approval/httpapi"
	"github.com/approvald/approval/internal/testdb"
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
