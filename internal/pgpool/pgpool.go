// Package pgpool lets the benchmark's baseline (internal/loadtest) open a PostgreSQL pool
// exactly as the postgres store opens its own, without the postgres package exporting it:
// the postgres package sets Open when it is initialised.
package pgpool

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Open returns a pool configured as a postgres Store's (pgx's defaults, or pool_max_conns
// and the like from the URL). The caller closes it. It is nil until the postgres package is
// imported.
var Open func(ctx context.Context, url string) (*pgxpool.Pool, error)
