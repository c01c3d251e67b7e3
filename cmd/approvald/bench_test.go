package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/approvald/approval/internal/loadtest"
	"github.com/approvald/approval/internal/testdb"
)

// benchArgs keeps the tests short: what is checked is that every scenario runs and
// succeeds, never how fast.
var benchArgs = []string{"--duration", "100ms", "--warmup", "20ms", "--clients", "1,2", "--pool", "16"}

// TestBench runs bench in process on a fresh database of each store, once printing the
// table (at 1 and 2 clients) and once the JSON (at 1): every scenario and baseline, each with
// requests and no errors, and the database removed at the end.
func TestBench(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Run("table", func(t *testing.T) {
			t.Parallel()
			args, removed := benchDatabase(t, kind)
			stdout, stderr := runBench(t, args...)
			rows := tableRows(t, stdout)
			for _, scenario := range loadtest.Scenarios {
				for _, clients := range []string{"1", "2"} {
					row, ok := rows[scenario+"/"+clients]
					if !ok {
						t.Errorf("no row for %s at %s clients in\n%s", scenario, clients, stdout)
						continue
					}
					if row.requests <= 0 || row.errors != 0 {
						t.Errorf("%s at %s clients: got %d requests and %d errors, want some and none; stderr:\n%s", scenario, clients, row.requests, row.errors, stderr)
					}
					if base := loadtest.BaselineOf(scenario); base != "" && !strings.HasSuffix(row.ratio, "x "+base) {
						t.Errorf("%s at %s clients: got ratio %q, want one to %s", scenario, clients, row.ratio, base)
					}
				}
			}
			if len(rows) != 2*len(loadtest.Scenarios) {
				t.Errorf("got %d rows, want %d:\n%s", len(rows), 2*len(loadtest.Scenarios), stdout)
			}
			removed(stderr)
		})
		t.Run("json", func(t *testing.T) {
			t.Parallel()
			args, removed := benchDatabase(t, kind)
			// One client count: the table's run already covers two, and this one checks the
			// JSON's shape (a flag given twice takes its last value).
			stdout, stderr := runBench(t, append(args, "--json", "--clients", "1")...)
			var report loadtest.Report
			if err := json.Unmarshal([]byte(stdout), &report); err != nil {
				t.Fatalf("decode the JSON: %v\n%s", err, stdout)
			}
			if report.Store != kind || !report.InProcess || report.PeakRSSBytes <= 0 {
				t.Errorf("got store %q, in process %v, peak RSS %d; want %s, true, > 0", report.Store, report.InProcess, report.PeakRSSBytes, kind)
			}
			var got []string
			for _, res := range report.Results {
				got = append(got, res.Scenario+"/"+strconv.Itoa(res.Clients))
				if res.Requests <= 0 || res.Errors != 0 || res.RequestsPerSecond <= 0 {
					t.Errorf("%s at %d clients: got %d requests, %d errors, %.1f/s; want some, none, > 0; stderr:\n%s",
						res.Scenario, res.Clients, res.Requests, res.Errors, res.RequestsPerSecond, stderr)
				}
				if (res.Ratio != nil) != (loadtest.BaselineOf(res.Scenario) != "") {
					t.Errorf("%s at %d clients: got ratio %v, want one exactly when the scenario has a baseline", res.Scenario, res.Clients, res.Ratio)
				}
				if (res.InboxWaiting != nil) != (res.Scenario == loadtest.Intake) || (res.InboxWaiting != nil && *res.InboxWaiting < 0) {
					t.Errorf("%s at %d clients: got inbox waiting %v, want a count exactly for intake", res.Scenario, res.Clients, res.InboxWaiting)
				}
				if (res.Checkpoints != nil) != (kind == testdb.Postgres) || (res.Checkpoints != nil && *res.Checkpoints < 0) {
					t.Errorf("%s at %d clients: got checkpoints %v, want a count exactly on PostgreSQL", res.Scenario, res.Clients, res.Checkpoints)
				}
			}
			var want []string
			for _, scenario := range loadtest.Scenarios {
				want = append(want, scenario+"/1")
			}
			if !slices.Equal(got, want) {
				t.Errorf("got results %v, want %v", got, want)
			}
			removed(stderr)
		})
	})
}

// TestBench_Server runs bench against a server already running, with the baselines on its
// database.
func TestBench_Server(t *testing.T) {
	t.Parallel()
	dsn := testdb.DSN(t, testdb.SQLite)
	srv := startServe(t, dsn)
	requester := createToken(t, dsn, "ci-bot", "requester")
	alice := createToken(t, dsn, "alice", "approver")

	stdout, stderr := runBench(t, append(benchArgs, "--json", "--server", "http://"+srv.addr, "--database-url", dsn,
		"--token", requester, "--approver", "alice", "--approver-token", alice, "--scenarios", "create,decide")...)
	var report loadtest.Report
	if err := json.Unmarshal([]byte(stdout), &report); err != nil {
		t.Fatalf("decode the JSON: %v\n%s", err, stdout)
	}
	var got []string
	for _, res := range report.Results {
		got = append(got, res.Scenario+"/"+strconv.Itoa(res.Clients))
		if res.Requests <= 0 || res.Errors != 0 {
			t.Errorf("%s at %d clients: got %d requests and %d errors; stderr:\n%s", res.Scenario, res.Clients, res.Requests, res.Errors, stderr)
		}
	}
	if want := []string{"insert/1", "insert/2", "create/1", "create/2", "decide/1", "decide/2"}; !slices.Equal(got, want) {
		t.Errorf("got results %v, want %v", got, want)
	}
	if report.InProcess {
		t.Error("got in_process true against --server")
	}
}

// TestBench_UsageErrors: refusals before anything runs exit 2.
func TestBench_UsageErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--scenarios", "create,delete"},
		{"--clients", "1,0"},
		{"--duration", "0s"},
		{"--token", "apv_x"},
		{"--server", "http://192.0.2.1:8080", "--token", "apv_x"},
		{"--server", "http://127.0.0.1:8080"},
		{"--server", "http://127.0.0.1:8080", "--token", "apv_x", "--scenarios", "decide"},
		{"--server", "http://127.0.0.1:8080", "--token", "apv_x", "--scenarios", "intake"},
		{"--server", "http://127.0.0.1:8080", "--token", "apv_x", "--approver", "a", "--approver-token", "apv_y", "--scenarios", "execute"},
		{"--source", "bench"},
		{"--server", "http://127.0.0.1:8080", "--token", "apv_x", "--scenarios", "select"},
		{"--config", remoteActionConfig(t)},
	} {
		var stdout, stderr bytes.Buffer
		if code := NewMain(&stdout, &stderr).Run(context.Background(), append([]string{"bench"}, args...)); code != exitUsage {
			t.Errorf("bench %v: got exit %d, want %d; stderr %s", args, code, exitUsage, stderr.String())
		}
	}
}

// remoteActionConfig writes a configuration whose action's target is off the machine.
func remoteActionConfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "approvald.yaml")
	if err := os.WriteFile(path, []byte("actions:\n  - name: deploy\n    url: http://192.0.2.1:9000/deploy\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// benchDatabase returns the flags that name the database of an in-process bench, and a check
// that it is gone afterwards, given bench's stderr: on SQLite a new file in the test's
// directory, on PostgreSQL the server of the tests, where bench makes and drops a schema.
func benchDatabase(t *testing.T, kind string) (args []string, removed func(stderr string)) {
	t.Helper()
	if kind == testdb.SQLite {
		path := filepath.Join(t.TempDir(), "bench.db")
		return append(slices.Clone(benchArgs), "--database-url", "file:"+path), func(string) {
			t.Helper()
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s: got %v, want the database removed", path, err)
			}
		}
	}
	base := testdb.PostgresURL(t)
	// With a pool parameter, which the store reads and a plain connection must leave out.
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	return append(slices.Clone(benchArgs), "--database-url", base+sep+"pool_max_conns=8"), func(stderr string) {
		t.Helper()
		m := regexp.MustCompile(`postgres schema (bench_[0-9a-f]+)`).FindStringSubmatch(stderr)
		if m == nil {
			t.Fatalf("no schema named on stderr:\n%s", stderr)
		}
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		defer conn.Close(ctx)
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, m[1]).Scan(&n); err != nil {
			t.Fatalf("look for schema %s: %v", m[1], err)
		}
		if n != 0 {
			t.Errorf("schema %s: still there after bench", m[1])
		}
	}
}

// runBench runs bench in process and returns its output; it fails the test unless bench
// exits 0.
func runBench(t *testing.T, args ...string) (stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := NewMain(&out, &errOut).Run(context.Background(), append([]string{"bench"}, args...)); code != exitOK {
		t.Fatalf("bench %v: exit %d, stderr:\n%s", args, code, errOut.String())
	}
	return out.String(), errOut.String()
}

// benchRow is a row of bench's table.
type benchRow struct {
	requests, errors int
	ratio            string
}

// tableRows reads bench's Markdown table, by scenario and clients ("create/8").
func tableRows(t *testing.T, table string) map[string]benchRow {
	t.Helper()
	rows := make(map[string]benchRow)
	for line := range strings.Lines(table) {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| store ") {
			continue
		}
		var cells []string
		for c := range strings.SplitSeq(strings.Trim(strings.TrimSpace(line), "|"), "|") {
			cells = append(cells, strings.TrimSpace(c))
		}
		if len(cells) != 11 {
			t.Fatalf("table row %q: got %d cells, want 11", line, len(cells))
		}
		if strings.Trim(cells[0], "-") == "" { // the rule under the header
			continue
		}
		requests, err1 := strconv.Atoi(cells[3])
		errs, err2 := strconv.Atoi(cells[8])
		if err1 != nil || err2 != nil {
			t.Fatalf("table row %q: requests %q, errors %q", line, cells[3], cells[8])
		}
		rows[cells[1]+"/"+cells[2]] = benchRow{requests: requests, errors: errs, ratio: cells[9]}
	}
	return rows
}

// TestBench_ServerProcess runs bench with the server as a child process (the binary built
// for the end-to-end tests) on a seeded database, with long-polls held open: each step
// reports the server's own peak RSS, the long-polls are counted on the server before the
// first step, and the child is gone at the end.
func TestBench_ServerProcess(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		args, removed := benchDatabase(t, kind)
		stdout, stderr := runBench(t, append(args, "--json", "--server-process", "--server-binary", binary,
			"--seed", "300", "--long-polls", "20", "--scenarios", "get,list,list-deep")...)
		var report loadtest.Report
		if err := json.Unmarshal([]byte(stdout), &report); err != nil {
			t.Fatalf("decode the JSON: %v\n%s", err, stdout)
		}
		if report.ServerPID <= 0 || report.InProcess || report.LongPolls != 20 {
			t.Errorf("got server pid %d, in process %v, long-polls %d; want a pid, false, 20", report.ServerPID, report.InProcess, report.LongPolls)
		}
		if !strings.Contains(stderr, "20 long-polls waiting on the server") || !strings.Contains(stderr, "seed: 300 approvals") {
			t.Errorf("stderr does not tell of the seed and the long-polls:\n%s", stderr)
		}
		if len(report.Results) != 8 {
			t.Errorf("got %d results, want 8 (select, get, list, list-deep at 1 and 2 clients)", len(report.Results))
		}
		for _, res := range report.Results {
			if res.Requests <= 0 || res.Errors != 0 || res.ServerPeakRSSBytes <= 0 {
				t.Errorf("%s at %d clients: got %d requests, %d errors, server RSS %d; want some, none, > 0; stderr:\n%s",
					res.Scenario, res.Clients, res.Requests, res.Errors, res.ServerPeakRSSBytes, stderr)
			}
		}
		// The child was stopped: its pid is gone (or reused by an unrelated process).
		if _, err := loadtest.ProcessPeakRSS(report.ServerPID); err == nil {
			if cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(report.ServerPID) + "/cmdline"); bytes.Contains(cmdline, []byte(binary)) {
				t.Errorf("server process %d still runs after bench", report.ServerPID)
			}
		}
		removed(stderr)
	})
}
