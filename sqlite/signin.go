package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/approvald/approval"
)

// SigninTokenCountSinceForUpdate needs no lock of its own: the write lock orders every
// request.
func (t *ruleTx) SigninTokenCountSinceForUpdate(ctx context.Context, subject string, since time.Time) (int, error) {
	var n int
	err := t.tx.QueryRowContext(ctx, `
		SELECT count(*) FROM signin_tokens WHERE subject = ? AND created_at >= ?`,
		subject, micros(since)).Scan(&n)
	return n, fail("count sign-in links", err)
}

func (t *ruleTx) SigninTokenInsert(ctx context.Context, hash []byte, subject string, expiresAt time.Time) error {
	_, err := t.tx.ExecContext(ctx, `
		INSERT INTO signin_tokens (hash, subject, created_at, expires_at) VALUES (?, ?, ?, ?)`,
		hash, subject, micros(t.tx.now), micros(expiresAt))
	return fail("insert sign-in link", err)
}

func (t *ruleTx) SigninTokenUseIfValid(ctx context.Context, hash []byte) (string, error) {
	var subject string
	err := t.tx.QueryRowContext(ctx, `
		UPDATE signin_tokens SET used_at = ?1
		WHERE hash = ?2 AND used_at IS NULL AND expires_at > ?1
		RETURNING subject`,
		micros(t.tx.now), hash).Scan(&subject)
	if errors.Is(err, sql.ErrNoRows) {
		return "", approval.Errorf(approval.ENOTFOUND, "no unused, unexpired sign-in link has this token")
	}
	return subject, fail("use sign-in link", err)
}

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
