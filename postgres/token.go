package postgres

import (
	"context"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/sqldb"
)

// CreateToken stores a token record. A duplicate id or hash is ECONFLICT.
func (s *Store) CreateToken(ctx context.Context, t approval.Token) error {
	tx, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)

	if err := tx.insertToken(ctx, t); err != nil {
		return err
	}
	return tx.commit(ctx, "commit token")
}

// Bootstrap stores t only if no token was ever bootstrapped here. The single-row bootstrap
// table decides: of several processes inserting at once, one inserts and the others wait
// for its commit and then insert nothing.
func (s *Store) Bootstrap(ctx context.Context, t approval.Token) (bool, error) {
	tx, err := s.begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(ctx)

	tag, err := tx.Exec(ctx, `
		INSERT INTO bootstrap (token_id, created_at) VALUES ($1, $2)
		ON CONFLICT (singleton) DO NOTHING`, t.ID, tx.now)
	if err != nil {
		return false, translate("claim bootstrap", err)
	}
	if tag.RowsAffected() == 0 {
		return false, nil
	}
	if err := tx.insertToken(ctx, t); err != nil {
		return false, err
	}
	if err := tx.commit(ctx, "commit bootstrap"); err != nil {
		return false, err
	}
	return true, nil
}

func (tx *tx) insertToken(ctx context.Context, t approval.Token) error {
	_, err := tx.Exec(ctx, insertTokenSQL, tokenArgs(t)...)
	return translate("insert token", err)
}

const insertTokenSQL = `
	INSERT INTO tokens (id, subject, role, hash, created_at, name, expires_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7)`

func tokenArgs(t approval.Token) []any {
	return []any{t.ID, t.Subject, string(t.Role), t.Hash, t.CreatedAt, t.Name, t.ExpiresAt}
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
		SELECT 1 / count(*) FROM changed`, id, t.tx.now)
	return nil
}

func (t *ruleTx) TokenInsert(ctx context.Context, tok approval.Token) error {
	t.enqueue("insert token", insertTokenSQL, tokenArgs(tok)...)
	return nil
}
