package postgres

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// SetListenTimes shortens how long the LISTEN connection may stay quiet before it is pinged,
// and how long the ping may take, so that a test can see a silently dropped connection
// replaced. Call it before the first Subscribe.
func (s *Store) SetListenTimes(idle, pingTimeout time.Duration) {
	s.notifier.idle, s.notifier.pingTimeout = idle, pingTimeout
}

// AcquiredConns is how many of the pool's connections are in use.
func (s *Store) AcquiredConns() int32 { return s.pool.Stat().AcquiredConns() }

// OpenCounting opens a store whose connections count their round trips to the server.
func OpenCounting(ctx context.Context, url string) (*Store, *RoundTrips, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, nil, err
	}
	rt := &RoundTrips{}
	var d net.Dialer
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: c, rt: rt}, nil
	}
	s, err := openConfig(ctx, cfg)
	return s, rt, err
}

// RoundTrips counts exchanges with the server over every connection of a store: a write
// that follows a read (or is a connection's first) starts a new round trip, however many
// statements it carries.
type RoundTrips struct{ n atomic.Int64 }

// Count is the number of round trips so far.
func (r *RoundTrips) Count() int64 { return r.n.Load() }

type countingConn struct {
	net.Conn
	rt      *RoundTrips
	mu      sync.Mutex
	writing bool
}

func (c *countingConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	if !c.writing {
		c.writing = true
		c.rt.n.Add(1)
	}
	c.mu.Unlock()
	return c.Conn.Write(b)
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.mu.Lock()
		c.writing = false
		c.mu.Unlock()
	}
	return n, err
}
