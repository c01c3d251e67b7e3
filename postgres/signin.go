package postgres

import (
	"context"

	"github.com/approvald/approval"
)

// SigninAskCountsForUpdate takes a transaction-scoped advisory lock in a statement of its
// own, before the counts (in the same round trip): their snapshot is then taken after the
// lock is held, so two requests for one person count one after the other and the limits
// hold. A request that matched nobody locks its client instead of the empty subject, so
// that such requests do not all queue behind one lock.
func (t *ruleTx) SigninAskCountsForUpdate(ctx context.Context, p approval.SigninCountParams) (approval.SigninCounts, error) {
	key := "signin:" + p.Subject
	if p.Subject == "" {
		key = "signin-client:" + p.Client
	}
	t.enqueue("lock sign-in links", `SELECT pg_advisory_xact_lock(hashtextextended($1::text, 0))`, key)
	return t.Tx.SigninAskCounts(ctx, p)
}
