package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/client"
	"github.com/approvald/approval/httpapi"
	"github.com/approvald/approval/sqlite"
	"github.com/approvald/approval/webhook"
)

// exampleServer starts the real API over a new SQLite database and returns its URL, a token
// per subject (ci-bot requests, alice and bob approve) and a function that stops it.
func exampleServer() (string, map[string]string, func()) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "approvald-example-")
	if err != nil {
		log.Fatal(err)
	}
	store, err := sqlite.Open(ctx, "file:"+filepath.Join(dir, "approvald.db"))
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	// The tokens are made as an admin, as approvald token create does.
	admin := approval.Principal{Subject: "approvald token", Role: approval.RoleAdmin}
	tokens := map[string]string{}
	for subject, role := range map[string]approval.Role{"ci-bot": approval.RoleRequester, "alice": approval.RoleApprover, "bob": approval.RoleApprover} {
		secret, _, err := (&approval.Service{Store: store}).CreateToken(ctx, admin, approval.TokenSpec{Subject: subject, Role: role})
		if err != nil {
			log.Fatal(err)
		}
		tokens[subject] = secret
	}
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Store: store, Service: &approval.Service{Store: store}}))
	return srv.URL, tokens, func() {
		srv.Close()
		store.Close()
		os.RemoveAll(dir)
	}
}

// A pipeline asks for an approval under the operation's key. Run again (a retried job), the
// same call finds the same approval instead of asking twice.
func ExampleClient_CreateApproval() {
	server, tokens, stop := exampleServer()
	defer stop()
	ctx := context.Background()

	c, err := client.New(server, tokens["ci-bot"])
	if err != nil {
		log.Fatal(err)
	}
	req := client.CreateRequest{
		Action:    "deploy",
		Title:     "Deploy api v1.42 to prod",
		Approvers: []string{"alice", "bob"},
		Context:   []byte(`{"commit": "9f2c1e"}`),
		ExpiresIn: 2 * time.Hour,
	}
	first, err := c.CreateApproval(ctx, "deploy-prod-1042", req)
	if err != nil {
		log.Fatal(err)
	}
	again, err := c.CreateApproval(ctx, "deploy-prod-1042", req)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(first.Approval.Status, first.Replayed)
	fmt.Println(again.Approval.ID == first.Approval.ID, again.Replayed)
	// Output:
	// pending false
	// true true
}

// The pipeline waits for the decision; an approver decides meanwhile.
func ExampleClient_WaitForDecision() {
	server, tokens, stop := exampleServer()
	defer stop()
	ctx := context.Background()

	ci, _ := client.New(server, tokens["ci-bot"])
	alice, _ := client.New(server, tokens["alice"])
	res, err := ci.CreateApproval(ctx, "deploy-prod-1043", client.CreateRequest{
		Action: "deploy", Title: "Deploy api v1.43 to prod", Approvers: []string{"alice"},
	})
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		if _, err := alice.Approve(ctx, res.Approval.ID, "ship it"); err != nil {
			log.Print(err)
		}
	}()

	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	a, err := ci.WaitForDecision(wait, res.Approval.ID, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(a.Status, a.Decisions[0].Approver, a.Decisions[0].Comment)
	// Output: approved alice ship it
}

// A different request under a key already used is refused; the problem's fields are on
// *client.Error.
func ExampleError() {
	server, tokens, stop := exampleServer()
	defer stop()
	ctx := context.Background()

	c, _ := client.New(server, tokens["ci-bot"])
	req := client.CreateRequest{Action: "refund", Title: "Refund order 9281", Approvers: []string{"alice"}}
	if _, err := c.CreateApproval(ctx, "refund-9281", req); err != nil {
		log.Fatal(err)
	}
	req.Title = "Refund order 9282"
	_, err := c.CreateApproval(ctx, "refund-9281", req)
	var e *client.Error
	if errors.As(err, &e) {
		fmt.Println(e.Status, e.Code())
		fmt.Println(e.Detail)
	}
	// Output:
	// 422 mismatch
	// the Idempotency-Key was already used for a different request
}

// List iterates over every page of a listing.
func ExampleClient_List() {
	server, tokens, stop := exampleServer()
	defer stop()
	ctx := context.Background()

	c, _ := client.New(server, tokens["ci-bot"])
	for _, key := range []string{"op-1", "op-2", "op-3"} {
		req := client.CreateRequest{Action: "deploy", Title: key, Approvers: []string{"bob"}}
		if _, err := c.CreateApproval(ctx, key, req); err != nil {
			log.Fatal(err)
		}
	}
	for a, err := range c.List(ctx, client.ListOptions{Status: client.StatusPending, Limit: 2}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(a.OperationKey)
	}
	// Output:
	// op-3
	// op-2
	// op-1
}

// A target of an action checks that a call comes from approvald before acting on it, and
// uses the Idempotency-Key (the requester and its operation key) to do the operation once.
func ExampleVerifyExecution() {
	const secret = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD" // the action's secret
	target := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := readAll(r)
		if err != nil {
			http.Error(w, "cannot read", http.StatusBadRequest)
			return
		}
		call, err := client.VerifyExecution(secret, r.Header, body)
		if err != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		fmt.Println("deploying", call.Key, "approved as", call.Approval.ID)
		w.Write([]byte(`{"deploy_id": "d-77"}`))
	})

	// approvald's runner sends this; here it is made by hand.
	body := []byte(`{"approval": {"id": "apr_1", "operation_key": "deploy-prod-1042", "requester": "ci-bot", "status": "approved"}}`)
	h, _ := webhook.SignStandard(secret, "exe_1-1", time.Now(), body)
	h.Set("Idempotency-Key", "ci-bot/deploy-prod-1042")
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("POST", "/deploy", bytesReader(body))
	req.Header = h
	target.ServeHTTP(rec, req)
	fmt.Println(rec.Code)
	// Output:
	// deploying ci-bot/deploy-prod-1042 approved as apr_1
	// 200
}

func readAll(r *http.Request) ([]byte, error) { return io.ReadAll(io.LimitReader(r.Body, 1<<20)) }

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }
