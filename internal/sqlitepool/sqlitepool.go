// Package sqlitepool lets the benchmark's baseline (internal/loadtest) open SQLite
// connections exactly as the sqlite store opens its own, without the sqlite package exporting
// them: the sqlite package sets Open when it is initialised.
package sqlitepool

import (
	"context"
	"database/sql"
)

// Open opens the two pools a sqlite Store works on: a write pool of exactly one connection
// whose transactions begin IMMEDIATE, and a read-only pool, both with the store's pragmas.
// The caller closes both. It is nil until the sqlite package is imported.
var Open func(ctx context.Context, dsn string) (write, read *sql.DB, err error)
