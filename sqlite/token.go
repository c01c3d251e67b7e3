package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/approvald/approval"
)

// bootstrapKey marks, in meta, that this database has had its bootstrap token.
const bootstrapKey = "bootstrap_token"

// CreateToken stores a token record. A duplicate id or hash is ECONFLICT.
func (s *Store) CreateToken(ctx context.Context, t approval.Token) error {
	if !t.Role.Valid() {
		return approval.Errorf(approval.EINVALID, "unknown role %q", t.Role)
	}
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return fail("create token", err)
	}
	defer tx.Rollback()

	if err := insertToken(ctx, tx, t); err != nil {
		return fail("create token", err)
	}
	if err := tx.commit(); err != nil {
		return fail("create token", err)
	}
	return nil
}

// TokenByHash finds the token with the given hash, or ENOTFOUND.
func (s *Store) TokenByHash(ctx context.Context, hash []byte) (*approval.Token, error) {
	tx, err := s.beginRead(ctx)
	if err != nil {
		return nil, fail("token by hash", err)
	}
	defer tx.Rollback()

	var (
		t         = approval.Token{Hash: hash}
		role      string
		createdAt int64
	)
	err = tx.QueryRowContext(ctx, `SELECT id, subject, role, created_at FROM tokens WHERE hash = ?`, hash).
		Scan(&t.ID, &t.Subject, &role, &createdAt)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, approval.Errorf(approval.ENOTFOUND, "token not found")
	} else if err != nil {
		return nil, fail("token by hash", err)
	}
	t.Role, t.CreatedAt = approval.Role(role), fromMicros(createdAt)
	return &t, nil
}

// Bootstrap stores t only if this database never had a bootstrap token, and reports whether
// it did. The marker row in meta and the token are written in one transaction, and write
// transactions on one file are serialized (BEGIN IMMEDIATE), so of several processes starting
// at once exactly one inserts the marker.
func (s *Store) Bootstrap(ctx context.Context, t approval.Token) (bool, error) {
	if !t.Role.Valid() {
		return false, approval.Errorf(approval.EINVALID, "unknown role %q", t.Role)
	}
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return false, fail("bootstrap", err)
	}
	defer tx.Rollback()

	res, err := tx.ExecContext(ctx, `
		INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING`,
		bootstrapKey, t.ID)
	if err != nil {
		return false, fail("bootstrap", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return false, fail("bootstrap", err)
	} else if n == 0 {
		return false, nil // bootstrapped before, perhaps by another process
	}
	if err := insertToken(ctx, tx, t); err != nil {
		return false, fail("bootstrap", err)
	}
	if err := tx.commit(); err != nil {
		return false, fail("bootstrap", err)
	}
	return true, nil
}

func insertToken(ctx context.Context, tx *tx, t approval.Token) error {
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO tokens (id, subject, role, hash, created_at) VALUES (?, ?, ?, ?, ?)`,
		t.ID, t.Subject, string(t.Role), t.Hash, micros(t.CreatedAt),
	); err != nil {
		if isUnique(err) {
			return approval.Errorf(approval.ECONFLICT, "a token with this id or hash already exists")
		}
		return fmt.Errorf("insert token: %w", err)
	}
	return nil
}
