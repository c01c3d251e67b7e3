package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/approvald/approval/internal/batch"
)

// Writes that arrive together are written together (internal/batch): at most writeBatches
// batches of a kind at once, of at most writeBatchMax writes each; the reads of one approval
// use the same two numbers (docs/architecture.md, "Creates, intakes and reads in batches").
const (
	writeBatches  = 2
	writeBatchMax = 64
)

// batchKinds is how many batchers a Store runs (creates, intakes, reads, token look-ups; see
// BatchStats), each up to writeBatches batches at once on the batches' pool.
const batchKinds = 4

// batchTimeout bounds a batch, which runs on a context of its own: it writes for callers
// who may have gone, until the latest of their deadlines and never longer than this
// (batch.EachAlone).
const batchTimeout = 30 * time.Second

// eachAlone is the run of the store's batchers: write over a batch, within batchTimeout, and
// over each call alone again when the whole was refused (batch.EachAlone).
func eachAlone[Req, Res any](write func(context.Context, []*batch.Call[Req, Res]) error) func([]*batch.Call[Req, Res]) {
	return batch.EachAlone(batchTimeout, write, refusedWhole)
}

// refusedWhole reports whether a batch's error is PostgreSQL's refusal of its statement (its
// content, a deadlock), after which nothing of the batch committed and each call is tried
// alone.
func refusedWhole(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr)
}

// BatchStats calls report with what each kind of batch has run so far in this process
// ("create", "intake", "read", "token"): batches run and calls in them, for the metrics
// approvald_store_batches_total and approvald_store_batched_calls_total.
func (s *Store) BatchStats(report func(kind string, batches, calls uint64)) {
	for kind, st := range s.batchStats() {
		report(kind, st.Batches, st.Calls)
	}
}

// batchStats is BatchStats' counts by kind.
func (s *Store) batchStats() map[string]batch.Stats {
	return map[string]batch.Stats{"create": s.creates.Stats(), "intake": s.intakes.Stats(), "read": s.reads.Stats(),
		"token": s.tokens.Stats()}
}
