// Command river measures approvald's execution throughput against River's on the same
// PostgreSQL, in the same run: executions per second for a no-op downstream over HTTP.
//
// Three systems run N units of work each with W concurrent workers on a fresh schema: River
// as shipped ("river"), River with its fetch cooldown at the 1 ms minimum ("river-tuned"; at
// the default 100 ms River fetches at most W jobs per cooldown, so short jobs run at about
// W/0.1s), and approvald with its defaults. A unit is one
// downstream call: a River job whose worker POSTs the approval, or an approved approval whose
// execution approvald's runner POSTs. Both send the same request (the approval JSON, an
// Idempotency-Key and a Standard Webhooks signature) to one no-op HTTP server on loopback.
//
// What is timed is "N queued units -> N calls done and recorded", the same on both sides:
//
//  1. The downstream's gate is closed: it counts requests and holds them unanswered.
//  2. The N units are queued: River jobs with InsertMany; approvald approvals created and
//     approved over its HTTP API (approving commits the queued execution, the outbox).
//  3. The workers start on the backlog, and their first calls (up to W) wait at the gate.
//  4. The gate opens and the clock starts.
//  5. The clock stops when a count in the database (river_job completed, approvald
//     executions succeeded) first reaches N, polled every 10 ms on both sides.
//
// Each run starts with a CHECKPOINT (checkpoint), so that no run's timed phase meets a
// checkpoint the runs before it set off.
//
// Queueing is kept out of the timing because the two systems queue differently (a bulk
// insert against an HTTP create and approve per unit); the question is how fast each turns a
// backlog into downstream calls. The runs alternate (river, river-tuned, approvald, river,
// ...) and the medians are reported, because the machine is small and shared. The latency
// columns are per unit, from its claim to its recorded success, over the units claimed after
// the gate opened; "held" is how many calls waited at the gate, and "conns" how many
// connections the workers opened to the target. A run fails unless the downstream answered
// exactly N calls, one per Idempotency-Key, and all N units finished as successes.
//
// Usage (from bench/river):
//
//	go run . -n 3000 -workers 10 -rounds 3
//	go run . -n 3000 -workers 1,10,50 -systems river-tuned,approvald   (a sweep)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// holdTimeout bounds one call on both sides. It is long because the first W calls are held
// at the gate for the whole queueing phase; a shorter timeout would fail them and turn the
// measurement into one of retries.
const holdTimeout = 10 * time.Minute

// gateQuiet is how long a run waits for one more call to arrive at the closed gate before it
// opens the gate with fewer than W held.
const gateQuiet = 5 * time.Second

// runConfig is what each run gets.
type runConfig struct {
	DatabaseURL string
	N, Workers  int
	Keep        bool   // keep each run's schema for inspection
	Approvald   string // path of the built approvald binary
	Loaders     int    // concurrent clients creating and approving approvals
	WorkDir     string // for approvald's config file and logs
}

// runResult is one run's measurement.
type runResult struct {
	System     string
	N, Workers int
	Held       int // calls waiting at the gate when the clock started
	Conns      int // connections the workers opened to the downstream
	Elapsed    time.Duration
	// Claim to recorded completion per unit, over the units claimed after the clock
	// started; Timed is how many those were.
	P50, P99 time.Duration
	Timed    int
}

// Rate is executions per second.
func (r runResult) Rate() float64 { return float64(r.N) / r.Elapsed.Seconds() }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("river", flag.ContinueOnError)
	var cfg runConfig
	fs.StringVar(&cfg.DatabaseURL, "database-url", envOr("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL `URL` both systems use (each run makes and drops its own schema)")
	fs.IntVar(&cfg.N, "n", 3000, "units of work (downstream calls) per run")
	workerList := fs.String("workers", "10", "concurrent workers on each side; a comma-separated `LIST` (1,10,50) sweeps them, each with its own rounds")
	rounds := fs.Int("rounds", 3, "runs of each system, alternating")
	systems := fs.String("systems", "river,river-tuned,approvald", "comma-separated systems to run: river (River's defaults), river-tuned (fetch cooldown 1ms), approvald")
	repo := fs.String("repo", "../..", "`DIR` of the approvald module, to build cmd/approvald from")
	fs.IntVar(&cfg.Loaders, "loaders", 8, "concurrent HTTP clients queueing approvald's units")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep each run's schema")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var sweep []int
	for w := range strings.SplitSeq(*workerList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(w))
		if err != nil || n <= 0 {
			return fmt.Errorf("-workers: %q is not a positive number", w)
		}
		sweep = append(sweep, n)
	}
	if cfg.N <= 0 || *rounds <= 0 || cfg.Loaders <= 0 {
		return errors.New("-n, -rounds and -loaders must be positive")
	}
	var order []string
	for s := range strings.SplitSeq(*systems, ",") {
		if s != "river" && s != "river-tuned" && s != "approvald" {
			return fmt.Errorf("-systems: unknown system %q", s)
		}
		order = append(order, s)
	}

	work, err := os.MkdirTemp("", "bench-river-")
	if err != nil {
		return fmt.Errorf("make work directory: %w", err)
	}
	defer os.RemoveAll(work)
	cfg.WorkDir = work
	if slices.Contains(order, "approvald") {
		cfg.Approvald = filepath.Join(work, "approvald")
		if err := buildApprovald(ctx, *repo, cfg.Approvald); err != nil {
			return err
		}
	}

	admin, err := pgx.Connect(ctx, cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("connect to postgres: %w", err)
	}
	defer admin.Close(context.WithoutCancel(ctx))

	var summary []string
	for _, workers := range sweep {
		cfg.Workers = workers
		lines, err := runSweepStep(ctx, cfg, admin, order, *rounds)
		if err != nil {
			return err
		}
		summary = append(summary, lines...)
	}
	if len(sweep) > 1 {
		fmt.Println("\nSummary (medians):")
		for _, l := range summary {
			fmt.Println(l)
		}
	}
	return nil
}

// checkpoint asks PostgreSQL for a checkpoint before a run, so that every run starts alike:
// none spends its timed phase beside a checkpoint begun by the WAL of the runs before it
// (one of River's or approvald's runs at fifty workers writes hundreds of MB), and none
// begins one on a timer (checkpoint_timeout counts from the last). It needs a superuser or
// the pg_checkpoint role.
func checkpoint(ctx context.Context, admin *pgx.Conn) error {
	if _, err := admin.Exec(ctx, "CHECKPOINT"); err != nil {
		return fmt.Errorf("CHECKPOINT before a run (the benchmark's user needs superuser or pg_checkpoint): %w", err)
	}
	return nil
}

// runSweepStep runs every system rounds times, alternating, with cfg.Workers workers, prints
// each run and the medians, and returns one summary line per system.
func runSweepStep(ctx context.Context, cfg runConfig, admin *pgx.Conn, order []string, rounds int) ([]string, error) {
	fmt.Printf("N=%d workers=%d rounds=%d, a CHECKPOINT before each run, gate-held start, completion polled every %s\n\n", cfg.N, cfg.Workers, rounds, pollInterval)
	printHeader()
	results := make(map[string][]runResult)
	for round := range rounds {
		for _, system := range order {
			if err := checkpoint(ctx, admin); err != nil {
				return nil, err
			}
			var res runResult
			var err error
			switch system {
			case "river":
				res, err = runRiver(ctx, cfg, admin, system, 0)
			case "river-tuned":
				res, err = runRiver(ctx, cfg, admin, system, riverTunedFetchCooldown)
			case "approvald":
				res, err = runApprovald(ctx, cfg, admin)
			}
			if err != nil {
				return nil, fmt.Errorf("%s, %d workers, round %d: %w", system, cfg.Workers, round+1, err)
			}
			printRow(fmt.Sprintf("%s #%d", system, round+1), res)
			results[system] = append(results[system], res)
		}
	}

	fmt.Println()
	printHeader()
	medians := make(map[string]runResult)
	var summary []string
	for _, system := range order {
		m := median(results[system])
		medians[system] = m
		printRow(system+" (median)", m)
		summary = append(summary, fmt.Sprintf("workers %3d  %-12s %10.1f executions/s  p50 %s  p99 %s", cfg.Workers, system, m.Rate(), ms(m.P50), ms(m.P99)))
	}
	if a := medians["approvald"]; a.N > 0 {
		fmt.Println()
		for _, system := range order {
			if r := medians[system]; system != "approvald" {
				line := fmt.Sprintf("approvald/%s executions per second: %.2f", system, a.Rate()/r.Rate())
				fmt.Println(line)
				summary = append(summary, fmt.Sprintf("workers %3d  %s", cfg.Workers, line))
			}
		}
	}
	fmt.Println()
	return summary, nil
}

// checkCalls confirms that a run made exactly N calls, one per key, each with a key, and
// that every unit finished as success.
func checkCalls(res *runResult, c downstreamCounts, unfinished int) error {
	res.Conns = c.Conns
	var problems []string
	if c.Answered != res.N || c.Keys != res.N {
		problems = append(problems, fmt.Sprintf("downstream answered %d calls for %d keys, want %d", c.Answered, c.Keys, res.N))
	}
	if c.Repeated > 0 {
		problems = append(problems, fmt.Sprintf("%d repeated calls for a key", c.Repeated))
	}
	if c.NoKey > 0 {
		problems = append(problems, fmt.Sprintf("%d calls without an Idempotency-Key", c.NoKey))
	}
	if unfinished > 0 {
		problems = append(problems, fmt.Sprintf("%d units not finished as success", unfinished))
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s run is not a clean measurement: %s", res.System, strings.Join(problems, "; "))
	}
	return nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
