package main

import (
	"bytes"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/approvald/approval/internal/loadtest"
)

func ratio(x float64) *float64 { return &x }

func report(results ...loadtest.Result) *loadtest.Report {
	return &loadtest.Report{Store: "sqlite", Results: results}
}

func TestCompare(t *testing.T) {
	// Two pairs: the scenario ran at 100 and 90 (pair 1), 50 and 60 (pair 2), its baseline at
	// 1000 / 900 and 500 / 400. A step missing from one run is left out of that pair only.
	runs := [][2]*loadtest.Report{
		{
			report(loadtest.Result{Scenario: "insert", Clients: 8, RequestsPerSecond: 1000},
				loadtest.Result{Scenario: "create", Clients: 8, RequestsPerSecond: 100, Ratio: ratio(0.1)},
				loadtest.Result{Scenario: "get", Clients: 8, RequestsPerSecond: 10}),
			report(loadtest.Result{Scenario: "insert", Clients: 8, RequestsPerSecond: 900},
				loadtest.Result{Scenario: "create", Clients: 8, RequestsPerSecond: 90, Ratio: ratio(0.1), Errors: 2},
				loadtest.Result{Scenario: "get", Clients: 8, RequestsPerSecond: 12}),
		},
		{
			report(loadtest.Result{Scenario: "insert", Clients: 8, RequestsPerSecond: 500},
				loadtest.Result{Scenario: "create", Clients: 8, RequestsPerSecond: 50, Ratio: ratio(0.1)}),
			report(loadtest.Result{Scenario: "insert", Clients: 8, RequestsPerSecond: 400},
				loadtest.Result{Scenario: "create", Clients: 8, RequestsPerSecond: 60, Ratio: ratio(0.15)},
				loadtest.Result{Scenario: "get", Clients: 8, RequestsPerSecond: 12, Errors: 3}),
		},
	}
	rows := compare(runs)
	if len(rows) != 3 {
		t.Fatalf("got %d rows, want 3: %+v", len(rows), rows)
	}
	create := rows[1]
	if create.Scenario != "create" || create.Clients != 8 {
		t.Fatalf("rows out of the first report's order: %+v", rows)
	}
	if want := []float64{0.9, 1.2}; !near(create.Raw, want) {
		t.Errorf("create raw = %v, want %v", create.Raw, want)
	}
	if want := []float64{1, 1.5}; !near(create.Normalized, want) {
		t.Errorf("create normalized = %v, want %v", create.Normalized, want)
	}
	if create.Errors != 2 {
		t.Errorf("create errors = %d, want 2", create.Errors)
	}
	if m, ok := create.Verdict(); !ok || math.Abs(m-1.05) > 1e-9 {
		t.Errorf("create verdict = %v %v, want 1.05 true", m, ok)
	}
	if get := rows[2]; get.Errors != 3 {
		t.Errorf("get errors = %d, want 3 (a pair left out still counts its errors)", get.Errors)
	}
	if get := rows[2]; len(get.Raw) != 1 || math.Abs(get.Raw[0]-1.2) > 1e-9 || len(get.Normalized) != 0 {
		t.Errorf("get = %+v, want one pair at 1.2 and no baseline ratio", get)
	}
	if m, ok := rows[0].Verdict(); !ok || math.Abs(m-0.85) > 1e-9 { // insert: 0.9 and 0.8
		t.Errorf("insert verdict = %v %v, want 0.85 within", m, ok)
	}
	for _, tc := range []struct {
		raw    []float64
		within bool
	}{{[]float64{0.79, 0.7, 0.9}, false}, {[]float64{0.8}, true}, {[]float64{1.2}, true}, {[]float64{1.21, 1.3, 1}, false}, {nil, false}} {
		if _, ok := (Row{Raw: tc.raw}).Verdict(); ok != tc.within {
			t.Errorf("Verdict of %v = %v, want %v", tc.raw, ok, tc.within)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := Median(tc.xs); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
}

func TestRefusesItsOwnFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-approvald", "x", "--", "--seed", "5"}, errOwnFlag.Error()},
		{[]string{"-approvald", "x", "--", "-seed=5"}, errOwnFlag.Error()},
		{[]string{"-approvald", "x", "--", "--json"}, errOwnFlag.Error()},
		{[]string{"-approvald", "x", "--", "-json=false"}, errOwnFlag.Error()},
		{[]string{"-approvald", "x", "--", "--server", "http://127.0.0.1:1"}, errOwnFlag.Error()},
		{[]string{"-approvald", "x", "-sizes", "100,10"}, "the first size must be the smaller"},
		{[]string{"-approvald", "x", "-sizes", "100"}, "want two sizes"},
		{[]string{"-approvald", "x", "-pairs", "0"}, "-pairs must be at least 1"},
		{nil, "-approvald is required"},
	} {
		out := t.TempDir() // must stay empty: a refusal runs nothing
		var stdout, stderr bytes.Buffer
		err := run(append([]string{"-out", out}, tc.args...), &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run(%q) = %v, want an error saying %q", tc.args, err, tc.want)
		}
		if entries, _ := os.ReadDir(out); len(entries) != 0 {
			t.Errorf("run(%q) wrote %d files", tc.args, len(entries))
		}
	}
}

func TestFlagName(t *testing.T) {
	for arg, want := range map[string]string{"-seed": "seed", "--seed": "seed", "--seed=5": "seed", "-json=false": "json", "5": "", "-": "", "--": ""} {
		got, ok := flagName(arg)
		if got != want || ok != (want != "") {
			t.Errorf("flagName(%q) = %q %v, want %q", arg, got, ok, want)
		}
	}
}

func TestCount(t *testing.T) {
	for n, want := range map[int]string{10_000: "10 thousand", 1_000_000: "1 million", 1_500_000: "1,500,000", 20: "20", 2_000_000: "2 million"} {
		if got := count(n); got != want {
			t.Errorf("count(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestRun builds approvald and runs two small pairs end to end on SQLite: the runs must
// alternate, the flags after -- follow the defaults, the table must have a row per step and
// every run's JSON must be kept.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds approvald")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "approvald")
	build := exec.Command("go", "build", "-o", bin, "../../cmd/approvald")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out := filepath.Join(dir, "runs")
	var stdout, stderr bytes.Buffer
	err := run([]string{"-approvald", bin, "-pairs", "2", "-sizes", "20,40", "-out", out, "--",
		"--scenarios", "get,list", "--clients", "1,2", "--duration", "100ms", "--warmup", "0s"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	table := stdout.String()
	for _, want := range []string{"20 against 40 approvals, 2 alternating pairs", "| select ", "| get ", "| list "} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	if n := strings.Count(table, "\n| "); n != 2+3*2 { // header, rule, three steps at two client counts
		t.Errorf("table has %d rows, want 8:\n%s", n, table)
	}
	// The flags after -- follow the defaults, so that they override them.
	if want := "bench flags: " + strings.Join(defaultBenchArgs, " ") + " --scenarios get,list"; !strings.Contains(table, want) {
		t.Errorf("table lacks %q:\n%s", want, table)
	}
	// The order flips from pair to pair: 20 then 40, then 40 then 20.
	var order []string
	for line := range strings.SplitSeq(stderr.String(), "\n") {
		if rest, ok := strings.CutPrefix(line, "flat: pair "); ok {
			order = append(order, rest[:strings.Index(rest, " (")])
		}
	}
	if want := []string{"1 of 2, seed 20", "1 of 2, seed 40", "2 of 2, seed 40", "2 of 2, seed 20"}; !slices.Equal(order, want) {
		t.Errorf("runs in the order %q, want %q", order, want)
	}
	files, _ := filepath.Glob(filepath.Join(out, "*.json"))
	if len(files) != 4 {
		t.Errorf("kept %d runs, want 4: %v", len(files), files)
	}
	if _, err := os.Stat(filepath.Join(out, "pair2-40.json")); err != nil {
		t.Error(err)
	}
}

func near(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(a[i]-b[i]) > 1e-9 {
			return false
		}
	}
	return true
}

func TestThousands(t *testing.T) {
	for x, want := range map[float64]string{0: "0", 999.4: "999", 999.6: "1,000", 12345: "12,345", 1234567: "1,234,567"} {
		if got := thousands(x); got != want {
			t.Errorf("thousands(%v) = %q, want %q", x, got, want)
		}
	}
}
