package postgres

import (
	"context"
	"time"

	"github.com/approvald/approval"
)

// SigninTokenCountSinceForUpdate takes a transaction-scoped advisory lock on the subject in
// a statement of its own, before the count (in the same round trip): the count's snapshot is
// then taken after the lock is held, so two requests for one person count one after the
// other and the limit holds.
func (t *ruleTx) SigninTokenCountSinceForUpdate(ctx context.Context, subject string, since time.Time) (int, error) {
	t.enqueue("lock sign-in links", `SELECT pg_advisory_xact_lock(hashtextextended('signin:' || $1::text, 0))`, subject)
	return t.Tx.SigninTokenCountSinceForUpdate(ctx, subject, since)
}

// PurgeSigninTokens deletes up to limit links made more than keep ago and expired. SKIP
// LOCKED: a link being used at that moment is left for the next sweep, and replicas
// sweeping at once do not wait on each other.
func (s *Store) PurgeSigninTokens(ctx context.Context, keep time.Duration, limit int) (int, error) {
	if limit <= 0 || keep < 0 {
		return 0, approval.Errorf(approval.EINVALID, "limit must be positive and keep not negative")
	}
	tx, err := s.begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx)
	tag, err := tx.Exec(ctx, `
		DELETE FROM signin_tokens t
		USING (
			SELECT hash FROM signin_tokens
			WHERE created_at < $1 AND expires_at <= $2
			LIMIT $3
			FOR UPDATE SKIP LOCKED
		) old
		WHERE t.hash = old.hash`,
		tx.At.Add(-keep), tx.At, limit)
	if err != nil {
		return 0, translate("purge sign-in links", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	return int(tag.RowsAffected()), nil
}
