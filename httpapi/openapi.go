package httpapi

import (
	_ "embed"
	"net/http"
)

// openAPIDocument is the OpenAPI 3.1 description of every route in the route table, served at
// GET /v1/openapi.json. docs/http-api.md is the prose contract; the tests hold the document to
// the route table and validate real answers against it.
//
//go:embed openapi.json
var openAPIDocument []byte

// handleOpenAPI is GET /v1/openapi.json. Like /healthz it needs no token: the document holds
// nothing secret, and clients and tools read it before they have one.
func (s *Server) handleOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(openAPIDocument); err != nil {
		s.info(r).log.Debug("write response", "error", err)
	}
}
