package postgres

import (
	"context"
	"time"

	"github.com/approvald/approval/internal/sqldb"
)

// BootstrapInsert runs at once, not queued: the Service needs its answer. The single-row
// bootstrap table decides: of several transactions inserting at once, one inserts and the
// others wait for its commit and then insert nothing.
func (t *ruleTx) BootstrapInsert(ctx context.Context, tokenID string) (bool, error) {
	n, err := t.Exec(ctx, `
		INSERT INTO bootstrap (token_id, created_at) VALUES ($1, $2)
		ON CONFLICT (singleton) DO NOTHING`, tokenID, t.At)
	return n == 1, translate("claim bootstrap", err)
}

// TokenSetLastUsedIfOlder is one statement outside a transaction: one round trip.
func (s *Store) TokenSetLastUsedIfOlder(ctx context.Context, id string, every time.Duration) error {
	conn, now, err := s.acquire(ctx, s.pool)
	if err != nil {
		return err
	}
	defer conn.Release()
	_, err = conn.Exec(ctx, sqldb.TokenTouchSQL(dialect), now, id, now.Add(-every))
	return translate("touch token", err)
}
