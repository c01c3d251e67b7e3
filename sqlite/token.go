package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/sqldb"
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
		INSERT INTO tokens (id, subject, role, hash, created_at, name, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		t.ID, t.Subject, string(t.Role), t.Hash, micros(t.CreatedAt), t.Name, nullMicros(t.ExpiresAt),
	); err != nil {
		if isUnique(err) {
			return approval.Errorf(approval.ECONFLICT, "a token with this id or hash already exists")
		}
		return fmt.Errorf("insert token: %w", err)
	}
	return nil
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

// TokenGetForUpdate needs no lock of its own: the write lock is held.
func (t *ruleTx) TokenGetForUpdate(ctx context.Context, id string) (*approval.Token, error) {
	tok, err := sqldb.TokenByID(ctx, querier{t.tx.Tx}, dialect, id, "")
	return tok, fail("read token", err)
}

func (t *ruleTx) TokenSetRevokedIfActive(ctx context.Context, id string) error {
	res, err := t.tx.ExecContext(ctx, `UPDATE tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL`,
		micros(t.tx.now), id)
	return fail("revoke token", changedOne(res, err, "token", id))
}

func (t *ruleTx) TokenInsert(ctx context.Context, tok approval.Token) error {
	return fail("insert token", insertToken(ctx, t.tx, tok))
}
