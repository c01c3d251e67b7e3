package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/approvald/approval"
)

var (
	_ command = (*TokenCreateCommand)(nil)
	_ command = (*TokenListCommand)(nil)
	_ command = (*TokenChangeCommand)(nil)
)

// tokenVerbs are the token subcommands.
var tokenVerbs = []string{"create", "list", "revoke", "rotate"}

// newTokenCommand returns the token subcommand named verb, or nil for an unknown verb.
func newTokenCommand(verb string, stdout, stderr io.Writer) command {
	switch verb {
	case "create":
		return NewTokenCreateCommand(stdout, stderr)
	case "list":
		return &TokenListCommand{tokenStore: tokenStore{stdout: stdout, stderr: stderr}}
	case "revoke", "rotate":
		return &TokenChangeCommand{tokenStore: tokenStore{stdout: stdout, stderr: stderr}, verb: verb}
	}
	return nil
}

// tokenStore is what every token subcommand shares: its streams, its configuration and the
// store it opens in Run.
// tokenCommand is the principal the token commands act as. They run where the server's
// configuration is, with the database's own credentials, which already reach every token: so
// they act as an admin, and the Service's rules see them as one, named for the command
// (docs/configuration.md, "Commands").
var tokenCommand = approval.Principal{Subject: "approvald token", Role: approval.RoleAdmin}

type tokenStore struct {
	stdout io.Writer // what the command answers, and nothing else
	stderr io.Writer // JSON logs

	config Config
	store  store
}

// parse parses args with fs (the config flags added), flags before or after the positional
// arguments, refusing positional arguments beyond nargs, and returns those.
func (c *tokenStore) parse(fs *flag.FlagSet, args []string, nargs int) ([]string, error) {
	var cf configFlags
	cf.register(fs)
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		rest = append(rest, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(rest) > nargs {
		return nil, fmt.Errorf("unexpected argument %q", rest[nargs])
	}
	cfg, err := cf.load()
	if err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c.config = cfg
	return rest, nil
}

// open opens (and migrates) the store and returns the rules over it.
func (c *tokenStore) open(ctx context.Context) (*approval.Service, error) {
	s, err := openStore(ctx, c.config.DatabaseURL, nil)
	if err != nil {
		return nil, err
	}
	c.store = s
	return &approval.Service{Store: s}, nil
}

// Close closes the store.
func (c *tokenStore) Close() error {
	if c.store == nil {
		return nil
	}
	if err := c.store.Close(); err != nil {
		return fmt.Errorf("close store: %w", err)
	}
	return nil
}

// plain turns an application error into its message alone, for a terminal.
func plain(op string, err error) error {
	if approval.AsError(err) != nil {
		return fmt.Errorf("%s: %s", op, approval.ErrorMessage(err))
	}
	return fmt.Errorf("%s: %w", op, err)
}

// TokenCreateCommand stores the hash of a new random bearer token and prints the token, alone,
// on stdout, so that scripts can capture it with $(approvald token create ...).
type TokenCreateCommand struct {
	tokenStore
	spec approval.TokenSpec
}

// NewTokenCreateCommand returns a TokenCreateCommand writing to the given streams.
func NewTokenCreateCommand(stdout, stderr io.Writer) *TokenCreateCommand {
	return &TokenCreateCommand{tokenStore: tokenStore{stdout: stdout, stderr: stderr}}
}

// ParseFlags parses the flags and loads the configuration.
func (c *TokenCreateCommand) ParseFlags(ctx context.Context, args []string) error {
	fs := newFlagSet("approvald token create", tokenCreateUsage, c.stderr)
	fs.StringVar(&c.spec.Subject, "subject", "", "the token's subject `NAME`: the requester or approver name it acts as")
	role := fs.String("role", "", "the `ROLE`: requester, approver, operator or admin")
	fs.StringVar(&c.spec.Name, "name", "", "what the token is for, shown by token list (`TEXT`, one line)")
	fs.DurationVar(&c.spec.ExpiresIn, "expires-in", 0, "make the token expire after `DURATION` (720h, 90m); default never")
	if _, err := c.parse(fs, args, 0); err != nil {
		return err
	}
	if err := validateSubject(c.spec.Subject); err != nil {
		return err
	}
	c.spec.Role = approval.Role(*role)
	if !c.spec.Role.Valid() {
		return fmt.Errorf("--role %q: must be requester, approver, operator or admin", *role)
	}
	if c.spec.ExpiresIn < 0 {
		return fmt.Errorf("--expires-in %s: must be positive", c.spec.ExpiresIn)
	}
	if c.spec.Name != "" {
		if err := approval.CheckName("--name", c.spec.Name, approval.MaxTokenNameLength); err != nil {
			return errors.New(approval.ErrorMessage(err))
		}
	}
	return nil
}

// Run stores the new token's hash and prints the token.
func (c *TokenCreateCommand) Run(ctx context.Context) error {
	svc, err := c.open(ctx)
	if err != nil {
		return err
	}
	secret, t, err := svc.CreateToken(ctx, tokenCommand, c.spec)
	if err != nil {
		return plain("create token", err)
	}
	if _, err := fmt.Fprintln(c.stdout, secret); err != nil {
		return fmt.Errorf("print token: %w", err)
	}
	newLogger(c.stderr).Info("token created", "token_id", t.ID, "subject", t.Subject, "role", t.Role)
	return nil
}

// TokenListCommand prints every token, newest first, without its secret or hash: a table, or
// JSON with --json.
type TokenListCommand struct {
	tokenStore
	json bool
}

// ParseFlags parses the flags and loads the configuration.
func (c *TokenListCommand) ParseFlags(ctx context.Context, args []string) error {
	fs := newFlagSet("approvald token list", tokenListUsage, c.stderr)
	fs.BoolVar(&c.json, "json", false, "print a JSON array instead of a table")
	_, err := c.parse(fs, args, 0)
	return err
}

// Run reads every page of tokens and prints them.
func (c *TokenListCommand) Run(ctx context.Context) error {
	svc, err := c.open(ctx)
	if err != nil {
		return err
	}
	all := []*approval.Token{}
	for cursor := ""; ; {
		list, next, err := svc.Tokens(ctx, tokenCommand, approval.TokenFilter{Limit: approval.MaxPageSize, Cursor: cursor})
		if err != nil {
			return plain("list tokens", err)
		}
		all = append(all, list...)
		if cursor = next; cursor == "" {
			break
		}
	}
	if c.json {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(all)
	}
	w := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tNAME\tSUBJECT\tROLE\tCREATED\tEXPIRES\tLAST USED\tREVOKED")
	for _, t := range all {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, terminalText(orDash(t.Name)), terminalText(t.Subject), t.Role,
			t.CreatedAt.Format(time.RFC3339), when(t.ExpiresAt), when(t.LastUsedAt), when(t.RevokedAt))
	}
	return w.Flush()
}

// TokenChangeCommand is token revoke ID or token rotate ID. Revoke prints the revoked token's
// id; rotate prints the new token, alone, as create does.
type TokenChangeCommand struct {
	tokenStore
	verb string // "revoke" or "rotate"
	id   string
}

// ParseFlags parses the flags and the token id, and loads the configuration.
func (c *TokenChangeCommand) ParseFlags(ctx context.Context, args []string) error {
	usage := tokenRevokeUsage
	if c.verb == "rotate" {
		usage = tokenRotateUsage
	}
	fs := newFlagSet("approvald token "+c.verb, usage, c.stderr)
	rest, err := c.parse(fs, args, 1)
	if err != nil {
		return err
	}
	if len(rest) == 0 || rest[0] == "" {
		return errors.New("the token ID is required (see approvald token list)")
	}
	c.id = rest[0]
	return nil
}

// Run revokes or rotates the token.
func (c *TokenChangeCommand) Run(ctx context.Context) error {
	svc, err := c.open(ctx)
	if err != nil {
		return err
	}
	log := newLogger(c.stderr)
	if c.verb == "revoke" {
		t, err := svc.RevokeToken(ctx, tokenCommand, c.id)
		if err != nil {
			return plain("revoke token", err)
		}
		log.Info("token revoked", "token_id", t.ID, "subject", t.Subject, "revoked_at", t.RevokedAt)
		_, err = fmt.Fprintln(c.stdout, t.ID)
		return err
	}
	secret, t, err := svc.RotateToken(ctx, tokenCommand, c.id)
	if err != nil {
		return plain("rotate token", err)
	}
	if _, err := fmt.Fprintln(c.stdout, secret); err != nil {
		return fmt.Errorf("print token: %w", err)
	}
	log.Info("token rotated", "token_id", c.id, "new_token_id", t.ID, "subject", t.Subject, "role", t.Role)
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func when(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format(time.RFC3339)
}

// validateSubject refuses names that could not be told apart in an approvers list or a log
// line: empty, padded, or holding control characters; and the rest of the rules for a
// person's name (approval.NormalizeName), so that a token's subject is always a name the API
// accepts as a requester or an approver. A case variant passes: the token is made for its
// normalised form.
func validateSubject(s string) error {
	switch {
	case s == "":
		return errors.New("--subject is required")
	case strings.TrimSpace(s) != s:
		return fmt.Errorf("--subject %q: leading or trailing white space", s)
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return fmt.Errorf("--subject %q: control characters", s)
	}
	if _, err := approval.NormalizeName("--subject", s); err != nil {
		return errors.New(approval.ErrorMessage(err))
	}
	return nil
}

const tokenUsage = `Usage: approvald token create|list|revoke|rotate [flags]

	create --subject NAME --role ROLE [--name TEXT] [--expires-in DURATION]
	                    make a token and print it, alone, on stdout
	list [--json]       every token: id, name, subject, role, created, expires, last used, revoked
	revoke ID           revoke a token: no replica accepts it from then on
	rotate ID           a new token for the same subject, role and name, printed alone;
	                    the old one revoked in the same transaction

Run "approvald token <verb> -h" for its flags.
`

const tokenCreateUsage = `Usage: approvald token create --subject NAME --role ROLE [--name TEXT] [--expires-in DURATION] [flags]

Stores the hash of a new random bearer token and prints the token, alone, on stdout.
Roles: requester, approver, operator, admin.

Flags:
`

const tokenListUsage = `Usage: approvald token list [--json] [flags]

Prints every token, newest first, without its secret: id, name, subject, role, created,
expires, last used (to within a minute), revoked.

Flags:
`

const tokenRevokeUsage = `Usage: approvald token revoke ID [flags]

Revokes the token: from the moment this returns, no replica accepts it. Prints its id.

Flags:
`

const tokenRotateUsage = `Usage: approvald token rotate ID [flags]

Makes a new token for the same subject, role and name (and lifetime, if it expires), revokes
the old one in the same transaction, and prints the new token, alone, on stdout.

Flags:
`
