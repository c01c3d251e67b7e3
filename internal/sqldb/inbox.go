package sqldb

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/approvald/approval"
)

// The inbox's claim and purges, one statement each. Each first picks its rows in a WITH
// clause, oldest first, skipping on PostgreSQL the rows another transaction holds (a claim
// racing on another replica, an operator's retry), and then changes exactly those: a
// WITH query that locks rows is run once, never folded into the statement that uses it.

// InboxClaimDue sets the due events' lease (see approval.Tx) and returns them.
func (t Tx) InboxClaimDue(ctx context.Context, limit int, leaseUntil time.Time, claim string) ([]*approval.InboxEvent, error) {
	events, err := query(ctx, t, `
		WITH due AS (
			SELECT id FROM inbox_events
			WHERE status = 'pending' AND next_attempt_at <= $1
				AND (lease_token = '' OR lease_expires_at <= $1)
			ORDER BY received_at, id
			LIMIT $2`+t.Dialect.SkipLocked+`
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

func (t Tx) InboxDeleteHandled(ctx context.Context, receivedBefore time.Time, limit int) (int, error) {
	n, err := t.exec(ctx, "purge inbox events", `
		WITH old AS (
			SELECT id FROM inbox_events
			WHERE status IN ('processed', 'ignored', 'stale') AND received_at < $1
			ORDER BY received_at, id
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
			ORDER BY received_at, id
			LIMIT $2`+t.Dialect.SkipLocked+`
		)
		UPDATE inbox_events SET body = NULL WHERE id IN (SELECT id FROM old)`,
		t.Dialect.Time(receivedBefore), limit)
	return int(n), err
}

// unqualified returns columns, written for the table alias, without it: SQLite's RETURNING
// takes no alias.
func unqualified(columns, alias string) string {
	return strings.ReplaceAll(columns, alias+".", "")
}
