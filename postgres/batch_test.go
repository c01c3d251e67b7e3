package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
	"github.com/approvald/approval/postgres"
)

// TestCreateBatch runs creates as one batch, as the batcher groups creates that arrive
// together, and checks that each create's outcome is its own: a key written once, a second
// create of the same key in the same batch answered with the first's approval, a refused
// token writing nothing, and, when one create's content is refused by the database, that
// create alone failing while the others of its batch are written.
func TestCreateBatch(t *testing.T) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(approval.Precision)
	s := testdb.Open(t, testdb.Postgres, func() time.Time { return now }).(*postgres.Store)
	svc := &approval.Service{Store: s}
	secret, token, err := svc.CreateToken(ctx, tokenIssuer, approval.TokenSpec{Subject: "ci-bot", Role: approval.RoleRequester})
	if err != nil {
		t.Fatal(err)
	}
	good := func() *approval.TokenCheck {
		return &approval.TokenCheck{ID: token.ID, Hash: approval.HashToken(secret), Now: now}
	}
	gone := &approval.TokenCheck{ID: "tok_gone", Hash: approval.HashToken("gone"), Now: now}
	n := 0
	create := func(key, title string) *approval.Approval {
		n++
		return &approval.Approval{
			ID: fmt.Sprintf("apr_batch_%d", n), OperationKey: key, Requester: "ci-bot",
			Fingerprint: "fp-" + key, Action: "deploy", Title: title, Context: []byte(`{}`),
			RequiredApprovals: 1, Approvers: []string{"alice", "bob"}, Status: approval.StatusPending,
			CreatedAt: now, ExpiresAt: now.Add(time.Hour),
		}
	}

	t.Run("together", func(t *testing.T) {
		first, again, refused, other := create("k1", "one"), create("k1", "one"), create("k2", "two"), create("k3", "three")
		out := s.InsertBatch([]*approval.Approval{first, again, refused, other},
			[]*approval.TokenCheck{good(), good(), gone, nil})
		for i, o := range out {
			if o.Err != nil {
				t.Fatalf("create %d: %v", i, o.Err)
			}
		}
		if !out[0].Written || out[0].Holder != nil {
			t.Errorf("first of k1: %+v; want written", out[0])
		}
		if out[1].Written || out[1].Holder == nil || out[1].Holder.ID != first.ID {
			t.Errorf("second of k1: %+v; want the first's approval as holder", out[1])
		} else if got := out[1].Holder.Approvers; len(got) != 2 || got[0] != "alice" {
			t.Errorf("holder's approvers = %v; want [alice bob]", got)
		}
		if !out[2].Refused || out[2].Written {
			t.Errorf("create with a gone token: %+v; want refused", out[2])
		}
		if !out[3].Written {
			t.Errorf("create without a check: %+v; want written", out[3])
		}
		if _, err := s.Approval(ctx, refused.ID); approval.ErrorCode(err) != approval.ENOTFOUND {
			t.Errorf("the refused create's approval: %v; want not found", err)
		}
		events, err := s.Events(ctx, first.ID)
		if err != nil || len(events) != 1 || events[0].Type != approval.EventCreated {
			t.Errorf("events of the written approval: %v, %v; want one approval.created", events, err)
		}
	})

	t.Run("reads", func(t *testing.T) {
		a := create("k7", "seven")
		if out := s.InsertBatch([]*approval.Approval{a}, []*approval.TokenCheck{nil}); !out[0].Written {
			t.Fatalf("create: %+v", out[0])
		}
		got, err := s.ReadBatch([]string{a.ID, "apr_missing", a.ID, a.ID}, []*approval.TokenCheck{good(), good(), gone, nil})
		if err != nil {
			t.Fatal(err)
		}
		if got[0] == nil || got[0].ID != a.ID || len(got[0].Approvers) != 2 {
			t.Errorf("read with a good token: %+v; want the approval with its approvers", got[0])
		}
		if got[1] != nil {
			t.Errorf("read of a missing id: %+v; want nothing", got[1])
		}
		if got[2] != nil {
			t.Errorf("read with a gone token: %+v; want nothing", got[2])
		}
		if got[3] == nil || got[3].ID != a.ID {
			t.Errorf("read without a check: %+v; want the approval", got[3])
		}
	})

	t.Run("one refused by the database", func(t *testing.T) {
		before, bad, after := create("k4", "four"), create("k5", "nul \x00 byte"), create("k6", "six")
		out := s.InsertBatch([]*approval.Approval{before, bad, after}, []*approval.TokenCheck{nil, nil, nil})
		if out[0].Err != nil || !out[0].Written || out[2].Err != nil || !out[2].Written {
			t.Errorf("the good creates beside a bad one: %+v, %+v; want both written", out[0], out[2])
		}
		if approval.ErrorCode(out[1].Err) != approval.EINVALID {
			t.Errorf("the create with a NUL byte: %+v; want EINVALID", out[1])
		}
		if _, err := s.Approval(ctx, bad.ID); approval.ErrorCode(err) != approval.ENOTFOUND {
			t.Errorf("the bad create's approval: %v; want not found", err)
		}
	})
}

// TestInboxBatch stores deliveries as one batch, as the batcher groups intakes that arrive
// together: a second delivery of the same event in the batch is not stored again, and a
// delivery the database refuses fails alone.
func TestInboxBatch(t *testing.T) {
	ctx := context.Background()
	s := testdb.Open(t, testdb.Postgres, nil).(*postgres.Store)
	event := func(id, eventID, typ string) *approval.InboxEvent {
		return &approval.InboxEvent{ID: id, Source: "github", EventID: eventID, Type: typ, Body: []byte(`{"n":"` + id + `"}`)}
	}
	stored, errs := s.RecordInboxBatch([]*approval.InboxEvent{
		event("in_1", "d1", "push"), event("in_2", "d1", "push"), event("in_3", "d2", "push"),
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("delivery %d: %v", i, err)
		}
	}
	if !stored[0] || stored[1] || !stored[2] {
		t.Errorf("stored = %v; want [true false true]: the second delivery of d1 is a duplicate", stored)
	}
	if _, err := s.InboxEvent(ctx, "in_2"); approval.ErrorCode(err) != approval.ENOTFOUND {
		t.Errorf("the duplicate's id: %v; want not found", err)
	}

	stored, errs = s.RecordInboxBatch([]*approval.InboxEvent{
		event("in_4", "d4", "push"), event("in_5", "d5", "nul \x00 type"), event("in_6", "d6", "push"),
		event("in_7", "", "push"),
	})
	if approval.ErrorCode(errs[3]) != approval.EINVALID || stored[3] {
		t.Errorf("the delivery without an event id: %v %v; want EINVALID", stored[3], errs[3])
	}
	if errs[0] != nil || !stored[0] || errs[2] != nil || !stored[2] {
		t.Errorf("the good deliveries beside a bad one: %v %v, %v %v; want both stored", stored[0], errs[0], stored[2], errs[2])
	}
	if approval.ErrorCode(errs[1]) != approval.EINVALID {
		t.Errorf("the delivery with a NUL byte: %v; want EINVALID", errs[1])
	}
}
