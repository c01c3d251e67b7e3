package loadtest

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/approvald/approval/internal/pgpool"
)

// seedWorkers is how many batches are written at once: on PostgreSQL the server does the
// work (index and foreign key maintenance), so two connections keep both cores busy.
const seedWorkers = 2

// SeedPostgres writes s into the migrated, empty PostgreSQL database url names (its
// search_path included), with COPY in transactions of seedBatch approvals, then VACUUM
// ANALYZE, as autovacuum would after a bulk load, so that plans see the real sizes.
func SeedPostgres(ctx context.Context, url string, s Seed, progress io.Writer) (SeedCounts, error) {
	if err := s.defaults(); err != nil {
		return SeedCounts{}, err
	}
	pool, err := pgpool.Open(ctx, url)
	if err != nil {
		return SeedCounts{}, err
	}
	defer pool.Close()
	counts, err := seedBatches(ctx, s, progress, "postgres", func(ctx context.Context, r *seedRows) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return copyRows(ctx, tx, r) })
	})
	if err != nil {
		return counts, err
	}
	start := time.Now()
	if err := vacuum(ctx, pool); err != nil {
		return counts, err
	}
	// Write the bulk load out now rather than in a checkpoint during the first scenarios.
	// CHECKPOINT needs a superuser or pg_checkpoint; without them it is skipped, and said.
	if _, err := pool.Exec(ctx, "CHECKPOINT"); err != nil {
		fmt.Fprintf(progress, "bench: postgres seed: no CHECKPOINT after the load (%v); the first steps may meet it\n", err)
	}
	fmt.Fprintf(progress, "bench: postgres seed: VACUUM ANALYZE and CHECKPOINT in %.1fs\n", time.Since(start).Seconds())
	return counts, nil
}

func vacuum(ctx context.Context, pool *pgxpool.Pool) error {
	for _, table := range []string{"approvals", "approval_approvers", "approval_asks", "decisions", "events", "executions", "inbox_events"} {
		if _, err := pool.Exec(ctx, "VACUUM (ANALYZE) "+table); err != nil {
			return fmt.Errorf("seed: vacuum %s: %w", table, err)
		}
	}
	return nil
}

// copyRows copies one batch, parents first.
func copyRows(ctx context.Context, tx pgx.Tx, r *seedRows) error {
	tables := []struct {
		name string
		cols []string
		n    int
		row  func(i int) []any
	}{
		{"approvals", []string{"id", "requester", "operation_key", "fingerprint", "action", "title", "context",
			"required_approvals", "status", "decided_at", "expires_at", "created_at", "version"}, len(r.approvals), func(i int) []any {
			a := r.approvals[i]
			return []any{a.id, a.requester, a.key, a.fingerprint, a.action, a.title, a.context, 1, string(a.status), a.decidedAt, a.expiresAt, a.createdAt, a.version}
		}},
		{"approval_approvers", []string{"approval_id", "position", "approver", "created_at"}, len(r.approvers), func(i int) []any {
			p := r.approvers[i]
			return []any{p.approvalID, p.position, p.approver, p.createdAt}
		}},
		{"approval_asks", []string{"approval_id", "kind", "name", "created_at"}, len(r.asks), func(i int) []any {
			p := r.asks[i]
			return []any{p.approvalID, "person", p.approver, p.createdAt}
		}},
		{"decisions", []string{"approval_id", "approver", "verdict", "comment", "decided_at", "event_seq"}, len(r.decisions), func(i int) []any {
			d := r.decisions[i]
			return []any{d.approvalID, d.approver, d.verdict, d.comment, d.at, d.eventSeq}
		}},
		{"events", []string{"approval_id", "seq", "type", "at", "actor", "cause", "detail"}, len(r.events), func(i int) []any {
			e := r.events[i]
			return []any{e.approvalID, e.seq, e.typ, e.at, e.actor, string(e.cause), jsonOrNil(e.detail)}
		}},
		{"executions", []string{"id", "approval_id", "operation_key", "action", "targeted", "status", "attempts",
			"last_error", "result", "next_attempt_at", "lease_expires_at", "applied_version", "uncertain", "attempt_base",
			"created_at", "updated_at"}, len(r.executions), func(i int) []any {
			x := r.executions[i]
			return []any{x.id, x.approvalID, x.key, x.action, x.targeted, string(x.status), x.attempts, "", x.result, nil, nil, 0, false, 0, x.createdAt, x.updatedAt}
		}},
		{"inbox_events", []string{"id", "source", "event_id", "type", "headers", "body", "received_at", "status",
			"attempts", "last_error", "next_attempt_at", "lease_token", "lease_expires_at", "processed_at", "outcome",
			"approval_id", "conflicts"}, len(r.inbox), func(i int) []any {
			e := r.inbox[i]
			var ref any
			if e.approvalID != "" {
				ref = e.approvalID
			}
			return []any{e.id, e.source, e.eventID, e.typ, string(e.headers), e.body, e.receivedAt, string(e.status), 1, "", nil, "", nil, e.processedAt, e.outcome, ref, 0}
		}},
	}
	for _, t := range tables {
		if t.n == 0 {
			continue
		}
		i := 0
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{t.name}, t.cols, pgx.CopyFromFunc(func() ([]any, error) {
			if i == t.n {
				return nil, nil
			}
			i++
			return t.row(i - 1), nil
		})); err != nil {
			return fmt.Errorf("seed: copy %s: %w", t.name, err)
		}
	}
	return nil
}

func jsonOrNil(b []byte) any {
	if b == nil {
		return nil
	}
	return string(b)
}

// seedBatches generates s in batches of seedBatch approvals and writes them with write from
// seedWorkers goroutines, reporting progress about every tenth of the way.
func seedBatches(ctx context.Context, s Seed, progress io.Writer, store string, write func(context.Context, *seedRows) error) (SeedCounts, error) {
	start := time.Now()
	batches := make(chan [2]int)
	results := make(chan *seedRows)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(batches)
		for from := 0; from < s.N; from += seedBatch {
			select {
			case batches <- [2]int{from, min(from+seedBatch, s.N)}:
			case <-gctx.Done():
				return gctx.Err()
			}
		}
		return nil
	})
	workers, _ := errgroup.WithContext(gctx)
	for range seedWorkers {
		workers.Go(func() error {
			for b := range batches {
				r, err := s.batch(b[0], b[1])
				if err != nil {
					return err
				}
				if err := write(gctx, r); err != nil {
					return err
				}
				select {
				case results <- r:
				case <-gctx.Done():
					return gctx.Err()
				}
			}
			return nil
		})
	}
	g.Go(func() error {
		defer close(results)
		return workers.Wait()
	})
	var counts SeedCounts
	next := s.N / 10
	for r := range results {
		counts.add(r)
		if counts.Approvals >= next && counts.Approvals < s.N {
			fmt.Fprintf(progress, "bench: %s seed: %d of %d approvals in %.1fs\n", store, counts.Approvals, s.N, time.Since(start).Seconds())
			next += s.N / 10
		}
	}
	if err := g.Wait(); err != nil {
		return counts, err
	}
	fmt.Fprintf(progress, "bench: %s seed: %d approvals (%d pending), %d rows in all, in %.1fs\n",
		store, counts.Approvals, counts.Pending, counts.Rows(), time.Since(start).Seconds())
	return counts, nil
}
