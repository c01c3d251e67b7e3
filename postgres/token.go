package postgres

import (
	"context"

	"github.com/approvald/approval"
)

func (t *ruleTx) TokenInsert(ctx context.Context, tok approval.Token) error {
	t.enqueue("insert token", `
		INSERT INTO tokens (id, subject, role, hash, created_at) VALUES ($1, $2, $3, $4, $5)`,
		tok.ID, tok.Subject, string(tok.Role), tok.Hash, tok.CreatedAt)
	return nil
}

// BootstrapInsert runs at once, not queued: the Service needs its answer. The single-row
// bootstrap table decides: of several transactions inserting at once, one inserts and the
// others wait for its commit and then insert nothing.
func (t *ruleTx) BootstrapInsert(ctx context.Context, tokenID string) (bool, error) {
	tag, err := t.Exec(ctx, `
		INSERT INTO bootstrap (token_id, created_at) VALUES ($1, $2)
		ON CONFLICT (singleton) DO NOTHING`, tokenID, t.now)
	return tag.RowsAffected() == 1, translate("claim bootstrap", err)
}
