package approval

import "context"

// The reads a principal makes. Each refuses what p may not see, so that the API, the approver
// pages and the commands show only what the rules let them (docs/http-api.md, "Authentication
// and roles"): an approval p may not read is answered ENOTFOUND, as if it did not exist, and
// the operators' listings (executions, inbox, outbox) are EFORBIDDEN to anyone who may not
// operate.

// Approval returns the approval id for p, or ENOTFOUND when it does not exist or p may not
// read it (mayReadNow: Principal.MayRead, or a vote of p's on it, or a stage p may vote in
// now through a group p joined after the create). It is Store.Approval's one read, so a
// TokenCheck ctx carries runs with it; the groups are read only for an approval p could not
// read otherwise.
func (s *Service) Approval(ctx context.Context, p Principal, id string) (*Approval, error) {
	a, err := s.Store.Approval(ctx, id)
	if err != nil {
		return nil, err
	}
	if ok, err := s.mayReadNow(ctx, p, a); err != nil {
		return nil, err
	} else if !ok {
		return nil, notFound(id)
	}
	return a, nil
}

// Approvals lists the approvals matching f that p may read, newest first, and the cursor of
// the next page: a principal whose role does not read every approval sees those it requested
// or is listed on (ApprovalFilter.VisibleTo is set to its subject, whatever f says).
func (s *Service) Approvals(ctx context.Context, p Principal, f ApprovalFilter) ([]*Approval, string, error) {
	if !p.Role.ReadsAll() {
		f.VisibleTo = p.Subject
		if f.Approver == p.Subject || f.Requester == p.Subject {
			// Already narrowed to p's own approvals: the visibility condition would only
			// repeat the filter in the query.
			f.VisibleTo = ""
		}
	}
	return s.Store.Approvals(ctx, f)
}

// Events returns the audit trail of the approval id, oldest first, for p: ENOTFOUND when it
// does not exist or p may not read it.
func (s *Service) Events(ctx context.Context, p Principal, id string) ([]Event, error) {
	if _, err := s.Approval(ctx, p, id); err != nil {
		return nil, err
	}
	return s.Store.Events(ctx, id)
}

// Executions lists executions matching f, newest first, for p: EFORBIDDEN unless p may
// operate (Principal.MayOperate).
func (s *Service) Executions(ctx context.Context, p Principal, f ExecutionFilter) ([]*ExecutionRecord, string, error) {
	if err := mayOperate(p); err != nil {
		return nil, "", err
	}
	return s.Store.Executions(ctx, f)
}

// Execution returns one execution for p, or ENOTFOUND: EFORBIDDEN, before anything is read,
// unless p may operate.
func (s *Service) Execution(ctx context.Context, p Principal, id string) (*ExecutionRecord, error) {
	if err := mayOperate(p); err != nil {
		return nil, err
	}
	return s.Store.Execution(ctx, id)
}

// InboxEvents lists stored inbox events matching f, newest first, for p: EFORBIDDEN unless p
// may operate.
func (s *Service) InboxEvents(ctx context.Context, p Principal, f InboxFilter) ([]*InboxEvent, string, error) {
	if err := mayOperate(p); err != nil {
		return nil, "", err
	}
	return s.Store.InboxEvents(ctx, f)
}

// InboxEvent returns one inbox event with its body for p, or ENOTFOUND: EFORBIDDEN, before
// anything is read, unless p may operate.
func (s *Service) InboxEvent(ctx context.Context, p Principal, id string) (*InboxEvent, error) {
	if err := mayOperate(p); err != nil {
		return nil, err
	}
	return s.Store.InboxEvent(ctx, id)
}

// OutboxMessages lists outbox messages matching f, newest first, for p: EFORBIDDEN unless p
// may operate. The messages are as stored; a consumer shows them Redacted.
func (s *Service) OutboxMessages(ctx context.Context, p Principal, f OutboxFilter) ([]*OutboxMessage, string, error) {
	if err := mayOperate(p); err != nil {
		return nil, "", err
	}
	return s.Store.OutboxMessages(ctx, f)
}

// OutboxMessage returns one outbox message with its attempts for p, or ENOTFOUND: EFORBIDDEN,
// before anything is read, unless p may operate.
func (s *Service) OutboxMessage(ctx context.Context, p Principal, id string) (*OutboxMessage, []OutboxAttempt, error) {
	if err := mayOperate(p); err != nil {
		return nil, nil, err
	}
	return s.Store.OutboxMessage(ctx, id)
}

// Tokens lists tokens newest first, revoked ones included, for p: EFORBIDDEN unless p may
// manage tokens (Principal.MayManageTokens).
func (s *Service) Tokens(ctx context.Context, p Principal, f TokenFilter) ([]*Token, string, error) {
	if err := mayManageTokens(p); err != nil {
		return nil, "", err
	}
	return s.Store.Tokens(ctx, f)
}

// notFound is the answer for an approval that does not exist or that the caller may not see:
// the two are told apart by nobody.
func notFound(id string) error {
	return Errorf(ENOTFOUND, "approval %s not found", id)
}

// ApprovalsByID returns, by id, the approvals of ids that exist and p may read, in one read of
// the store: the titles the operators' page shows beside executions. An id p may not read is
// left out, as if it did not exist.
func (s *Service) ApprovalsByID(ctx context.Context, p Principal, ids []string) (map[string]*Approval, error) {
	out := make(map[string]*Approval, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	tx, err := s.Store.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)
	list, err := tx.ApprovalGetByIDMany(ctx, ids)
	if err != nil {
		return nil, err
	}
	for _, a := range list {
		if p.MayRead(a) {
			out[a.ID] = a
		}
	}
	return out, nil
}

// MayVoteNow reports whether p may vote on a now, and when not, why, by the rules Vote
// applies: p's role, a's status, and the approvers a lists or, for an approval created under
// a policy, the current stage's rules with the groups as they are now (Progress.Eligible).
// It is what a page asks before it offers the vote; Vote decides again when the vote comes.
func (s *Service) MayVoteNow(ctx context.Context, p Principal, a *Approval) (bool, string, error) {
	switch {
	case !p.MayDecide():
		return false, "role " + string(p.Role) + " may not vote", nil
	case a.Status.Terminal():
		return false, "the approval is already " + string(a.Status), nil
	}
	if _, ok := a.DecisionBy(p.Subject); ok {
		return false, "already voted on this approval", nil
	}
	if a.Resolved == nil {
		if !a.IsApprover(p.Subject) {
			return false, p.Subject + " is not an approver of this approval", nil
		}
		return true, "", nil
	}
	stages := a.Resolved.Stages
	members := membersOrNone(s.Members)
	if oidc := s.oidcGroups(stages); len(oidc) > 0 {
		var err error
		if members, err = s.storedMembers(ctx, oidc); err != nil {
			return false, "", err
		}
	}
	ok, why := Tally(stages, members, a.Requester, a.Decisions).Eligible(stages, members, a.Requester, a.Decisions, p.Subject)
	return ok, why, nil
}
