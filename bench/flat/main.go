// Command flat measures whether approvald's cost is flat with data (issue 11, "Cost flat with
// data"): it runs `approvald bench --seed N` for each size in alternating pairs, each run on a
// fresh database of its own, and prints, per scenario and clients, the median requests a
// second at each size and the median over the pairs of the larger size's figure over the
// smaller's.
//
// One pair of runs minutes apart does not settle the question on a shared two-core machine:
// between two runs the baselines themselves (tables the seed does not touch) move by up to
// 2x. Here the sizes alternate, the order flipping
// from pair to pair (small-large, large-small, ...) so that a drift of the machine weighs on
// both sizes alike, and each pair's ratio is taken between two runs next to each other. The
// verdict is the median of those ratios, fixed before any run: within 20% when it is from
// 0.8 to 1.2. The median of the pairs' ratios of the scenario's own ratio to its baseline is
// printed beside it.
//
// Usage (scripts/bench-flat builds approvald and runs this):
//
//	go run ./bench/flat -approvald /tmp/approvald [-pairs 3] [-sizes 10000,1000000] [-- bench flags]
//
// Every `approvald bench` run gets --scenarios create,replay,get,list,list-deep,intake
// --clients 8,32 --duration 5s, then the flags after --, which add to these or override them
// (the last of a flag wins): --database-url among them runs the pairs on PostgreSQL. --seed,
// --json and --server are this program's and refused after --. Each run's JSON is kept in
// -out.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/approvald/approval/internal/loadtest"
)

// defaultBenchArgs are the bench flags every run starts with; those after -- come after them.
var defaultBenchArgs = []string{"--scenarios", "create,replay,get,list,list-deep,intake", "--clients", "8,32", "--duration", "5s"}

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "flat:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("flat", flag.ContinueOnError)
	fs.SetOutput(stderr)
	bin := fs.String("approvald", "", "the approvald `BINARY` to run (required)")
	pairs := fs.Int("pairs", 3, "`N` alternating pairs of runs")
	sizes := fs.String("sizes", "10000,1000000", "the two seed `SIZES`, smaller first")
	out := fs.String("out", "", "`DIR` to keep each run's JSON in (default: a new temporary directory)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *bin == "" {
		return fmt.Errorf("-approvald is required")
	}
	if *pairs < 1 {
		return fmt.Errorf("-pairs must be at least 1")
	}
	small, large, err := parseSizes(*sizes)
	if err != nil {
		return err
	}
	for _, a := range fs.Args() {
		if name, ok := flagName(a); ok && (name == "seed" || name == "json" || name == "server") {
			return fmt.Errorf("%s: %w", a, errOwnFlag)
		}
	}
	benchArgs := append(slices.Clone(defaultBenchArgs), fs.Args()...)
	dir := *out
	if dir == "" {
		if dir, err = os.MkdirTemp("", "approvald-flat-"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}

	started := time.Now().UTC()
	var runs [][2]*loadtest.Report // per pair: small, large
	seeds := [2]int{small, large}
	for p := range *pairs {
		order := []int{0, 1} // indices into seeds and into a pair
		if p%2 == 1 {
			order = []int{1, 0}
		}
		var pair [2]*loadtest.Report
		for _, side := range order {
			n := seeds[side]
			path := filepath.Join(dir, fmt.Sprintf("pair%d-%d.json", p+1, n))
			fmt.Fprintf(stderr, "flat: pair %d of %d, seed %d (%s)\n", p+1, *pairs, n, time.Now().UTC().Format("15:04:05"))
			if pair[side], err = benchOnce(*bin, n, benchArgs, path, stderr); err != nil {
				return fmt.Errorf("pair %d, seed %d: %w", p+1, n, err)
			}
		}
		runs = append(runs, pair)
	}
	rows := compare(runs)
	fmt.Fprintf(stdout, "approvald flat: %s, %d against %d approvals, %d alternating pairs, %s to %s UTC, runs in %s\n",
		runs[0][0].Store, small, large, len(runs), started.Format("2006-01-02 15:04"), time.Now().UTC().Format("15:04"), dir)
	fmt.Fprintf(stdout, "bench flags: %s\n\n", strings.Join(benchArgs, " "))
	WriteTable(stdout, rows, small, large)
	return nil
}

// errOwnFlag refuses a bench flag that this program sets itself.
var errOwnFlag = errors.New("this program sets it; it does not go after --")

// flagName returns the name of the flag arg is, as Go's flag package reads it (-name,
// --name, -name=value, --name=value), and false when arg is not a flag.
func flagName(arg string) (string, bool) {
	if len(arg) < 2 || arg[0] != '-' || arg == "--" {
		return "", false
	}
	name := strings.TrimPrefix(strings.TrimPrefix(arg, "-"), "-")
	name, _, _ = strings.Cut(name, "=")
	return name, name != ""
}

func parseSizes(s string) (small, large int, err error) {
	parts := strings.Split(s, ",")
	if len(parts) != 2 {
		return 0, 0, fmt.Errorf("-sizes: want two sizes, smaller first, such as 10000,1000000")
	}
	for i, p := range parts {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 1 {
			return 0, 0, fmt.Errorf("-sizes: %q is not a positive number", p)
		}
		if i == 0 {
			small = n
		} else {
			large = n
		}
	}
	if small >= large {
		return 0, 0, fmt.Errorf("-sizes: the first size must be the smaller")
	}
	return small, large, nil
}

// benchOnce runs approvald bench on a fresh database seeded with n approvals, keeps its JSON
// at path and returns it. Its progress goes to stderr.
func benchOnce(bin string, n int, benchArgs []string, path string, stderr io.Writer) (*loadtest.Report, error) {
	args := append([]string{"bench", "--seed", strconv.Itoa(n), "--json"}, benchArgs...)
	cmd := exec.Command(bin, args...)
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %w", bin, strings.Join(args, " "), err)
	}
	if err := os.WriteFile(path, stdout.Bytes(), 0o644); err != nil {
		return nil, err
	}
	var r loadtest.Report
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		return nil, fmt.Errorf("decode %s: %w", path, err)
	}
	return &r, nil
}

// Row is one scenario at one number of clients over every pair.
type Row struct {
	Scenario string
	Clients  int
	// Small and Large are the requests a second at each size, one per pair.
	Small, Large []float64
	// Raw is each pair's Large over its Small; Normalized the same of the scenario's ratio
	// to its baseline (empty for a baseline, or when a run lacked it).
	Raw, Normalized []float64
	// Errors is the errors of every run of the row.
	Errors int
}

// Verdict is the row's median raw ratio and whether it is within 20%.
func (r Row) Verdict() (float64, bool) {
	m := Median(r.Raw)
	return m, m >= 0.8 && m <= 1.2
}

// compare pairs up the results of runs (per pair: the smaller size's report, the larger's)
// by scenario and clients, in the order of the first report. A step missing from a run is
// left out of that pair.
func compare(runs [][2]*loadtest.Report) []Row {
	type key struct {
		scenario string
		clients  int
	}
	index := func(r *loadtest.Report) map[key]loadtest.Result {
		m := make(map[key]loadtest.Result, len(r.Results))
		for _, res := range r.Results {
			m[key{res.Scenario, res.Clients}] = res
		}
		return m
	}
	var rows []Row
	at := make(map[key]int)
	for _, res := range runs[0][0].Results {
		k := key{res.Scenario, res.Clients}
		at[k] = len(rows)
		rows = append(rows, Row{Scenario: res.Scenario, Clients: res.Clients})
	}
	for _, pair := range runs {
		s, l := index(pair[0]), index(pair[1])
		for k, i := range at {
			a, okA := s[k]
			b, okB := l[k]
			row := &rows[i]
			row.Errors += a.Errors + b.Errors // a step missing from a run counts none
			if !okA || !okB || a.RequestsPerSecond == 0 {
				continue
			}
			row.Small = append(row.Small, a.RequestsPerSecond)
			row.Large = append(row.Large, b.RequestsPerSecond)
			row.Raw = append(row.Raw, b.RequestsPerSecond/a.RequestsPerSecond)
			if a.Ratio != nil && b.Ratio != nil && *a.Ratio > 0 {
				row.Normalized = append(row.Normalized, *b.Ratio / *a.Ratio)
			}
		}
	}
	return rows
}

// Median returns the median of xs (the mean of the middle two for an even count), or 0 for
// none.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// WriteTable writes rows as a Markdown table.
func WriteTable(w io.Writer, rows []Row, small, large int) {
	header := []string{"scenario", "clients", fmt.Sprintf("req/s at %s, median", count(small)), fmt.Sprintf("req/s at %s, median", count(large)),
		"large / small, each pair", "median", "vs baseline, median", "errors", "within 20%"}
	table := [][]string{header}
	for _, r := range rows {
		m, ok := r.Verdict()
		within := "yes"
		switch {
		case len(r.Raw) == 0:
			within = "not measured"
		case !ok && m > 1.2:
			within = "no (faster)"
		case !ok:
			within = "**no**"
		}
		norm := ""
		if len(r.Normalized) > 0 {
			norm = fmt.Sprintf("%.2f", Median(r.Normalized))
		}
		table = append(table, []string{
			r.Scenario, strconv.Itoa(r.Clients),
			thousands(Median(r.Small)), thousands(Median(r.Large)),
			joinRatios(r.Raw), fmt.Sprintf("%.2f", m), norm, strconv.Itoa(r.Errors), within,
		})
	}
	loadtest.WriteMarkdown(w, table, 1)
}

// thousands writes x rounded, its thousands separated by commas: 12,345.
func thousands(x float64) string {
	s := strconv.FormatInt(int64(x+0.5), 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func joinRatios(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(s, " / ")
}

// count writes n for a column header: 10000 as "10 thousand", 1000000 as "1 million",
// 1500000 as "1,500,000".
func count(n int) string {
	switch {
	case n%1_000_000 == 0:
		return strconv.Itoa(n/1_000_000) + " million"
	case n < 1_000_000 && n%1_000 == 0:
		return strconv.Itoa(n/1_000) + " thousand"
	}
	return thousands(float64(n))
}
