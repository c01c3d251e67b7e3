package approval

import (
	"context"
	"sync/atomic"
	"time"
)

// TokenCheck is the re-check of a bearer token the Service already knows: the token id, the
// hash of its secret and the instant of the request. Service.AuthenticateFirstTrip puts one in
// the request's context instead of asking the store; the store runs it in the request's
// first round trip, beside the request's own work, and refuses that work when the token has
// been revoked, has expired or no longer exists (docs/architecture.md, "Round trips"). So a
// cached principal is never trusted alone, and a revocation holds on every replica from the
// moment it commits, as when every request looked its token up first.
//
// A store honours a pending check in Approval, InsertApproval and Begin (the first statement
// of the transaction): it runs it with the first statement it sends, calls Pass when the
// token is still good, and otherwise answers Refuse's error and writes nothing.
type TokenCheck struct {
	// ID and Hash name the token: the row with this id and this hash must still exist.
	ID   string
	Hash []byte
	// Now is the request's instant: the token must be unrevoked and expire after it.
	Now time.Time

	state  atomic.Int32 // checkPending, checkPassed or checkRefused
	passed func()       // the Service's follow-up of a good token (its last use)
	forget func()       // the Service's follow-up of a refused one (its cache)
}

const (
	checkPending int32 = iota
	checkPassed
	checkRefused
)

type tokenCheckKey struct{}

// WithTokenCheck returns ctx carrying c for the store to run.
func WithTokenCheck(ctx context.Context, c *TokenCheck) context.Context {
	return context.WithValue(ctx, tokenCheckKey{}, c)
}

// PendingTokenCheck returns the check ctx carries while nobody has run it yet, or nil: a
// check runs once per request, in its first round trip.
func PendingTokenCheck(ctx context.Context) *TokenCheck {
	c, _ := ctx.Value(tokenCheckKey{}).(*TokenCheck)
	if c == nil || c.state.Load() != checkPending {
		return nil
	}
	return c
}

type tokenChecksKey struct{}

// withTokenChecks returns ctx carrying checks for Store.Begin to run, each with the first
// statement it sends: the checks of the votes that share one transaction (see voteBatch).
func withTokenChecks(ctx context.Context, checks []*TokenCheck) context.Context {
	return context.WithValue(ctx, tokenChecksKey{}, checks)
}

// PendingTokenChecks returns every check ctx carries that nobody has run yet: the one of
// PendingTokenCheck, and those of the requests whose votes share a transaction. Store.Begin
// runs them all; the first one refused refuses the whole transaction (its Refuse's error),
// and the Service then runs each other request alone.
func PendingTokenChecks(ctx context.Context) []*TokenCheck {
	var checks []*TokenCheck
	if c := PendingTokenCheck(ctx); c != nil {
		checks = append(checks, c)
	}
	list, _ := ctx.Value(tokenChecksKey{}).([]*TokenCheck)
	for _, c := range list {
		if c != nil && c.state.Load() == checkPending {
			checks = append(checks, c)
		}
	}
	return checks
}

// again makes a check that passed in a transaction that then failed pending again, so that
// the transaction its request is retried in checks the token again.
func (c *TokenCheck) again() {
	c.state.CompareAndSwap(checkPassed, checkPending)
}

// Pass records that the store found the token still good.
func (c *TokenCheck) Pass() {
	if c.state.CompareAndSwap(checkPending, checkPassed) && c.passed != nil {
		c.passed()
	}
}

// Refuse records that the store found the token revoked, expired or gone, and returns the
// EUNAUTHORIZED error to answer with. The store has written nothing.
func (c *TokenCheck) Refuse() error {
	if c.state.CompareAndSwap(checkPending, checkRefused) && c.forget != nil {
		c.forget()
	}
	c.state.Store(checkRefused)
	return Errorf(EUNAUTHORIZED, "the bearer token was revoked or has expired")
}

// Pending reports whether the check has not run yet.
func (c *TokenCheck) Pending() bool { return c.state.Load() == checkPending }

// Refused reports whether a store found the token no longer good.
func (c *TokenCheck) Refused() bool { return c.state.Load() == checkRefused }
