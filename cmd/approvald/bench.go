package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.yaml.in/yaml/v3"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/loadtest"
	"github.com/approvald/approval/policy"
)

// Defaults of bench's flags.
const (
	defaultBenchClients  = "1,8,32,64"
	defaultBenchDuration = 5 * time.Second
	defaultBenchWarmup   = time.Second
	// maxBenchClients bounds --clients: every client is a goroutine and a connection.
	maxBenchClients = 1024
	// maxBenchLongPolls bounds --long-polls, each a goroutine and a connection.
	maxBenchLongPolls = 10000
	// maxBenchSeed bounds --seed.
	maxBenchSeed = 100_000_000
)

// Subjects of the tokens bench makes on its fresh database.
const (
	benchRequester = "bench-requester"
	benchApprover  = "bench-alice" // decides the decide scenario
	benchOther     = "bench-bob"   // the second approver listed
	benchAdmin     = "bench-admin"
)

// benchSeeder is the principal bench makes its tokens as: it owns the fresh database it
// made, as the token commands own theirs (tokenCommand).
var benchSeeder = approval.Principal{Subject: "approvald bench", Role: approval.RoleAdmin}

// What bench adds to the in-process server's configuration for intake and execute.
const (
	benchSource = "bench"      // the webhook source intake delivers to
	benchAction = "bench-exec" // the action whose target execute waits on
	// benchPolicyAction is the action of create-policy and decide-policy, under a policy of
	// two rules: one vote of benchSRE, one of benchSecurity.
	benchPolicyAction = "bench-policy"
	benchSRE          = "bench-sre"      // bench-alice and bench-carol
	benchSecurity     = "bench-security" // bench-bob and bench-dave
)

// withBenchPolicy returns cfg with the policy of create-policy and decide-policy ahead of
// cfg's own, and its two groups; with no policy in cfg, every other action keeps letting
// the request name its approvers, as the other scenarios do.
func withBenchPolicy(cfg Config) Config {
	groups := map[string]policy.Group{
		benchSRE:      {Members: []string{benchApprover, "bench-carol"}},
		benchSecurity: {Members: []string{benchOther, "bench-dave"}},
	}
	for name, g := range cfg.Groups {
		groups[name] = g
	}
	policies := []policy.Policy{{
		Name:  "bench-two-rules",
		Match: policy.Match{Action: benchPolicyAction, When: `context.environment == "prod"`},
		Rules: []policy.Rule{{Group: benchSRE, Approvals: 1}, {Group: benchSecurity, Approvals: 1}},
	}}
	if len(cfg.Policies) == 0 {
		policies = append(policies, policy.Policy{Name: "bench-anything-else", Match: policy.Match{Action: "*"}, Approvers: policy.FromRequest})
	}
	cfg.Groups, cfg.Policies = groups, append(policies, cfg.Policies...)
	return cfg
}

// policyScenario reports whether name runs under the bench's policy.
func policyScenario(name string) bool {
	return name == loadtest.CreatePolicy || name == loadtest.DecidePolicy
}

var _ command = (*BenchCommand)(nil)

// BenchCommand measures approvald under concurrent load over real HTTP, each scenario beside
// a baseline on the same database in the same run (see internal/loadtest). By default it
// makes a fresh database, starts the server in process on loopback with serve's wiring, and
// removes the database at the end; with --server it loads a server already running on this
// machine.
type BenchCommand struct {
	stdout io.Writer // the table, or the JSON
	stderr io.Writer // progress lines, and the server's warnings and errors

	config        Config // the server's settings; bench never uses its database_url
	databaseURL   string // --database-url as given
	serverURL     string
	token         string
	approver      string
	approverToken string
	scenarios     []string
	clients       []int
	warmup        time.Duration
	duration      time.Duration
	pool          int
	json          bool
	keep          bool
	source        loadtest.Source // with --server: intake's source
	cpuProfile    string
	blockProfile  string
	mutexProfile  string
	seed          int    // --seed: approvals written in bulk before the scenarios
	longPolls     int    // --long-polls
	serverProcess bool   // --server-process
	serverBinary  string // --server-binary

	// closers release what Run made, in reverse order, in Close.
	closers []func() error
}

// NewBenchCommand returns a BenchCommand writing to the given streams.
func NewBenchCommand(stdout, stderr io.Writer) *BenchCommand {
	// The in-process server logs to stderr from its own goroutines while the load writes its
	// progress there: one lock keeps the lines whole whatever stderr is.
	return &BenchCommand{stdout: stdout, stderr: &lockedWriter{w: stderr}}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// ParseFlags parses the flags and loads the configuration.
func (c *BenchCommand) ParseFlags(ctx context.Context, args []string) error {
	fs := newFlagSet("approvald bench", benchUsage, c.stderr)
	var cf configFlags
	cf.register(fs)
	// Not serve's database: bench never writes into one it did not make.
	fs.Lookup("database-url").Usage = "database `URL`: postgres://... makes a fresh schema there, file:PATH a new file (default: SQLite in a temporary directory); with --server, the server's database, for the baselines"
	fs.StringVar(&c.serverURL, "server", "", "load the server already running at `URL` (loopback only) instead of one started in process")
	fs.StringVar(&c.token, "token", "", "with --server: a requester's `TOKEN`, which creates every approval")
	fs.StringVar(&c.approver, "approver", "", "with --server: the `NAME` of the approver who decides in the decide scenario")
	fs.StringVar(&c.approverToken, "approver-token", "", "with --server: that approver's `TOKEN`")
	scenarios := fs.String("scenarios", "", "comma-separated `LIST` of "+strings.Join(loadtest.Scenarios, ", ")+" (default all; a scenario's baseline always runs with it)")
	clients := fs.String("clients", defaultBenchClients, "comma-separated `LIST` of concurrent client counts to sweep")
	fs.DurationVar(&c.duration, "duration", defaultBenchDuration, "timed `DURATION` of each step")
	fs.DurationVar(&c.warmup, "warmup", defaultBenchWarmup, "unmeasured `DURATION` before each step's timed phase")
	fs.IntVar(&c.pool, "pool", loadtest.DefaultPool, "`N` approvals that replay and get cycle over (and rows that select does)")
	fs.BoolVar(&c.json, "json", false, "print the results as JSON instead of a table")
	fs.BoolVar(&c.keep, "keep", false, "keep the database (and the baseline table) at the end")
	fs.StringVar(&c.source.Name, "source", "", "with --server: the `NAME` of a standard-webhooks source, which intake delivers to")
	fs.StringVar(&c.source.Secret, "source-secret", "", "with --server: that source's whsec_ `SECRET`")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run (server and load) to `FILE`")
	fs.StringVar(&c.blockProfile, "blockprofile", "", "write a blocking profile of the whole run to `FILE`")
	fs.StringVar(&c.mutexProfile, "mutexprofile", "", "write a mutex contention profile of the whole run to `FILE`")
	fs.IntVar(&c.seed, "seed", 0, "fill the fresh database with `N` approvals (and their approvers, decisions, events, executions and inbox events) in bulk before the scenarios")
	fs.IntVar(&c.longPolls, "long-polls", 0, "hold `N` long-polls open on the server through every step")
	fs.BoolVar(&c.serverProcess, "server-process", false, "run the server as a child process (approvald serve) rather than in this one, and report its own peak RSS after each step")
	fs.StringVar(&c.serverBinary, "server-binary", "", "with --server-process: the approvald `PATH` to run (default: this binary)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if c.seed < 0 || c.seed > maxBenchSeed {
		return fmt.Errorf("--seed: must be from 0 to %d", maxBenchSeed)
	}
	if c.longPolls < 0 || c.longPolls > maxBenchLongPolls {
		return fmt.Errorf("--long-polls: must be from 0 to %d", maxBenchLongPolls)
	}
	if c.serverBinary != "" && !c.serverProcess {
		return errors.New("--server-binary goes with --server-process")
	}
	cfg, err := cf.load()
	if err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	// The in-process runner calls the targets of approved actions: keep that traffic on this
	// machine too.
	for i, a := range cfg.Actions {
		for _, raw := range []string{a.URL, a.LookupURL} {
			if u, err := url.Parse(raw); raw != "" && (err != nil || !loadtest.LoopbackHost(u.Hostname())) {
				return fmt.Errorf("actions[%d]: bench calls targets on loopback only, not %q", i, raw)
			}
		}
	}
	c.config, c.databaseURL = cfg, cf.databaseURL
	if c.databaseURL != "" {
		if _, err := ParseDatabaseURL(c.databaseURL); err != nil {
			return fmt.Errorf("--database-url: %w", err)
		}
	}

	if c.clients, err = parseClients(*clients); err != nil {
		return fmt.Errorf("--clients: %w", err)
	}
	if c.duration <= 0 {
		return fmt.Errorf("--duration: %w", ErrNotPositive)
	}
	if c.warmup < 0 {
		return fmt.Errorf("--warmup: %w", ErrNegative)
	}
	if c.pool <= 0 {
		return fmt.Errorf("--pool: %w", ErrNotPositive)
	}
	// Baselines need the database: in process bench always has it, against --server only
	// when --database-url names the server's.
	withBaselines := c.serverURL == "" || c.databaseURL != ""
	if c.scenarios, err = parseScenarios(*scenarios, withBaselines); err != nil {
		return fmt.Errorf("--scenarios: %w", err)
	}
	if *scenarios == "" && c.serverURL != "" {
		// By default, against --server, what it can run: execute needs bench's own target,
		// intake a source.
		c.scenarios = slices.DeleteFunc(c.scenarios, func(name string) bool {
			return name == loadtest.Execute || name == loadtest.Intake && c.source.Name == "" || policyScenario(name)
		})
	}

	if c.serverURL != "" && (c.seed > 0 || c.serverProcess) {
		return errors.New("--seed and --server-process make their own database and server; they do not go with --server")
	}
	if c.serverURL == "" {
		if c.token != "" || c.approver != "" || c.approverToken != "" || c.source != (loadtest.Source{}) {
			return errors.New("--token, --approver, --approver-token, --source and --source-secret go with --server; in process bench makes its own tokens and source")
		}
		return nil
	}
	if err := loadtest.CheckLoopback(c.serverURL); err != nil {
		return fmt.Errorf("--server: %w", err)
	}
	if c.token == "" {
		return errors.New("--server needs --token, a requester's token")
	}
	if (slices.Contains(c.scenarios, loadtest.Decide) || slices.Contains(c.scenarios, loadtest.Execute)) && (c.approver == "" || c.approverToken == "") {
		return errors.New("the decide scenario against --server needs --approver and --approver-token")
	}
	if slices.Contains(c.scenarios, loadtest.Intake) && (c.source.Name == "" || c.source.Secret == "") {
		return errors.New("the intake scenario against --server needs --source and --source-secret")
	}
	if slices.ContainsFunc(c.scenarios, policyScenario) {
		return errors.New("create-policy and decide-policy run in process only: they need the bench's policy; leave them out with --scenarios")
	}
	if slices.Contains(c.scenarios, loadtest.Execute) {
		return errors.New("the execute scenario runs in process only: it needs its own target; leave it out with --scenarios")
	}
	return nil
}

// Run prepares the database and the server, runs the scenarios and prints the results.
func (c *BenchCommand) Run(ctx context.Context) error {
	run := loadtest.Config{
		Scenarios: c.scenarios,
		Clients:   c.clients,
		Warmup:    c.warmup,
		Duration:  c.duration,
		Pool:      c.pool,
		LongPolls: c.longPolls,
		Progress:  c.stderr,
	}
	var notes []string
	var report *loadtest.Report
	stopProfiles, err := c.startProfiles()
	if err != nil {
		return err
	}
	defer func() {
		if perr := stopProfiles(); perr != nil {
			fmt.Fprintf(c.stderr, "bench: %v\n", perr)
		}
	}()
	if c.serverURL == "" {
		report, err = c.runInProcess(ctx, run)
	} else {
		report, err = c.runAgainstServer(ctx, run)
		if c.databaseURL == "" {
			notes = append(notes, "no baselines: pass --database-url with the server's database to run insert and select beside the scenarios")
		}
	}
	if err != nil {
		return err
	}
	info, _ := debug.ReadBuildInfo()
	report.Version = "approvald " + version(info)
	report.Notes = append(report.Notes, notes...)
	if c.json {
		return report.WriteJSON(c.stdout)
	}
	return report.WriteTable(c.stdout)
}

// runInProcess makes a fresh database, starts the server on it in this process with serve's
// wiring, and runs the load against it.
func (c *BenchCommand) runInProcess(ctx context.Context, run loadtest.Config) (*loadtest.Report, error) {
	dsn, kind, err := c.freshDatabase(ctx)
	if err != nil {
		return nil, err
	}
	// The source intake delivers to, and the action execute approves, whose target is ours.
	source := loadtest.Source{Name: benchSource, Secret: "whsec_" + base64.StdEncoding.EncodeToString(randomBytes(24))}
	target := loadtest.NewTarget()
	targetLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for the target: %w", err)
	}
	targetSrv := &http.Server{Handler: target, ReadHeaderTimeout: 10 * time.Second}
	go targetSrv.Serve(targetLn)
	c.closers = append(c.closers, targetSrv.Close)
	cfg := c.config
	cfg.Sources = append(slices.Clone(cfg.Sources), SourceConfig{Name: benchSource, Scheme: "standard-webhooks", Secrets: []string{source.Secret}, Tolerance: DefaultSourceTolerance,
		Handlers: []string{approval.TypeApprovalDecision}})
	cfg.Actions = append(slices.Clone(cfg.Actions), ActionConfig{
		Name: benchAction, URL: "http://" + targetLn.Addr().String() + "/effect", Idempotent: true,
		Secret: "whsec_" + base64.StdEncoding.EncodeToString(randomBytes(24)),
	})
	if slices.ContainsFunc(run.Scenarios, policyScenario) {
		cfg = withBenchPolicy(cfg)
		run.PolicyAction = benchPolicyAction
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("bench's source, action and policy: %w", err)
	}
	run.Source, run.Target, run.ExecAction = &source, target, benchAction

	// Warnings and errors only: an access log line per request would bury the progress.
	logger := slog.New(slog.NewJSONHandler(c.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// serve's collector settings, which then hold for the load generator in this process too.
	tuneCollector(logger, os.LookupEnv)
	svc := newService(cfg, logger, nil)
	st, err := openStore(ctx, dsn, svc.logger)
	if err != nil {
		return nil, err
	}
	c.closers = append(c.closers, st.Close)
	tokens := make(map[string]string)
	for _, t := range []struct {
		subject string
		role    approval.Role
	}{
		{benchRequester, approval.RoleRequester},
		{benchApprover, approval.RoleApprover},
		{benchOther, approval.RoleApprover},
		{benchAdmin, approval.RoleAdmin},
	} {
		secret, _, err := (&approval.Service{Store: st}).CreateToken(ctx, benchSeeder, approval.TokenSpec{Subject: t.subject, Role: t.role})
		if err != nil {
			return nil, fmt.Errorf("create token %s: %w", t.subject, err)
		}
		tokens[t.subject] = secret
	}
	if run.Rows, err = c.openRows(ctx, kind, dsn); err != nil {
		return nil, err
	}
	run.Checkpoints = checkpointsOf(run.Rows)
	if c.seed > 0 {
		seed := loadtest.Seed{
			N: c.seed, Now: approval.Now(), InboxRetain: cfg.Retention.InboxIDs,
			Requesters: []string{benchRequester}, Approvers: []string{benchApprover, benchOther},
		}
		// The bench's users are among many: a requester's own listing, or an approver's, is
		// a tenth of the approvals.
		for i := 1; i < 10; i++ {
			seed.Requesters = append(seed.Requesters, fmt.Sprintf("seed-requester-%d", i))
		}
		for i := 2; i < 20; i++ {
			seed.Approvers = append(seed.Approvers, fmt.Sprintf("seed-approver-%d", i))
		}
		if err := c.seedDatabase(ctx, kind, dsn, seed); err != nil {
			return nil, err
		}
		// Halfway down the seeded approvals, whatever else the run adds on top.
		run.DeepCursorAt = seed.Now.Add(-seedSpan / 2)
	}

	run.Requester = tokens[benchRequester]
	run.Lister = tokens[benchAdmin]
	run.Approver = loadtest.Approver{Name: benchApprover, Token: tokens[benchApprover]}
	run.OtherApprover, run.OtherApproverToken = benchOther, tokens[benchOther]
	run.Store = kind
	if c.serverProcess {
		base, pid, stop, err := c.startServerProcess(ctx, cfg, dsn)
		if err != nil {
			return nil, err
		}
		run.Server, run.ServerPID = fmt.Sprintf("approvald serve (pid %d) at %s", pid, base), pid
		report, runErr := c.load(ctx, base, run)
		if err := stop(); err != nil {
			runErr = errors.Join(runErr, fmt.Errorf("server: %w", err))
		}
		return report, runErr
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	serveCtx, stopServing := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- svc.serve(serveCtx, st, ln) }()
	base := "http://" + ln.Addr().String()

	run.Server, run.InProcess = "in process at "+base, true
	report, runErr := c.load(ctx, base, run)
	stopServing()
	if err := <-served; err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("server: %w", err))
	}
	return report, runErr
}

// seedSpan is how far back the seeded approvals go (loadtest.Seed's default).
const seedSpan = 90 * 24 * time.Hour

// seedDatabase writes the seed in bulk into the fresh, migrated database.
func (c *BenchCommand) seedDatabase(ctx context.Context, kind, dsn string, seed loadtest.Seed) error {
	seed.Span = seedSpan
	var err error
	if kind == databasePostgres {
		_, err = loadtest.SeedPostgres(ctx, dsn, seed, c.stderr)
	} else {
		_, err = loadtest.SeedSQLite(ctx, dsn, seed, c.stderr)
	}
	if err != nil {
		return fmt.Errorf("--seed: %w", err)
	}
	return nil
}

// startServerProcess starts approvald serve as a child process on the fresh database, with
// the bench's configuration (its source and action) in a file of its own, and returns its
// URL once it answers /readyz, and the function that stops it (SIGTERM, then SIGKILL after
// serverStopTimeout). The child's warnings and errors are copied to stderr; its access log is
// dropped.
func (c *BenchCommand) startServerProcess(ctx context.Context, cfg Config, dsn string) (base string, pid int, stop func() error, err error) {
	bin := c.serverBinary
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return "", 0, nil, fmt.Errorf("--server-process: find this binary: %w", err)
		}
	}
	dir, err := os.MkdirTemp("", "approvald-bench-server-")
	if err != nil {
		return "", 0, nil, fmt.Errorf("--server-process: %w", err)
	}
	c.closers = append(c.closers, func() error { return os.RemoveAll(dir) })
	// A free port: taken, then given back for the child. Another process could take it in
	// between; the child would then fail to listen, and bench says so.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", 0, nil, fmt.Errorf("--server-process: find a port: %w", err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg.DatabaseURL, cfg.Listen = dsn, addr
	file := filepath.Join(dir, "approvald.yaml")
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return "", 0, nil, fmt.Errorf("--server-process: write the configuration: %w", err)
	}
	if err := os.WriteFile(file, out, 0o600); err != nil {
		return "", 0, nil, fmt.Errorf("--server-process: %w", err)
	}
	cmd := exec.Command(bin, "serve", "--config", file, "--database-url", dsn, "--listen", addr)
	cmd.Stdout = io.Discard // the bootstrap admin token: bench has its own
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return "", 0, nil, fmt.Errorf("--server-process: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return "", 0, nil, fmt.Errorf("--server-process: start %s: %w", bin, err)
	}
	logged := make(chan struct{})
	go func() {
		defer close(logged)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if line := sc.Text(); !strings.Contains(line, `"level":"INFO"`) {
				fmt.Fprintln(c.stderr, "server:", line)
			}
		}
	}()
	exited := make(chan error, 1)
	go func() {
		<-logged // Wait must not run before the pipe is read to its end
		exited <- cmd.Wait()
	}()
	stop = func() error {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			return err
		case <-time.After(serverStopTimeout):
			cmd.Process.Kill()
			<-exited
			return fmt.Errorf("approvald serve did not stop within %s of SIGTERM; killed", serverStopTimeout)
		}
	}
	base = "http://" + addr
	if err := waitReady(ctx, base, exited); err != nil {
		stop()
		return "", 0, nil, fmt.Errorf("--server-process: %w", err)
	}
	fmt.Fprintf(c.stderr, "bench: server process %d (%s) ready at %s\n", cmd.Process.Pid, bin, base)
	return base, cmd.Process.Pid, stop, nil
}

// serverStopTimeout bounds the child server's graceful stop.
const serverStopTimeout = 30 * time.Second

// waitReady polls base/readyz until it answers 200, the process exits, or a minute passes.
func waitReady(ctx context.Context, base string, exited <-chan error) error {
	client := &http.Client{Timeout: 2 * time.Second}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(time.Minute)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-exited:
			return fmt.Errorf("approvald serve exited before it was ready: %v", err)
		case <-deadline:
			return errors.New("approvald serve not ready after a minute")
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// runAgainstServer runs the load against --server, with the baselines on --database-url when
// it is given.
func (c *BenchCommand) runAgainstServer(ctx context.Context, run loadtest.Config) (*loadtest.Report, error) {
	run.Store, run.Server = "server", c.serverURL
	if c.databaseURL != "" {
		kind, _ := ParseDatabaseURL(c.databaseURL)
		if kind == databaseSQLite {
			// The server's database: opening a missing file would make an empty one.
			if _, err := os.Stat(sqlitePath(c.databaseURL)); err != nil {
				return nil, fmt.Errorf("--database-url: the server's database: %w", err)
			}
		}
		rows, err := c.openRows(ctx, kind, c.databaseURL)
		if err != nil {
			return nil, err
		}
		run.Store, run.Rows = kind, rows
		run.Checkpoints = checkpointsOf(rows)
	}
	run.Requester = c.token
	if c.source.Name != "" {
		run.Source = &c.source
	}
	run.Approver = loadtest.Approver{Name: c.approver, Token: c.approverToken}
	run.OtherApprover = benchOther
	return c.load(ctx, c.serverURL, run)
}

// load runs the scenarios against the server at base.
func (c *BenchCommand) load(ctx context.Context, base string, run loadtest.Config) (*loadtest.Report, error) {
	// An idle connection per client, and some for the preparation of the pools.
	api, err := loadtest.NewClient(base, slices.Max(run.Clients)+8)
	if err != nil {
		return nil, err
	}
	defer api.Close()
	run.API = api
	fmt.Fprintf(c.stderr, "bench: %s, server %s, clients %v, %s warm-up and %s per step\n", run.Store, run.Server, run.Clients, run.Warmup, run.Duration)
	return loadtest.Run(ctx, run)
}

// freshDatabase makes the database the in-process server runs on and returns its URL and
// kind: SQLite in a new temporary directory by default, a new file at --database-url
// file:PATH, or a new schema on the PostgreSQL server --database-url names. Close removes it
// unless --keep.
func (c *BenchCommand) freshDatabase(ctx context.Context) (dsn, kind string, err error) {
	if c.databaseURL == "" {
		dir, err := os.MkdirTemp("", "approvald-bench-")
		if err != nil {
			return "", "", fmt.Errorf("make a temporary directory: %w", err)
		}
		c.cleanup("database directory "+dir, func() error { return os.RemoveAll(dir) })
		// The default database URL's pragmas: none beyond the store's own (synchronous FULL).
		return "file:" + filepath.Join(dir, "approvald.db"), databaseSQLite, nil
	}
	kind, _ = ParseDatabaseURL(c.databaseURL)
	if kind == databaseSQLite {
		path := sqlitePath(c.databaseURL)
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			return "", "", fmt.Errorf("--database-url: %s exists; bench makes a fresh database, name a new file", path)
		}
		c.cleanup("database "+path, func() error {
			var errs []error
			for _, suffix := range []string{"", "-wal", "-shm"} {
				if err := os.Remove(path + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
					errs = append(errs, err)
				}
			}
			return errors.Join(errs...)
		})
		return c.databaseURL, kind, nil
	}

	var b [6]byte
	rand.Read(b[:])
	schema := "bench_" + hex.EncodeToString(b[:])
	u, err := url.Parse(c.databaseURL)
	if err != nil {
		return "", "", fmt.Errorf("--database-url: %w", err)
	}
	conn, err := connectAdmin(ctx, c.databaseURL)
	if err != nil {
		return "", "", fmt.Errorf("connect to postgres: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return "", "", fmt.Errorf("create schema %s: %w", schema, err)
	}
	c.cleanup("schema "+schema, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := connectAdmin(ctx, c.databaseURL)
		if err != nil {
			return fmt.Errorf("connect to drop schema %s: %w", schema, err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			return fmt.Errorf("drop schema %s: %w", schema, err)
		}
		return nil
	})
	// Every statement of the store and of the baselines uses unqualified names.
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	fmt.Fprintf(c.stderr, "bench: postgres schema %s\n", schema)
	return u.String(), databasePostgres, nil
}

// checkpointsOf is how the run reads PostgreSQL's requested checkpoints through the baseline's
// pool (loadtest.Config.Checkpoints); nil on SQLite.
func checkpointsOf(rows loadtest.Rows) func(context.Context) (int64, error) {
	if pg, ok := rows.(*loadtest.PostgresRows); ok {
		return pg.CheckpointsRequested
	}
	return nil
}

// connectAdmin opens one connection on the database url names, read as the store reads it:
// the pool's own parameters (pool_max_conns and the like), which a server would refuse as
// unknown settings, are left out.
func connectAdmin(ctx context.Context, url string) (*pgx.Conn, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	return pgx.ConnectConfig(ctx, cfg.ConnConfig)
}

// cleanup registers the removal of something bench made, unless --keep, which reports it.
func (c *BenchCommand) cleanup(what string, remove func() error) {
	if c.keep {
		c.closers = append(c.closers, func() error {
			fmt.Fprintf(c.stderr, "bench: kept the %s\n", what)
			return nil
		})
		return
	}
	c.closers = append(c.closers, remove)
}

// openRows creates the baselines' table on the database dsn names, with connections opened as
// the store opens its own. Close drops it unless --keep.
func (c *BenchCommand) openRows(ctx context.Context, kind, dsn string) (loadtest.Rows, error) {
	var rows loadtest.Rows
	var err error
	if kind == databasePostgres {
		rows, err = loadtest.OpenPostgresRows(ctx, dsn)
	} else {
		rows, err = loadtest.OpenSQLiteRows(ctx, dsn)
	}
	if err != nil {
		return nil, fmt.Errorf("baseline table: %w", err)
	}
	c.closers = append(c.closers, rows.Close)
	c.cleanup("table "+loadtest.RowsTable, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return rows.Drop(ctx)
	})
	return rows, nil
}

// Close releases, in reverse order, what Run made: the baseline table, the store, the
// database.
func (c *BenchCommand) Close() error {
	var errs []error
	for i := len(c.closers) - 1; i >= 0; i-- {
		errs = append(errs, c.closers[i]())
	}
	c.closers = nil
	return errors.Join(errs...)
}

// startProfiles starts the profiles the flags ask for and returns the function that writes
// them. The server runs in this process, so they show its time beside the load's.
func (c *BenchCommand) startProfiles() (func() error, error) {
	var stops []func() error
	if c.cpuProfile != "" {
		f, err := os.Create(c.cpuProfile)
		if err != nil {
			return nil, fmt.Errorf("--cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("--cpuprofile: %w", err)
		}
		stops = append(stops, func() error {
			pprof.StopCPUProfile()
			return f.Close()
		})
	}
	for _, p := range []struct {
		file, name string
		start      func()
	}{
		{c.blockProfile, "block", func() { runtime.SetBlockProfileRate(int(10 * time.Microsecond)) }},
		{c.mutexProfile, "mutex", func() { runtime.SetMutexProfileFraction(10) }},
	} {
		if p.file == "" {
			continue
		}
		p.start()
		stops = append(stops, func() error {
			f, err := os.Create(p.file)
			if err != nil {
				return fmt.Errorf("%s profile: %w", p.name, err)
			}
			return errors.Join(pprof.Lookup(p.name).WriteTo(f, 0), f.Close())
		})
	}
	return func() error {
		var errs []error
		for _, stop := range stops {
			errs = append(errs, stop())
		}
		return errors.Join(errs...)
	}, nil
}

// randomBytes returns n random bytes.
func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// parseClients parses --clients: positive counts, at most maxBenchClients each.
func parseClients(s string) ([]int, error) {
	var counts []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > maxBenchClients {
			return nil, fmt.Errorf("%q: each must be a whole number from 1 to %d", f, maxBenchClients)
		}
		counts = append(counts, n)
	}
	return counts, nil
}

// parseScenarios parses --scenarios ("" for every one) and adds each scenario's baseline.
// Without baselines, they are left out of the default and refused when named.
func parseScenarios(s string, withBaselines bool) ([]string, error) {
	if s == "" {
		var all []string
		for _, name := range loadtest.Scenarios {
			if withBaselines || loadtest.BaselineOf(name) != "" {
				all = append(all, name)
			}
		}
		return all, nil
	}
	var names []string
	for f := range strings.SplitSeq(s, ",") {
		name := strings.TrimSpace(f)
		switch {
		case !slices.Contains(loadtest.Scenarios, name):
			return nil, fmt.Errorf("unknown scenario %q; known: %s", name, strings.Join(loadtest.Scenarios, ", "))
		case loadtest.BaselineOf(name) == "" && !withBaselines:
			return nil, fmt.Errorf("%s is a baseline: against --server it needs --database-url with the server's database", name)
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
		if base := loadtest.BaselineOf(name); base != "" && withBaselines && !slices.Contains(names, base) {
			names = append(names, base)
		}
	}
	return names, nil
}

// sqlitePath returns the file a SQLite database URL names.
func sqlitePath(dsn string) string {
	file, _, _ := strings.Cut(dsn, "?")
	return strings.TrimPrefix(file, "file:")
}

const benchUsage = `Usage: approvald bench [flags]

Measures approvald under concurrent load over real HTTP on loopback, and beside each scenario
a baseline on the same database in the same run, at the same concurrency:

	create   POST /v1/approvals, a new Idempotency-Key each time    (baseline insert)
	replay   the same key and body again, answered from the store   (baseline insert)
	storm    every client sends the same new key at once: one create,
	         the others wait for it and replay it                   (baseline insert)
	decide   approve a pending approval, each once                  (baseline insert)
	create-policy  POST /v1/approvals of an action under a policy of two
	         rules, one vote of each of two groups (in process only) (baseline insert)
	decide-policy  the vote that meets the second rule of such an
	         approval, the first met (in process only)             (baseline insert)
	intake   a Standard Webhooks delivery to the inbox, one in ten
	         a redelivery                                           (baseline insert)
	execute  approve a pending approval whose action has a target,
	         and wait until the target is called (in process only) (baseline insert)
	get      GET /v1/approvals/{id}                                 (baseline select)
	list     GET /v1/approvals?limit=50: in turn unfiltered, by status
	         and by approver (as an admin), and as the requester    (baseline select)
	list-deep the same pages from a cursor far down the listing     (baseline select)
	insert   one row the size of an approval, in its own transaction
	select   that row by primary key

By default it makes a fresh SQLite database in a temporary directory (or, with
--database-url postgres://..., a fresh schema there; with file:PATH, a new file), makes its
tokens through the store, starts the server in this process on 127.0.0.1 with serve's wiring
(and --config's settings; its database_url is never used) and removes the database at the end
unless --keep. With --server URL it loads a server already running on this machine; the
baselines then run only when --database-url names that server's database.

--seed N first fills the fresh database with N approvals in bulk (COPY on PostgreSQL,
multi-row INSERTs on SQLite), spread over 90 days and over the statuses, with their approvers,
decisions, events, executions and inbox events, so that the scenarios meet a database that has served for months. --long-polls N holds
N long-polls open on the server through every step. --server-process runs the server as a
child process, approvald serve, and reports its own peak RSS after each step.

Progress goes to stderr, the results to stdout: a table, or JSON with --json. Each figure
comes with its ratio to its baseline, which moves much less than the figures themselves
when the machine is shared. After each intake step the server's inbox backlog is read: the
events stored but not yet applied by its inbox worker, which says whether it kept up. On
PostgreSQL the checkpoints the server was asked for during each step are counted too: a step
that met one (its WAL outgrew max_wal_size) ran slower than its baseline, measured earlier.

Flags:
`
