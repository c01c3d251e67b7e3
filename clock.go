package approval

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// ClockWatch keeps this process's clock honest against the database's. Leases (of
// executions, inbox events and outbox messages) are written and judged by the clock of
// whichever process claims: one whose clock runs ahead sees another's lease end early and
// could take over work still in flight. The watch measures the offset between the process's
// clock and the database's, at start and every Every, and while the offset, plus what the
// measurement cannot tell, exceeds Bound the Service claims no work (ErrClockOffset) and
// /readyz fails (docs/operations.md, "Clocks"). Two replicas each within Bound of the
// database disagree by at most twice Bound, which a bound of a twentieth of the lease keeps
// inside the runner's margin of a tenth.
type ClockWatch struct {
	// Store is asked for the database's time (Store.DatabaseTime).
	Store Store
	// Now is the clock leases are written by: the store's. time.Now when nil.
	Now func() time.Time
	// Bound is the largest offset at which work is still claimed.
	Bound time.Duration
	// Every is how often the offset is measured again; a minute when zero.
	Every time.Duration
	// Logger reports each change between within and beyond the bound.
	Logger *slog.Logger

	mu       sync.Mutex
	measured bool
	offset   time.Duration // the database's clock minus this process's
	spread   time.Duration // half the round trip of the best reading: the offset's uncertainty
	err      error         // the last measurement's failure, if it failed
}

// clockSamples is how many readings one measurement takes; the one with the shortest round
// trip, whose midpoint is the most certain, is kept.
const clockSamples = 3

// Measure reads the database's clock clockSamples times and keeps the offset of the reading
// with the shortest round trip. A failed measurement keeps the earlier offset: the database
// being away says nothing of the clocks, and every claim would fail on it anyway.
func (w *ClockWatch) Measure(ctx context.Context) error {
	var best struct {
		offset, spread time.Duration
		ok             bool
	}
	var err error
	for range clockSamples {
		before := w.now()
		var db time.Time
		db, err = w.Store.DatabaseTime(ctx)
		after := w.now()
		if err != nil {
			break
		}
		spread := after.Sub(before) / 2
		offset := db.Sub(before.Add(spread))
		if !best.ok || spread < best.spread {
			best.offset, best.spread, best.ok = offset, spread, true
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	wasOK := w.within()
	w.err = err
	if best.ok {
		w.offset, w.spread, w.measured = best.offset, best.spread, true
	}
	if isOK := w.within(); isOK != wasOK || !best.ok {
		w.report(isOK)
	}
	return err
}

// Run measures at once and then every Every until ctx ends.
func (w *ClockWatch) Run(ctx context.Context) {
	every := w.Every
	if every <= 0 {
		every = time.Minute
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		w.Measure(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Offset returns the last measured offset (the database's clock minus this process's), its
// uncertainty, and whether any measurement has succeeded.
func (w *ClockWatch) Offset() (offset, spread time.Duration, measured bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.offset, w.spread, w.measured
}

// Check is nil while the last measured offset is within the bound, and an EUNAVAILABLE
// error saying by how much it is not otherwise. Before the first measurement it is nil: a
// process measures before it starts its workers (serve), and a watch nobody runs is the
// caller's choice. A nil watch is always within.
func (w *ClockWatch) Check() error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.within() {
		return nil
	}
	return &Error{Code: EUNAVAILABLE, RetryAfter: time.Second, clockOffset: true, Message: fmt.Sprintf(
		"this replica's clock is %s off the database's (give or take %s), more than the %s at which it may claim work: "+
			"leases are judged by the clocks of the replicas; synchronise this machine's clock (NTP)",
		abs(w.offset).Round(time.Millisecond), w.spread.Round(time.Millisecond), w.Bound)}
}

// IsClockOffset reports whether err is a claim refused because this process's clock is off
// the database's (ClockWatch.Check): the watch has logged it once, so a worker that polls
// need not log it again at every poll.
func IsClockOffset(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.clockOffset
}

// within reports whether the last offset is within the bound; w.mu is held.
func (w *ClockWatch) within() bool {
	return !w.measured || abs(w.offset)+w.spread <= w.Bound
}

// report logs a change of within; w.mu is held.
func (w *ClockWatch) report(within bool) {
	if w.Logger == nil {
		return
	}
	attrs := []any{"offset", w.offset, "uncertainty", w.spread, "bound", w.Bound}
	switch {
	case w.err != nil:
		w.Logger.Warn("clock offset: the database's time could not be read", append(attrs, "error", w.err)...)
	case within:
		w.Logger.Info("clock offset within bound: claiming work", attrs...)
	default:
		w.Logger.Error("clock offset beyond bound: this replica claims no work until its clock agrees with the database's", attrs...)
	}
}

func (w *ClockWatch) now() time.Time {
	if w.Now == nil {
		return time.Now()
	}
	return w.Now()
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
