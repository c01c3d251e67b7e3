package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/failpoint"
	"github.com/approvald/approval/internal/workerhook"
)

// The tests of other packages deliver the outbox a round at a time through workerhook.
func init() {
	workerhook.OutboxRunOnce = func(ctx context.Context, o any) (int, error) { return o.(*Outbox).runOnce(ctx) }
}

// Defaults of the outbox worker.
const (
	DefaultOutboxAttempts = 8
	DefaultOutboxBatch    = 16
)

// DefaultOutboxBackoff spaces the attempts of a message whose channel failed.
var DefaultOutboxBackoff = Backoff{Initial: 2 * time.Second, Max: 10 * time.Minute, Multiplier: 2, Jitter: 0.2}

// The failpoints of the outbox (see package failpoint).
const (
	fpOutboxAfterSend = "outbox.after-send" // the channel accepted the message, not yet recorded
)

// Sender delivers one outbox message on its channel (e-mail, chat, callback). It returns
// nil once the other side accepted the message; an error wrapped by Permanent is not worth
// retrying (a refused address, a 4xx), any other is.
type Sender interface {
	Send(ctx context.Context, m *approval.OutboxMessage) error
}

// SenderFunc is a function as a Sender.
type SenderFunc func(ctx context.Context, m *approval.OutboxMessage) error

// Send calls f.
func (f SenderFunc) Send(ctx context.Context, m *approval.OutboxMessage) error { return f(ctx, m) }

// Permanent marks err as a refusal that a retry will not change: the message fails at once.
func Permanent(err error) error { return permanentError{err} }

// IsPermanent reports whether err was marked by Permanent.
func IsPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}

type permanentError struct{ error }

// RetryAt marks err as a refusal for now that says when to try again (a 429's Retry-After):
// the next attempt is due at at rather than after the backoff.
func RetryAt(err error, at time.Time) error { return retryAtError{err, at} }

type retryAtError struct {
	error
	at time.Time
}

func (r retryAtError) Unwrap() error { return r.error }

func (p permanentError) Unwrap() error { return p.error }

// Mailbox is what the outbox worker needs of the Service: claims and fenced outcomes.
type Mailbox interface {
	ClaimOutbox(ctx context.Context, lease time.Duration, limit int) ([]*approval.OutboxMessage, error)
	FinishOutbox(ctx context.Context, id string, attempt int, o approval.OutboxOutcome) (*approval.OutboxMessage, error)
}

// Outbox sends what the outbox holds (docs/notifications.md): it claims due messages with a
// lease, hands each to the Sender of its channel, and records the outcome fenced by the
// attempt number, so that the late result of an attempt whose lease ran out (and whose
// message another worker took over) is refused. A failed send is retried with backoff and
// jitter up to MaxAttempts, then the message is failed for an operator. Every replica runs
// one.
//
// A worker that dies after its channel accepted a message and before recording it leaves the
// message sending; once the lease ends another worker sends it again, with the same id (the
// e-mail's Message-ID, the callback's webhook-id), so the receiver can fold the two. That is
// at most one resend per crash, never a lost message.
type Outbox struct {
	Store   approval.Store    // signals
	Mailbox Mailbox           // claims and outcomes (an *approval.Service); required
	Senders map[string]Sender // by channel
	Logger  *slog.Logger      // slog.Default() when nil

	// Lease is how long a claim lasts (DefaultLease when zero). A send is cut short at nine
	// tenths of it, so that no send outlives its claim.
	Lease       time.Duration
	Poll        time.Duration // how often to look without a signal (DefaultPoll when zero)
	Batch       int           // messages claimed at once (DefaultOutboxBatch when zero)
	MaxAttempts int           // attempts before a message fails (DefaultOutboxAttempts when zero)
	Backoff     Backoff       // between attempts (DefaultOutboxBackoff when zero)
	Failpoints  *failpoint.Set
	Now         func() time.Time // time.Now when nil; for retry times
	Rand        func() float64   // jitter source; nil means math/rand/v2
}

// Run sends due messages until ctx ends. It wakes on the store's outbox signal and polls
// every Poll as well. Sends in flight when ctx ends are finished and recorded.
func (o *Outbox) Run(ctx context.Context) error {
	if err := o.validate(); err != nil {
		return err
	}
	signal, unsubscribe := o.Store.Subscribe(approval.TopicOutbox)
	defer unsubscribe()
	ticker := time.NewTicker(orDefault(o.Poll, DefaultPoll))
	defer ticker.Stop()
	for {
		n, err := o.runOnce(ctx)
		if err != nil && ctx.Err() == nil && !approval.IsClockOffset(err) {
			o.logger().ErrorContext(ctx, "outbox round failed", "error", err)
		}
		if err == nil && n == o.batch() {
			continue // the store had a full batch: look again at once
		}
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-signal:
			if !ok {
				signal = nil
			}
		case <-ticker.C:
		}
		if ctx.Err() != nil {
			return nil // stopped while a wake-up was also ready, which select may pick
		}
	}
}

// runOnce claims up to Batch due messages, sends them at once, records each outcome, and
// returns how many it claimed.
func (o *Outbox) runOnce(ctx context.Context) (int, error) {
	if err := o.validate(); err != nil {
		return 0, err
	}
	if ctx.Err() != nil {
		return 0, nil
	}
	lease := orDefault(o.Lease, DefaultLease)
	msgs, err := o.Mailbox.ClaimOutbox(ctx, lease, o.batch())
	if err != nil {
		return 0, err
	}
	var wg sync.WaitGroup
	for _, m := range msgs {
		wg.Go(func() { o.send(context.WithoutCancel(ctx), m, lease) })
	}
	wg.Wait()
	return len(msgs), nil
}

// send makes one attempt at m and records it.
func (o *Outbox) send(ctx context.Context, m *approval.OutboxMessage, lease time.Duration) {
	log := o.logger().With("outbox_id", m.ID, "kind", m.Kind, "channel", m.Channel, "recipient", m.Recipient, "attempt", m.Attempts)
	var err error
	if s := o.Senders[m.Channel]; s == nil {
		err = Permanent(fmt.Errorf("no sender is configured for channel %q", m.Channel))
	} else {
		sendCtx, cancel := context.WithTimeout(ctx, lease*9/10)
		err = s.Send(sendCtx, m)
		cancel()
	}
	if fpErr := o.Failpoints.Inject(fpOutboxAfterSend); fpErr != nil {
		log.WarnContext(ctx, "failpoint: the outcome of this attempt is not recorded", "error", fpErr)
		return
	}
	out := approval.OutboxOutcome{Status: approval.OutboxSent}
	if err != nil {
		out.Error = err.Error()
		switch {
		case IsPermanent(err), m.Attempts >= o.maxAttempts():
			out.Status = approval.OutboxFailed
		default:
			at := o.now().Add(Policy{Backoff: o.backoff()}.Delay(m.Attempts, 0, o.Rand))
			if ra, ok := errors.AsType[retryAtError](err); ok && ra.at.After(o.now()) {
				at = ra.at
			}
			out.Status, out.RetryAt = approval.OutboxPending, &at
		}
	}
	if _, ferr := o.Mailbox.FinishOutbox(ctx, m.ID, m.Attempts, out); ferr != nil {
		if approval.ErrorCode(ferr) == approval.ECONFLICT {
			log.WarnContext(ctx, "outbox attempt lost its claim; its outcome is not recorded", "error", ferr)
		} else {
			log.ErrorContext(ctx, "record outbox attempt", "error", ferr)
		}
		return
	}
	switch out.Status {
	case approval.OutboxSent:
		log.InfoContext(ctx, "outbox message sent")
	case approval.OutboxFailed:
		log.ErrorContext(ctx, "outbox message failed; an operator may retry it", "error", err)
	default:
		log.WarnContext(ctx, "outbox message will be retried", "error", err, "retry_at", out.RetryAt)
	}
}

func (o *Outbox) validate() error {
	switch {
	case o.Store == nil:
		return errors.New("outbox: no store")
	case o.Mailbox == nil:
		return errors.New("outbox: no mailbox (an *approval.Service) to claim and finish messages with")
	case o.Lease < 0 || o.Poll < 0 || o.Batch < 0 || o.MaxAttempts < 0:
		return fmt.Errorf("outbox: negative lease %s, poll %s, batch %d or max attempts %d", o.Lease, o.Poll, o.Batch, o.MaxAttempts)
	}
	return (Policy{MaxAttempts: o.maxAttempts(), Backoff: o.backoff()}).Validate()
}

func (o *Outbox) logger() *slog.Logger {
	if o.Logger != nil {
		return o.Logger
	}
	return slog.Default()
}

func (o *Outbox) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

func (o *Outbox) batch() int {
	if o.Batch > 0 {
		return o.Batch
	}
	return DefaultOutboxBatch
}

func (o *Outbox) maxAttempts() int {
	if o.MaxAttempts > 0 {
		return o.MaxAttempts
	}
	return DefaultOutboxAttempts
}

func (o *Outbox) backoff() Backoff {
	if o.Backoff == (Backoff{}) {
		return DefaultOutboxBackoff
	}
	return o.Backoff
}
