package sqlite

import (
	"context"
	"time"

	"github.com/approvald/approval"
)

// PurgeSigninTokens deletes up to limit links made more than keep ago and expired.
func (s *Store) PurgeSigninTokens(ctx context.Context, keep time.Duration, limit int) (int, error) {
	if limit < 1 || keep < 0 {
		return 0, approval.Errorf(approval.EINVALID, "limit must be positive and keep not negative")
	}
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return 0, fail("purge sign-in links", err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `
		DELETE FROM signin_tokens WHERE rowid IN (
			SELECT rowid FROM signin_tokens
			WHERE created_at < ? AND expires_at <= ?
			LIMIT ?)`,
		micros(tx.now.Add(-keep)), micros(tx.now), limit)
	if err != nil {
		return 0, fail("purge sign-in links", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fail("purge sign-in links", err)
	}
	if err := tx.commit(); err != nil {
		return 0, fail("purge sign-in links", err)
	}
	return int(n), nil
}
