package postgres

import (
	"context"
	"time"
)

// SigninTokenCountSinceForUpdate takes a transaction-scoped advisory lock on the subject in
// a statement of its own, before the count (in the same round trip): the count's snapshot is
// then taken after the lock is held, so two requests for one person count one after the
// other and the limit holds.
func (t *ruleTx) SigninTokenCountSinceForUpdate(ctx context.Context, subject string, since time.Time) (int, error) {
	t.enqueue("lock sign-in links", `SELECT pg_advisory_xact_lock(hashtextextended('signin:' || $1::text, 0))`, subject)
	return t.Tx.SigninTokenCountSinceForUpdate(ctx, subject, since)
}
