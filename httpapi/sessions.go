package httpapi

import "net/http"

// revokeSessionsRequest is the body of POST /v1/sessions/revoke.
type revokeSessionsRequest struct {
	Subject string `json:"subject"`
}

// revokeSessionsAnswer is its answer: how many live page sessions were ended.
type revokeSessionsAnswer struct {
	Ended int `json:"ended"`
}

// handleRevokeSessions is POST /v1/sessions/revoke with {"subject"}: every live page session
// of the subject ends at once, on every replica (docs/security.md, "Page sessions").
// Operators and admins only (Service.RevokeSessions decides).
func (s *Server) handleRevokeSessions(w http.ResponseWriter, r *http.Request) {
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
	var req revokeSessionsRequest
	if err := decodeObject(body, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	n, err := s.svc.RevokeSessions(r.Context(), p, req.Subject)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.log.Info("sessions revoked", "subject", req.Subject, "ended", n, "by", p.Subject)
	s.writeJSON(w, r, http.StatusOK, revokeSessionsAnswer{Ended: n})
}
