package postgres

import (
	"context"

	"github.com/approvald/approval"
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
	return tx.Commit(ctx)
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
	if err := tx.Commit(ctx); err != nil {
		return false, err
	}
	return true, nil
}

func (tx *ruleTx) insertToken(ctx context.Context, t approval.Token) error {
	_, err := tx.Exec(ctx, `
		INSERT INTO tokens (id, subject, role, hash, created_at) VALUES ($1, $2, $3, $4, $5)`,
		t.ID, t.Subject, string(t.Role), t.Hash, t.CreatedAt)
	return translate("insert token", err)
}
