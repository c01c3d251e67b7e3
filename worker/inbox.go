package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/approvald/approval"
)

// Defaults used when the corresponding InboxProcessor field is zero. DefaultLease and
// DefaultPoll serve the Runner too.
const (
	DefaultLease         = 30 * time.Second
	DefaultPoll          = time.Second
	DefaultInboxBatch    = 20
	DefaultInboxMaxBatch = 320
	DefaultInboxAttempts = 10
	DefaultInboxPace     = 20 * time.Millisecond
)

// DefaultInboxBackoff spaces the attempts of an inbox event whose store work failed.
var DefaultInboxBackoff = Backoff{Initial: time.Second, Max: 10 * time.Minute, Multiplier: 2, Jitter: 0.2}

// InboxProcessor applies stored webhook events (docs/invariants.md, invariant 3: work happens
// after the acknowledgement, in a worker that claims stored events). Every replica runs one.
// A batch is taken under its transaction's locks, applied and marked done before it commits,
// and an event that must be applied alone is claimed under a lease in the store: so an event
// is applied once however many processors race for it, and an event whose processor died is
// taken again when its transaction ends or its lease runs out.
type InboxProcessor struct {
	Store InboxStore
	// Rules claims and applies events by approvald's rules (an *approval.Service); required.
	Rules  InboxRules
	Logger *slog.Logger // slog.Default() when nil

	// Sources maps each configured source to the handlers (event types) it may trigger. An
	// event from a source not listed triggers nothing and is ignored.
	Sources map[string][]string

	Lease time.Duration // claim lease (DefaultLease when zero)
	Poll  time.Duration // how often to look without a signal (DefaultPoll when zero)
	Batch int           // events claimed at once (DefaultInboxBatch when zero)
	// MaxBatch bounds the claim while a backlog lasts (DefaultInboxMaxBatch when zero): Run
	// doubles its claim after each full batch, up to MaxBatch, and after one that was not
	// full claims twice what that one found (at least Batch). A batch is one transaction, so
	// a backlog is applied with fewer commits and round trips per event the longer it is.
	MaxBatch int
	// Pace is the least time from the start of a pass that found events to the start of the
	// next one that waited for a signal (DefaultInboxPace when zero). Under a busy intake
	// the signals come often (one per stored batch, before PostgreSQL's were coalesced), and
	// a processor that took a pass per signal applied a few events per transaction; paced,
	// it applies what arrived meanwhile in one (docs/operations.md, "The inbox under load").
	// An idle processor is never held back: after a pass that found nothing, a signal starts
	// the next at once; nor is a backlog, whose full batches follow each other at once.
	Pace        time.Duration
	Backoff     Backoff // wait before retrying an event whose store work failed (DefaultInboxBackoff when zero)
	MaxAttempts int     // attempts before an event is failed (DefaultInboxAttempts when zero)

	Now  func() time.Time // time.Now when nil; for the next attempt's due time
	Rand func() float64   // jitter source; nil means math/rand/v2

	// SlackUsers finds the person of a Slack user who clicked and whom no person is known as
	// yet, by the user's address in Slack (a *notify.Slack). Nil: such a click is answered
	// as unknown.
	SlackUsers SlackUsers
}

// SlackUsers asks Slack who a user is, outside any transaction: LookupSlackUser remembers the
// person whose address the user has and reports whether there is one, or fails when Slack
// does (a 5xx, a timeout, a 429 through RetryAt, a refusal through Permanent);
// SlackUserUnknown reports whether a recent lookup found no person, so that a click of that
// user is answered at once.
type SlackUsers interface {
	LookupSlackUser(ctx context.Context, userID string) (found bool, err error)
	SlackUserUnknown(userID string) bool
}

// InboxStore is what an InboxProcessor needs of the store: the inbox signal.
type InboxStore interface {
	Subscribe(topic string) (<-chan struct{}, func())
}

// InboxRules takes and applies events in one transaction, claims events, applies one claimed
// event, or records a failed attempt: approval.Service's ClaimApplyInbox, ClaimInbox,
// ApplyInbox and FailInbox.
type InboxRules interface {
	ClaimApplyInbox(ctx context.Context, limit int, actionFor func(*approval.InboxEvent) approval.InboxAction) ([]*approval.InboxEvent, error)
	ClaimInbox(ctx context.Context, lease time.Duration, limit int) ([]*approval.InboxEvent, error)
	ApplyInbox(ctx context.Context, e *approval.InboxEvent, a approval.InboxAction) (*approval.InboxEvent, error)
	FailInbox(ctx context.Context, e *approval.InboxEvent, errMsg string, retryAt *time.Time) error
}

// Run processes events as they become due until ctx ends, then returns nil. It wakes on the
// store's inbox signal and polls every Poll as well, since a signal is only a hint; after a
// pass that found events, it starts the next no sooner than Pace after it. A failed
// pass is logged and retried at the next wake-up. Run returns an error only when the
// processor is misconfigured.
func (p *InboxProcessor) Run(ctx context.Context) error {
	if err := p.validate(); err != nil {
		return err
	}
	signal, unsubscribe := p.Store.Subscribe(approval.TopicInbox)
	defer unsubscribe()
	ticker := time.NewTicker(orDefault(p.Poll, DefaultPoll))
	defer ticker.Stop()
	limit := p.batch()
	pace := orDefault(p.Pace, DefaultInboxPace)
	for {
		start := time.Now()
		n, err := p.process(ctx, limit)
		if err != nil && ctx.Err() == nil && !approval.IsClockOffset(err) {
			p.logger().ErrorContext(ctx, "inbox pass failed", "error", err)
		}
		if err == nil && n == limit {
			limit = min(2*limit, max(p.maxBatch(), p.batch()))
			continue // a full batch: more may be waiting
		}
		// Not full: the events stored from now to the next pass are about as many as this one
		// found, if it was paced; claim room for twice that. After a failure, Batch: a batch
		// that meets the failing event again falls back to the leased path whole.
		limit = p.batch()
		if err == nil {
			limit = min(max(2*n, limit), max(p.maxBatch(), limit))
		}
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-signal:
			if !ok {
				signal = nil // the store closed the subscription: poll only
			}
		case <-ticker.C:
		}
		if ctx.Err() != nil {
			return nil // stopped while a wake-up was also ready, which select may pick
		}
		if n > 0 && !sleep(ctx, time.Until(start.Add(pace))) {
			return nil
		}
	}
}

// sleep waits d (nothing when d <= 0) and reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
	return ctx.Err() == nil
}

// process takes a batch of up to limit due events, handles them, and returns how many it
// took. The batch is taken, applied and marked done in one transaction, in the order taken:
// one commit for the batch, and no lease written, since the transaction's lock is the claim
// (one event at a time, each waiting for its own commit, the processor applied 85 events a
// second while 32 clients delivered 1,600 a second on PostgreSQL; docs/operations.md, "The
// inbox under load"). When that fails, nothing of it was applied: the due events are then
// claimed with a lease and handled each on its own, so that one that fails is scheduled for a
// later attempt (or failed, after MaxAttempts) and the others go on. The error reports a
// claim that failed, or failures that could not even be recorded.
//
// Events claimed with a lease are handled to the end even if ctx ends meanwhile: a store
// transaction is short, and abandoning a claim would cost the event an attempt and a lease
// of delay. Their work is bounded by the lease instead, after which the claim is void anyway.
func (p *InboxProcessor) process(ctx context.Context, limit int) (int, error) {
	// The batch holds its events' locks until it ends, and no lease frees them meanwhile: it
	// is bounded by the lease as a claimed event's work is.
	batch, cancelBatch := context.WithTimeout(ctx, orDefault(p.Lease, DefaultLease))
	done, err := p.Rules.ClaimApplyInbox(batch, limit, func(e *approval.InboxEvent) approval.InboxAction {
		return p.action(e)
	})
	cancelBatch()
	if err == nil {
		for _, e := range done {
			p.handled(ctx, e)
		}
		return len(done), nil
	}
	if ctx.Err() != nil {
		// Stopped: the batch rolled back, or committed with its answer lost; either way
		// nothing is left half done, and the next processor takes what is still due.
		return 0, nil
	}
	p.logger().WarnContext(ctx, "inbox batch not applied together; claiming its events to apply them one at a time", "limit", limit, "error", err)

	events, err := p.Rules.ClaimInbox(ctx, orDefault(p.Lease, DefaultLease), limit)
	if err != nil {
		return 0, fmt.Errorf("claim inbox events: %w", err)
	}
	work, cancel := context.WithTimeout(context.WithoutCancel(ctx), orDefault(p.Lease, DefaultLease))
	defer cancel()
	var errs []error
	for _, e := range events {
		if err := p.handle(work, e, p.action(e)); err != nil {
			errs = append(errs, fmt.Errorf("inbox event %s (%s/%s): %w", e.ID, e.Source, e.EventID, err))
		}
	}
	return len(events), errors.Join(errs...)
}

// action is what e asks for (Handle); a click of a Slack user whom a recent lookup found to
// be no person's is answered as unknown without asking Slack again.
func (p *InboxProcessor) action(e *approval.InboxEvent) approval.InboxAction {
	a := Handle(e, p.Sources[e.Source])
	if a.Kind == approval.ActionSlack && p.SlackUsers != nil && p.SlackUsers.SlackUserUnknown(a.Slack.User) {
		return lookedUp(a)
	}
	return a
}

// lookedUp is the Slack action a marked as looked up: a user still no person's is answered as
// unknown, not looked up again.
func lookedUp(a approval.InboxAction) approval.InboxAction {
	in := *a.Slack
	in.LookedUp = true
	a.Slack = &in
	return a
}

// handled logs an event applied.
func (p *InboxProcessor) handled(ctx context.Context, e *approval.InboxEvent) {
	p.logger().InfoContext(ctx, "inbox event handled", "inbox_event", e.ID, "source", e.Source, "event_id", e.EventID,
		"type", e.Type, "attempt", e.Attempts, "status", e.Status, "outcome", e.Outcome)
}

// handle applies one claimed event by its action alone, and records a failed attempt when the
// store could not apply it. It returns an error only when that record failed too. A click of
// a Slack user whom no person is known as yet is looked up in Slack here, between two
// transactions (lookupSlack), and applied again.
func (p *InboxProcessor) handle(ctx context.Context, e *approval.InboxEvent, action approval.InboxAction) error {
	log := p.logger().With("inbox_event", e.ID, "source", e.Source, "event_id", e.EventID, "type", e.Type, "attempt", e.Attempts)
	done, err := p.Rules.ApplyInbox(ctx, e, action)
	if lookup, ok := errors.AsType[*approval.SlackLookupError](err); ok && action.Kind == approval.ActionSlack {
		if action, err = p.lookupSlack(ctx, action, lookup.User); err == nil {
			done, err = p.Rules.ApplyInbox(ctx, e, action)
		}
	}
	switch {
	case err == nil:
		p.handled(ctx, done)
		return nil
	case approval.ErrorCode(err) == approval.ECONFLICT:
		// The lease ran out and another processor holds the event now; it will apply it.
		log.WarnContext(ctx, "inbox event claim lost before it was applied", "error", err)
		return nil
	}

	// The rules never fail an event (a refused decision is a processed one), so this is the
	// store itself failing (the database down, a transaction aborted) or Slack, asked who
	// clicked. Trying again later may work, no sooner than a 429's Retry-After; an event that
	// keeps failing, or that Slack refused for good (missing_scope), is parked as failed for
	// an operator. An event the operator re-queued keeps its attempts, so it gets one more
	// try.
	var retryAt *time.Time
	if e.Attempts < p.maxAttempts() && !IsPermanent(err) {
		delay := Policy{Backoff: p.backoff()}.Delay(e.Attempts, 0, p.Rand)
		at := p.now().Add(delay)
		if ra, ok := errors.AsType[retryAtError](err); ok && ra.at.After(at) {
			at = ra.at
		}
		retryAt = &at
	}
	msg := fmt.Sprintf("attempt %d of %d: apply: %v", e.Attempts, p.maxAttempts(), err)
	if ferr := p.Rules.FailInbox(ctx, e, msg, retryAt); ferr != nil {
		if approval.ErrorCode(ferr) == approval.ECONFLICT {
			log.WarnContext(ctx, "inbox event claim lost before its failure was recorded", "error", err)
			return nil
		}
		return fmt.Errorf("apply: %w; record the failure: %w", err, ferr)
	}
	if retryAt != nil {
		log.WarnContext(ctx, "inbox event failed; will retry", "error", err, "retry_at", *retryAt)
	} else {
		log.ErrorContext(ctx, "inbox event failed for good", "error", err)
	}
	return nil
}

// lookupSlack asks Slack who user is (SlackUsers), which remembers the person they are, and
// returns action marked as looked up, so that applying it again answers a user who is still
// no person's as unknown. The lookup has a third of the lease, so that a slow Slack leaves
// the claim the time to record the failed attempt.
func (p *InboxProcessor) lookupSlack(ctx context.Context, action approval.InboxAction, user string) (approval.InboxAction, error) {
	if p.SlackUsers != nil {
		lookupCtx, cancel := context.WithTimeout(ctx, orDefault(p.Lease, DefaultLease)/3)
		_, err := p.SlackUsers.LookupSlackUser(lookupCtx, user)
		cancel()
		if err != nil {
			return action, fmt.Errorf("look up Slack user %s: %w", user, err)
		}
	}
	return lookedUp(action), nil
}

// validate reports a misconfigured processor.
func (p *InboxProcessor) validate() error {
	switch {
	case p.Store == nil:
		return errors.New("inbox processor: no store")
	case p.Rules == nil:
		return errors.New("inbox processor: no rules to apply events with")
	case p.Lease < 0 || p.Poll < 0 || p.Pace < 0 || p.Batch < 0 || p.MaxBatch < 0 || p.MaxAttempts < 0:
		return fmt.Errorf("inbox processor: negative lease %s, poll %s, pace %s, batch %d, max batch %d or max attempts %d", p.Lease, p.Poll, p.Pace, p.Batch, p.MaxBatch, p.MaxAttempts)
	}
	if err := (Policy{MaxAttempts: p.maxAttempts(), Backoff: p.backoff()}).Validate(); err != nil {
		return fmt.Errorf("inbox processor: %w", err)
	}
	return nil
}

func (p *InboxProcessor) batch() int {
	if p.Batch == 0 {
		return DefaultInboxBatch
	}
	return p.Batch
}

func (p *InboxProcessor) maxBatch() int {
	if p.MaxBatch == 0 {
		return DefaultInboxMaxBatch
	}
	return p.MaxBatch
}

func (p *InboxProcessor) maxAttempts() int {
	if p.MaxAttempts == 0 {
		return DefaultInboxAttempts
	}
	return p.MaxAttempts
}

func (p *InboxProcessor) backoff() Backoff {
	if p.Backoff == (Backoff{}) {
		return DefaultInboxBackoff
	}
	return p.Backoff
}

func (p *InboxProcessor) now() time.Time {
	if p.Now == nil {
		return time.Now()
	}
	return p.Now()
}

func (p *InboxProcessor) logger() *slog.Logger {
	if p.Logger == nil {
		return slog.Default()
	}
	return p.Logger
}

// orDefault returns d, or def when d is zero.
func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}
