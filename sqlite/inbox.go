package sqlite

import (
	"context"
	"fmt"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/sqldb"
)

// RecordInbox stores a verified webhook delivery under its unique (source, event_id), or
// reports a duplicate; see approval.InboxStore. On success e holds the stored state; on a
// duplicate, the event stored first. The write lock orders concurrent deliveries, and the
// deliveries that queue for it together share one transaction (writeBatch).
func (s *Store) RecordInbox(ctx context.Context, e *approval.InboxEvent) (bool, error) {
	stored, err := s.intakes.Do(ctx, e)
	if err != nil {
		return false, fail("record inbox event", err)
	}
	return sqldb.Recorded(e, stored), nil
}

// recordInbox runs one delivery's intake in tx and returns the event stored under its key:
// e itself when it is new.
func recordInbox(ctx context.Context, tx *tx, e *approval.InboxEvent) (*approval.InboxEvent, error) {
	r, err := sqldb.RecordInbox(dialect, e, tx.now)
	if err != nil {
		return nil, err
	}
	for _, st := range []sqldb.Statement{r.Insert, r.Conflict} {
		if _, err := tx.ExecContext(ctx, st.SQL, st.Args...); err != nil {
			return nil, fail("record inbox", err)
		}
	}
	rows, err := tx.query(ctx, r.Stored.SQL, r.Stored.Args...)
	list, err := sqldb.Collect(rows, err, sqldb.ScanInbox)
	if err == nil && len(list) != 1 {
		err = fmt.Errorf("stored event %s/%s: found %d rows, want 1", e.Source, e.EventID, len(list))
	}
	if err != nil {
		return nil, fail("record inbox", err)
	}
	if list[0].ID == e.ID {
		tx.topics.Add(approval.TopicInbox)
	}
	return list[0], nil
}
