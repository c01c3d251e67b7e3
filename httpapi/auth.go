package httpapi

import (
	"context"
	"net/http"
	"strings"

	"github.com/approvald/approval"
)

// principal is the authenticated caller; its methods are the permission rules.
type principal = approval.Principal

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

// authenticateOperator authenticates the request and lets operators and admins through:
// executions and the inbox are theirs (docs/http-api.md, "Authentication and roles"). Anyone
// else is EFORBIDDEN.
func (s *Server) authenticateOperator(r *http.Request) (principal, error) {
	p, err := s.authenticate(r.Context(), r)
	if err != nil {
		return principal{}, err
	}
	if !p.MayOperate() {
		return principal{}, approval.Errorf(approval.EFORBIDDEN, "role %s may not manage executions or the inbox; use an operator or admin token", p.Role)
	}
	return p, nil
}
