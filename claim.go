package approval

import (
	"context"
	"time"
)

// The fence of a worker's claim, the same for every leased row: an execution and an outbox
// message, claimed by attempt number, and an inbox event, claimed by lease token. A claim
// holds its row while the row still carries the claim's own number or token and is still in
// the status the claim put it in; a lease that ran out and was claimed again changes the
// first, a report or an operator the second. A worker whose claim no longer holds writes
// nothing (docs/invariants.md, invariants 3 and 5).

// holds reports, as ECONFLICT, that the claim mine on the row id of kind no longer holds it:
// current is the number or token the row carries now and active whether it is still in the
// claimed status, both as read under the row's lock. The zero value of T is no claim.
func holds[T comparable](kind, id string, mine, current T, active bool) error {
	var none T
	if mine != none && mine == current && active {
		return nil
	}
	return claimLost(kind, id, mine)
}

// claimLost is the ECONFLICT of a worker whose claim mine on the row id of kind was lost. A
// lease token is a secret of its holder and is not named.
func claimLost[T comparable](kind, id string, mine T) error {
	if n, ok := any(mine).(int); ok {
		return Errorf(ECONFLICT, "attempt %d no longer holds %s %s", n, kind, id)
	}
	return Errorf(ECONFLICT, "the claim on %s %s was lost", kind, id)
}

// claimDue runs one claim of a worker in a transaction of its own: EINVALID unless lease and
// limit are positive, EUNAVAILABLE while s.Clock says this process's clock is too far off
// the database's to judge leases by; take claims up to limit rows, each leased until leaseEnd.
func claimDue[T any](ctx context.Context, s *Service, lease time.Duration, limit int, take func(tx Tx, leaseEnd time.Time) ([]T, error)) ([]T, error) {
	if lease <= 0 || limit <= 0 {
		return nil, Errorf(EINVALID, "lease and limit must be positive")
	}
	if err := s.Clock.Check(); err != nil {
		return nil, err
	}
	return inTx(ctx, s, func(tx Tx) ([]T, error) { return take(tx, tx.Now().Add(lease)) })
}

// inTx runs fn in a transaction of its own and returns its result once committed.
func inTx[T any](ctx context.Context, s *Service, fn func(Tx) (T, error)) (T, error) {
	var zero T
	tx, err := s.Store.Begin(ctx)
	if err != nil {
		return zero, err
	}
	defer tx.Rollback(ctx)
	v, err := fn(tx)
	if err != nil {
		return zero, err
	}
	if err := tx.Commit(ctx); err != nil {
		return zero, err
	}
	return v, nil
}
