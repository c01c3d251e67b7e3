package httpapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
)

// TestOutbox: operators list the outbox by status and kind and read a message with its
// attempts; others are refused; a bad filter is a problem and changes nothing.
func TestOutbox(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		ci := f.token("ci-bot", approval.RoleRequester)
		olga := f.token("olga", approval.RoleOperator)
		resp := f.create(ci, "outbox-1", `{"action":"deploy","title":"Deploy","approvers":["alice","bob"]}`)
		if resp.status != http.StatusCreated {
			t.Fatalf("create: %d %s", resp.status, resp.body)
		}

		type page struct {
			Messages   []approval.OutboxMessage `json:"messages"`
			NextCursor string                   `json:"next_cursor"`
		}
		var p page
		f.do("GET", "/v1/outbox?status=pending&kind=notification", olga, "").decode(t, &p)
		if len(p.Messages) != 1 || p.Messages[0].Recipient != "alice" || p.Messages[0].Channel != approval.ChannelEmail {
			t.Fatalf("pending notifications: got %+v, want alice's e-mail", p.Messages)
		}
		id := p.Messages[0].ID

		// A worker's attempt, so that the log has something to show.
		svc := f.service()
		claimed, err := svc.ClaimOutbox(t.Context(), time.Minute, 1)
		if err != nil || len(claimed) != 1 {
			t.Fatalf("claim: %v", err)
		}
		if _, err := svc.FinishOutbox(t.Context(), id, 1, approval.OutboxOutcome{Status: approval.OutboxFailed, Error: "550 no such user"}); err != nil {
			t.Fatal(err)
		}
		var m struct {
			approval.OutboxMessage
			AttemptLog []approval.OutboxAttempt `json:"attempt_log"`
		}
		f.do("GET", "/v1/outbox/"+id, olga, "").decode(t, &m)
		if m.Status != approval.OutboxFailed || len(m.AttemptLog) != 1 || m.AttemptLog[0].Error != "550 no such user" {
			t.Fatalf("message: got %+v", m)
		}
		f.do("GET", "/v1/outbox?status=failed", olga, "").decode(t, &p)
		if len(p.Messages) != 1 || p.Messages[0].ID != id {
			t.Fatalf("failed: got %+v", p.Messages)
		}
		f.do("POST", "/v1/outbox/"+id+"/retry", olga, "").decode(t, &m)
		if m.Status != approval.OutboxPending {
			t.Fatalf("retried: got %s, want pending", m.Status)
		}
		f.do("POST", "/v1/outbox/"+id+"/retry", olga, "").problem(t, http.StatusConflict)

		f.do("GET", "/v1/outbox", ci, "").problem(t, http.StatusForbidden)
		f.do("GET", "/v1/outbox/"+id, ci, "").problem(t, http.StatusForbidden)
		f.do("GET", "/v1/outbox/ntf_none", olga, "").problem(t, http.StatusNotFound)
		f.do("GET", "/v1/outbox?status=lost", olga, "").problem(t, http.StatusBadRequest)
		f.do("GET", "/v1/outbox?kind=pigeon", olga, "").problem(t, http.StatusBadRequest)
	})
}

// TestOutboxHidesSigninTokens: operators see a sign-in link's message, never its token,
// which would sign them in as its recipient.
func TestOutboxHidesSigninTokens(t *testing.T) {
	t.Parallel()
	testdb.Each(t, func(t *testing.T, kind string) {
		f := setup(t, kind)
		olga := f.token("olga", approval.RoleOperator)
		if res, err := f.service().RequestSignin(t.Context(), "alice", "", ""); err != nil || !res.Queued {
			t.Fatalf("request a link: %+v, %v", res, err)
		}
		msgs, _, err := f.store.OutboxMessages(t.Context(), approval.OutboxFilter{Kind: approval.OutboxSignin})
		if err != nil || len(msgs) != 1 {
			t.Fatalf("sign-in messages: %d, %v", len(msgs), err)
		}
		var stored approval.Signin
		if err := json.Unmarshal(msgs[0].Payload, &stored); err != nil || stored.Token == "" {
			t.Fatalf("stored payload %s: want the token until it is sent", msgs[0].Payload)
		}
		for _, path := range []string{"/v1/outbox?kind=signin", "/v1/outbox/" + msgs[0].ID} {
			resp := f.do("GET", path, olga, "")
			if resp.status != http.StatusOK || strings.Contains(string(resp.body), stored.Token) || !strings.Contains(string(resp.body), msgs[0].ID) {
				t.Fatalf("GET %s: %d %s; want the message without its token", path, resp.status, resp.body)
			}
		}
	})
}
