package approval_test

import (
	"testing"

	"github.com/approvald/approval"
)

// The permission rules, role by role, for an approval requested by ci-bot with alice as its
// approver.
func TestPrincipal(t *testing.T) {
	a := &approval.Approval{Requester: "ci-bot", Approvers: []string{"alice"}}
	for _, c := range []struct {
		p                                             approval.Principal
		create, read, decide, cancel, report, operate bool
	}{
		{approval.Principal{Subject: "ci-bot", Role: approval.RoleRequester}, true, true, false, true, true, false},
		{approval.Principal{Subject: "other-bot", Role: approval.RoleRequester}, true, false, false, false, false, false},
		{approval.Principal{Subject: "alice", Role: approval.RoleApprover}, false, true, true, false, false, false},
		{approval.Principal{Subject: "bob", Role: approval.RoleApprover}, false, false, true, false, false, false},
		{approval.Principal{Subject: "oncall", Role: approval.RoleOperator}, false, true, false, false, true, true},
		{approval.Principal{Subject: "root", Role: approval.RoleAdmin}, true, true, true, true, true, true},
	} {
		got := [6]bool{c.p.MayCreate(), c.p.MayRead(a), c.p.MayDecide(), c.p.MayCancel(a), c.p.MayReport(a), c.p.MayOperate()}
		want := [6]bool{c.create, c.read, c.decide, c.cancel, c.report, c.operate}
		if got != want {
			t.Errorf("%s (%s): got create, read, decide, cancel, report, operate = %v, want %v", c.p.Subject, c.p.Role, got, want)
		}
	}
}
