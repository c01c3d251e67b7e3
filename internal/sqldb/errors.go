package sqldb

import (
	"context"
	"errors"
	"fmt"

	"github.com/approvald/approval"
)

// Translate turns a driver error into the application's vocabulary for a driver's methods:
// an error that carries an *approval.Error already passes as it is; any other is wrapped
// with op, and with what it means to the application when it means something (Classify). The
// driver's error stays in the chain for the log.
func Translate(op string, err error, class func(error) *approval.Error) error {
	if err == nil || approval.AsError(err) != nil {
		return err
	}
	return fmt.Errorf("%s: %w", op, Classify(err, class))
}

// Classify puts in front of a driver error the *approval.Error it means: class's answer,
// which reads the driver's own codes (a unique violation, text the database cannot hold, a
// server that cannot be reached), or else EUNAVAILABLE for a caller's deadline that passed
// (a statement, or a wait for a connection or a lock, that the database was too busy to end
// in time: 503, not an internal error). An error that means nothing to the application, or
// that carries an *approval.Error already, is returned as it is.
func Classify(err error, class func(error) *approval.Error) error {
	if err == nil || approval.AsError(err) != nil {
		return err
	}
	e := class(err)
	if e == nil && errors.Is(err, context.DeadlineExceeded) {
		e = approval.DeadlinePassed()
	}
	if e == nil {
		return err
	}
	return fmt.Errorf("%w: %w", e, err)
}

// Unavailable is the error of a database that cannot be used now (503). It is a fresh error
// each time, since callers may annotate what they receive.
func Unavailable() *approval.Error {
	return approval.Errorf(approval.EUNAVAILABLE, "the database is unavailable")
}
