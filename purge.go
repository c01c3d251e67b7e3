package approval

import (
	"context"
	"time"
)

// The sweeper's purges (worker.Sweeper): rows kept past their use are deleted in batches of at
// most limit, each batch one short transaction, so that no purge holds locks for long on a
// large backlog; the sweeper repeats a purge while it returns limit or more. Rows another
// transaction holds at that moment are skipped, not waited for, and left for the next pass.

// PurgeInbox deletes up to limit handled events (processed, ignored or stale) received more
// than keepIDs ago, then clears the bodies of up to limit other handled events received more
// than keepBodies ago, and returns how many events it deleted plus how many bodies it
// cleared. Pending and failed events are kept whatever their age, body included: a pending
// one is not yet applied, and a failed one waits, body and all, for an operator's RetryInbox.
func (s *Service) PurgeInbox(ctx context.Context, keepIDs, keepBodies time.Duration, limit int) (int, error) {
	if limit <= 0 || keepIDs < 0 || keepBodies < 0 {
		return 0, Errorf(EINVALID, "limit must be positive and retention periods not negative")
	}
	return inTx(ctx, s, func(tx Tx) (int, error) {
		deleted, err := tx.InboxDeleteHandled(ctx, tx.Now().Add(-keepIDs), limit)
		if err != nil {
			return 0, err
		}
		cleared, err := tx.InboxClearBodyHandled(ctx, tx.Now().Add(-keepBodies), limit)
		return deleted + cleared, err
	})
}

// PurgeSigninTokens deletes up to limit sign-in links made more than keep ago whose expiry has
// passed, used or not, and with what is left of limit the requests for links made more than
// keep ago, and returns how many rows in all (the sweeper passes SigninKeep).
func (s *Service) PurgeSigninTokens(ctx context.Context, keep time.Duration, limit int) (int, error) {
	if limit <= 0 || keep < 0 {
		return 0, Errorf(EINVALID, "limit must be positive and keep not negative")
	}
	return inTx(ctx, s, func(tx Tx) (int, error) {
		before := tx.Now().Add(-keep)
		links, err := tx.SigninTokenDeleteExpired(ctx, before, limit)
		if err != nil || links == limit {
			return links, err
		}
		asks, err := tx.SigninAskDeleteBefore(ctx, before, limit-links)
		return links + asks, err
	})
}
