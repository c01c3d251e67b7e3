package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"

	"github.com/approvald/approval"
)

var _ command = (*TokenCreateCommand)(nil)

// TokenCreateCommand stores the hash of a new random bearer token and prints the token, alone,
// on stdout, so that scripts can capture it with $(approvald token create ...).
type TokenCreateCommand struct {
	stdout io.Writer // the token, and nothing else
	stderr io.Writer // JSON logs

	config  Config
	subject string
	role    approval.Role
	store   store
}

// NewTokenCreateCommand returns a TokenCreateCommand writing to the given streams.
func NewTokenCreateCommand(stdout, stderr io.Writer) *TokenCreateCommand {
	return &TokenCreateCommand{stdout: stdout, stderr: stderr}
}

// ParseFlags parses the flags and loads the configuration.
func (c *TokenCreateCommand) ParseFlags(ctx context.Context, args []string) error {
	fs := newFlagSet("approvald token create", tokenUsage, c.stderr)
	var cf configFlags
	cf.register(fs)
	fs.StringVar(&c.subject, "subject", "", "the token's subject `NAME`: the requester or approver name it acts as")
	role := fs.String("role", "", "the `ROLE`: requester, approver, operator or admin")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := validateSubject(c.subject); err != nil {
		return err
	}
	c.role = approval.Role(*role)
	if !c.role.Valid() {
		return fmt.Errorf("--role %q: must be requester, approver, operator or admin", *role)
	}
	cfg, err := cf.load()
	if err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	c.config = cfg
	return nil
}

// Run stores the new token's hash and prints the token.
func (c *TokenCreateCommand) Run(ctx context.Context) error {
	s, err := openStore(ctx, c.config.DatabaseURL, nil, approval.Routing{})
	if err != nil {
		return err
	}
	c.store = s
	secret, t := approval.NewToken(c.subject, c.role, approval.Now())
	if err := (&approval.Service{Store: c.store}).CreateToken(ctx, t); err != nil {
		return fmt.Errorf("create token: %w", err)
	}
	if _, err := fmt.Fprintln(c.stdout, secret); err != nil {
		return fmt.Errorf("print token: %w", err)
	}
	newLogger(c.stderr).Info("token created", "token_id", t.ID, "subject", t.Subject, "role", t.Role)
	return nil
}

// Close closes the store.
func (c *TokenCreateCommand) Close() error {
	if c.store == nil {
		return nil
	}
	if err := c.store.Close(); err != nil {
		return fmt.Errorf("close store: %w", err)
	}
	return nil
}

// validateSubject refuses names that could not be told apart in an approvers list or a log
// line: empty, padded, or holding control characters.
func validateSubject(s string) error {
	switch {
	case s == "":
		return errors.New("--subject is required")
	case strings.TrimSpace(s) != s:
		return fmt.Errorf("--subject %q: leading or trailing white space", s)
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return fmt.Errorf("--subject %q: control characters", s)
	}
	// The rest of the input policy for names (docs/http-api.md), so that a token's subject is
	// always a name the API accepts as a requester or an approver.
	if err := approval.CheckName("--subject", s, approval.MaxNameLength); err != nil {
		return errors.New(approval.ErrorMessage(err))
	}
	return nil
}

const tokenUsage = `Usage: approvald token create --subject NAME --role ROLE [flags]

Stores the hash of a new random bearer token and prints the token, alone, on stdout.
Roles: requester, approver, operator, admin.

Flags:
`
