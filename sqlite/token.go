package sqlite

import (
	"context"

	"github.com/approvald/approval"
)

// bootstrapKey marks, in meta, that this database has had its bootstrap token.
const bootstrapKey = "bootstrap_token"

// TokenInsert: a duplicate id or hash is a unique violation, ECONFLICT (classify).
func (t *ruleTx) TokenInsert(ctx context.Context, tok approval.Token) error {
	_, err := t.tx.ExecContext(ctx, `
		INSERT INTO tokens (id, subject, role, hash, created_at) VALUES (?, ?, ?, ?, ?)`,
		tok.ID, tok.Subject, string(tok.Role), tok.Hash, micros(tok.CreatedAt))
	return fail("insert token", err)
}

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
