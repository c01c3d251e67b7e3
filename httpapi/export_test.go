package httpapi

// LongPolls returns how many long-polls are watching the approval id, so that tests can
// change the approval once a long-poll is parked and so prove the wake-up.
func (s *Server) LongPolls(id string) int {
	s.changes.mu.Lock()
	defer s.changes.mu.Unlock()
	if w := s.changes.waiting[id]; w != nil {
		return w.n
	}
	return 0
}
