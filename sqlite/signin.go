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
