package notify_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/mailtest"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/notify"
)

// stagedPolicy applies one policy to every create: 1 of sre, then carol, reminders every
// hour, expiry in 3 hours.
type stagedPolicy struct{}

// List and Groups: the test lists neither.
func (stagedPolicy) List() []approval.PolicyInfo  { return nil }
func (stagedPolicy) Groups() []approval.GroupInfo { return nil }

func (stagedPolicy) Resolve(context.Context, approval.PolicyInput) (*approval.PolicyDecision, error) {
	return &approval.PolicyDecision{ExpiresIn: 3 * time.Hour, Resolved: approval.Resolved{
		Policy: "staged", Version: "0123456789abcdef", RemindEvery: time.Hour,
		Stages: []approval.Stage{
			{Rules: []approval.Rule{{Group: "sre", Approvals: 1}}},
			{Rules: []approval.Rule{{People: []string{"carol"}, Approvals: 1}}},
		},
	}}, nil
}

// TestMail_StagesAndReminders: under a policy of two stages, the create's mails go to the
// first stage's people and show the stage and the rules' progress; the vote that meets stage
// 1 mails the second stage's person, and a reminder an hour later says when the approval
// expires; the chat message carries the same lines.
func TestMail_StagesAndReminders(t *testing.T) {
	testdb.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := t.Context()
		h := newHarness(t, kind, approval.Routing{Channels: map[string][]string{
			"alice": {approval.ChannelEmail}, "bob": {approval.ChannelEmail},
			"carol": {approval.ChannelEmail, approval.ChannelChat}}})
		var mu sync.Mutex
		var chats []string
		hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			var m struct{ Text string }
			json.Unmarshal(b, &m)
			mu.Lock()
			chats = append(chats, m.Text)
			mu.Unlock()
		}))
		t.Cleanup(hook.Close)
		svc := h.service()
		svc.Policies, svc.Members = stagedPolicy{}, approval.GroupMembers{"sre": {"alice", "bob"}}
		ob := h.outbox(nil)
		ob.Mailbox = svc
		ob.Senders[approval.ChannelChat] = &notify.Chat{URL: func(string) string { return hook.URL }, PublicURL: publicURL, Client: hook.Client()}
		drain := func() {
			for ob.RunOnceT(t) > 0 {
			}
		}

		res, err := svc.Create(ctx, approval.Principal{Subject: "ci-bot", Role: approval.RoleRequester}, approval.CreateCommand{
			Key: "refund-1", Body: []byte(`{"action":"refund","title":"Refund 40 EUR"}`),
			Decode: func() (approval.CreateRequest, error) {
				return approval.CreateRequest{Action: "refund", Title: "Refund 40 EUR"}, nil
			},
			Cause: approval.HTTPCause("create"),
			Respond: func(a *approval.Approval) (approval.StoredResponse, error) {
				return approval.StoredResponse{StatusCode: 201, Body: []byte(`{}`)}, nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		a := res.Approval
		expires := a.ExpiresAt.Format("2006-01-02 15:04 MST")
		drain()
		mails := h.smtp.Mails()
		if got := recipients(mails); got != "alice@example.com,bob@example.com" {
			t.Fatalf("mails at create: got %s, want alice and bob (stage 1 only)", got)
		}
		for _, m := range mails {
			msg := parseMail(t, m.Data)
			for _, part := range []string{msg.text, msg.html} {
				for _, want := range []string{"Stage: stage 1 of 2", "Progress: sre: 0 of 1", "Expires: " + expires} {
					if !strings.Contains(part, want) {
						t.Errorf("mail at create to %s: want %q in\n%s", m.To, want, part)
					}
				}
			}
		}

		h.clock.Advance(10 * time.Minute)
		if _, err := svc.Decide(ctx, approval.Principal{Subject: "alice", Role: approval.RoleApprover},
			approval.DecideRequest{ApprovalID: a.ID, Verdict: approval.VerdictApprove, Cause: approval.HTTPCause("vote")}); err != nil {
			t.Fatal(err)
		}
		drain()
		mails = h.smtp.Mails()[2:]
		if got := recipients(mails); got != "carol@example.com" {
			t.Fatalf("mails when stage 2 began: got %s, want carol", got)
		}
		msg := parseMail(t, mails[0].Data)
		for _, want := range []string{"The earlier stages are met", "Stage: stage 2 of 2", "Progress: carol: 0 of 1"} {
			if !strings.Contains(msg.text, want) || !strings.Contains(msg.html, want) {
				t.Errorf("stage mail: want %q in both parts\n%s\n%s", want, msg.text, msg.html)
			}
		}

		h.clock.Advance(time.Hour)
		if _, err := svc.RemindDue(ctx, 10); err != nil {
			t.Fatal(err)
		}
		drain()
		mails = h.smtp.Mails()[3:]
		if got := recipients(mails); got != "carol@example.com" {
			t.Fatalf("reminders: got %s, want carol", got)
		}
		msg = parseMail(t, mails[0].Data)
		for _, want := range []string{"Reminder: your vote is still asked; the approval expires on " + expires, "Stage: stage 2 of 2"} {
			if !strings.Contains(msg.text, want) || !strings.Contains(msg.html, want) {
				t.Errorf("reminder mail: want %q in both parts\n%s\n%s", want, msg.text, msg.html)
			}
		}

		mu.Lock()
		defer mu.Unlock()
		if len(chats) != 2 {
			t.Fatalf("chat messages to carol: got %d, want 2 (stage 2, reminder)", len(chats))
		}
		for _, c := range chats {
			for _, want := range []string{"Stage: stage 2 of 2", "Progress: carol: 0 of 1", "Expires: " + expires} {
				if !strings.Contains(c, want) {
					t.Errorf("chat message: want %q in\n%s", want, c)
				}
			}
		}
	})
}

// recipients lists the mails' recipients, sorted, joined by commas.
func recipients(mails []mailtest.Mail) string {
	var to []string
	for _, m := range mails {
		to = append(to, m.To)
	}
	slices.Sort(to)
	return strings.Join(to, ",")
}
