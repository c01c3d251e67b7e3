package postgres

import (
	"context"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/sqldb"
)

// BootstrapInsert runs at once, not queued: the Service needs its answer. The single-row
// bootstrap table decides: of several transactions inserting at once, one inserts and the
// others wait for its commit and then insert nothing.
func (t *ruleTx) BootstrapInsert(ctx context.Context, tokenID string) (bool, error) {
	tag, err := t.Exec(ctx, `
		INSERT INTO bootstrap (token_id, created_at) VALUES ($1, $2)
		ON CONFLICT (singleton) DO NOTHING`, tokenID, t.now)
	return tag.RowsAffected() == 1, translate("claim bootstrap", err)
}

// TokenSetLastUsedIfOlder is one statement outside a transaction: one round trip.
func (s *Store) TokenSetLastUsedIfOlder(ctx context.Context, id string, every time.Duration) error {
	conn, now, err := s.acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	_, err = conn.Exec(ctx, sqldb.TokenTouchSQL(dialect), now, id, now.Add(-every))
	return translate("touch token", err)
}

// TokenGetForUpdate locks the row in the statement that reads it.
func (t *ruleTx) TokenGetForUpdate(ctx context.Context, id string) (*approval.Token, error) {
	tok, err := sqldb.TokenByID(ctx, querier{t}, dialect, id, "FOR UPDATE")
	return tok, translate("read token", err)
}

// TokenSetRevokedIfActive: 1/count(*) divides by zero when the guard matched no row, which
// aborts the transaction inside the database.
func (t *ruleTx) TokenSetRevokedIfActive(ctx context.Context, id string) error {
	t.enqueue("revoke token", `
		WITH changed AS (
			UPDATE tokens SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL
			RETURNING 1
		)
		SELECT 1 / count(*) FROM changed`, id, t.now)
	return nil
}

// TokenInsert is queued: a duplicate id or hash surfaces, as ECONFLICT, from the next
// statement or Commit.
func (t *ruleTx) TokenInsert(ctx context.Context, tok approval.Token) error {
	sql, args := sqldb.TokenInsert(dialect, tok)
	t.enqueue("insert token", sql, args...)
	return nil
}
