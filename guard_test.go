package approval_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/testdb"
)

// The rules guard themselves: each Service operation done for someone refuses exactly the
// roles and relations it must, whoever calls it. The approval is ci-bot's, with alice as its
// approver; an operation a principal may do is let through to its own answer (a missing
// execution, inbox event or outbox message is ENOTFOUND then).
func TestServiceGuards(t *testing.T) {
	var (
		owner    = approval.Principal{Subject: "ci-bot", Role: approval.RoleRequester}
		stranger = approval.Principal{Subject: "other-bot", Role: approval.RoleRequester}
		listed   = approval.Principal{Subject: "alice", Role: approval.RoleApprover}
		unlisted = approval.Principal{Subject: "bob", Role: approval.RoleApprover}
		operator = approval.Principal{Subject: "oncall", Role: approval.RoleOperator}
		admin    = approval.Principal{Subject: "root", Role: approval.RoleAdmin}
	)
	type want map[approval.Principal]string // the error code for each principal; "" is success
	operatorsOnly := func(allowed string) want {
		return want{owner: approval.EFORBIDDEN, stranger: approval.EFORBIDDEN, listed: approval.EFORBIDDEN,
			unlisted: approval.EFORBIDDEN, operator: allowed, admin: allowed}
	}
	testdb.Each(t, func(t *testing.T, kind string) {
		svc := &approval.Service{Store: testdb.Open(t, kind, nil)}
		ctx := t.Context()
		n := 0
		pending := func(t *testing.T) *approval.Approval {
			t.Helper()
			n++
			return mustCreate(t, svc, "ci-bot", fmt.Sprintf("guard-%d", n), `{"action":"deploy","title":"guarded","approvers":["alice"]}`)
		}
		for _, op := range []struct {
			name string
			want want
			do   func(t *testing.T, p approval.Principal) error
		}{
			{"Cancel", want{owner: "", stranger: approval.ENOTFOUND, listed: approval.EFORBIDDEN,
				unlisted: approval.ENOTFOUND, operator: approval.EFORBIDDEN, admin: ""},
				func(t *testing.T, p approval.Principal) error {
					a := pending(t)
					_, err := svc.Cancel(ctx, p, a.ID, approval.HTTPCause("cancel"))
					if err != nil {
						// A refusal changes nothing.
						if got, rerr := svc.Store.Approval(ctx, a.ID); rerr != nil || got.Status != approval.StatusPending || got.Version != a.Version {
							t.Errorf("%s: after the refusal got %+v, %v, want it pending at version %d", p.Subject, got, rerr, a.Version)
						}
					}
					return err
				}},
			{"Decide", want{owner: approval.EFORBIDDEN, stranger: approval.EFORBIDDEN, listed: "",
				unlisted: approval.ENOTFOUND, operator: approval.EFORBIDDEN, admin: approval.EFORBIDDEN},
				func(t *testing.T, p approval.Principal) error {
					a := pending(t)
					_, err := svc.Decide(ctx, p, approval.DecideRequest{ApprovalID: a.ID, Verdict: approval.VerdictApprove, Cause: approval.HTTPCause("vote")})
					return err
				}},
			{"RetryExecution", operatorsOnly(approval.ENOTFOUND), func(t *testing.T, p approval.Principal) error {
				_, err := svc.RetryExecution(ctx, p, approval.NewID("exe"), approval.Cause{Kind: approval.CauseOperator, Operator: p.Subject})
				return err
			}},
			{"ResolveExecution", operatorsOnly(approval.ENOTFOUND), func(t *testing.T, p approval.Principal) error {
				_, err := svc.ResolveExecution(ctx, p, approval.NewID("exe"), approval.ExecutionSucceeded, "done by hand", approval.Cause{Kind: approval.CauseOperator, Operator: p.Subject})
				return err
			}},
			{"CancelExecution", operatorsOnly(approval.ENOTFOUND), func(t *testing.T, p approval.Principal) error {
				_, err := svc.CancelExecution(ctx, p, approval.NewID("exe"), approval.Cause{Kind: approval.CauseOperator, Operator: p.Subject})
				return err
			}},
			{"RetryInbox", operatorsOnly(approval.ENOTFOUND), func(t *testing.T, p approval.Principal) error {
				_, err := svc.RetryInbox(ctx, p, approval.NewID("inb"))
				return err
			}},
			{"RetryOutbox", operatorsOnly(approval.ENOTFOUND), func(t *testing.T, p approval.Principal) error {
				_, err := svc.RetryOutbox(ctx, p, approval.NewID("out"))
				return err
			}},
			{"RevokeSessions", operatorsOnly(""), func(t *testing.T, p approval.Principal) error {
				_, err := svc.RevokeSessions(ctx, p, "alice")
				return err
			}},
		} {
			t.Run(op.name, func(t *testing.T) {
				for _, p := range []approval.Principal{owner, stranger, listed, unlisted, operator, admin} {
					if got, want := approval.ErrorCode(op.do(t, p)), op.want[p]; got != want {
						t.Errorf("%s (%s): got %q, want %q", p.Subject, p.Role, got, want)
					}
				}
			})
		}
	})
}

func mustCreate(tb testing.TB, svc *approval.Service, requester, key, body string) *approval.Approval {
	tb.Helper()
	res, err := svc.Create(context.Background(), approval.CreateCommand{
		Requester: requester,
		Key:       key,
		Body:      []byte(body),
		Decode: func() (approval.CreateRequest, error) {
			return approval.CreateRequest{Action: "deploy", Title: "guarded", Approvers: []string{"alice"}}, nil
		},
		Cause:   approval.HTTPCause("create-" + key),
		Respond: func(*approval.Approval) (approval.StoredResponse, error) { return approval.StoredResponse{}, nil },
	})
	if err != nil {
		tb.Fatalf("create %s/%s: %v", requester, key, err)
	}
	return res.Approval
}
