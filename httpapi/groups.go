package httpapi

import (
	"net/http"

	"github.com/approvald/approval"
)

// groupList is the answer of GET /v1/groups.
type groupList struct {
	Groups []approval.GroupInfo `json:"groups"`
}

// policyList is the answer of GET /v1/policies.
type policyList struct {
	Policies []approval.PolicyInfo `json:"policies"`
}

// handleListGroups is GET /v1/groups: the configured groups with their members, those of the
// identity provider with the time of their last sign-in (docs/policies.md, "Groups").
// Operators and admins only (Service.Groups decides).
func (s *Server) handleListGroups(w http.ResponseWriter, r *http.Request) {
	p, err := s.authenticate(r.Context(), r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	groups, err := s.svc.Groups(r.Context(), p)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, groupList{Groups: groups})
}

// handleListPolicies is GET /v1/policies: the policies in force, in order, with their
// versions (docs/policies.md). Operators and admins only (Service.PolicyList decides).
func (s *Server) handleListPolicies(w http.ResponseWriter, r *http.Request) {
	p, err := s.authenticate(r.Context(), r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	policies, err := s.svc.PolicyList(p)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, policyList{Policies: policies})
}
