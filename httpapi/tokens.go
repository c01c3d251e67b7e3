package httpapi

import (
	"net/http"
	"time"

	"github.com/approvald/approval"
)

// tokenList is the answer to GET /v1/tokens. Tokens are shown without their secret or hash.
type tokenList struct {
	Tokens     []*approval.Token `json:"tokens"`
	NextCursor string            `json:"next_cursor"`
}

// tokenWithSecret is the answer to a create or a rotation: the only time the secret is shown.
type tokenWithSecret struct {
	*approval.Token
	Secret string `json:"secret"`
}

// createTokenRequest is the body of POST /v1/tokens.
type createTokenRequest struct {
	Subject string        `json:"subject"`
	Role    approval.Role `json:"role"`
	Name    string        `json:"name"`
	// ExpiresIn is a Go duration ("720h", "90m"); "" for a token that does not expire.
	ExpiresIn string `json:"expires_in"`
}

// handleCreateToken is POST /v1/tokens with {"subject", "role", "name", "expires_in"}: a new
// token, answered 201 with its secret, which is shown this once. The Service lets admins
// only manage tokens.
func (s *Server) handleCreateToken(w http.ResponseWriter, r *http.Request) {
	p, err := s.authenticate(r.Context(), r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	body, err := readBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var req createTokenRequest
	if err := decodeObject(body, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	spec := approval.TokenSpec{Subject: req.Subject, Role: req.Role, Name: req.Name}
	if req.ExpiresIn != "" {
		d, err := time.ParseDuration(req.ExpiresIn)
		if err != nil || d <= 0 {
			s.writeError(w, r, approval.Errorf(approval.EINVALID, "expires_in %q is not a positive duration; write 720h or 90m", req.ExpiresIn))
			return
		}
		spec.ExpiresIn = d
	}
	secret, t, err := s.svc.CreateToken(r.Context(), p, spec)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.log.Info("token created", "token_id", t.ID, "subject", t.Subject, "role", t.Role, "by", p.Subject)
	w.Header().Set("Location", "/v1/tokens/"+t.ID)
	s.writeJSON(w, r, http.StatusCreated, tokenWithSecret{Token: t, Secret: secret})
}

// handleListTokens is GET /v1/tokens?limit=&cursor=, newest first, revoked ones included.
func (s *Server) handleListTokens(w http.ResponseWriter, r *http.Request) {
	p, err := s.authenticate(r.Context(), r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	q := r.URL.Query()
	f := approval.TokenFilter{Cursor: q.Get("cursor")}
	if f.Limit, err = parseLimit(q.Get("limit")); err != nil {
		s.writeError(w, r, err)
		return
	}
	list, next, err := s.svc.Tokens(r.Context(), p, f)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, tokenList{Tokens: list, NextCursor: next})
}

// handleRevokeToken is POST /v1/tokens/{id}/revoke: from its answer on, no replica accepts
// the token. Revoking a revoked token answers it as it is.
func (s *Server) handleRevokeToken(w http.ResponseWriter, r *http.Request) {
	p, err := s.authenticate(r.Context(), r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	t, err := s.svc.RevokeToken(r.Context(), p, r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.log.Info("token revoked", "token_id", t.ID, "subject", t.Subject, "by", p.Subject)
	s.writeJSON(w, r, http.StatusOK, t)
}

// handleRotateToken is POST /v1/tokens/{id}/rotate: a new secret for the same subject, role
// and name, the old token revoked in the same transaction. 409 for a revoked token.
func (s *Server) handleRotateToken(w http.ResponseWriter, r *http.Request) {
	p, err := s.authenticate(r.Context(), r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	id := r.PathValue("id")
	secret, t, err := s.svc.RotateToken(r.Context(), p, id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.log.Info("token rotated", "token_id", id, "new_token_id", t.ID, "subject", t.Subject, "by", p.Subject)
	s.writeJSON(w, r, http.StatusOK, tokenWithSecret{Token: t, Secret: secret})
}
