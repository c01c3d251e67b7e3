package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/approvald/approval"
)

// readyTimeout bounds the database check of /readyz, so a hung database fails the probe
// instead of hanging it.
const readyTimeout = 2 * time.Second

// handleHealthz answers 200 while the process runs (liveness): it does not touch the database,
// so a database outage does not get healthy replicas restarted.
func (s *Server) handleHealthz(w http.ResponseWriter, r *http.Request) {
	s.writeJSON(w, r, http.StatusOK, map[string]string{"status": "ok"})
}

// handleReadyz answers 200 when the store answers a ping (readiness), 503 otherwise.
func (s *Server) handleReadyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	if err := s.store.Ping(ctx); err != nil {
		if approval.ErrorCode(err) != approval.EUNAVAILABLE {
			s.info(r).log.Warn("readiness check failed", slog.Any("error", err))
			err = approval.Errorf(approval.EUNAVAILABLE, "the database does not answer")
		}
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, map[string]string{"status": "ready"})
}
