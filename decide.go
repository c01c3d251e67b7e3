package approval

import (
	"context"
	"slices"
	"strings"
)

// ActorSystem is the actor of transitions nobody asked for, such as expiry.
const ActorSystem = "system"

// Decide records p's vote (docs/invariants.md, invariant 1), in one store transaction, and
// returns the approval as it then is. It is Vote without the word on a repeat.
func (s *Service) Decide(ctx context.Context, p Principal, d DecideRequest) (*Approval, error) {
	v, err := s.Vote(ctx, p, d)
	if err != nil {
		return nil, err
	}
	return v.Approval, nil
}

// VoteResult is the answer to a vote.
type VoteResult struct {
	// Approval is the approval after the vote. With a refusal it is the approval as found
	// (nil when none was), so that the caller can tell a refusal it may explain from one
	// that must look like a missing approval.
	Approval *Approval
	// AlreadyVoted reports that the approver had already cast this same verdict: nothing
	// changed, and Approval shows the first vote.
	AlreadyVoted bool
	// CommentIgnored reports that such a repeat carried another comment than the first
	// vote's; the first vote's comment stands.
	CommentIgnored bool
}

// Vote records p's vote (docs/invariants.md, invariant 1), in one store transaction, which
// votes on other approvals arriving at the same moment may share (castVote); the approver is
// p's subject, whatever d.Approver says. In order:
//   - EFORBIDDEN if p's role may not vote (Principal.MayDecide);
//   - EINVALID if the verdict is unknown or the request breaks the input policy
//     (DecideRequest.Validate);
//   - ENOTFOUND if the approval does not exist (by ApprovalID, or by OperationKey when
//     ApprovalID is empty; an operation key used by several requesters is ECONFLICT), or if p
//     is not listed and may not see it (Principal.MayRead: its existence is not revealed);
//   - EFORBIDDEN if p is not an approver, or is the requester voting approve; for an
//     approval created under a policy, unless p may vote in its current stage now
//     (decideUnder), which comes after the repeat and the terminal status below;
//   - if d.Approver already voted: the same verdict returns the current approval with no
//     change, AlreadyVoted (a repeat); the other verdict is ECONFLICT carrying the current
//     approval;
//   - ECONFLICT carrying the current approval if it is no longer pending;
//   - if expires_at <= now: the approval is moved to expired (with its event) in this
//     transaction, and ECONFLICT carrying it is returned;
//   - otherwise the vote is stored, version+1, an EventVoted event appended; a reject makes
//     the approval rejected, and the approvals reaching required_approvals make it approved
//     (decided_at = now, with EventRejected/EventApproved) and, in the same transaction,
//     create its execution (the outbox; see ExecutionStore); under a policy, Tally over every
//     vote decides instead (docs/policies.md, "Creates and votes").
//
// A refusal is committed before it is returned, because finding the approval past its expiry
// expires it, and that truth is kept.
func (s *Service) Vote(ctx context.Context, p Principal, d DecideRequest) (VoteResult, error) {
	if !p.MayDecide() {
		return VoteResult{}, Errorf(EFORBIDDEN, "role %s may not decide approvals; use an approver token", p.Role)
	}
	d.Approver = p.Subject
	if !d.Verdict.Valid() {
		return VoteResult{}, Errorf(EINVALID, "unknown verdict %q; use approve or reject", d.Verdict)
	}
	if err := d.Validate(); err != nil {
		return VoteResult{}, err // before any store work; decide checks again for the inbox
	}
	res, err := s.castVote(ctx, d)
	if err != nil {
		return VoteResult{}, err
	}
	v := VoteResult{Approval: res.approval, AlreadyVoted: res.repeat, CommentIgnored: res.commentIgnored}
	if res.refusal != nil && res.refusal.Code == EFORBIDDEN && v.Approval != nil && !p.MayRead(v.Approval) {
		// An approver not listed may not see the approval: the vote must not reveal that it
		// exists.
		id := d.ApprovalID
		if id == "" {
			id = v.Approval.ID
		}
		return VoteResult{}, Errorf(ENOTFOUND, "approval %s not found", id)
	}
	if res.refusal != nil {
		return v, res.refusal
	}
	return v, nil
}

// Cancel moves a pending approval to cancelled for p (version+1, decided_at = now,
// EventCancelled with p's subject as actor, and cause). ENOTFOUND if missing or if p may not
// see it (Principal.MayRead: its existence is not revealed); EFORBIDDEN unless p may cancel
// it (Principal.MayCancel); ECONFLICT carrying the current approval if it is already
// terminal, or past expires_at (it is expired then, as in Decide). A refusal for p's sake
// changes nothing, not even an expiry.
func (s *Service) Cancel(ctx context.Context, p Principal, id string, cause Cause) (*Approval, error) {
	actor := p.Subject
	tx, err := s.Store.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)

	a, err := tx.ApprovalGetForUpdate(ctx, id)
	if err != nil {
		return nil, err
	}
	if !p.MayRead(a) {
		return nil, Errorf(ENOTFOUND, "approval %s not found", id)
	}
	if !p.MayCancel(a) {
		return nil, Errorf(EFORBIDDEN, "only the requester (%s) or an admin may cancel approval %s", a.Requester, id)
	}
	refusal, err := s.refuseUnlessPending(ctx, tx, a, cause)
	if err != nil {
		return nil, err
	}
	if refusal == nil {
		now := tx.Now()
		if err := tx.ApprovalSetStatusIfPending(ctx, a.ID, StatusCancelled, &now); err != nil {
			return nil, err
		}
		if err := tx.EventInsert(ctx, a.ID, EventCancelled, actor, cause, nil); err != nil {
			return nil, err
		}
		if err := tx.Notify(ctx, TopicApproval(a.ID)); err != nil {
			return nil, err
		}
		a.Status, a.DecidedAt, a.Version = StatusCancelled, &now, a.Version+1
		if err := queueNotices(ctx, tx, s.Routing, decisionNotice(a, EventCancelled, actor, now), decisionRecipients(a)); err != nil {
			return nil, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	if refusal != nil {
		return nil, refusal
	}
	return a, nil
}

// decided is what decide did. A refusal is the rules' answer to the request (403, 404, 409 of
// the API), not a failure: what decide wrote before refusing (an expiry) is to be committed.
type decided struct {
	approval *Approval // the approval as it now is; nil if it was not found
	repeat   bool      // the approver's earlier identical vote; nothing changed
	// commentIgnored: a repeat whose comment differs from the first vote's, which stands.
	commentIgnored bool
	refusal        *Error
}

// decide applies one vote inside tx: the one code path of a vote, whether it comes from the
// API (Decide) or from an inbox event (ApplyInbox), so a decision arriving by webhook is held
// to exactly the API's rules. The approval's lock orders it against every other vote, cancel
// and expiry of the same approval. An error means tx must be rolled back.
func (s *Service) decide(ctx context.Context, tx Tx, d DecideRequest) (decided, error) {
	refuse := func(a *Approval, e *Error) (decided, error) {
		return decided{approval: a, refusal: e}, nil
	}
	if !d.Verdict.Valid() {
		return refuse(nil, Errorf(EINVALID, "unknown verdict %q; use approve or reject", d.Verdict))
	}
	if err := d.Validate(); err != nil {
		return refuse(nil, AsError(err))
	}
	// The vote, the audit trail and the comparisons below name the approver normalised: an
	// inbox event's "CI-BOT" is ci-bot.
	d.Approver, _ = NormalizeName("approver", d.Approver)
	id := d.ApprovalID
	if id == "" {
		if d.OperationKey == "" {
			return refuse(nil, Errorf(EINVALID, "a vote must name the approval by id or operation key"))
		}
		// Operation keys are unique per requester only; the vote carries no requester, so a
		// key two requesters use cannot name one approval.
		ids, err := tx.ApprovalIDsByOperationKey(ctx, d.OperationKey, 2)
		switch {
		case err != nil:
			return decided{}, err
		case len(ids) == 0:
			return refuse(nil, Errorf(ENOTFOUND, "no approval has operation key %q", d.OperationKey))
		case len(ids) > 1:
			return refuse(nil, Errorf(ECONFLICT, "operation key %q is used by several requesters; name the approval id", d.OperationKey))
		}
		id = ids[0]
	}
	a, err := tx.ApprovalGetForUpdate(ctx, id)
	if e := AsError(err); e != nil && e.Code == ENOTFOUND {
		return refuse(nil, e)
	} else if err != nil {
		return decided{}, err
	}
	if a.Resolved != nil {
		return s.decideUnder(ctx, tx, a, d)
	}
	if !a.IsApprover(d.Approver) {
		return refuse(a, Errorf(EFORBIDDEN, "%s is not an approver of this approval", d.Approver))
	}
	if a.IsRequester(d.Approver) && d.Verdict == VerdictApprove {
		return refuse(a, Errorf(EFORBIDDEN, "the requester may not approve their own request"))
	}
	if prev, ok := a.DecisionBy(d.Approver); ok {
		if prev.Verdict == d.Verdict {
			return decided{approval: a, repeat: true, commentIgnored: prev.Comment != d.Comment}, nil
		}
		return refuse(a, conflict(a, "%s already voted %s", d.Approver, prev.Verdict))
	}
	if refusal, err := s.refuseUnlessPending(ctx, tx, a, d.Cause); err != nil {
		return decided{}, err
	} else if refusal != nil {
		return refuse(a, refusal)
	}

	status, event := StatusPending, ""
	switch {
	case d.Verdict == VerdictReject:
		status, event = StatusRejected, EventRejected // any single rejection is final
	case a.Approvals()+1 >= a.RequiredApprovals:
		status, event = StatusApproved, EventApproved
	}
	return s.recordVote(ctx, tx, a, d, status, event, map[string]any{"verdict": d.Verdict, "comment": d.Comment})
}

// decideUnder applies one vote on a, created under a policy, inside tx: the vote is refused
// (EFORBIDDEN, nothing written) unless d.Approver may vote in the current stage now, by the
// rules a keeps and the groups as Members has them at this moment (docs/policies.md, "Rules
// and stages"); otherwise the outcome is Tally's over every vote, and the vote's event says
// which rule it counted toward. The repeats, the conflicts and the expiry are decide's.
func (s *Service) decideUnder(ctx context.Context, tx Tx, a *Approval, d DecideRequest) (decided, error) {
	if prev, ok := a.DecisionBy(d.Approver); ok {
		if prev.Verdict == d.Verdict {
			return decided{approval: a, repeat: true, commentIgnored: prev.Comment != d.Comment}, nil
		}
		return decided{approval: a, refusal: conflict(a, "%s already voted %s", d.Approver, prev.Verdict)}, nil
	}
	if a.Status.Terminal() {
		return decided{approval: a, refusal: conflict(a, "the approval is already %s", a.Status)}, nil
	}
	stages := a.Resolved.Stages
	members, err := s.voteMembers(ctx, tx, a, d.Approver)
	if err != nil {
		return decided{}, err
	}
	before := Tally(stages, members, a.Requester, a.Decisions)
	if ok, why := before.Eligible(stages, members, a.Requester, a.Decisions, d.Approver); !ok {
		return decided{approval: a, refusal: Errorf(EFORBIDDEN, "%s may not vote on this approval: %s", d.Approver, why)}, nil
	}
	if refusal, err := s.refuseUnlessPending(ctx, tx, a, d.Cause); err != nil {
		return decided{}, err
	} else if refusal != nil {
		return decided{approval: a, refusal: refusal}, nil
	}

	votes := append(slices.Clip(a.Decisions), Decision{Approver: d.Approver, Verdict: d.Verdict})
	after := Tally(stages, members, a.Requester, votes)
	status, event := StatusPending, ""
	switch {
	case after.Rejected:
		status, event = StatusRejected, EventRejected // an eligible person's rejection vetoes
	case after.Approved:
		status, event = StatusApproved, EventApproved
	}
	detail := map[string]any{"verdict": d.Verdict, "comment": d.Comment}
	if c := after.Toward[len(votes)-1]; c.Stage >= 0 {
		detail["counted_toward"] = map[string]any{"stage": c.Stage + 1, "rule": stages[c.Stage].Rules[c.Rule].Label()}
	}
	res, err := s.recordVote(ctx, tx, a, d, status, event, detail)
	if err != nil || status.Terminal() || after.Current == before.Current {
		return res, err
	}
	return res, s.stageStarted(ctx, tx, a, after)
}

// recordVote writes d's vote on a, which tx holds locked and which is pending and not past
// its expiry, with its event (detail its data), and moves a to status, with event, when that
// is terminal: the execution queued in the same transaction when approved, the outcome
// notified. The vote, its events, the status and the execution are one write
// (Tx.DecisionInsertIfPending), one statement on PostgreSQL.
func (s *Service) recordVote(ctx context.Context, tx Tx, a *Approval, d DecideRequest, status Status, event string, detail map[string]any) (decided, error) {
	now := tx.Now()
	vote := Decision{Approver: d.Approver, Verdict: d.Verdict, Comment: d.Comment, At: now}
	w := VoteWrite{ApprovalID: a.ID, Vote: vote, Status: status,
		Events: []Event{{Type: EventVoted, Actor: d.Approver, Cause: d.Cause, Detail: detail}}}
	if status.Terminal() {
		w.DecidedAt = &now
	}
	if event != "" {
		w.Events = append(w.Events, Event{Type: event, Actor: d.Approver, Cause: d.Cause})
	}
	if status == StatusApproved {
		// The outbox: the execution exists from the instant the approval is approved, so no
		// crash can leave an approved action that nobody will run.
		w.Execution = s.newExecution(tx, a)
		if w.Execution.Status == ExecutionQueued {
			w.Events = append(w.Events, Event{Type: EventExecutionQueued, Actor: d.Approver, Cause: d.Cause,
				Detail: map[string]any{"execution_id": w.Execution.ID}})
			if err := tx.Notify(ctx, TopicExecutions); err != nil {
				return decided{}, err
			}
		}
	}
	if err := tx.DecisionInsertIfPending(ctx, w); err != nil {
		return decided{}, err
	}
	a.Decisions = append(a.Decisions, vote)
	a.Status, a.DecidedAt, a.Version = status, w.DecidedAt, a.Version+1
	if w.Execution != nil {
		a.Execution = w.Execution.Public()
	}
	if event != "" {
		// The final outcome is told in the deciding transaction: to the requester and the
		// approvers who did not vote, and to the requester's callback.
		if err := queueNotices(ctx, tx, s.Routing, decisionNotice(a, event, d.Approver, now), decisionRecipients(a)); err != nil {
			return decided{}, err
		}
	} else if err := queueSlackProgress(ctx, tx, s.Routing, a); err != nil {
		// A vote that leaves it pending changes the progress every Slack message shows.
		return decided{}, err
	}
	if err := tx.Notify(ctx, TopicApproval(a.ID)); err != nil {
		return decided{}, err
	}
	return decided{approval: a}, nil
}

// newExecution is the execution of an approval being approved in tx: queued and due now
// when its action has a target, not_configured otherwise. Its downstream key names the
// requester and the operation key, which together name one approval, so no other
// approval's execution can be mistaken for it by the target.
func (s *Service) newExecution(tx Tx, a *Approval) *ExecutionRecord {
	now := tx.Now()
	rec := &ExecutionRecord{
		ID: NewID("exe"), ApprovalID: a.ID, OperationKey: a.OperationKey,
		DownstreamKey: DownstreamKey(a.Requester, a.OperationKey), Action: a.Action,
		Status: ExecutionNotConfigured, CreatedAt: now, UpdatedAt: now,
	}
	if s.Targeted != nil && s.Targeted(a.Action) {
		rec.Targeted, rec.Status, rec.NextAttemptAt = true, ExecutionQueued, &now
	}
	return rec
}

// refuseUnlessPending returns the conflict to answer with when a can no longer change: it is
// terminal, or its expiry has passed, in which case it is expired here first (with cause) and
// a is updated to say so.
func (s *Service) refuseUnlessPending(ctx context.Context, tx Tx, a *Approval, cause Cause) (*Error, error) {
	if a.Status.Terminal() {
		return conflict(a, "the approval is already %s", a.Status), nil
	}
	now := tx.Now()
	if a.ExpiresAt.After(now) {
		return nil, nil
	}
	if err := s.expire(ctx, tx, a, cause); err != nil {
		return nil, err
	}
	return conflict(a, "the approval has expired"), nil
}

// ExpireDue moves up to limit pending approvals whose expiry has passed to expired, oldest
// expiry first, each with an EventExpired by the system for the sweeper, in one transaction,
// and returns how many it moved. Every replica's sweeper may run it at once: the approvals
// are locked as they are found, and PostgreSQL skips those another transaction holds (a
// vote, which expires a due approval itself, or another sweeper). Expiry and a vote never
// both win: whichever takes the approval's lock first decides, and the other finds it no
// longer pending.
func (s *Service) ExpireDue(ctx context.Context, limit int) (int, error) {
	if limit < 1 {
		return 0, Errorf(EINVALID, "limit must be positive")
	}
	tx, err := s.Store.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx)

	ids, err := tx.ApprovalIDsDueForUpdate(ctx, limit)
	if err != nil {
		return 0, err
	}
	approvals := make([]*Approval, len(ids))
	for i, id := range ids {
		approvals[i] = &Approval{ID: id, Status: StatusPending}
	}
	if r := s.Routing; len(ids) > 0 && (len(r.Channels) > 0 || len(r.Callbacks) > 0 || r.ProviderEmails || r.Slack != nil) {
		// The notices name the approval: read them, locked already, only when anyone is told.
		if approvals, err = tx.ApprovalGetByIDMany(ctx, ids); err != nil {
			return 0, err
		}
	}
	for _, a := range approvals {
		if err := s.expire(ctx, tx, a, SweeperCause()); err != nil {
			return 0, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	return len(ids), nil
}

// expire moves the pending, due approval a, which tx holds locked, to expired, with its
// event naming cause, the signal to long-polls and its notices, and updates a to say so.
func (s *Service) expire(ctx context.Context, tx Tx, a *Approval, cause Cause) error {
	now := tx.Now()
	if err := tx.ApprovalSetStatusIfPending(ctx, a.ID, StatusExpired, &now); err != nil {
		return err
	}
	if err := tx.EventInsert(ctx, a.ID, EventExpired, ActorSystem, cause, nil); err != nil {
		return err
	}
	a.Status, a.DecidedAt, a.Version = StatusExpired, &now, a.Version+1
	if err := queueNotices(ctx, tx, s.Routing, decisionNotice(a, EventExpired, ActorSystem, now), decisionRecipients(a)); err != nil {
		return err
	}
	return tx.Notify(ctx, TopicApproval(a.ID))
}

// queueReview tells the operators, in tx, that the execution rec needs review.
func (s *Service) queueReview(ctx context.Context, tx Tx, rec *ExecutionRecord) error {
	r := s.Routing
	if len(r.Operators) == 0 {
		return nil
	}
	n := Notice{
		EventID: "evt_" + strings.TrimPrefix(rec.ID, "exe_") + "_needs_review", Event: EventNeedsReview,
		ApprovalID: rec.ApprovalID, OperationKey: rec.OperationKey, Action: rec.Action,
		Reason: rec.LastError, At: tx.Now(),
	}
	return queueNotices(ctx, tx, r, n, r.Operators)
}

// conflict is an ECONFLICT error carrying the approval the caller lost against.
func conflict(a *Approval, format string, args ...any) *Error {
	e := Errorf(ECONFLICT, format, args...)
	e.Approval = a
	return e
}
