package loadtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Report is the outcome of a run, printed as a table or as JSON.
type Report struct {
	Version   string    `json:"version"` // of the binary that measured, set by the caller
	Store     string    `json:"store"`
	Server    string    `json:"server"`
	InProcess bool      `json:"in_process"`
	GoVersion string    `json:"go_version"`
	CPUs      int       `json:"cpus"`
	Clients   []int     `json:"clients"`
	Warmup    string    `json:"warmup"`
	Duration  string    `json:"duration"` // of each step's timed phase
	Started   time.Time `json:"started"`
	// PeakRSSBytes is the peak resident set size of this process at the end of the run.
	PeakRSSBytes int64    `json:"peak_rss_bytes"`
	Notes        []string `json:"notes"`
	Results      []Result `json:"results"`
}

// Result is one step: a scenario at a number of clients.
type Result struct {
	Store             string  `json:"store"`
	Scenario          string  `json:"scenario"`
	Clients           int     `json:"clients"`
	Requests          int     `json:"requests"`
	Errors            int     `json:"errors"`
	Seconds           float64 `json:"seconds"`
	RequestsPerSecond float64 `json:"requests_per_second"`
	P50Ms             float64 `json:"p50_ms"`
	P99Ms             float64 `json:"p99_ms"`
	P999Ms            float64 `json:"p999_ms"`
	// Baseline names the baseline the scenario is compared with; empty for a baseline.
	Baseline string `json:"baseline,omitempty"`
	// Ratio is the scenario's requests per second over its baseline's at the same clients in
	// the same run; absent for a baseline, or when the baseline did not run.
	Ratio *float64 `json:"ratio,omitempty"`
	// PeakRSSBytes is the process's peak resident set size so far, read after the step.
	PeakRSSBytes int64 `json:"peak_rss_bytes"`
	// Exhausted: the step ran out of prepared approvals before its duration was up.
	Exhausted bool `json:"exhausted,omitempty"`
}

func newResult(store, scenario string, clients int, m Measurement) Result {
	return Result{
		Store:             store,
		Scenario:          scenario,
		Clients:           clients,
		Requests:          m.Requests,
		Errors:            m.Errors,
		Seconds:           m.Elapsed.Seconds(),
		RequestsPerSecond: m.Rate(),
		P50Ms:             ms(m.Percentile(0.5)),
		P99Ms:             ms(m.Percentile(0.99)),
		P999Ms:            ms(m.Percentile(0.999)),
		Baseline:          BaselineOf(scenario),
		PeakRSSBytes:      PeakRSS(),
		Exhausted:         m.Exhausted,
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// finish computes the ratios, orders the results by scenario then clients, and adds what a
// reader of the figures must know.
func (r *Report) finish() {
	rate := make(map[string]float64) // by scenario and clients
	for _, res := range r.Results {
		rate[res.Scenario+"/"+strconv.Itoa(res.Clients)] = res.RequestsPerSecond
	}
	for i, res := range r.Results {
		base, ok := rate[res.Baseline+"/"+strconv.Itoa(res.Clients)]
		if res.Baseline == "" || !ok || base == 0 {
			continue
		}
		ratio := res.RequestsPerSecond / base
		r.Results[i].Ratio = &ratio
	}
	slices.SortStableFunc(r.Results, func(a, b Result) int {
		if c := slices.Index(Scenarios, a.Scenario) - slices.Index(Scenarios, b.Scenario); c != 0 {
			return c
		}
		return a.Clients - b.Clients
	})
	r.GoVersion = runtime.Version()
	r.CPUs = runtime.NumCPU()
	r.PeakRSSBytes = PeakRSS()
	r.Notes = append(r.Notes, "ratio: the scenario's requests/s over its baseline's (insert for the writes: create, replay, storm, decide, intake, execute; select for get) at the same clients, on the same database, in the same run")
	if r.InProcess {
		r.Notes = append(r.Notes, "peak RSS: VmHWM of this process, which holds both the server and the load generator")
	} else {
		r.Notes = append(r.Notes, "peak RSS: VmHWM of the load generator only; the server runs in another process")
	}
	for _, res := range r.Results {
		if res.Exhausted {
			r.Notes = append(r.Notes, fmt.Sprintf("%s at %d clients ran out of prepared approvals after %.2fs and was measured over that time", res.Scenario, res.Clients, res.Seconds))
		}
	}
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// WriteTable writes the report as a Markdown table, with a header line saying what ran where
// and the notes after it.
func (r *Report) WriteTable(w io.Writer) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "approvald bench: %s, server %s, %s warm-up then %s per step, %s, %d CPUs, %s, started %s\n\n",
		r.Store, r.Server, r.Warmup, r.Duration, r.Version, r.CPUs, r.GoVersion, r.Started.Format(time.RFC3339))
	rows := [][]string{{"store", "scenario", "clients", "requests", "req/s", "p50 ms", "p99 ms", "p99.9 ms", "errors", "vs baseline", "peak RSS MiB"}}
	for _, res := range r.Results {
		ratio := ""
		if res.Ratio != nil {
			ratio = fmt.Sprintf("%.2fx %s", *res.Ratio, res.Baseline)
		} else if res.Baseline != "" {
			ratio = "(no " + res.Baseline + ")"
		}
		rows = append(rows, []string{
			res.Store, res.Scenario, strconv.Itoa(res.Clients), strconv.Itoa(res.Requests),
			fmt.Sprintf("%.1f", res.RequestsPerSecond),
			fmt.Sprintf("%.2f", res.P50Ms), fmt.Sprintf("%.2f", res.P99Ms), fmt.Sprintf("%.2f", res.P999Ms),
			strconv.Itoa(res.Errors), ratio, fmt.Sprintf("%.1f", float64(res.PeakRSSBytes)/(1<<20)),
		})
	}
	writeMarkdown(&b, rows, 2)
	b.WriteString("\n")
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	_, err := w.Write(b.Bytes())
	return err
}

// writeMarkdown writes rows as a Markdown table whose first row is the header, padded so that
// it also reads as a table in a terminal. Columns from firstRight on are numbers, aligned
// right.
func writeMarkdown(w io.Writer, rows [][]string, firstRight int) {
	widths := make([]int, len(rows[0]))
	for _, row := range rows {
		for i, cell := range row {
			widths[i] = max(widths[i], len(cell), 3)
		}
	}
	line := func(cells []string) {
		for i, cell := range cells {
			pad := strings.Repeat(" ", widths[i]-len(cell))
			if i >= firstRight {
				fmt.Fprintf(w, "| %s%s ", pad, cell)
			} else {
				fmt.Fprintf(w, "| %s%s ", cell, pad)
			}
		}
		fmt.Fprintln(w, "|")
	}
	line(rows[0])
	rule := make([]string, len(widths))
	for i, n := range widths {
		if i >= firstRight {
			rule[i] = strings.Repeat("-", n-1) + ":"
		} else {
			rule[i] = strings.Repeat("-", n)
		}
	}
	line(rule)
	for _, row := range rows[1:] {
		line(row)
	}
}

// PeakRSS returns the peak resident set size of this process in bytes (VmHWM in
// /proc/self/status), or 0 where the kernel does not report it.
func PeakRSS() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:")
		if !ok {
			continue
		}
		fields := strings.Fields(rest) // "12345 kB"
		if len(fields) != 2 || fields[1] != "kB" {
			return 0
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0
		}
		return kb * 1024
	}
	return 0
}
