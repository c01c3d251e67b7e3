package httpapi

import (
	"context"
	"net/http"
	"strings"

	"github.com/approvald/approval"
)

// principal is the authenticated caller: a token's subject and role.
type principal struct {
	Subject string
	Role    approval.Role
}

// authenticate resolves the request's bearer token, reading the store with ctx. A missing, malformed or unknown token is
// EUNAUTHORIZED; a store failure is passed on (503 when the database is down, never 401).
func (s *Server) authenticate(ctx context.Context, r *http.Request) (principal, error) {
	values := r.Header.Values("Authorization")
	if len(values) == 0 {
		return principal{}, approval.Errorf(approval.EUNAUTHORIZED, "missing Authorization header; send Authorization: Bearer <token>")
	} else if len(values) > 1 {
		return principal{}, approval.Errorf(approval.EUNAUTHORIZED, "send one Authorization header, not %d", len(values))
	}
	scheme, secret, ok := strings.Cut(values[0], " ")
	secret = strings.TrimSpace(secret)
	if !ok || !strings.EqualFold(scheme, "Bearer") || secret == "" {
		return principal{}, approval.Errorf(approval.EUNAUTHORIZED, "Authorization must be a bearer token: Authorization: Bearer <token>")
	}

	t, err := s.svc.Authenticate(ctx, secret)
	if err != nil {
		return principal{}, err
	}
	s.info(r).subject = t.Subject
	return principal{Subject: t.Subject, Role: t.Role}, nil
}

// mayCreate reports whether p may create approvals (and so become their requester).
func (p principal) mayCreate() bool {
	return p.Role == approval.RoleRequester || p.Role == approval.RoleAdmin
}

// mayRead reports whether p may see a. Approvals p may not see are answered 404, so that
// their existence is not revealed.
func (p principal) mayRead(a *approval.Approval) bool {
	return p.Role.ReadsAll() || a.VisibleTo(p.Subject)
}

// mayDecide reports whether p's role may vote at all: approvers decide where listed, admins may
// do everything (docs/http-api.md, "Authentication and roles"); requesters and operators may
// not. The store checks that p is listed.
func (p principal) mayDecide() bool {
	return p.Role == approval.RoleApprover || p.Role == approval.RoleAdmin
}

// mayCancel reports whether p may cancel a: its requester (with a requester token) or an admin.
func (p principal) mayCancel(a *approval.Approval) bool {
	return p.Role == approval.RoleAdmin || (p.Role == approval.RoleRequester && a.Requester == p.Subject)
}

// authenticateOperator authenticates the request and lets operators and admins through:
// executions and the inbox are theirs (docs/http-api.md, "Authentication and roles"). Anyone
// else is EFORBIDDEN.
func (s *Server) authenticateOperator(r *http.Request) (principal, error) {
	p, err := s.authenticate(r.Context(), r)
	if err != nil {
		return principal{}, err
	}
	if p.Role != approval.RoleOperator && p.Role != approval.RoleAdmin {
		return principal{}, approval.Errorf(approval.EFORBIDDEN, "role %s may not manage executions or the inbox; use an operator or admin token", p.Role)
	}
	return p, nil
}

// mayReport reports whether p may report the execution outcome of a: its requester (who
// executes actions without a target), an operator or an admin.
func (p principal) mayReport(a *approval.Approval) bool {
	return p.Role.ReadsAll() || (p.Role == approval.RoleRequester && a.Requester == p.Subject)
}
