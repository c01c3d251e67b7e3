package postgres

import "time"

// SetListenTimes shortens how long the LISTEN connection may stay quiet before it is pinged,
// and how long the ping may take, so that a test can see a silently dropped connection
// replaced. Call it before the first Subscribe.
func (s *Store) SetListenTimes(idle, pingTimeout time.Duration) {
	s.notifier.idle, s.notifier.pingTimeout = idle, pingTimeout
}

// AcquiredConns is how many of the pool's connections are in use.
func (s *Store) AcquiredConns() int32 { return s.pool.Stat().AcquiredConns() }
