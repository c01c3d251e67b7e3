package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/approvald/approval"
	"github.com/approvald/approval/client"
)

var _ command = (*ApprovalsCommand)(nil)

// ApprovalsCommand is approvald approvals list|get|approve|reject|cancel: the API for people
// at a terminal, as a table by default or as JSON with --json.
type ApprovalsCommand struct {
	stdout io.Writer
	stderr io.Writer
	verb   string

	server   string
	token    string
	json     bool
	id       string
	comment  string
	list     client.ListOptions
	maxItems int
}

// NewApprovalsCommand returns the command for verb (list, get, approve, reject, cancel).
func NewApprovalsCommand(stdout, stderr io.Writer, verb string) *ApprovalsCommand {
	return &ApprovalsCommand{stdout: stdout, stderr: stderr, verb: verb}
}

func isApprovalsVerb(v string) bool {
	switch v {
	case "list", "get", "approve", "reject", "cancel":
		return true
	}
	return false
}

// ParseFlags parses the flags and the approval id the verbs but list take.
func (c *ApprovalsCommand) ParseFlags(ctx context.Context, args []string) error {
	fs := newFlagSet("approvald approvals "+c.verb, approvalsUsage, c.stderr)
	serverFlag(fs, &c.server)
	fs.BoolVar(&c.json, "json", false, "print JSON instead of a table")
	switch c.verb {
	case "list":
		fs.StringVar(&c.list.Status, "status", "", "only approvals in `STATUS` (pending, approved, rejected, expired, cancelled)")
		fs.StringVar(&c.list.Approver, "approver", "", "only approvals listing `NAME` as an approver")
		fs.BoolVar(&c.list.Waiting, "waiting", false, "only what waits for the token's subject now, through its groups too (not with --status or --approver)")
		fs.IntVar(&c.maxItems, "limit", 50, "show at most `N` approvals (0: all)")
	case "approve", "reject":
		fs.StringVar(&c.comment, "comment", "", "a `COMMENT` with the vote")
	}
	// The id may come before the flags (approve apr_... --comment ok) or after them.
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		c.id, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	rest := fs.Args()
	if c.id == "" && len(rest) > 0 {
		c.id, rest = rest[0], rest[1:]
	}
	if len(rest) > 0 {
		return fmt.Errorf("unexpected argument %q", rest[0])
	}
	if c.verb == "list" && c.id != "" {
		return fmt.Errorf("unexpected argument %q", c.id)
	}
	if c.verb != "list" && c.id == "" {
		return errors.New("missing the approval id")
	}
	if c.maxItems < 0 {
		return fmt.Errorf("--limit %d: must not be negative", c.maxItems)
	}
	var err error
	c.token, err = tokenFromEnv()
	return err
}

// Run calls the server and prints the answer.
func (c *ApprovalsCommand) Run(ctx context.Context) error {
	cl, err := client.New(c.server, c.token)
	if err != nil {
		return err
	}
	if c.verb == "list" {
		return c.runList(ctx, cl)
	}
	var a *client.Approval
	switch c.verb {
	case "get":
		a, err = cl.Get(ctx, c.id)
	case "approve":
		a, err = cl.Approve(ctx, c.id, c.comment)
	case "reject":
		a, err = cl.Reject(ctx, c.id, c.comment)
	case "cancel":
		a, err = cl.Cancel(ctx, c.id)
	}
	if err != nil {
		return err
	}
	if c.json {
		return printJSON(c.stdout, a)
	}
	return printApproval(c.stdout, a, approvalLink(cl, a.ID))
}

func (c *ApprovalsCommand) runList(ctx context.Context, cl *client.Client) error {
	var all []*client.Approval
	if c.maxItems > 0 {
		c.list.Limit = min(c.maxItems, 200)
	}
	for a, err := range cl.List(ctx, c.list) {
		if err != nil {
			return err
		}
		all = append(all, a)
		if c.maxItems > 0 && len(all) == c.maxItems {
			break
		}
	}
	if c.json {
		if all == nil {
			all = []*client.Approval{}
		}
		return printJSON(c.stdout, all)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tVOTES\tACTION\tKEY\tREQUESTER\tCREATED\tTITLE")
	for _, a := range all {
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%s\t%s\t%s\t%s\t%s\n", terminalText(a.ID), terminalText(a.Status), approvals(a), a.RequiredApprovals,
			terminalText(a.Action), terminalText(a.OperationKey), terminalText(a.Requester), a.CreatedAt.Local().Format(time.DateTime), oneLine(a.Title))
	}
	return tw.Flush()
}

// Close does nothing.
func (c *ApprovalsCommand) Close() error { return nil }

// printApproval shows one approval as aligned fields, then its votes. What the server sends
// is written through terminalText: it is the requester's text, meant to be read, not obeyed.
func printApproval(w io.Writer, a *client.Approval, link string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "id\t%s\n", terminalText(a.ID))
	fmt.Fprintf(tw, "status\t%s\n", terminalText(a.Status))
	fmt.Fprintf(tw, "title\t%s\n", oneLine(a.Title))
	fmt.Fprintf(tw, "action\t%s\n", terminalText(a.Action))
	fmt.Fprintf(tw, "key\t%s\n", terminalText(a.OperationKey))
	fmt.Fprintf(tw, "requester\t%s\n", terminalText(a.Requester))
	fmt.Fprintf(tw, "approvers\t%s (%d of %d approved)\n", terminalText(strings.Join(a.Approvers, ", ")), approvals(a), a.RequiredApprovals)
	if st := policyStatus(a); st != nil {
		fmt.Fprintf(tw, "policy\t%s (version %s)\n", terminalText(st.Name), terminalText(st.Version))
		fmt.Fprintf(tw, "stage\t%s\n", terminalText(st.StageLine()))
		fmt.Fprintf(tw, "progress\t%s\n", terminalText(st.ProgressLine()))
	}
	fmt.Fprintf(tw, "context\t%s\n", terminalText(string(a.Context)))
	fmt.Fprintf(tw, "created\t%s\n", a.CreatedAt.Local().Format(time.DateTime))
	fmt.Fprintf(tw, "expires\t%s\n", a.ExpiresAt.Local().Format(time.DateTime))
	if a.Execution != nil {
		fmt.Fprintf(tw, "execution\t%s\n", terminalText(a.Execution.Status))
	}
	fmt.Fprintf(tw, "page\t%s\n", terminalText(link))
	for _, d := range a.Decisions {
		fmt.Fprintf(tw, "vote\t%s %s at %s%s\n", terminalText(d.Approver), terminalText(d.Verdict), d.At.Local().Format(time.DateTime), comment(oneLine(d.Comment)))
	}
	return tw.Flush()
}

// policyStatus is a's policy and progress as the approval package formats them
// (PolicyStatus.StageLine, ProgressLine), nil when a keeps no policy.
func policyStatus(a *client.Approval) *approval.PolicyStatus {
	p := a.Policy
	if p == nil {
		return nil
	}
	st := &approval.PolicyStatus{Name: p.Name, Version: p.Version, CurrentStage: p.CurrentStage,
		Stages: make([]approval.StageStatus, len(p.Stages))}
	for i, s := range p.Stages {
		st.Stages[i] = approval.StageStatus{Met: s.Met, Rules: make([]approval.RuleStatus, len(s.Rules))}
		for j, r := range s.Rules {
			st.Stages[i].Rules[j] = approval.RuleStatus{Label: r.Label, Group: r.Group, People: r.People,
				Approvals: r.Approvals, Counted: r.Counted}
		}
	}
	return st
}

// oneLine keeps a table's rows one line each whatever a title holds, and makes it safe for a
// terminal (terminalText).
func oneLine(s string) string { return terminalText(strings.Join(strings.Fields(s), " ")) }

// terminalText returns s with what a terminal would act on instead of showing written as
// escapes: C0 and C1 control characters and DEL (an escape sequence can recolour, move the
// cursor, rewrite the title or, in some terminals, answer back), the bidirectional controls
// that reorder what is shown, and bytes that are not UTF-8. Characters become \u00XX (so a
// JSON text stays JSON), bytes \xXX; everything else is kept as it is.
func terminalText(s string) string {
	if !strings.ContainsFunc(s, unsafeForTerminal) && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], string(utf8.RuneError)):
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unsafeForTerminal(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// unsafeForTerminal reports whether a terminal would act on r rather than show it.
func unsafeForTerminal(r rune) bool {
	switch {
	case r < 0x20, r >= 0x7f && r <= 0x9f:
		return true
	case r == '\u061c', r == '\u200e', r == '\u200f', r >= '\u202a' && r <= '\u202e', r >= '\u2066' && r <= '\u2069':
		return true
	}
	return false
}

const approvalsUsage = `Usage: approvald approvals list|get|approve|reject|cancel [ID] [flags]

	list                      approvals the token may see, newest first; --waiting: what
	                          waits for your vote now
	get ID                    one approval
	approve ID [--comment C]  vote approve as the token's subject
	reject ID [--comment C]   vote reject
	cancel ID                 cancel a pending approval you requested

A table by default, JSON with --json. The token comes from APPROVALD_TOKEN, the server from
--server or APPROVALD_SERVER.

`
