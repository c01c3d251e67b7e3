package approval

import (
	"context"
	"slices"
)

// Whom a pending approval asks now (docs/policies.md, "Waiting for me"). The store keeps it
// beside the approval (table approval_asks) for as long as the approval is pending: the
// approvers its request named, or, under a policy, the groups and the people of its current
// stage's rules. Groups are kept by name, not expanded into their members, so that whoever is
// in a group when they look finds the approval, though they joined after the create; a vote
// that starts the next stage replaces the rows, and the write that ends the approval deletes
// them. "Waiting for me" (Service.Waiting) reads them by the viewer's name and by the name of
// each group the viewer is in at that moment.

// Ask is one whom a pending approval asks: a group (Group set) or a person (Person set).
type Ask struct {
	Group  string
	Person string
}

// Asks are whom the new approval a asks (Store.InsertApproval writes them with it): the
// approvers its request named, or, under a policy, the groups and people of its first stage.
func (a *Approval) Asks() []Ask {
	if a.Resolved == nil {
		asks := make([]Ask, len(a.Approvers))
		for i, name := range a.Approvers {
			asks[i] = Ask{Person: name}
		}
		return asks
	}
	return stageAsks(a.Resolved.Stages, 0)
}

// stageAsks are the groups and the people (normalised) the rules of stage i of stages name,
// once each, in the order of the rules; none past the last stage.
func stageAsks(stages []Stage, i int) []Ask {
	if i < 0 || i >= len(stages) {
		return nil
	}
	var asks []Ask
	add := func(k Ask) {
		if !slices.Contains(asks, k) {
			asks = append(asks, k)
		}
	}
	for _, r := range stages[i].Rules {
		if r.Group != "" {
			add(Ask{Group: r.Group})
		}
		for _, person := range r.People {
			add(Ask{Person: NameKey(person)})
		}
	}
	return asks
}

// askedNow is whom "waiting for me" looks under for person: their name and the configured
// groups they are in at this moment, as a vote judges it: listed (Service.Members) or through
// an oidc_group their last sign-in stored (one read of the store, only when a group has an
// oidc_group).
func (s *Service) askedNow(ctx context.Context, person string) (string, []string, error) {
	person = NameKey(person)
	if s.Policies == nil {
		return person, nil, nil
	}
	groups := s.Policies.Groups()
	var stored []string
	if slices.ContainsFunc(groups, func(g GroupInfo) bool { return g.OIDCGroup != "" }) {
		got, err := inTx(ctx, s, func(tx Tx) ([]IdentityGroup, error) { return tx.IdentityGroupGetMany(ctx, []string{person}) })
		if err != nil {
			return "", nil, err
		}
		for _, g := range got {
			stored = append(stored, g.Group)
		}
	}
	configured := membersOrNone(s.Members)
	var in []string
	for _, g := range groups {
		if configured.InGroup(person, g.Name) || (g.OIDCGroup != "" && slices.Contains(stored, g.OIDCGroup)) {
			in = append(in, g.Name)
		}
	}
	return person, in, nil
}

// Waiting lists, for p, the pending approvals p may vote on now and has not voted on, newest
// first, with the cursor of the next page (docs/policies.md, "Waiting for me"): those whose
// request named p an approver, and those under a policy whose current stage names p or a group
// p is in at this moment, whichever the group's members were at the create, and which p did
// not request. f narrows it further (Action, Requester, Query, Limit, Cursor); its Status,
// Approver, VisibleTo and NotVotedBy are set here. The page reads one range of an index per
// name it looks under, each no further than a page, so it costs what waits for p, however
// many approvals there are.
func (s *Service) Waiting(ctx context.Context, p Principal, f ApprovalFilter) ([]*Approval, string, error) {
	person, groups, err := s.askedNow(ctx, p.Subject)
	if err != nil {
		return nil, "", err
	}
	f.Status, f.Approver, f.VisibleTo, f.Decided = StatusPending, "", "", false
	f.NotVotedBy, f.AskedOf, f.AskedGroups = person, person, groups
	return s.Store.Approvals(ctx, f)
}

// mayReadNow reports whether p may read a: Principal.MayRead, or p voted on a, or a is a
// pending approval under a policy whose current stage p may vote in now (MayVoteNow). The
// last two let someone who joined a group after the create open what "waiting for me" lists,
// and see it again once they voted; the groups are read only for the last.
func (s *Service) mayReadNow(ctx context.Context, p Principal, a *Approval) (bool, error) {
	if p.MayRead(a) {
		return true, nil
	}
	if _, voted := a.DecisionBy(p.Subject); voted {
		return true, nil
	}
	if a.Resolved == nil || a.Status != StatusPending || !p.MayDecide() {
		return false, nil
	}
	ok, _, err := s.MayVoteNow(ctx, p, a)
	return ok, err
}

// RestoreAsks gives the pending approvals under a policy that have no asks their current
// stage's (Tx.ApprovalAskReplace), up to limit of them in one transaction, and returns how
// many it gave. Migration 0027 gives the approvals whose request named their approvers theirs;
// those under a policy need the votes counted toward the stages, which only the Service can
// do, so serve runs it at start until it returns fewer than limit.
func (s *Service) RestoreAsks(ctx context.Context, limit int) (int, error) {
	if limit < 1 {
		return 0, Errorf(EINVALID, "limit must be positive")
	}
	return inTx(ctx, s, func(tx Tx) (int, error) {
		given := 0
		ids, err := tx.ApprovalIDsWithoutAsksForUpdate(ctx, limit)
		if err != nil || len(ids) == 0 {
			return 0, err
		}
		list, err := tx.ApprovalGetByIDMany(ctx, ids)
		if err != nil {
			return 0, err
		}
		for _, a := range list {
			if a.Resolved == nil || a.Status != StatusPending {
				continue
			}
			members, err := s.voteMembers(ctx, tx, a, a.Requester)
			if err != nil {
				return 0, err
			}
			p := Tally(a.Resolved.Stages, members, a.Requester, a.Decisions)
			asks := stageAsks(a.Resolved.Stages, p.Current)
			if len(asks) == 0 {
				continue // every stage met yet pending: nobody to ask, nothing to give
			}
			if err := tx.ApprovalAskReplace(ctx, a.ID, a.CreatedAt, asks); err != nil {
				return 0, err
			}
			given++
		}
		return given, nil
	})
}
