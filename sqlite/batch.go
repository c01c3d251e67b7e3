package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/approvald/approval/internal/batch"
)

// Writes that queue for the write connection together are written together (internal/batch):
// one batch at a time, since there is one writer, of at most writeBatchMax writes.
const writeBatchMax = 64

// batchTimeout bounds a batch, which runs on a context of its own: it writes for callers who
// may have gone, until the latest of their deadlines and never longer than this
// (batch.Deadline).
const batchTimeout = 30 * time.Second

// newBatcher returns a batcher whose batches are written by writeBatch with write.
func newBatcher[Req, Res any](s *Store, op string, write func(context.Context, *tx, Req) (Res, error)) *batch.Batcher[Req, Res] {
	return batch.New(1, writeBatchMax, func(calls []*batch.Call[Req, Res]) { writeBatch(s, op, calls, write) })
}

// writeBatch runs write for each call of a batch in one write transaction, each call in a
// savepoint of its own, so that one call's failure (its content refused) undoes only its
// own rows, and the batch pays for one BEGIN and one commit: on SQLite a commit is a sync of
// the WAL, and pages that several writes change (an index's last leaf) are written once. A
// call's result is set only once the transaction committed; a failed commit, or a failure
// that ended the whole transaction, is every call's (docs/architecture.md, "Inside the
// SQLite driver").
func writeBatch[Req, Res any](s *Store, op string, calls []*batch.Call[Req, Res], write func(context.Context, *tx, Req) (Res, error)) {
	ctx, cancel := context.WithDeadline(context.Background(), batch.Deadline(calls, time.Now().Add(batchTimeout)))
	defer cancel()
	failAll := func(err error) {
		var zero Res
		for _, c := range calls {
			c.Res, c.Err = zero, err
		}
	}
	tx, err := s.beginWrite(ctx)
	if err != nil {
		failAll(fail(op, err))
		return
	}
	defer tx.Rollback()
	savepoints := len(calls) > 1
	for _, c := range calls {
		if savepoints {
			if _, err := tx.ExecContext(ctx, `SAVEPOINT one_write`); err != nil {
				failAll(fail(op, err))
				return
			}
		}
		c.Res, c.Err = write(ctx, tx, c.Req)
		switch {
		case !savepoints && c.Err != nil:
			return // the write alone: its rows are rolled back with the transaction
		case !savepoints:
		case c.Err != nil:
			// ROLLBACK TO keeps the transaction open; it fails when an error already ended
			// the transaction (SQLite may roll back the whole of it on some errors, such as
			// a full disk), and then nothing of the batch is written.
			if _, err := tx.ExecContext(ctx, `ROLLBACK TO one_write; RELEASE one_write`); err != nil {
				own := c.Err
				failAll(fail(op, fmt.Errorf("the batch's transaction ended (another write of it failed, or its time ran out): %w", unavailable(err))))
				c.Err = own
				return
			}
		default:
			if _, err := tx.ExecContext(ctx, `RELEASE one_write`); err != nil {
				failAll(fail(op, err))
				return
			}
		}
	}
	if err := tx.commit(); err != nil {
		failAll(fail(op, err))
	}
}

// BatchStats calls report with what each kind of batch has run so far in this process
// ("create", "intake", and "transaction": the groups of write transactions that
// shared a commit, see writer): batches run and calls in them, for the metrics
// approvald_store_batches_total and approvald_store_batched_calls_total.
func (s *Store) BatchStats(report func(kind string, batches, calls uint64)) {
	for kind, st := range s.batchStats() {
		report(kind, st.Batches, st.Calls)
	}
}

// batchStats is BatchStats' counts by kind.
func (s *Store) batchStats() map[string]batch.Stats {
	return map[string]batch.Stats{"create": s.creates.Stats(), "intake": s.intakes.Stats(), "transaction": s.writer.stats()}
}
