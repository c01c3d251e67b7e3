package httpapi

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/approvald/approval"
)

// principal is the authenticated caller; its methods are the permission rules.
type principal = approval.Principal

// authenticate resolves the request's bearer token, reading the store with ctx. A missing, malformed or unknown token is
// EUNAUTHORIZED; a store failure is passed on (503 when the database is down, never 401).
func (s *Server) authenticate(ctx context.Context, r *http.Request) (principal, error) {
	secret, err := bearer(r)
	if err != nil {
		return principal{}, err
	}
	t, err := s.svc.Authenticate(ctx, secret)
	if err != nil {
		return principal{}, err
	}
	s.info(r).subject = t.Subject
	return t.Principal(), nil
}

// authenticateFirstTrip is authenticate for the hot routes (create, GET of one approval,
// vote): a token this process knows is not looked up first but re-checked by the store in the
// request's first round trip, beside the request's own statement (approval.TokenCheck). It
// returns the context to do the request's work with, which carries the check. Every answer
// the request gives goes through writeError or writeJSON (or settle), which make sure the
// check ran before anything is answered, and answer the 401 of a refused token.
func (s *Server) authenticateFirstTrip(ctx context.Context, r *http.Request) (context.Context, principal, error) {
	info, ok := r.Context().Value(requestInfoKey{}).(*requestInfo)
	if !ok {
		p, err := s.authenticate(ctx, r)
		return ctx, p, err
	}
	secret, err := bearer(r)
	if err != nil {
		return ctx, principal{}, err
	}
	ctx, t, err := s.svc.AuthenticateFirstTrip(ctx, secret)
	if err != nil {
		return ctx, principal{}, err
	}
	info.subject = t.Subject
	info.check = approval.PendingTokenCheck(ctx)
	return ctx, t.Principal(), nil
}

// settle returns nil when the request's token check, if it has one, passed, running it now
// when no store call has; otherwise the 401 to answer instead of whatever the request was
// about to answer. A check a store refused is looked up once more for the reason
// Authenticate would give (revoked, expired, unknown). The check runs even if the client has
// gone, within the request's deadline, or settleGrace when that has passed (it is often why
// the request is answering an error).
func (s *Server) settle(r *http.Request) error {
	info, ok := r.Context().Value(requestInfoKey{}).(*requestInfo)
	if !ok || info.check == nil {
		return nil
	}
	c := info.check
	info.check = nil
	if !c.Pending() && !c.Refused() {
		return nil
	}
	deadline := time.Now().Add(settleGrace)
	if d, ok := r.Context().Deadline(); ok && d.After(deadline) {
		deadline = d
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(r.Context()), deadline)
	defer cancel()
	err := s.svc.ConfirmToken(ctx, c)
	if err != nil && ctx.Err() != nil {
		return approval.Unfinished(ctx, err)
	}
	return err
}

// settleGrace bounds the token check settle runs for a request whose deadline has passed.
const settleGrace = 500 * time.Millisecond

// authenticateOperator authenticates the request and lets operators and admins through, for
// what the server itself holds rather than the Service (the configured webhook sources): the
// Service's own operations refuse for themselves (docs/http-api.md, "Authentication and
// roles"). Anyone else is EFORBIDDEN.
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

// tokenRequired runs h only for a request that authenticates, with any role: what h serves
// is for the service's own users, not for whoever reaches the address.
func (s *Server) tokenRequired(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := s.authenticate(r.Context(), r); err != nil {
			s.writeError(w, r, err)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// bearer returns the secret of the request's one bearer token; a missing or malformed one is
// EUNAUTHORIZED.
func bearer(r *http.Request) (string, error) {
	values := r.Header.Values("Authorization")
	if len(values) == 0 {
		return "", approval.Errorf(approval.EUNAUTHORIZED, "missing Authorization header; send Authorization: Bearer <token>")
	} else if len(values) > 1 {
		return "", approval.Errorf(approval.EUNAUTHORIZED, "send one Authorization header, not %d", len(values))
	}
	scheme, secret, ok := strings.Cut(values[0], " ")
	secret = strings.TrimSpace(secret)
	if !ok || !strings.EqualFold(scheme, "Bearer") || secret == "" {
		return "", approval.Errorf(approval.EUNAUTHORIZED, "Authorization must be a bearer token: Authorization: Bearer <token>")
	}
	return secret, nil
}
