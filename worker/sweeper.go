package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/approvald/approval"
)

// Defaults used when the corresponding Sweeper field is zero.
const (
	DefaultSweepInterval = time.Second
	DefaultSweepBatch    = 100
)

// Sweeper moves overdue approvals to expired, queues the reminders that are due
// (approval.Service.RemindDue), purges finished inbox events past their
// retention, sign-in links past approval.SigninKeep and page sessions expired more than
// approval.SessionKeep ago. Every replica runs one: the store's conditional writes make concurrent
// sweeps safe, so an approval is expired exactly once, and reminded once per person and round,
// however many sweepers race for it.
type Sweeper struct {
	// Rules expires due approvals and purges old rows (an *approval.Service); required.
	Rules  SweepRules
	Logger *slog.Logger // slog.Default() when nil

	// Interval is the time between passes (DefaultSweepInterval when zero).
	Interval time.Duration
	// Batch bounds the rows one store call touches, so that no transaction holds locks for
	// long on a large backlog (DefaultSweepBatch when zero).
	Batch int
	// InboxIDs is how long a finished inbox event is kept, so that a provider's redelivery is
	// still recognised as a duplicate; InboxBodies is how long its raw body is kept (zero: as
	// long as the event; longer than InboxIDs has no effect, deleting the event takes the body
	// with it). Zero InboxIDs leaves the inbox alone, for a sweeper given no retention.
	InboxIDs    time.Duration
	InboxBodies time.Duration
}

// SweepRules expires due approvals, reminds and purges what is kept no longer:
// approval.Service's ExpireDue, RemindDue, PurgeInbox, PurgeSigninTokens and PurgeSessions.
type SweepRules interface {
	ExpireDue(ctx context.Context, limit int) (int, error)
	RemindDue(ctx context.Context, limit int) (int, error)
	PurgeInbox(ctx context.Context, keepIDs, keepBodies time.Duration, limit int) (int, error)
	PurgeSigninTokens(ctx context.Context, keep time.Duration, limit int) (int, error)
	PurgeSessions(ctx context.Context, keep time.Duration, limit int) (int, error)
}

// Run sweeps at once and then every Interval until ctx ends, when it returns nil. A failed
// pass is logged and the next one tried: a database that is down for a while must not stop
// the sweeper for good. Run returns an error only when the Sweeper is misconfigured.
func (s *Sweeper) Run(ctx context.Context) error {
	if s.Rules == nil {
		return errors.New("sweeper: no rules to expire approvals and purge with")
	} else if s.Interval < 0 || s.Batch < 0 || s.InboxIDs < 0 || s.InboxBodies < 0 {
		return fmt.Errorf("sweeper: negative interval %s, batch %d or inbox retention %s/%s",
			s.Interval, s.Batch, s.InboxIDs, s.InboxBodies)
	}
	interval := s.Interval
	if interval == 0 {
		interval = DefaultSweepInterval
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		if err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
			s.logger().ErrorContext(ctx, "sweep failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// Sweep makes one pass: it expires due approvals, queues due reminders, then purges the inbox (when InboxIDs is set)
// old sign-in links and old page sessions, each in batches until a batch comes back short. A failure of
// one does not skip the others.
func (s *Sweeper) Sweep(ctx context.Context) error {
	batch := s.Batch
	if batch == 0 {
		batch = DefaultSweepBatch
	}
	expired, expireErr := drain(ctx, batch, func(ctx context.Context) (int, error) {
		return s.Rules.ExpireDue(ctx, batch)
	})
	if expireErr != nil {
		expireErr = fmt.Errorf("expire due approvals: %w", expireErr)
	}
	reminded, remindErr := drain(ctx, batch, func(ctx context.Context) (int, error) {
		return s.Rules.RemindDue(ctx, batch)
	})
	if remindErr != nil {
		remindErr = fmt.Errorf("remind: %w", remindErr)
	}
	var inboxPurged int
	var inboxErr error
	if s.InboxIDs > 0 {
		bodies := s.InboxBodies
		if bodies == 0 {
			bodies = s.InboxIDs
		}
		inboxPurged, inboxErr = drain(ctx, batch, func(ctx context.Context) (int, error) {
			return s.Rules.PurgeInbox(ctx, s.InboxIDs, bodies, batch)
		})
		if inboxErr != nil {
			inboxErr = fmt.Errorf("purge inbox: %w", inboxErr)
		}
	}
	signins, signinErr := drain(ctx, batch, func(ctx context.Context) (int, error) {
		return s.Rules.PurgeSigninTokens(ctx, approval.SigninKeep, batch)
	})
	if signinErr != nil {
		signinErr = fmt.Errorf("purge sign-in links: %w", signinErr)
	}
	sessions, sessionErr := drain(ctx, batch, func(ctx context.Context) (int, error) {
		return s.Rules.PurgeSessions(ctx, approval.SessionKeep, batch)
	})
	if sessionErr != nil {
		sessionErr = fmt.Errorf("purge sessions: %w", sessionErr)
	}
	if expired > 0 || reminded > 0 || inboxPurged > 0 || signins > 0 || sessions > 0 {
		s.logger().InfoContext(ctx, "swept", "expired", expired, "reminded", reminded, "inbox_purged", inboxPurged,
			"signin_links_purged", signins, "sessions_purged", sessions)
	}
	return errors.Join(expireErr, remindErr, inboxErr, signinErr, sessionErr)
}

func (s *Sweeper) logger() *slog.Logger {
	if s.Logger == nil {
		return slog.Default()
	}
	return s.Logger
}

// drain calls step until it moves fewer than batch rows, and returns the total moved.
func drain(ctx context.Context, batch int, step func(context.Context) (int, error)) (int, error) {
	total := 0
	for {
		n, err := step(ctx)
		total += n
		if err != nil || n < batch {
			return total, err
		}
	}
}
