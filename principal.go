package approval

// Principal is an authenticated caller: a token's subject and role. Its subject is compared
// as a name (SameName), so that two spellings of one person are one caller. Its methods are the
// permission rules, written once for every consumer (the API, the approver pages, the
// commands); docs/http-api.md, "Authentication and roles", states them.
type Principal struct {
	Subject string
	Role    Role
}

// MayCreate reports whether p may create approvals (and so become their requester).
func (p Principal) MayCreate() bool {
	return p.Role == RoleRequester || p.Role == RoleAdmin
}

// MayRead reports whether p may see a. An approval p may not see is answered as if it did
// not exist, so that its existence is not revealed.
func (p Principal) MayRead(a *Approval) bool {
	return p.Role.ReadsAll() || a.VisibleTo(p.Subject)
}

// MayDecide reports whether p's role may vote at all: approvers decide where listed, admins
// may do everything; requesters and operators may not. Service.Decide checks that p is
// listed.
func (p Principal) MayDecide() bool {
	return p.Role == RoleApprover || p.Role == RoleAdmin
}

// MayCancel reports whether p may cancel a: its requester (with a requester token) or an
// admin.
func (p Principal) MayCancel(a *Approval) bool {
	return p.Role == RoleAdmin || (p.Role == RoleRequester && a.IsRequester(p.Subject))
}

// MayReport reports whether p may report the execution outcome of a: its requester (who
// executes actions without a target), an operator or an admin.
func (p Principal) MayReport(a *Approval) bool {
	return p.Role.ReadsAll() || (p.Role == RoleRequester && a.IsRequester(p.Subject))
}

// MayOperate reports whether p may manage executions and the inbox: operators and admins.
func (p Principal) MayOperate() bool {
	return p.Role == RoleOperator || p.Role == RoleAdmin
}

// MayManageTokens reports whether p may create, list, revoke and rotate bearer tokens: admins
// only, since a token is a role.
func (p Principal) MayManageTokens() bool {
	return p.Role == RoleAdmin
}

// mayOperate is EFORBIDDEN unless p may operate: the one refusal of every operator action.
func mayOperate(p Principal) error {
	if !p.MayOperate() {
		return Errorf(EFORBIDDEN, "role %s may not manage executions or the inbox; use an operator or admin token", p.Role)
	}
	return nil
}

// CheckCreate is the refusal Service.Create gives a principal whose role may not create
// (EFORBIDDEN), or nil. Create checks it itself; a consumer asks for it first only where its
// contract answers the role before the form of the request (the HTTP API answers 403 before it
// reads the Idempotency-Key and the body).
func (p Principal) CheckCreate() error { return mayCreate(p) }

// mayCreate is EFORBIDDEN unless p may create approvals.
func mayCreate(p Principal) error {
	if !p.MayCreate() {
		return Errorf(EFORBIDDEN, "role %s may not create approvals; use a requester or admin token", p.Role)
	}
	return nil
}

// mayManageTokens is EFORBIDDEN unless p may manage tokens.
func mayManageTokens(p Principal) error {
	if !p.MayManageTokens() {
		return Errorf(EFORBIDDEN, "role %s may not manage tokens; use an admin token", p.Role)
	}
	return nil
}
