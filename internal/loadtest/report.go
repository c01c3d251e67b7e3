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
	PeakRSSBytes int64 `json:"peak_rss_bytes"`
	// ServerPID is the server's process when it ran apart from the load (--server-process);
	// each result then has the server's own peak RSS.
	ServerPID int `json:"server_pid,omitempty"`
	// LongPolls is how many long-polls were held open on the server through the run.
	LongPolls int      `json:"long_polls,omitempty"`
	Notes     []string `json:"notes"`
	Results   []Result `json:"results"`
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
	// ServerPeakRSSBytes is the server process's peak resident set size so far, read after
	// the step, when it runs as a process of its own.
	ServerPeakRSSBytes int64 `json:"server_peak_rss_bytes,omitempty"`
	// Exhausted: the step ran out of prepared approvals before its duration was up.
	Exhausted bool `json:"exhausted,omitempty"`
	// InboxWaiting, for intake, is how many stored events were still waiting to be applied
	// when the step ended (the server's approvald_inbox_events{status="pending"}): whether
	// the inbox worker kept up with the deliveries.
	InboxWaiting *int `json:"inbox_waiting,omitempty"`
	// Checkpoints, on PostgreSQL, is how many checkpoints the server was asked for during the
	// step (its WAL outgrew max_wal_size): a step that met one ran slower for it.
	Checkpoints *int `json:"checkpoints_requested,omitempty"`
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
	if r.LongPolls > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d long-polls were held open on the server through every step", r.LongPolls))
	}
	r.Notes = append(r.Notes, "ratio: the scenario's requests/s over its baseline's (insert for the writes: create, create-policy, replay, storm, decide, decide-policy, intake, execute; select for get, list, list-deep) at the same clients, on the same database, in the same run")
	switch {
	case r.ServerPID != 0:
		r.Notes = append(r.Notes, fmt.Sprintf("server RSS: VmHWM of the server process (pid %d) alone, read after each step; peak RSS: the load generator's", r.ServerPID))
	case r.InProcess:
		r.Notes = append(r.Notes, "peak RSS: VmHWM of this process, which holds both the server and the load generator")
	default:
		r.Notes = append(r.Notes, "peak RSS: VmHWM of the load generator only; the server runs in another process")
	}
	var waiting []string
	for _, res := range r.Results {
		if res.InboxWaiting != nil {
			waiting = append(waiting, fmt.Sprintf("%d at %d clients", *res.InboxWaiting, res.Clients))
		}
	}
	if len(waiting) > 0 {
		r.Notes = append(r.Notes, "intake: events stored but not yet applied by the inbox worker when the step ended: "+strings.Join(waiting, ", "))
	}
	var checkpoints []string
	measured := false
	for _, res := range r.Results {
		if res.Checkpoints != nil {
			measured = true
			if *res.Checkpoints > 0 {
				checkpoints = append(checkpoints, fmt.Sprintf("%s at %d clients %d", res.Scenario, res.Clients, *res.Checkpoints))
			}
		}
	}
	switch {
	case len(checkpoints) > 0:
		r.Notes = append(r.Notes, "checkpoints PostgreSQL was asked for during a step (its WAL outgrew max_wal_size), which slow the step down: "+strings.Join(checkpoints, ", "))
	case measured:
		r.Notes = append(r.Notes, "checkpoints PostgreSQL was asked for during the steps: none")
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
	if r.ServerPID != 0 {
		rows[0] = append(rows[0], "server RSS MiB")
	}
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
		if r.ServerPID != 0 {
			rows[len(rows)-1] = append(rows[len(rows)-1], fmt.Sprintf("%.1f", float64(res.ServerPeakRSSBytes)/(1<<20)))
		}
	}
	WriteMarkdown(&b, rows, 2)
	b.WriteString("\n")
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	_, err := w.Write(b.Bytes())
	return err
}

// WriteMarkdown writes rows as a Markdown table whose first row is the header, padded so that
// it also reads as a table in a terminal. Columns from firstRight on are numbers, aligned
// right.
func WriteMarkdown(w io.Writer, rows [][]string, firstRight int) {
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
	n, _ := vmHWM("/proc/self/status")
	return n
}

// ProcessPeakRSS returns the peak resident set size of process pid in bytes (VmHWM in
// /proc/PID/status).
func ProcessPeakRSS(pid int) (int64, error) {
	return vmHWM("/proc/" + strconv.Itoa(pid) + "/status")
}

func vmHWM(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
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
			return 0, fmt.Errorf("%s: VmHWM:%s", path, rest)
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: VmHWM:%s", path, rest)
		}
		return kb * 1024, nil
	}
	return 0, fmt.Errorf("%s: no VmHWM", path)
}
