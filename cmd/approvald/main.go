// Command approvald runs the approval service and administers its database.
//
//	approvald serve          the HTTP API and the background workers
//	approvald migrate        apply database migrations and exit
//	approvald check          report stored names that now collide or are refused
//	approvald policy check   explain which policy applies to a request and who would be asked
//	approvald token create   make a bearer token and print it
//	approvald token list     list tokens; revoke ID, rotate ID
//	approvald request        ask for an approval (or find it) and wait for the decision
//	approvald approvals      list, show and decide approvals at a terminal
//	approvald bench          measure the server under concurrent load beside baselines
//	approvald health         ask a running server whether it is alive, for health checks
//	approvald version        print the version
//
// Problems with the command line or the configuration exit 2; failures while running exit 1
// with a one-line message on stderr. The request command has exit codes of its own, for
// pipelines (request.go).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/approvald/approval"
	"github.com/approvald/approval/postgres"
	"github.com/approvald/approval/sqlite"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	// After the first signal, restore the default handling so that a second one kills a
	// shutdown that hangs.
	context.AfterFunc(ctx, stop)
	code := NewMain(os.Stdout, os.Stderr).Run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

// Main dispatches to the subcommands.
type Main struct {
	Stdout io.Writer
	Stderr io.Writer
}

// NewMain returns a Main writing to the given streams.
func NewMain(stdout, stderr io.Writer) *Main {
	return &Main{Stdout: stdout, Stderr: stderr}
}

// command is one subcommand: flags are parsed (and the configuration loaded) before
// anything runs, so that every usage problem is reported before any side effect.
type command interface {
	ParseFlags(ctx context.Context, args []string) error
	Run(ctx context.Context) error
	Close() error
}

// Run runs the subcommand named by args[0] and returns the process exit code.
func (m *Main) Run(ctx context.Context, args []string) int {
	var name string
	if len(args) > 0 {
		name, args = args[0], args[1:]
	}

	var cmd command
	switch name {
	case "serve":
		cmd = NewServeCommand(m.Stdout, m.Stderr)
	case "migrate":
		cmd = NewMigrateCommand(m.Stderr)
	case "check":
		cmd = NewCheckCommand(m.Stdout, m.Stderr)
	case "token":
		if len(args) == 0 || !slices.Contains(tokenVerbs, args[0]) {
			fmt.Fprint(m.Stderr, tokenUsage)
			return exitUsage
		}
		name, args = "token "+args[0], args[1:]
		cmd = newTokenCommand(strings.TrimPrefix(name, "token "), m.Stdout, m.Stderr)
	case "policy":
		if len(args) == 0 || args[0] != "check" {
			fmt.Fprint(m.Stderr, policyCheckUsage)
			return exitUsage
		}
		name, args = "policy check", args[1:]
		cmd = NewPolicyCheckCommand(m.Stdout, m.Stderr)
	case "bench":
		cmd = NewBenchCommand(m.Stdout, m.Stderr)
	case "version":
		cmd = NewVersionCommand(m.Stdout, m.Stderr)
	case "health":
		cmd = NewHealthCommand(m.Stdout, m.Stderr)
	case "request":
		cmd = NewRequestCommand(m.Stdout, m.Stderr)
	case "approvals":
		if len(args) == 0 || !isApprovalsVerb(args[0]) {
			fmt.Fprint(m.Stderr, approvalsUsage)
			return exitUsage
		}
		name, args = "approvals "+args[0], args[1:]
		cmd = NewApprovalsCommand(m.Stdout, m.Stderr, strings.TrimPrefix(name, "approvals "))
	case "help", "-h", "-help", "--help":
		fmt.Fprint(m.Stdout, usage)
		return exitOK
	case "":
		fmt.Fprint(m.Stderr, usage)
		return exitUsage
	default:
		fmt.Fprintf(m.Stderr, "approvald: unknown command %q\n\n%s", name, usage)
		return exitUsage
	}

	if err := cmd.ParseFlags(ctx, args); errors.Is(err, flag.ErrHelp) {
		return exitOK
	} else if err != nil {
		return m.exit(name, err, exitUsage)
	}
	runErr := cmd.Run(ctx)
	closeErr := cmd.Close()
	if err := errors.Join(runErr, closeErr); err != nil {
		return m.exit(name, err, exitFailure)
	}
	return exitOK
}

// exit reports err and returns the exit code: the one the command chose (an *exitError,
// the request command's codes), or code.
func (m *Main) exit(name string, err error, code int) int {
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	}
	m.printError(name, err)
	return code
}

// printError writes err as one line, whatever new lines joined errors carry.
func (m *Main) printError(name string, err error) {
	msg := strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
	// The client's errors name approvald, as they must in a caller's logs; here the line's
	// own prefix does.
	for _, p := range []string{"approvald: ", "approvald client: "} {
		msg = strings.TrimPrefix(msg, p)
	}
	fmt.Fprintf(m.Stderr, "approvald %s: %s\n", name, msg)
}

const usage = `approvald puts a human approval in front of an automated action.

Usage:

	approvald <command> [flags]

Commands:

	serve          run the HTTP API and the background workers
	migrate        apply database migrations and exit
	check          report stored names of people that now collide or are refused
	policy check   explain which policy applies to a request and who would be asked
	token          create|list|revoke|rotate bearer tokens (create prints the new token)
	request        ask for an approval under an operation key and wait for the decision
	approvals      list|get|approve|reject|cancel approvals on a server
	bench          measure the server under concurrent load beside baselines
	health         ask a running server whether it is alive (or ready) for health checks
	version        print the version

Every command that opens the database takes --config FILE and --database-url URL;
request and approvals talk to a server (--server URL, token in APPROVALD_TOKEN).
Run "approvald <command> -h" for a command's flags.
`

// configFlags are the flags every subcommand takes.
type configFlags struct {
	path        string
	databaseURL string
}

func (f *configFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.path, "config", "", "read the YAML configuration `FILE`")
	fs.StringVar(&f.databaseURL, "database-url", "", "database `URL`: file:PATH or postgres://... (default "+DefaultDatabaseURL+")")
}

// loadConfig parses args for a command whose only flags are --config and --database-url,
// and returns its validated configuration.
func loadConfig(name, usage string, stderr io.Writer, args []string) (Config, error) {
	fs := newFlagSet(name, usage, stderr)
	var cf configFlags
	cf.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return Config{}, err
	}
	cfg, err := cf.load()
	if err != nil {
		return Config{}, err
	}
	return cfg, cfg.Validate()
}

// load returns the configuration: the file (or the defaults without one), then the
// APPROVALD_* environment, then --database-url. The caller applies its own flags and
// validates.
func (f *configFlags) load() (Config, error) {
	c := DefaultConfig()
	if f.path != "" {
		var err error
		if c, err = ReadConfigFile(f.path); err != nil {
			return Config{}, err
		}
	}
	if err := c.ApplyEnv(os.LookupEnv); err != nil {
		return Config{}, err
	}
	if f.databaseURL != "" {
		c.DatabaseURL = f.databaseURL
	}
	return c, nil
}

// newFlagSet returns a flag set that prints usageText (and nothing else: the caller reports
// the error) on -h or a bad flag.
func newFlagSet(name, usageText string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fmt.Fprint(stderr, usageText)
		fs.SetOutput(stderr)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return fs
}

// parseFlags parses args, refusing positional arguments: no subcommand takes any.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

// newLogger returns the JSON logger every subcommand writes to stderr.
func newLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, nil))
}

// store is what the subcommands need of either store.
type store interface {
	approval.Store
	Migrate(ctx context.Context) error
}

// openStore opens the store the database URL names and applies its migrations. Migrating is
// idempotent, so every subcommand that touches the database does it first and works on a new
// database. logger receives what the PostgreSQL store cannot return to a caller (nil: slog's
// default).
func openStore(ctx context.Context, databaseURL string, logger *slog.Logger) (store, error) {
	kind, err := ParseDatabaseURL(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("database url: %w", err)
	}
	var s store
	switch kind {
	case databasePostgres:
		pg, err := postgres.Open(ctx, databaseURL)
		if err != nil {
			return nil, fmt.Errorf("open postgres: %w", err)
		}
		if logger != nil {
			pg.Logger = logger.With("component", "postgres")
		}
		s = pg
	default:
		lite, err := sqlite.Open(ctx, databaseURL)
		if err != nil {
			if plain := checkSQLitePath(databaseURL); plain != nil {
				return nil, plain // the directory or a permission, said plainly
			}
			return nil, fmt.Errorf("open sqlite: %w", err)
		}
		s = lite
	}
	if err := s.Migrate(ctx); err != nil {
		s.Close()
		if kind == databaseSQLite {
			if plain := checkSQLitePath(databaseURL); plain != nil {
				return nil, plain
			}
		}
		return nil, fmt.Errorf("migrate: %w", err)
	}
	return s, nil
}
