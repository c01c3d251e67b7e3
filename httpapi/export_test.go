package httpapi

// LongPolls returns how many long-polls are waiting, so that tests can change an approval once
// a long-poll is parked and so prove the wake-up.
func (s *Server) LongPolls() int { return int(s.longPolls.Load()) }
