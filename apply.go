package approval

import (
	"context"
	"fmt"
	"time"
)

// ApplyInbox applies a handler's action to the claimed event e and marks it processed (or
// ignored, or stale) with its outcome, in one transaction, only while e.LeaseToken still
// holds the event (ECONFLICT otherwise, nothing applied), so a crash between applying and
// marking cannot apply an event twice (docs/invariants.md, invariants 3 and 4). A decision
// goes through the same rules as Decide and a result through those of ReportExecution: what
// they refuse (403, 404, 409 of the API) is a processed event whose Outcome says why, not an
// error. A decision acts for the approver it names, on the word of the source that signed
// the event, through the unexported path Vote also takes after its role check: it takes no
// principal, and is held to the rules of the approval itself (listed, not approving one's
// own request). The audit events name the cause {kind: inbox, source, event_id}.
func (s *Service) ApplyInbox(ctx context.Context, e *InboxEvent, a InboxAction) (*InboxEvent, error) {
	if err := checkInboxAction(a); err != nil {
		return nil, err
	}
	tx, err := s.Store.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)
	cur, err := tx.InboxGetForUpdate(ctx, e.ID)
	if err != nil {
		return nil, err
	}
	status, outcome, approvalID, err := s.applyInbox(ctx, tx, e, cur, a)
	if err != nil {
		return nil, err
	}
	done, err := tx.InboxSetDone(ctx, e.ID, status, outcome, approvalID)
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	return done, nil
}

// ClaimApplyInbox takes up to limit events that ClaimInbox would claim and applies them in
// the same transaction, each by the action actionFor computes from it (without touching the
// store), in the order taken, and marks them done with one more attempt each: no lease is
// written, since the transaction's lock on the events is the claim, and a crash before the
// commit leaves them as they were, to be taken again (docs/operations.md, "The inbox under
// load"). Against a claim and then ApplyInbox, that is one write of each event and one commit
// fewer per event, and one commit for the batch. It is all or nothing: when one event cannot
// be applied nothing is, and the error names it; the caller then claims the events instead,
// to apply them one at a time and record which failed. It returns the events as marked, with their bodies.
func (s *Service) ClaimApplyInbox(ctx context.Context, limit int, actionFor func(*InboxEvent) InboxAction) ([]*InboxEvent, error) {
	if limit <= 0 {
		return nil, Errorf(EINVALID, "limit must be positive")
	}
	if err := s.Clock.Check(); err != nil {
		return nil, err
	}
	return inTx(ctx, s, func(tx Tx) ([]*InboxEvent, error) {
		events, err := tx.InboxLockDue(ctx, limit)
		if err != nil || len(events) == 0 {
			return nil, err
		}
		marks := make([]InboxMark, len(events))
		now := tx.Now()
		for i, e := range events {
			a := actionFor(e)
			err := checkInboxAction(a)
			var status InboxStatus
			var outcome, approvalID string
			if err == nil {
				status, outcome, approvalID, err = s.applyLockedInbox(ctx, tx, e, a)
			}
			if err != nil {
				return nil, fmt.Errorf("inbox event %s: %w", e.ID, err)
			}
			marks[i] = InboxMark{ID: e.ID, Status: status, Outcome: outcome, ApprovalID: approvalID, Attempted: true}
			e.Status, e.Outcome, e.ApprovalID, e.ProcessedAt = status, outcome, approvalID, &now
			e.NextAttemptAt, e.LeaseToken = nil, ""
			e.Attempts++
		}
		// Every event marked done in one write: no handler reads another event's status.
		return events, tx.InboxMarkDoneMany(ctx, marks)
	})
}

// checkInboxAction refuses an action the rules cannot apply.
func checkInboxAction(a InboxAction) error {
	switch {
	case a.Kind == ActionDecide && a.Decide == nil,
		a.Kind == ActionExecutionResult && a.Report == nil,
		a.Kind == ActionSlack && a.Slack == nil:
		return Errorf(EINVALID, "inbox action %d has no payload", a.Kind)
	case a.Kind != ActionIgnore && a.Kind != ActionDecide && a.Kind != ActionExecutionResult && a.Kind != ActionSlack:
		return Errorf(EINVALID, "unknown inbox action %d", a.Kind)
	}
	return nil
}

// applyInbox applies a to the claimed event e, as it is now (cur, locked in tx), and returns
// what the event is to be marked with (see ApplyInbox).
func (s *Service) applyInbox(ctx context.Context, tx Tx, e, cur *InboxEvent, a InboxAction) (InboxStatus, string, string, error) {
	if err := holdsClaim(e, cur); err != nil {
		return "", "", "", err
	}
	return s.applyLockedInbox(ctx, tx, cur, a)
}

// applyLockedInbox applies a to the event cur, locked in tx and held by this caller (its
// claim checked, or its lock the claim), and returns what the event is to be marked with.
func (s *Service) applyLockedInbox(ctx context.Context, tx Tx, cur *InboxEvent, a InboxAction) (InboxStatus, string, string, error) {
	cause := Cause{Kind: CauseInbox, Source: cur.Source, EventID: cur.EventID}

	status, outcome, approvalID := InboxProcessed, "", ""
	switch a.Kind {
	case ActionIgnore:
		status, outcome = InboxIgnored, a.Reason

	case ActionDecide:
		d := *a.Decide
		d.Cause = cause
		res, err := s.decide(ctx, tx, d)
		if err != nil {
			return "", "", "", err
		}
		if res.approval != nil {
			approvalID = res.approval.ID
		}
		if res.refusal != nil {
			if !refusedByRules(res.refusal) {
				return "", "", "", res.refusal
			}
			outcome = "refused: " + res.refusal.Message
			break
		}
		outcome = DecisionOutcome(res.approval, d, res.repeat)

	case ActionSlack:
		return s.applySlack(ctx, tx, cur, *a.Slack, cause)

	case ActionExecutionResult:
		r := *a.Report
		r.Cause = cause
		if r.Actor == "" {
			r.Actor = cur.Source
		}
		res, err := s.report(ctx, tx, r)
		if err != nil {
			return "", "", "", err
		}
		if res.rec != nil {
			approvalID = res.rec.ApprovalID
		}
		switch {
		case res.refusal != nil:
			if !refusedByRules(res.refusal) {
				return "", "", "", res.refusal
			}
			outcome = "refused: " + res.refusal.Message
		case res.applied:
			outcome = ReportOutcome(res.rec, r)
		default:
			status = InboxStale
			outcome = fmt.Sprintf("stale: version %d <= applied %d", r.Version, res.rec.AppliedVersion)
		}
	}

	return status, outcome, approvalID, nil
}

// refusedByRules reports whether a refusal is the rules' answer to an event's content (it is
// recorded as the event's outcome) rather than a failure: content the input policy refuses
// (EINVALID) can no more be fixed by retrying than a vote the rules refuse.
func refusedByRules(e *Error) bool {
	switch e.Code {
	case EINVALID, EFORBIDDEN, ECONFLICT, ENOTFOUND:
		return true
	}
	return false
}

// ClaimInbox claims up to limit pending events whose next attempt is due and which no live
// lease holds (a lease past its expiry is taken over), oldest first, for a worker (EINVALID
// unless lease and limit are positive). Each gets a new LeaseToken, unique to the event and
// this claim, that fences out whoever held it before, a lease until now+lease, and one more
// attempt. Workers on every replica may claim at once and take disjoint events.
func (s *Service) ClaimInbox(ctx context.Context, lease time.Duration, limit int) ([]*InboxEvent, error) {
	return claimDue(ctx, s, lease, limit, func(tx Tx, leaseEnd time.Time) ([]*InboxEvent, error) {
		return tx.InboxClaimDue(ctx, limit, leaseEnd, NewID("clm"))
	})
}

// FailInbox records a failed attempt of the claimed event e, only while e.LeaseToken still
// holds it (ECONFLICT otherwise): pending again, due at retryAt, with the inbox signal; or,
// when retryAt is nil, failed for good, until an operator retries it. Either way the lease
// is cleared and errMsg becomes the event's last error.
func (s *Service) FailInbox(ctx context.Context, e *InboxEvent, errMsg string, retryAt *time.Time) error {
	tx, err := s.Store.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)

	cur, err := tx.InboxGetForUpdate(ctx, e.ID)
	if err != nil {
		return err
	}
	if err := holdsClaim(e, cur); err != nil {
		return err
	}
	now := tx.Now()
	status, processedAt := InboxFailed, &now
	if retryAt != nil {
		status, processedAt = InboxPending, nil
		if err := tx.Notify(ctx, TopicInbox); err != nil {
			return err
		}
	}
	if err := tx.InboxSetAttemptFailed(ctx, e.ID, status, errMsg, retryAt, processedAt); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// RetryInbox puts a failed event back in the queue, pending and due now with its attempts
// kept, and signals the inbox, for the operator p; EFORBIDDEN, before anything else, unless
// p may operate (Principal.MayOperate); ECONFLICT if the event is not failed.
func (s *Service) RetryInbox(ctx context.Context, p Principal, id string) (*InboxEvent, error) {
	if err := mayOperate(p); err != nil {
		return nil, err
	}
	tx, err := s.Store.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)

	cur, err := tx.InboxGetForUpdate(ctx, id)
	if err != nil {
		return nil, err
	}
	if cur.Status != InboxFailed {
		return nil, Errorf(ECONFLICT, "inbox event %s is %s; only a failed event can be retried", id, cur.Status)
	}
	e, err := tx.InboxSetPendingIfFailed(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := tx.Notify(ctx, TopicInbox); err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

// holdsClaim returns the ECONFLICT of a worker whose claim e no longer holds the event, as it
// now is (cur): another claim took it over after the lease ran out, or it is no longer
// pending.
func holdsClaim(e, cur *InboxEvent) error {
	return holds("inbox event", e.ID, e.LeaseToken, cur.LeaseToken, cur.Status == InboxPending)
}
