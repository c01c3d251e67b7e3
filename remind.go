package approval

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// Under a policy, the people asked are those of the current stage (docs/policies.md,
// "Reminders and stage notices"): a create tells the first stage's, a vote that completes a
// stage tells the next one's, and, under a policy with remind_every, the reminder scan
// (RemindDue) tells the current stage's people who have not voted again once per round. All of
// it goes through the outbox in the transaction of its cause, each message unique per
// approval, person, channel and what it tells (the stage; the stage and round of a reminder),
// so that replicas and restarts never queue one twice.

// The notification events of stages and reminders.
const (
	EventStageStarted = "approval.stage_started" // a stage after the first now waits for the recipient
	EventReminder     = "approval.reminder"      // the current stage still waits for the recipient
)

// ReminderDue is an approval whose next reminder is due, as the reminder scan finds it.
type ReminderDue struct {
	ID string
	// StageStartedAt is when the approval's current stage began: its create for the first.
	StageStartedAt time.Time
}

// FirstReminder is when the first reminder of the new approval a is due: one remind_every of
// its policy after its create; nil when its policy has none, or when the reminder would come
// at or after its expiry. The create's insert writes it (remind_at).
func (a *Approval) FirstReminder() *time.Time { return a.reminderAt(a.CreatedAt, 1) }

// reminderAt is when round k of the reminders of a stage begun at start is due, nil when a
// keeps no remind_every or it would come at or after a's expiry.
func (a *Approval) reminderAt(start time.Time, k int64) *time.Time {
	if a.Resolved == nil || a.Resolved.RemindEvery <= 0 {
		return nil
	}
	at := start.Add(time.Duration(k) * a.Resolved.RemindEvery).UTC().Truncate(Precision)
	if !at.Before(a.ExpiresAt) {
		return nil
	}
	return &at
}

// RemindDue reminds, for up to limit pending approvals whose next reminder is due, in one
// transaction, the people of each one's current stage who may vote and have not, and returns
// how many approvals it looked at. The round is k = floor((now - stage start) / remind_every),
// k >= 1, and each message is unique per (approval, person, channel, stage, round): a scan
// that finds an approval already reminded for this round (another replica's, or its own before
// a crash) queues nothing. The approvals are locked as they are found, PostgreSQL skipping
// those another transaction holds (a vote, another scan), so every replica's worker may run it
// at once. Each approval's next reminder is set to the next round, or to none when that would
// come at or after its expiry.
func (s *Service) RemindDue(ctx context.Context, limit int) (int, error) {
	if limit < 1 {
		return 0, Errorf(EINVALID, "limit must be positive")
	}
	tx, err := s.Store.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx)

	due, err := tx.ApprovalRemindDueForUpdate(ctx, limit)
	if err != nil || len(due) == 0 {
		return 0, err
	}
	ids := make([]string, len(due))
	for i, d := range due {
		ids[i] = d.ID
	}
	list, err := tx.ApprovalGetByIDMany(ctx, ids)
	if err != nil {
		return 0, err
	}
	byID := make(map[string]*Approval, len(list))
	for _, a := range list {
		byID[a.ID] = a
	}
	now := tx.Now()
	members := membersOrNone(s.Members)
	for _, d := range due {
		a := byID[d.ID]
		if a == nil {
			continue
		}
		if a.Resolved == nil || a.Resolved.RemindEvery <= 0 || !a.ExpiresAt.After(now) {
			// Nothing to remind of: the sweeper expires a due approval.
			if err := tx.ApprovalSetReminder(ctx, a.ID, d.StageStartedAt, nil); err != nil {
				return 0, err
			}
			continue
		}
		every := a.Resolved.RemindEvery
		round := int64(now.Sub(d.StageStartedAt) / every)
		if round >= 1 {
			p := Tally(a.Resolved.Stages, members, a.Requester, a.Decisions)
			n := askNotice(a, EventReminder, p, now)
			n.Round = int(round)
			key := EventReminder + "/" + strconv.Itoa(p.Current+1) + "/" + strconv.FormatInt(round, 10)
			if err := queueNoticesKeyed(ctx, tx, s.Routing, n, key, stageRecipients(a, p, members)); err != nil {
				return 0, err
			}
		}
		if err := tx.ApprovalSetReminder(ctx, a.ID, d.StageStartedAt, a.reminderAt(d.StageStartedAt, max(round, 0)+1)); err != nil {
			return 0, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	return len(due), nil
}

// stageStarted tells, in tx, the people of the stage p.Current of a, which a vote at now has
// just made current, that it waits for them, starts the stage's reminders and makes a ask
// the stage's groups and people (Ask).
func (s *Service) stageStarted(ctx context.Context, tx Tx, a *Approval, p Progress) error {
	if err := tx.ApprovalAskReplace(ctx, a.ID, a.CreatedAt, stageAsks(a.Resolved.Stages, p.Current)); err != nil {
		return err
	}
	members := membersOrNone(s.Members)
	now := tx.Now()
	if a.Resolved.RemindEvery > 0 {
		if err := tx.ApprovalSetReminder(ctx, a.ID, now, a.reminderAt(now, 1)); err != nil {
			return err
		}
	}
	n := askNotice(a, EventStageStarted, p, now)
	key := EventStageStarted + "/" + strconv.Itoa(p.Current+1)
	return queueNoticesKeyed(ctx, tx, s.Routing, n, key, stageRecipients(a, p, members))
}

// askNotice is the notice that a's current stage, by p, waits for its recipients: event is
// EventRequested, EventStageStarted or EventReminder.
func askNotice(a *Approval, event string, p Progress, now time.Time) Notice {
	n := Notice{
		EventID: "evt_" + strings.TrimPrefix(a.ID, "apr_") + "_" + strings.TrimPrefix(event, "approval."),
		Event:   event, ApprovalID: a.ID, OperationKey: a.OperationKey, Action: a.Action, Title: a.Title,
		Requester: a.Requester, Approvers: a.Approvers, Status: a.Status, ExpiresAt: a.ExpiresAt, At: now,
	}
	if a.Resolved != nil {
		n.Policy = policyStatus(a.Resolved, p)
		n.LinkOnly = a.Resolved.NoChatDecisions
	}
	return n
}

// stageRecipients are the people asked now on a, created under a policy and tallied as p: the
// people the current stage's rules name (the groups' members as members knows them now), who
// are not the requester and have not voted, in the order of the rules.
func stageRecipients(a *Approval, p Progress, members Members) []string {
	if p.Approved || p.Rejected || p.Current >= len(a.Resolved.Stages) {
		return nil
	}
	var out []string
	seen := map[string]bool{}
	add := func(person string) {
		k := NameKey(person)
		if seen[k] || SameName(k, a.Requester) {
			return
		}
		seen[k] = true
		if _, voted := a.DecisionBy(k); !voted {
			out = append(out, k)
		}
	}
	for _, r := range a.Resolved.Stages[p.Current].Rules {
		if r.Group != "" {
			for _, m := range members.Members(r.Group) {
				add(m)
			}
		}
		for _, person := range r.People {
			add(person)
		}
	}
	return out
}
