package main

import (
	"context"
	"fmt"
	"io"
)

var _ command = (*MigrateCommand)(nil)

// MigrateCommand applies the database migrations and exits. serve migrates on start too;
// this lets a deployment migrate once before it starts several replicas.
type MigrateCommand struct {
	stderr io.Writer // JSON logs

	config Config
	store  store
}

// NewMigrateCommand returns a MigrateCommand logging to stderr.
func NewMigrateCommand(stderr io.Writer) *MigrateCommand {
	return &MigrateCommand{stderr: stderr}
}

// ParseFlags parses the flags and loads the configuration.
func (c *MigrateCommand) ParseFlags(ctx context.Context, args []string) error {
	cfg, err := loadConfig("approvald migrate", migrateUsage, c.stderr, args)
	c.config = cfg
	return err
}

// Run opens the database, which applies the migrations.
func (c *MigrateCommand) Run(ctx context.Context) error {
	s, err := openStore(ctx, c.config.DatabaseURL, nil)
	if err != nil {
		return err
	}
	c.store = s
	newLogger(c.stderr).Info("database migrated")
	return nil
}

// Close closes the store.
func (c *MigrateCommand) Close() error {
	if c.store == nil {
		return nil
	}
	if err := c.store.Close(); err != nil {
		return fmt.Errorf("close store: %w", err)
	}
	return nil
}

const migrateUsage = `Usage: approvald migrate [flags]

Applies the database migrations and exits.

Flags:
`
