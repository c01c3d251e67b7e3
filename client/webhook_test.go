package client_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/approvald/approval/client"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/webhook"
)

// A webhook signed by SignStandardWebhook is accepted by approvald's real intake, once.
func TestSignStandardWebhook(t *testing.T) {
	f := setup(t, testdb.SQLite)
	body := []byte(`{"type": "approval.decision", "data": {"operation_key": "k", "approver": "alice", "verdict": "approve"}}`)
	h, err := client.SignStandardWebhook(chatSecret, "msg_1", time.Now(), body)
	if err != nil {
		t.Fatal(err)
	}
	for i, wantDuplicate := range []bool{false, true} {
		req, _ := http.NewRequest("POST", f.server.URL+"/v1/inbox/chat", bytes.NewReader(body))
		req.Header = h.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			ID        string `json:"id"`
			Duplicate bool   `json:"duplicate"`
		}
		json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || out.Duplicate != wantDuplicate || out.ID == "" {
			t.Errorf("delivery %d: got %d %+v, want 200 duplicate=%v", i+1, resp.StatusCode, out, wantDuplicate)
		}
	}
	if _, err := client.SignStandardWebhook("not base64!", "msg_1", time.Now(), body); err == nil {
		t.Error("got no error for a bad secret")
	}
}

// VerifyExecution accepts a call signed as the runner signs (webhook.SignStandard over
// {"approval": ...}) and refuses a tampered, unsigned or stale one.
func TestVerifyExecution(t *testing.T) {
	const secret = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
	body := []byte(`{"approval": {"id": "apr_1", "operation_key": "deploy-1", "status": "approved", "version": 2}}`)
	h, err := webhook.SignStandard(secret, "exe_1-1", time.Now(), body)
	if err != nil {
		t.Fatal(err)
	}
	h.Set("Idempotency-Key", "ci-bot/deploy-1")
	call, err := client.VerifyExecution(secret, h, body)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if call.Key != "ci-bot/deploy-1" || call.MessageID != "exe_1-1" || call.Approval.ID != "apr_1" || call.Approval.Status != "approved" {
		t.Errorf("got %+v, want the call's key, message id and approval", call)
	}

	old, _ := webhook.SignStandard(secret, "exe_1-1", time.Now().Add(-time.Hour), body)
	for name, tc := range map[string]struct {
		h    http.Header
		body []byte
	}{
		"tampered":  {h, bytes.Replace(body, []byte("apr_1"), []byte("apr_2"), 1)},
		"unsigned":  {http.Header{}, body},
		"stale":     {old, body},
		"other key": {mustSign(t, "whsec_"+"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", body), body},
	} {
		if _, err := client.VerifyExecution(secret, tc.h, tc.body); !errors.Is(err, client.ErrSignature) {
			t.Errorf("%s: got %v, want ErrSignature", name, err)
		}
	}
}

func mustSign(t *testing.T, secret string, body []byte) http.Header {
	t.Helper()
	h, err := webhook.SignStandard(secret, "exe_1-1", time.Now(), body)
	if err != nil {
		t.Fatal(err)
	}
	return h
}
