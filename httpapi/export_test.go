package httpapi

// OpenAPI returns the OpenAPI 3.1 document of the API (a copy), so that tests can validate
// answers against it.
func OpenAPI() []byte { return append([]byte(nil), openAPIDocument...) }

// LongPolls returns how many long-polls are waiting, so that tests can change an approval once
// a long-poll is parked and so prove the wake-up.
func (s *Server) LongPolls() int { return int(s.longPolls.Load()) }

// RouteTable lists the route table as "METHOD /path" patterns, so that tests can hold the
// OpenAPI document to it.
func (s *Server) RouteTable() []string {
	var out []string
	for _, rt := range s.routes(nil) {
		out = append(out, rt.method+" "+rt.path)
	}
	return out
}

// InUse returns the bytes the budget has reserved now, so that tests can see every body give
// its share back.
func (b *BodyBudget) InUse() int64 { return b.used.Load() }

// WriteProbeEvery is how long /readyz keeps its write check's answer, so that tests move
// their clock past it.
const WriteProbeEvery = writeProbeEvery
