package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/approvald/approval"
)

var _ command = (*CheckCommand)(nil)

// CheckCommand reports the stored names of people that the rules for names
// (approval.NormalizeName) no longer hold apart or no longer accept: token subjects,
// requesters, approvers and voters that normalise alike (alice, Alice), and names now refused
// (ci-bot with a zero-width space). Such rows are now one person, or cannot act; the command
// reports them for an operator to settle (revoke a token, cancel an approval) and changes
// nothing. It exits 1 when it found any, 0 when the database is clean.
type CheckCommand struct {
	stdout io.Writer // the report
	stderr io.Writer // JSON logs

	config Config
	store  store
}

// NewCheckCommand returns a CheckCommand writing to the given streams.
func NewCheckCommand(stdout, stderr io.Writer) *CheckCommand {
	return &CheckCommand{stdout: stdout, stderr: stderr}
}

// ParseFlags parses the flags and loads the configuration.
func (c *CheckCommand) ParseFlags(ctx context.Context, args []string) error {
	cfg, err := loadConfig("approvald check", checkUsage, c.stderr, args)
	c.config = cfg
	return err
}

// Run reads every token and approval, prints what it found, and returns an exitError of 1
// when it found anything.
func (c *CheckCommand) Run(ctx context.Context) error {
	s, err := openStore(ctx, c.config.DatabaseURL, nil)
	if err != nil {
		return err
	}
	c.store = s
	seen := map[string][]string{} // name: where it is stored, the first few places
	var names []string
	add := func(name, where string) {
		if _, ok := seen[name]; !ok {
			names = append(names, name)
		}
		if len(seen[name]) < 3 {
			seen[name] = append(seen[name], where)
		}
	}
	for cursor := ""; ; {
		tokens, next, err := s.Tokens(ctx, approval.TokenFilter{Limit: approval.MaxPageSize, Cursor: cursor})
		if err != nil {
			return fmt.Errorf("read tokens: %w", err)
		}
		for _, t := range tokens {
			add(t.Subject, "token "+t.ID)
		}
		if cursor = next; cursor == "" {
			break
		}
	}
	for cursor := ""; ; {
		list, next, err := s.Approvals(ctx, approval.ApprovalFilter{Limit: approval.MaxPageSize, Cursor: cursor})
		if err != nil {
			return fmt.Errorf("read approvals: %w", err)
		}
		for _, a := range list {
			add(a.Requester, "requester of "+a.ID)
			for _, p := range a.Approvers {
				add(p, "approver of "+a.ID)
			}
			for _, d := range a.Decisions {
				add(d.Approver, "voter on "+a.ID)
			}
		}
		if cursor = next; cursor == "" {
			break
		}
	}

	collisions, refused := approval.AuditNames(names)
	w := c.stdout
	for _, g := range collisions {
		fmt.Fprintf(w, "names that are now one person, %q:\n", g.Normalized)
		for _, n := range g.Names {
			fmt.Fprintf(w, "\t%+q\t%s\n", n, strings.Join(seen[n], ", "))
		}
	}
	for _, r := range refused {
		fmt.Fprintf(w, "name now refused, %+q: %s\n\t%s\n", r.Name, r.Reason, strings.Join(seen[r.Name], ", "))
	}
	if len(collisions) == 0 && len(refused) == 0 {
		fmt.Fprintf(w, "%d names checked: none collide, none is refused\n", len(names))
		return nil
	}
	return &exitError{code: exitFailure, err: fmt.Errorf(
		"%d names checked: %d groups normalise alike, %d are refused", len(names), len(collisions), len(refused))}
}

// Close closes the store.
func (c *CheckCommand) Close() error {
	if c.store == nil {
		return nil
	}
	if err := c.store.Close(); err != nil {
		return fmt.Errorf("close store: %w", err)
	}
	return nil
}

const checkUsage = `Usage: approvald check [flags]

Reports the names of people stored in tokens and approvals that the rules for names no
longer hold apart (alice and Alice are one person) or no longer accept (a zero-width space,
a Cyrillic letter in a Latin name), with where each is stored. It changes nothing. Exits 1
when it found any, 0 when there is none.

Flags:
`
