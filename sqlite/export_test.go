package sqlite

import (
	"context"

	"github.com/approvald/approval/internal/batch"
)

// HoldWriter takes the store's one write connection and returns the function that gives it
// back, so that a test can make write transactions queue for it.
func (s *Store) HoldWriter(ctx context.Context) (release func(), err error) {
	c, err := s.write.Conn(ctx)
	if err != nil {
		return nil, err
	}
	return func() { c.Close() }, nil
}

// WriterWaits is how many times a write transaction has had to wait for the write connection.
func (s *Store) WriterWaits() int64 { return s.write.Stats().WaitCount }

// CreatesWaiting is how many creates are queued for the next batch.
func (s *Store) CreatesWaiting() int { return s.creates.Waiting() }

// IntakesWaiting is how many deliveries are queued for the next batch of intakes.
func (s *Store) IntakesWaiting() int { return s.intakes.Waiting() }

// BatchCounts is what BatchStats reports, by kind.
func (s *Store) BatchCounts() map[string]batch.Stats { return s.batchStats() }
