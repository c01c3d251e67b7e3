package sqldb

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/approvald/approval"
)

// The inbox's claim and purges, one statement each. Each first picks its rows in a WITH
// clause, oldest first (the claim by when they are due, the purges by when they arrived),
// skipping on PostgreSQL the rows another transaction holds (a claim racing on another
// replica, an operator's retry), and then changes exactly those: a WITH query that locks
// rows is run once, never folded into the statement that uses it.

// dueInboxSQL picks the events a claim takes, oldest due first, up to $2 of them: pending,
// due at $1 and held by no live lease. Its SELECT list is the caller's; the dialect's SKIP
// LOCKED follows.
const dueInboxSQL = ` FROM inbox_events i
			WHERE status = 'pending' AND next_attempt_at <= $1
				AND (lease_token = '' OR lease_expires_at <= $1)
			ORDER BY next_attempt_at, id
			LIMIT $2`

// InboxClaimDue sets the due events' lease (see approval.Tx) and returns them.
func (t Tx) InboxClaimDue(ctx context.Context, limit int, leaseUntil time.Time, claim string) ([]*approval.InboxEvent, error) {
	events, err := query(ctx, t, `
		WITH due AS (
			SELECT id`+dueInboxSQL+t.Dialect.SkipLocked+`
		)
		UPDATE inbox_events
		SET lease_token = $3 || ':' || id, lease_expires_at = $4, attempts = attempts + 1
		WHERE id IN (SELECT id FROM due)
		RETURNING `+unqualified(InboxColumns, "i")+`, body`,
		ScanInbox, t.Dialect.Time(t.At), limit, claim, t.Dialect.Time(leaseUntil))
	// RETURNING has no order of its own.
	slices.SortFunc(events, func(a, b *approval.InboxEvent) int {
		return cmp.Or(a.ReceivedAt.Compare(b.ReceivedAt), strings.Compare(a.ID, b.ID))
	})
	return events, t.Translate("claim inbox events", err)
}

// InboxLockDue locks the events InboxClaimDue would claim (see approval.Tx); on SQLite the
// write transaction holds them all.
func (t Tx) InboxLockDue(ctx context.Context, limit int) ([]*approval.InboxEvent, error) {
	events, err := query(ctx, t, `SELECT `+InboxColumns+`, body`+dueInboxSQL+t.Dialect.SkipLocked,
		ScanInbox, t.Dialect.Time(t.At), limit)
	return events, t.Translate("lock due inbox events", err)
}

func (t Tx) InboxDeleteHandled(ctx context.Context, receivedBefore time.Time, limit int) (int, error) {
	n, err := t.exec(ctx, "purge inbox events", `
		WITH old AS (
			SELECT id FROM inbox_events
			WHERE status IN ('processed', 'ignored', 'stale') AND received_at < $1
			ORDER BY `+t.Dialect.InboxBodyPurgeOrder+`
			LIMIT $2`+t.Dialect.SkipLocked+`
		)
		DELETE FROM inbox_events WHERE id IN (SELECT id FROM old)`,
		t.Dialect.Time(receivedBefore), limit)
	return int(n), err
}

func (t Tx) InboxClearBodyHandled(ctx context.Context, receivedBefore time.Time, limit int) (int, error) {
	n, err := t.exec(ctx, "purge inbox bodies", `
		WITH old AS (
			SELECT id FROM inbox_events
			WHERE status IN ('processed', 'ignored', 'stale') AND body IS NOT NULL AND received_at < $1
			ORDER BY `+t.Dialect.InboxBodyPurgeOrder+`
			LIMIT $2`+t.Dialect.SkipLocked+`
		)
		UPDATE inbox_events SET body = NULL WHERE id IN (SELECT id FROM old)`,
		t.Dialect.Time(receivedBefore), limit)
	return int(n), err
}

// InboxRecord is an intake's statements (approval.InboxStore.RecordInbox), run in this order:
// Insert stores the event unless its (source, event_id), or its (source, body_hash), is
// taken (a concurrent delivery of the same event makes it wait for that transaction and then
// store nothing); Conflict counts a different body under a taken id, the first body being
// kept; Stored reads the event kept, the new one's own row when Insert stored it, and the
// one whose id matches before one whose body hash does (a replay under another id).
type InboxRecord struct {
	Insert, Conflict, Stored Statement
	// Headers and BodyHash are the event's headers and body hash as stored (JSON; nil, which
	// binds as NULL, unless the scheme hashes bodies), for a driver that writes the event with
	// a statement of its own (PostgreSQL's batches).
	Headers  string
	BodyHash []byte
}

// Statement is one statement in a dialect, with its arguments.
type Statement struct {
	SQL  string
	Args []any
}

// RecordInbox checks e, completes it as it is stored (headers {} when it has none, an empty
// body rather than none, which would read as purged, received at now when unset), and
// returns its intake's statements in d.
func RecordInbox(d Dialect, e *approval.InboxEvent, now time.Time) (InboxRecord, error) {
	if e.ID == "" || e.Source == "" || e.EventID == "" {
		return InboxRecord{}, approval.Errorf(approval.EINVALID, "an inbox event needs an id, a source and an event id")
	}
	if e.Headers == nil {
		e.Headers = map[string]string{}
	}
	headers, err := json.Marshal(e.Headers)
	if err != nil {
		return InboxRecord{}, fmt.Errorf("encode inbox headers: %w", err)
	}
	if e.Body == nil {
		e.Body = []byte{}
	}
	if e.ReceivedAt.IsZero() {
		e.ReceivedAt = now
	}
	// NULL when the scheme asks for no body hash, so that the unique index leaves the event out.
	var hash []byte
	if len(e.BodyHash) > 0 {
		hash = e.BodyHash
	}
	return InboxRecord{
		Headers:  string(headers),
		BodyHash: hash,
		Insert: Statement{d.SQL(`
			INSERT INTO inbox_events (id, source, event_id, type, headers, body, body_hash, received_at,
				status, next_attempt_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'pending', $9)
			ON CONFLICT DO NOTHING`),
			[]any{e.ID, e.Source, e.EventID, e.Type, string(headers), e.Body, nullBytes(hash), d.Time(e.ReceivedAt), d.Time(now)}},
		Conflict: Statement{d.SQL(`
			UPDATE inbox_events SET conflicts = conflicts + 1, last_conflict_at = $3
			WHERE source = $1 AND event_id = $2 AND body IS NOT NULL AND body <> $4`),
			[]any{e.Source, e.EventID, d.Time(now), e.Body}},
		Stored: Statement{d.SQL(`
			SELECT ` + InboxColumns + `, i.body FROM inbox_events i
			WHERE i.id = COALESCE(
				(SELECT id FROM inbox_events WHERE source = $1 AND event_id = $2),
				(SELECT id FROM inbox_events WHERE source = $1 AND body_hash = $3))`),
			[]any{e.Source, e.EventID, nullBytes(hash)}},
	}, nil
}

// Recorded makes e the event stored, as the intake that stored or found it answers it, and
// reports whether it was there before (a duplicate). A worker's claim token is not the
// caller's to hold.
func Recorded(e, stored *approval.InboxEvent) (duplicate bool) {
	duplicate, hash := stored.ID != e.ID, e.BodyHash
	*e = *stored
	e.LeaseToken = ""
	if !duplicate {
		e.BodyHash = hash
	}
	return duplicate
}

// unqualified returns columns, written for the table alias, without it: SQLite's RETURNING
// takes no alias.
func unqualified(columns, alias string) string {
	return strings.ReplaceAll(columns, alias+".", "")
}
