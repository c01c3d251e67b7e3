package sqlite

import (
	"context"
	"time"

	"github.com/approvald/approval/internal/sqldb"
)

// bootstrapKey marks, in meta, that this database has had its bootstrap token.
const bootstrapKey = "bootstrap_token"

// BootstrapInsert writes the marker row in meta. Write transactions on one file are
// serialized (BEGIN IMMEDIATE), so of several processes starting at once exactly one inserts
// it.
func (t *ruleTx) BootstrapInsert(ctx context.Context, tokenID string) (bool, error) {
	res, err := t.tx.ExecContext(ctx, `
		INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING`,
		bootstrapKey, tokenID)
	if err != nil {
		return false, fail("claim bootstrap", err)
	}
	n, err := res.RowsAffected()
	return n == 1, fail("claim bootstrap", err)
}

// TokenSetLastUsedIfOlder takes the write lock briefly; it runs beside no request.
func (s *Store) TokenSetLastUsedIfOlder(ctx context.Context, id string, every time.Duration) error {
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return fail("touch token", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, sqldb.TokenTouchSQL(dialect), micros(tx.now), id, micros(tx.now.Add(-every))); err != nil {
		return fail("touch token", err)
	}
	return fail("touch token", tx.commit())
}
