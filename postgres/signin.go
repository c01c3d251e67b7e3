package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/approvald/approval"
)

// SigninTokenCountSinceForUpdate takes a transaction-scoped advisory lock on the subject in
// a statement of its own, before the count (in the same round trip): the count's snapshot is
// then taken after the lock is held, so two requests for one person count one after the
// other and the limit holds.
func (t *ruleTx) SigninTokenCountSinceForUpdate(ctx context.Context, subject string, since time.Time) (int, error) {
	t.enqueue("lock sign-in links", `SELECT pg_advisory_xact_lock(hashtextextended('signin:' || $1::text, 0))`, subject)
	var n int
	err := t.QueryRow(ctx, `SELECT count(*) FROM signin_tokens WHERE subject = $1 AND created_at >= $2`,
		subject, since).Scan(&n)
	return n, translate("count sign-in links", err)
}

// SigninTokenInsert is queued like every write.
func (t *ruleTx) SigninTokenInsert(ctx context.Context, hash []byte, subject string, expiresAt time.Time) error {
	t.enqueue("insert sign-in link", `
		INSERT INTO signin_tokens (hash, subject, created_at, expires_at) VALUES ($1, $2, $3, $4)`,
		hash, subject, t.now, expiresAt)
	return nil
}

// SigninTokenUseIfValid goes out at once: its answer decides the sign-in. Racing uses wait on
// the row's lock, and the losers find used_at set and update nothing.
func (t *ruleTx) SigninTokenUseIfValid(ctx context.Context, hash []byte) (string, error) {
	var subject string
	err := t.QueryRow(ctx, `
		UPDATE signin_tokens SET used_at = $1
		WHERE hash = $2 AND used_at IS NULL AND expires_at > $1
		RETURNING subject`,
		t.now, hash).Scan(&subject)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", approval.Errorf(approval.ENOTFOUND, "no unused, unexpired sign-in link has this token")
	}
	return subject, translate("use sign-in link", err)
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
		tx.now.Add(-keep), tx.now, limit)
	if err != nil {
		return 0, translate("purge sign-in links", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	return int(tag.RowsAffected()), nil
}
