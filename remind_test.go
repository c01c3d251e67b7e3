package approval_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/fakeclock"
	"github.com/approvald/approval/internal/testdb"
)

// remindPolicies are the policies of the tests of reminders and stage notices.
const remindPolicies = `
groups:
  sre: [alice, bob, carol]
  security: [dave]
  support-leads: [erin, gina]
policies:
  - name: prod-deploy
    match: {action: deploy}
    rules:
      - {group: sre, approvals: 2}
      - {group: security, approvals: 1}
    expires_in: 4h
    remind_every: 1h
  - name: refunds
    match: {action: refund}
    stages:
      - rules: [{group: support-leads, approvals: 1}]
      - rules: [{people: [fiona], approvals: 1}]
    expires_in: 10h
    remind_every: 2h
`

// remindSetup is a Service under remindPolicies on a store of kind, with every person
// notified by e-mail, on a fake clock.
func remindSetup(t *testing.T, kind string) (*approval.Service, approval.Store, *fakeclock.Clock) {
	t.Helper()
	clock := fakeclock.New(time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC))
	st := testdb.Open(t, kind, clock.Now)
	policies, members := MustPolicies(t, remindPolicies)
	channels := map[string][]string{}
	for _, p := range []string{"alice", "bob", "carol", "dave", "erin", "gina", "fiona", "ci-bot"} {
		channels[p] = []string{approval.ChannelEmail}
	}
	svc := &approval.Service{Store: st, Now: clock.Now, Policies: policies, Members: members,
		Routing: approval.Routing{Channels: channels}}
	return svc, st, clock
}

// sent is one queued notification as the tests compare them.
type sent struct {
	recipient, event string
	notice           approval.Notice
}

// outbox returns the notifications queued for the approval id with the event, by recipient.
func outbox(t *testing.T, st approval.Store, id, event string) []sent {
	t.Helper()
	var out []sent
	cursor := ""
	for {
		page, next, err := st.OutboxMessages(t.Context(), approval.OutboxFilter{Kind: approval.OutboxNotification, Limit: approval.MaxPageSize, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range page {
			if m.ApprovalID != id || m.Event != event {
				continue
			}
			var n approval.Notice
			if err := json.Unmarshal(m.Payload, &n); err != nil {
				t.Fatal(err)
			}
			out = append(out, sent{m.Recipient, m.Event, n})
		}
		if next == "" {
			break
		}
		cursor = next
	}
	slices.SortFunc(out, func(a, b sent) int {
		if c := strings.Compare(a.recipient, b.recipient); c != 0 {
			return c
		}
		return a.notice.Round - b.notice.Round
	})
	return out
}

// who lists the recipients, with the round for reminders: "bob#2".
func who(list []sent) string {
	var parts []string
	for _, s := range list {
		if s.event == approval.EventReminder {
			parts = append(parts, s.recipient+"#"+strconv.Itoa(s.notice.Round))
		} else {
			parts = append(parts, s.recipient)
		}
	}
	return strings.Join(parts, ",")
}

func mustCreatePolicy(t *testing.T, svc *approval.Service, key, body string) *approval.Approval {
	t.Helper()
	res, err := svc.Create(t.Context(), ciBot, policyCreate(key, body))
	if err != nil {
		t.Fatal(err)
	}
	return res.Approval
}

func mustRemind(t *testing.T, svc *approval.Service) int {
	t.Helper()
	n, err := svc.RemindDue(t.Context(), 100)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestStageNotices: a create under a policy of stages asks the first stage's people only; the
// vote that meets it asks the next stage's, in its transaction, with the progress.
func TestStageNotices(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		ctx := t.Context()
		svc, st, clock := remindSetup(t, kind)
		a := mustCreatePolicy(t, svc, "refund-1", `{"action":"refund","title":"Refund 40 EUR"}`)
		requested := outbox(t, st, a.ID, approval.EventRequested)
		if got, want := who(requested), "erin,gina"; got != want {
			t.Fatalf("asked at create: got %s, want %s (stage 1 only)", got, want)
		}
		if p := requested[0].notice.Policy; p == nil || p.String() != "stage 1 of 2: support-leads: 0 of 1" {
			t.Errorf("progress at create: got %v, want stage 1 of 2: support-leads: 0 of 1", p)
		}
		if got := who(outbox(t, st, a.ID, approval.EventStageStarted)); got != "" {
			t.Fatalf("stage notices before a vote: got %s, want none", got)
		}

		clock.Advance(30 * time.Minute)
		if _, err := vote(ctx, svc, a.ID, "erin", approval.VerdictApprove); err != nil {
			t.Fatal(err)
		}
		started := outbox(t, st, a.ID, approval.EventStageStarted)
		if got, want := who(started), "fiona"; got != want {
			t.Fatalf("asked when stage 2 began: got %s, want %s", got, want)
		}
		if p := started[0].notice.Policy; p == nil || p.String() != "stage 2 of 2: fiona: 0 of 1" {
			t.Errorf("progress in the stage notice: got %v, want stage 2 of 2: fiona: 0 of 1", p)
		}
		if !started[0].notice.ExpiresAt.Equal(a.ExpiresAt) {
			t.Errorf("expiry in the stage notice: got %s, want %s", started[0].notice.ExpiresAt, a.ExpiresAt)
		}

		// Stage 2's reminders count from its start: its first round is 2h after the vote.
		clock.Advance(90 * time.Minute)
		mustRemind(t, svc)
		if got := who(outbox(t, st, a.ID, approval.EventReminder)); got != "" {
			t.Fatalf("reminders 2h after the create, 1h30m into stage 2: got %s, want none", got)
		}
		clock.Advance(30 * time.Minute)
		mustRemind(t, svc)
		if got, want := who(outbox(t, st, a.ID, approval.EventReminder)), "fiona#1"; got != want {
			t.Fatalf("reminders 2h into stage 2: got %s, want %s", got, want)
		}
	})
}

// TestRemindDue: every remind_every, the current stage's people who have not voted are
// reminded once per round, until the next round would come at or after the expiry; a scan
// that comes late sends the round it is in, once.
func TestRemindDue(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		ctx := t.Context()
		svc, st, clock := remindSetup(t, kind)
		a := mustCreatePolicy(t, svc, "deploy-1", `{"action":"deploy","title":"Deploy api"}`)
		late := mustCreatePolicy(t, svc, "deploy-2", `{"action":"deploy","title":"Deploy web"}`)
		reminders := func(id string) string { return who(outbox(t, st, id, approval.EventReminder)) }

		clock.Advance(59 * time.Minute)
		if n := mustRemind(t, svc); n != 0 {
			t.Fatalf("59m after the create: got %d approvals due, want 0", n)
		}
		if _, err := vote(ctx, svc, late.ID, "alice", approval.VerdictApprove); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		if n := mustRemind(t, svc); n != 2 {
			t.Fatalf("at 1h: got %d approvals due, want 2", n)
		}
		if got, want := reminders(a.ID), "alice#1,bob#1,carol#1,dave#1"; got != want {
			t.Fatalf("round 1: got %s, want %s", got, want)
		}
		if got, want := reminders(late.ID), "bob#1,carol#1,dave#1"; got != want {
			t.Fatalf("round 1 after alice's vote: got %s, want %s", got, want)
		}
		list := outbox(t, st, a.ID, approval.EventReminder)
		if n := list[0].notice; !n.ExpiresAt.Equal(a.ExpiresAt) || n.Policy == nil || n.Policy.String() != "stage 1 of 1: sre: 0 of 2; security: 0 of 1" {
			t.Errorf("reminder: got expiry %s and progress %v, want %s and stage 1 of 1: sre: 0 of 2; security: 0 of 1", n.ExpiresAt, n.Policy, a.ExpiresAt)
		}
		if n := mustRemind(t, svc); n != 0 {
			t.Fatalf("a second scan at 1h: got %d approvals due, want 0", n)
		}

		clock.Advance(10 * time.Minute)
		if _, err := vote(ctx, svc, a.ID, "alice", approval.VerdictApprove); err != nil {
			t.Fatal(err)
		}
		clock.Advance(50 * time.Minute)
		mustRemind(t, svc)
		if got, want := reminders(a.ID), "alice#1,bob#1,bob#2,carol#1,carol#2,dave#1,dave#2"; got != want {
			t.Fatalf("round 2, alice having voted: got %s, want %s", got, want)
		}
		for _, s := range outbox(t, st, a.ID, approval.EventReminder) {
			if s.notice.Round == 2 && s.notice.Policy.String() != "stage 1 of 1: sre: 1 of 2 (alice); security: 0 of 1" {
				t.Errorf("progress in round 2: got %s, want stage 1 of 1: sre: 1 of 2 (alice); security: 0 of 1", s.notice.Policy)
			}
		}
		clock.Advance(time.Hour)
		mustRemind(t, svc)
		clock.Advance(59 * time.Minute) // 3h59m: round 4 would be at the expiry, so there is none
		if n := mustRemind(t, svc); n != 0 {
			t.Fatalf("after round 3: got %d approvals due, want 0", n)
		}
		if got, want := reminders(a.ID), "alice#1,bob#1,bob#2,bob#3,carol#1,carol#2,carol#3,dave#1,dave#2,dave#3"; got != want {
			t.Fatalf("rounds 1 to 3: got %s, want %s", got, want)
		}
	})
}

// TestRemindDue_late: a scan that comes several rounds late sends the round it is in, once,
// and the next round is counted from the stage's start.
func TestRemindDue_late(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		svc, st, clock := remindSetup(t, kind)
		a := mustCreatePolicy(t, svc, "deploy-1", `{"action":"deploy","title":"Deploy api"}`)
		clock.Advance(2*time.Hour + 30*time.Minute)
		mustRemind(t, svc)
		mustRemind(t, svc)
		if got, want := who(outbox(t, st, a.ID, approval.EventReminder)), "alice#2,bob#2,carol#2,dave#2"; got != want {
			t.Fatalf("a scan at 2h30m: got %s, want %s", got, want)
		}
		// Found due again in the same round (a replica that read it before this scan
		// committed, a restart): the outbox's key queues nothing more.
		tx, err := st.Begin(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.ApprovalSetReminder(t.Context(), a.ID, a.CreatedAt, &a.CreatedAt); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(t.Context()); err != nil {
			t.Fatal(err)
		}
		if n := mustRemind(t, svc); n != 1 {
			t.Fatalf("found due again: got %d due, want 1", n)
		}
		if got, want := who(outbox(t, st, a.ID, approval.EventReminder)), "alice#2,bob#2,carol#2,dave#2"; got != want {
			t.Fatalf("a second scan in round 2: got %s, want %s (once each)", got, want)
		}
		clock.Advance(29 * time.Minute)
		if n := mustRemind(t, svc); n != 0 {
			t.Fatalf("at 2h59m: got %d due, want 0 (round 3 is at 3h)", n)
		}
		clock.Advance(time.Minute)
		if n := mustRemind(t, svc); n != 1 {
			t.Fatalf("at 3h: got %d due, want 1", n)
		}
	})
}

// TestRemindDue_racing: scanners started together (several replicas) queue one reminder per
// approval, person and round, whoever finds the approval first.
func TestRemindDue_racing(t *testing.T) {
	const approvals, scanners = 20, 8
	testdb.Each(t, func(t *testing.T, kind string) {
		ctx := t.Context()
		svc, st, clock := remindSetup(t, kind)
		var ids []string
		for i := range approvals {
			ids = append(ids, mustCreatePolicy(t, svc, "deploy-"+strconv.Itoa(i), `{"action":"deploy","title":"Deploy"}`).ID)
		}
		for round := 1; round <= 3; round++ {
			clock.Advance(time.Hour)
			start := make(chan struct{})
			var wg sync.WaitGroup
			errs := make([]error, scanners)
			for j := range scanners {
				// Each scanner is a replica of its own, sharing the store.
				replica := &approval.Service{Store: st, Now: clock.Now, Policies: svc.Policies, Members: svc.Members, Routing: svc.Routing}
				wg.Go(func() {
					<-start
					_, errs[j] = replica.RemindDue(ctx, 3)
					for errs[j] == nil {
						var n int
						if n, errs[j] = replica.RemindDue(ctx, 3); n == 0 {
							break
						}
					}
				})
			}
			close(start)
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
			}
			for _, id := range ids {
				var want []string
				for r := 1; r <= round; r++ {
					for _, p := range []string{"alice", "bob", "carol", "dave"} {
						want = append(want, fmt.Sprintf("%s#%d", p, r))
					}
				}
				slices.Sort(want)
				got := strings.Split(who(outbox(t, st, id, approval.EventReminder)), ",")
				slices.Sort(got)
				if !slices.Equal(got, want) {
					t.Fatalf("round %d, approval %s: got %v, want %v (once each)", round, id, got, want)
				}
			}
		}
	})
}
