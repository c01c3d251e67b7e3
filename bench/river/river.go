package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// callArgs is one River job: the downstream call for one unit of work.
type callArgs struct {
	Key      string          `json:"key"`
	Approval json.RawMessage `json:"approval"`
}

// Kind names the job kind in river_job.
func (callArgs) Kind() string { return "bench_call" }

// callWorker makes the call, as approvald's runner does for an approved action.
type callWorker struct {
	river.WorkerDefaults[callArgs]
	caller *caller
}

// Work calls the target and records its answer as the job's output, as approvald records it
// as the execution's result.
func (w *callWorker) Work(ctx context.Context, job *river.Job[callArgs]) error {
	result, err := w.caller.Call(ctx, "msg_"+strconv.FormatInt(job.ID, 10), job.Args.Key, job.Args.Approval)
	if err != nil {
		return err
	}
	if err := river.RecordOutput(ctx, json.RawMessage(result)); err != nil {
		return fmt.Errorf("record output: %w", err)
	}
	return nil
}

// River's FetchCooldown is the least time between two fetches of a queue's producer, and a
// fetch takes at most the free worker slots, so with short jobs River runs at most about
// W / FetchCooldown jobs a second: 100/s for 10 workers at its default of 100 ms. The
// benchmark therefore runs River twice: as shipped ("river"), and tuned for throughput
// ("river-tuned") with the cooldown at riverTunedFetchCooldown, the least River accepts.
const riverTunedFetchCooldown = time.Millisecond

// runRiver measures River: N jobs inserted in a fresh schema, then a client with W workers
// started; once its first calls are held at the downstream's gate, the gate opens and the
// clock runs until all N jobs are completed in river_job. fetchCooldown 0 keeps River's
// default.
func runRiver(ctx context.Context, cfg runConfig, admin *pgx.Conn, system string, fetchCooldown time.Duration) (res runResult, err error) {
	res = runResult{System: system, N: cfg.N, Workers: cfg.Workers}

	schema, err := newSchema(ctx, admin, "bench_river_")
	if err != nil {
		return res, err
	}
	if !cfg.Keep {
		defer func() {
			if dropErr := dropSchema(context.WithoutCancel(ctx), admin, schema); err == nil {
				err = dropErr
			}
		}()
	}

	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		return res, fmt.Errorf("open river pool: %w", err)
	}
	defer pool.Close()
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: schema})
	if err != nil {
		return res, fmt.Errorf("river migrator: %w", err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return res, fmt.Errorf("river migrate: %w", err)
	}

	down, err := startDownstream()
	if err != nil {
		return res, err
	}
	defer down.Close()
	call, err := newCaller(down.URL(), cfg.Workers)
	if err != nil {
		return res, err
	}
	defer call.Close()

	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, &callWorker{caller: call}); err != nil {
		return res, fmt.Errorf("add river worker: %w", err)
	}
	// River's defaults everywhere (poll 1 s, completer batching, and unless tuned the fetch
	// cooldown), but for the queue's worker count and a job timeout long enough for the held
	// calls.
	client, err := river.NewClient(driver, &river.Config{
		Schema:        schema,
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.Workers}},
		Workers:       workers,
		JobTimeout:    holdTimeout,
		FetchCooldown: fetchCooldown,
		Logger:        slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return res, fmt.Errorf("new river client: %w", err)
	}

	now := time.Now()
	params := make([]river.InsertManyParams, cfg.N)
	for i := range params {
		key := fmt.Sprintf("%s-%d", schema, i)
		a, err := benchApproval(key, i, now)
		if err != nil {
			return res, err
		}
		params[i] = river.InsertManyParams{Args: callArgs{Key: key, Approval: a}}
	}
	// In chunks: one multi-row insert of thousands of jobs is not how callers enqueue, and
	// a bounded statement keeps the insert phase's memory flat.
	for start := 0; start < len(params); start += insertChunk {
		if _, err := client.InsertMany(ctx, params[start:min(start+insertChunk, len(params))]); err != nil {
			return res, fmt.Errorf("insert river jobs: %w", err)
		}
	}

	if err := client.Start(ctx); err != nil {
		return res, fmt.Errorf("start river client: %w", err)
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if stopErr := client.Stop(stopCtx); stopErr != nil && err == nil {
			err = fmt.Errorf("stop river client: %w", stopErr)
		}
	}()

	res.Held = down.WaitArrived(ctx, min(cfg.Workers, cfg.N), gateQuiet)
	start := time.Now()
	down.Open()
	end, err := waitCount(ctx, admin, "SELECT count(*) FROM "+schema+".river_job WHERE state = 'completed'", cfg.N)
	if err != nil {
		return res, err
	}
	res.Elapsed = end.Sub(start)

	// Claim to recorded completion, for jobs fetched after the gate opened (the held ones
	// waited on the gate, not on River).
	ls, err := latencies(ctx, admin,
		"SELECT EXTRACT(EPOCH FROM finalized_at - attempted_at)::float8 FROM "+schema+".river_job WHERE attempted_at >= $1",
		start)
	if err != nil {
		return res, err
	}
	res.setLatencies(ls)

	var notCompleted int
	if err := admin.QueryRow(ctx, "SELECT count(*) FROM "+schema+".river_job WHERE state <> 'completed'").Scan(&notCompleted); err != nil {
		return res, fmt.Errorf("count unfinished river jobs: %w", err)
	}
	return res, checkCalls(&res, down.Counts(), notCompleted)
}

// insertChunk is how many jobs one InsertMany carries.
const insertChunk = 1000
