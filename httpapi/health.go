package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/approvald/approval"
)

// readyTimeout bounds each database check of /readyz, so a hung database fails the probe
// instead of hanging it.
const readyTimeout = 2 * time.Second

// writeProbeEvery is how long /readyz goes by its last write check before it writes again:
// under any number of probes a replica writes the heartbeat at most once a second, and a
// database that takes writes again is ready within a second.
const writeProbeEvery = time.Second

// handleHealthz answers 200 while the process runs (liveness): it does not touch the database,
// so a database outage does not get healthy replicas restarted.
func (s *Server) handleHealthz(w http.ResponseWriter, r *http.Request) {
	s.writeJSON(w, r, http.StatusOK, map[string]string{"status": "ok"})
}

// handleReadyz answers 200 when the store answers a ping and takes a write, and this
// process's clock agrees with the database's (approval.ClockWatch), 503 otherwise (readiness). The ping is made for every request; the write (Store.HeartbeatUpdate) at most
// once every writeProbeEvery, its answer shared by the requests meanwhile.
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
	if err := s.svc.Clock.Check(); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.ready.check(s.now(), func() error {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), readyTimeout)
		defer cancel()
		err := s.store.HeartbeatUpdate(ctx)
		if err != nil {
			s.info(r).log.Warn("readiness write check failed", slog.Any("error", err))
		}
		return err
	}); err != nil {
		s.writeError(w, r, approval.Errorf(approval.EUNAVAILABLE,
			"the database answers but does not take writes (a full disk, a read-only database or a server in recovery)"))
		return
	}
	s.writeJSON(w, r, http.StatusOK, map[string]string{"status": "ready"})
}

// writeProbe is the last answer of /readyz's write check, and when it was made. One check
// runs at a time; requests that arrive meanwhile wait for its answer.
type writeProbe struct {
	mu  sync.Mutex
	at  time.Time // zero: never checked
	err error
}

// check returns the last answer of probe if it was made less than writeProbeEvery before
// now, and otherwise runs probe and keeps its answer.
func (p *writeProbe) check(now time.Time, probe func() error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.at.IsZero() && now.Sub(p.at) < writeProbeEvery && now.Sub(p.at) >= 0 {
		return p.err
	}
	p.err, p.at = probe(), now
	return p.err
}
