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
	adminsOnly := func(allowed string) want {
		return want{owner: approval.EFORBIDDEN, stranger: approval.EFORBIDDEN, listed: approval.EFORBIDDEN,
			unlisted: approval.EFORBIDDEN, operator: approval.EFORBIDDEN, admin: allowed}
	}
	// Who may read ci-bot's approval: its requester, its approver, and the roles that read
	// everything; to anyone else it does not exist.
	readers := want{owner: "", stranger: approval.ENOTFOUND, listed: "", unlisted: approval.ENOTFOUND, operator: "", admin: ""}
	testdb.Each(t, func(t *testing.T, kind string) {
		svc := &approval.Service{Store: testdb.Open(t, kind, nil)}
		ctx := t.Context()
		n := 0
		pending := func(t *testing.T) *approval.Approval {
			t.Helper()
			n++
			return mustCreate(t, svc, owner, fmt.Sprintf("guard-%d", n))
		}
		for _, op := range []struct {
			name string
			want want
			do   func(t *testing.T, p approval.Principal) error
		}{
			{"Create", want{owner: "", stranger: "", listed: approval.EFORBIDDEN,
				unlisted: approval.EFORBIDDEN, operator: approval.EFORBIDDEN, admin: ""},
				func(t *testing.T, p approval.Principal) error {
					n++
					res, err := svc.Create(ctx, p, createCommand(fmt.Sprintf("guard-%d", n)))
					if err == nil && !approval.SameName(res.Approval.Requester, p.Subject) {
						t.Errorf("%s: got requester %q, want the principal's subject", p.Subject, res.Approval.Requester)
					}
					return err
				}},
			{"Approval", readers, func(t *testing.T, p approval.Principal) error {
				_, err := svc.Approval(ctx, p, pending(t).ID)
				return err
			}},
			{"Events", readers, func(t *testing.T, p approval.Principal) error {
				_, err := svc.Events(ctx, p, pending(t).ID)
				return err
			}},
			{"Approvals", readers, func(t *testing.T, p approval.Principal) error {
				// A listing refuses nobody; an approval p may not read is left out of it.
				a := pending(t)
				list, _, err := svc.Approvals(ctx, p, approval.ApprovalFilter{Limit: approval.MaxPageSize})
				if err != nil {
					t.Fatalf("%s: list: %v", p.Subject, err)
				}
				for _, got := range list {
					if got.ID == a.ID {
						return nil
					}
				}
				return approval.Errorf(approval.ENOTFOUND, "approval %s not listed", a.ID)
			}},
			{"ReportExecution", want{owner: approval.ECONFLICT, stranger: approval.ENOTFOUND, listed: approval.EFORBIDDEN,
				unlisted: approval.ENOTFOUND, operator: approval.ECONFLICT, admin: approval.ECONFLICT},
				func(t *testing.T, p approval.Principal) error {
					// The approval is pending, so whoever may report is answered the conflict
					// with its state.
					a := pending(t)
					_, _, err := svc.ReportExecution(ctx, p, approval.ExecutionReport{ApprovalID: a.ID, Status: approval.ExecutionSucceeded, Version: 1, Cause: approval.HTTPCause("report")})
					if e := approval.AsError(err); approval.ErrorCode(err) == approval.ECONFLICT && (e.Approval == nil || e.Approval.ID != a.ID) {
						t.Errorf("%s: got conflict %+v, want it to carry approval %s", p.Subject, e, a.ID)
					}
					return err
				}},
			{"ReportExecutionByKey", operatorsOnly(approval.ENOTFOUND), func(t *testing.T, p approval.Principal) error {
				_, _, err := svc.ReportExecution(ctx, p, approval.ExecutionReport{OperationKey: "no-such-key", Status: approval.ExecutionSucceeded, Version: 1, Cause: approval.HTTPCause("report")})
				return err
			}},
			{"Executions", operatorsOnly(""), func(t *testing.T, p approval.Principal) error {
				_, _, err := svc.Executions(ctx, p, approval.ExecutionFilter{})
				return err
			}},
			{"Execution", operatorsOnly(approval.ENOTFOUND), func(t *testing.T, p approval.Principal) error {
				_, err := svc.Execution(ctx, p, approval.NewID("exe"))
				return err
			}},
			{"InboxEvents", operatorsOnly(""), func(t *testing.T, p approval.Principal) error {
				_, _, err := svc.InboxEvents(ctx, p, approval.InboxFilter{})
				return err
			}},
			{"InboxEvent", operatorsOnly(approval.ENOTFOUND), func(t *testing.T, p approval.Principal) error {
				_, err := svc.InboxEvent(ctx, p, approval.NewID("inb"))
				return err
			}},
			{"OutboxMessages", operatorsOnly(""), func(t *testing.T, p approval.Principal) error {
				_, _, err := svc.OutboxMessages(ctx, p, approval.OutboxFilter{})
				return err
			}},
			{"OutboxMessage", operatorsOnly(approval.ENOTFOUND), func(t *testing.T, p approval.Principal) error {
				_, _, err := svc.OutboxMessage(ctx, p, approval.NewID("out"))
				return err
			}},
			{"CreateToken", adminsOnly(""), func(t *testing.T, p approval.Principal) error {
				_, _, err := svc.CreateToken(ctx, p, approval.TokenSpec{Subject: "carol", Role: approval.RoleApprover})
				return err
			}},
			{"Tokens", adminsOnly(""), func(t *testing.T, p approval.Principal) error {
				_, _, err := svc.Tokens(ctx, p, approval.TokenFilter{})
				return err
			}},
			{"RevokeToken", adminsOnly(approval.ENOTFOUND), func(t *testing.T, p approval.Principal) error {
				_, err := svc.RevokeToken(ctx, p, approval.NewID("tok"))
				return err
			}},
			{"RotateToken", adminsOnly(approval.ENOTFOUND), func(t *testing.T, p approval.Principal) error {
				_, _, err := svc.RotateToken(ctx, p, approval.NewID("tok"))
				return err
			}},
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
			{"Groups", operatorsOnly(""), func(t *testing.T, p approval.Principal) error {
				_, err := svc.Groups(ctx, p)
				return err
			}},
			{"PolicyList", operatorsOnly(""), func(t *testing.T, p approval.Principal) error {
				_, err := svc.PolicyList(p)
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

// mustCreate creates an approval for p under key, with alice as its approver.
func mustCreate(tb testing.TB, svc *approval.Service, p approval.Principal, key string) *approval.Approval {
	tb.Helper()
	res, err := svc.Create(context.Background(), p, createCommand(key))
	if err != nil {
		tb.Fatalf("create %s/%s: %v", p.Subject, key, err)
	}
	return res.Approval
}

// createCommand asks for an approval of deploy, with alice as its approver, under key.
func createCommand(key string) approval.CreateCommand {
	return approval.CreateCommand{
		Key:  key,
		Body: []byte(`{"action":"deploy","title":"guarded","approvers":["alice"]}`),
		Decode: func() (approval.CreateRequest, error) {
			return approval.CreateRequest{Action: "deploy", Title: "guarded", Approvers: []string{"alice"}}, nil
		},
		Cause:   approval.HTTPCause("create-" + key),
		Respond: func(*approval.Approval) (approval.StoredResponse, error) { return approval.StoredResponse{}, nil },
	}
}
