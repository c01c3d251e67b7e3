package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/approvald/approval/client"
)

// The request command's exit codes, for pipelines to branch on.
const (
	exitApproved    = 0
	exitRejected    = 1
	exitEnded       = 2 // expired or cancelled
	exitWaitTimeout = 3 // still pending when the wait ended (or no --wait)
	exitGateError   = 4 // usage or server error
)

var _ command = (*RequestCommand)(nil)

// RequestCommand is the gate of a pipeline: it asks for an approval under the operation's
// key, or finds it when the pipeline runs again (the server replays the create), and with
// --wait blocks until it is decided. The approval is printed as JSON on stdout, progress and
// the approval page's link on stderr, and the exit code says the outcome.
type RequestCommand struct {
	stdout io.Writer
	stderr io.Writer

	server    string
	token     string
	key       string
	req       client.CreateRequest
	wait      time.Duration
	approvers stringList
}

// NewRequestCommand returns a RequestCommand writing to the given streams.
func NewRequestCommand(stdout, stderr io.Writer) *RequestCommand {
	return &RequestCommand{stdout: stdout, stderr: stderr}
}

// ParseFlags parses the flags, reads the context file and APPROVALD_TOKEN. Every problem is
// a usage error, exit 4.
func (c *RequestCommand) ParseFlags(ctx context.Context, args []string) error {
	if err := c.parseFlags(args); err != nil && !errors.Is(err, flag.ErrHelp) {
		return &exitError{code: exitGateError, err: err}
	} else if err != nil {
		return err
	}
	return nil
}

func (c *RequestCommand) parseFlags(args []string) error {
	fs := newFlagSet("approvald request", requestUsage, c.stderr)
	serverFlag(fs, &c.server)
	fs.StringVar(&c.key, "key", "", "the operation `KEY` (deploy-prod-1042): the same on every run of one operation")
	fs.StringVar(&c.req.Action, "action", "", "the `ACTION` (deploy)")
	fs.StringVar(&c.req.Title, "title", "", "the `TITLE` approvers see")
	fs.Var(&c.approvers, "approver", "an approver's `NAME`; repeat for several (where no policy chooses them)")
	contextFile := fs.String("context-file", "", "a JSON object `FILE` shown to approvers as the context")
	fs.IntVar(&c.req.RequiredApprovals, "quorum", 0, "approvals needed, `N` (default 1)")
	fs.DurationVar(&c.req.ExpiresIn, "expires-in", 0, "expire the approval after `DURATION` (server default 24h)")
	fs.DurationVar(&c.wait, "wait", 0, "wait up to `DURATION` for the decision (0: do not wait)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	c.req.Approvers = c.approvers
	var missing []string
	for _, f := range []struct{ name, v string }{{"--key", c.key}, {"--action", c.req.Action}, {"--title", c.req.Title}} {
		if f.v == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %s", strings.Join(missing, ", "))
	}
	if c.wait < 0 {
		return fmt.Errorf("--wait %s: must not be negative", c.wait)
	}
	if *contextFile != "" {
		b, err := os.ReadFile(*contextFile)
		if err != nil {
			return fmt.Errorf("--context-file: %w", err)
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(b, &obj); err != nil || obj == nil {
			return fmt.Errorf("--context-file %s: not a JSON object", *contextFile)
		}
		c.req.Context = b
	}
	var err error
	if c.token, err = tokenFromEnv(); err != nil {
		return err
	}
	return nil
}

// Run creates or finds the approval and, with --wait, waits for its decision. Its error
// carries the exit code.
func (c *RequestCommand) Run(ctx context.Context) error {
	reach := newReachability(http.DefaultTransport, c.stderr, c.server)
	hc := &http.Client{Transport: reach}
	cl, err := client.New(c.server, c.token, client.WithHTTPClient(hc))
	if err != nil {
		return &exitError{code: exitGateError, err: err}
	}
	res, err := cl.CreateApproval(ctx, c.key, c.req)
	if err != nil {
		return &exitError{code: exitGateError, err: reach.explain(ctx, err)}
	}
	a := res.Approval
	link := approvalLink(cl, a.ID)
	if res.Replayed {
		// A replay answers the create as it was first answered: the approval as it was then.
		// What the run must tell is what it is now.
		now, err := cl.Get(ctx, a.ID)
		if err != nil {
			return &exitError{code: exitGateError, err: reach.explain(ctx, err)}
		}
		a = now
		fmt.Fprintf(c.stderr, "approval %s, asked for under key %s, %s: %s\n", terminalText(a.ID), terminalText(c.key), terminalText(replayState(a)), terminalText(link))
	} else {
		fmt.Fprintf(c.stderr, "approval %s asked of %s: %s\n", terminalText(a.ID), terminalText(strings.Join(a.Approvers, ", ")), terminalText(link))
	}
	if st := policyStatus(a); st != nil && !a.Decided() {
		fmt.Fprintf(c.stderr, "policy %s, %s\n", terminalText(st.Name), terminalText(st.String()))
	}

	if !a.Decided() && c.wait > 0 {
		fmt.Fprintf(c.stderr, "waiting up to %s for the decision\n", c.wait)
		waitCtx, cancel := context.WithTimeout(ctx, c.wait)
		defer cancel()
		// While it waits, the gate retries for as long as the wait lasts: a server restarting
		// or a network failing for a while does not end it.
		waitCl, err := client.New(c.server, c.token, client.WithHTTPClient(hc), client.WithRetry(client.Retry{MaxAttempts: math.MaxInt32}))
		if err != nil {
			return &exitError{code: exitGateError, err: err}
		}
		seen := len(a.Decisions)
		decided, err := waitCl.WaitForDecision(waitCtx, a.ID, func(now *client.Approval) {
			for _, d := range now.Decisions[min(seen, len(now.Decisions)):] {
				if st := policyStatus(now); st != nil {
					fmt.Fprintf(c.stderr, "%s voted %s (%s)%s\n", terminalText(d.Approver), terminalText(d.Verdict),
						terminalText(st.String()), comment(oneLine(d.Comment)))
					continue
				}
				fmt.Fprintf(c.stderr, "%s voted %s (%d of %d approvals)%s\n", terminalText(d.Approver), terminalText(d.Verdict),
					approvals(now), now.RequiredApprovals, comment(oneLine(d.Comment)))
			}
			seen = len(now.Decisions)
		})
		switch {
		case err == nil:
			a = decided
		case waitCtx.Err() != nil:
			// Still pending: print it as it is now, if the server says soon.
			getCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalReadTimeout)
			defer cancel()
			if now, gerr := cl.Get(getCtx, a.ID); gerr == nil {
				a = now
			} else if since, down := reach.downSince(); down {
				fmt.Fprintf(c.stderr, "the approval was pending when last read; the server is unreachable since %s\n", since.Format(time.RFC3339))
			}
		default:
			return &exitError{code: exitGateError, err: reach.explain(ctx, err)}
		}
	}
	if err := printJSON(c.stdout, a); err != nil {
		return &exitError{code: exitGateError, err: err}
	}
	switch a.Status {
	case client.StatusApproved:
		fmt.Fprintf(c.stderr, "approved\n")
		return nil
	case client.StatusRejected:
		return &exitError{code: exitRejected, err: errors.New("rejected")}
	case client.StatusExpired, client.StatusCancelled:
		return &exitError{code: exitEnded, err: errors.New(a.Status)}
	}
	if c.wait == 0 {
		return &exitError{code: exitWaitTimeout, err: errors.New("pending; not waiting (no --wait)")}
	}
	if ctx.Err() != nil {
		return &exitError{code: exitWaitTimeout, err: errors.New("interrupted while the approval is pending")}
	}
	return &exitError{code: exitWaitTimeout, err: fmt.Errorf("still pending after %s", c.wait)}
}

// finalReadTimeout bounds the read of a still pending approval after the wait has ended.
const finalReadTimeout = 10 * time.Second

// replayState says, for a run that found the approval an earlier run asked for, where it
// stands now: who decided and when, or how far the votes are.
func replayState(a *client.Approval) string {
	at := ""
	if a.DecidedAt != nil {
		at = " at " + a.DecidedAt.UTC().Format(time.RFC3339)
	}
	switch a.Status {
	case client.StatusPending:
		return fmt.Sprintf("is still pending (%d of %d approvals)", approvals(a), a.RequiredApprovals)
	case client.StatusApproved:
		return "was already approved by " + voters(a, "approve") + at
	case client.StatusRejected:
		return "was already rejected by " + voters(a, "reject") + at
	default:
		return "was already " + a.Status + at
	}
}

// voters lists the approvers who voted verdict.
func voters(a *client.Approval, verdict string) string {
	var names []string
	for _, d := range a.Decisions {
		if d.Verdict == verdict {
			names = append(names, d.Approver)
		}
	}
	if len(names) == 0 {
		return "nobody listed"
	}
	return strings.Join(names, ", ")
}

// Close does nothing: the command holds no resources beyond Run.
func (c *RequestCommand) Close() error { return nil }

const requestUsage = `Usage: approvald request --key KEY --action ACTION --title TITLE [--approver NAME...] [flags]

Asks for an approval under the operation KEY, or finds the one an earlier run asked for, and
with --wait waits for the decision. The approval is printed as JSON on stdout; progress and
the approval page's link go to stderr. Under a policy the server chooses the approvers;
where none applies, name them with --approver. The token comes from APPROVALD_TOKEN. A run under a
key an earlier run used says at once where that approval stands; while the server cannot be
reached it says so on stderr, with since when, and retries.

Exit codes: 0 approved, 1 rejected, 2 expired or cancelled, 3 still pending when the wait
ended (or without --wait), 4 usage or server error.

`

// approvalLink is the approver page of the approval.
func approvalLink(cl *client.Client, id string) string {
	return cl.BaseURL() + "/ui/approvals/" + id
}

// approvals counts the approve votes.
func approvals(a *client.Approval) int {
	n := 0
	for _, d := range a.Decisions {
		if d.Verdict == "approve" {
			n++
		}
	}
	return n
}

func comment(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("print: %w", err)
	}
	return nil
}

// serverFlag registers --server, defaulting to APPROVALD_SERVER or the local server.
func serverFlag(fs *flag.FlagSet, dst *string) {
	def := os.Getenv("APPROVALD_SERVER")
	if def == "" {
		def = "http://127.0.0.1:8080"
	}
	// The flag package prints the default after the usage; the text only says where it comes from.
	fs.StringVar(dst, "server", def, "the approvald server's `URL`; $APPROVALD_SERVER sets the default")
}

// tokenFromEnv returns APPROVALD_TOKEN: a token is never a flag, so it stays out of process
// listings and shell histories.
func tokenFromEnv() (string, error) {
	t := strings.TrimSpace(os.Getenv("APPROVALD_TOKEN"))
	if t == "" {
		return "", errors.New("APPROVALD_TOKEN is not set: it must hold the bearer token")
	}
	return t, nil
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(v string) error {
	if v == "" {
		return errors.New("empty")
	}
	*l = append(*l, v)
	return nil
}

// exitError is a failure whose exit code the command chose. err, when not nil, is printed
// as the one-line message.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }
