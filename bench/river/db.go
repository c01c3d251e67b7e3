package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
)

// pollInterval is how often a run counts finished units in the database. Both systems are
// watched with the same query cadence, so the cost and the resolution (±pollInterval on runs
// of seconds) are the same on both sides.
const pollInterval = 10 * time.Millisecond

// newSchema creates a schema with a fresh random name, so that every run starts on empty
// tables whatever earlier runs left behind.
func newSchema(ctx context.Context, conn *pgx.Conn, prefix string) (string, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("random schema name: %w", err)
	}
	name := prefix + hex.EncodeToString(b[:])
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		return "", fmt.Errorf("create schema %s: %w", name, err)
	}
	return name, nil
}

// dropSchema removes a run's schema and everything in it.
func dropSchema(ctx context.Context, conn *pgx.Conn, name string) error {
	if _, err := conn.Exec(ctx, "DROP SCHEMA "+name+" CASCADE"); err != nil {
		return fmt.Errorf("drop schema %s: %w", name, err)
	}
	return nil
}

// withSearchPath returns base with search_path set to schema, which is how approvald is
// placed in a schema (its SQL uses unqualified names).
func withSearchPath(base, schema string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("parse database url: %w", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// waitCount runs query, a SELECT count(*), every pollInterval until it returns at least n,
// and returns when it first did. It gives up when ctx ends, reporting the last count.
func waitCount(ctx context.Context, conn *pgx.Conn, query string, n int) (time.Time, error) {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	last := -1
	for {
		if err := conn.QueryRow(ctx, query).Scan(&last); err != nil {
			return time.Time{}, fmt.Errorf("count finished units (%d so far): %w", max(last, 0), err)
		}
		if last >= n {
			return time.Now(), nil
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("wait for %d finished units, %d so far: %w", n, last, ctx.Err())
		}
	}
}

// latencies runs query, which returns one duration per unit of work, in seconds, and returns
// them.
func latencies(ctx context.Context, conn *pgx.Conn, query string, args ...any) ([]time.Duration, error) {
	rows, err := conn.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("query latencies: %w", err)
	}
	var out []time.Duration
	for rows.Next() {
		var s float64
		if err := rows.Scan(&s); err != nil {
			return nil, fmt.Errorf("scan latency: %w", err)
		}
		out = append(out, time.Duration(s*float64(time.Second)))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read latencies: %w", err)
	}
	return out, nil
}
