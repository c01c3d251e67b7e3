package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/approvald/approval/internal/batch"
)

// Writes that arrive together are written together (internal/batch): at most writeBatches
// batches of a kind at once, of at most writeBatchMax writes each. A batch is one statement
// of work and one commit, so under load a write costs a fraction of a commit, while a lone
// write starts at once, alone. Fewer batches in flight make bigger batches (less work per
// write) and a longer wait behind the batch in flight; the batches grow with the load, so two
// in flight still carry writeBatchMax writes each when the database is slow to answer. On
// this project's 2-core machine two carried more creates, GETs and intakes per second at 8
// and 32 clients than four (BENCHMARKS.md, session 6). The reads of one approval use the
// same two numbers.
const (
	writeBatches  = 2
	writeBatchMax = 64
)

// batchTimeout bounds a batch, which runs on a context of its own: it writes for callers
// who may have gone, and each caller waits for it to end.
const batchTimeout = 30 * time.Second

// eachAlone runs write over calls as one batch and, when the batch fails with an error of
// PostgreSQL's (its content refused, a deadlock: nothing of it committed), over each call
// alone, so that one call's failure is its own. write may also fail a call of its own
// accord (its content checked before the batch is sent), setting its Err. Any other error (the connection lost, when
// the commit may or may not have happened) is every call's.
func eachAlone[Req, Res any](calls []*batch.Call[Req, Res], write func(context.Context, []*batch.Call[Req, Res]) error) {
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	err := write(ctx, calls)
	var pgErr *pgconn.PgError
	if err != nil && len(calls) > 1 && errors.As(err, &pgErr) {
		for _, c := range calls {
			c.Err = nil
			if err := write(ctx, []*batch.Call[Req, Res]{c}); err != nil {
				c.Err = err
			}
		}
		return
	}
	if err != nil {
		for _, c := range calls {
			c.Err = err
		}
	}
}
