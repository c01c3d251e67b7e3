package sqlite

import (
	"context"
	"fmt"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/sqldb"
)

// RecordInbox stores a verified webhook delivery under its unique (source, event_id), or
// reports a duplicate; see approval.InboxStore. On success e holds the stored state; on a
// duplicate, the event stored first. The write lock orders concurrent deliveries.
func (s *Store) RecordInbox(ctx context.Context, e *approval.InboxEvent) (bool, error) {
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return false, fail("record inbox", err)
	}
	defer tx.Rollback()
	r, err := sqldb.RecordInbox(dialect, e, tx.now)
	if err != nil {
		return false, err
	}
	for _, st := range []sqldb.Statement{r.Insert, r.Conflict} {
		if _, err := tx.ExecContext(ctx, st.SQL, st.Args...); err != nil {
			return false, fail("record inbox", err)
		}
	}
	rows, err := tx.query(ctx, r.Stored.SQL, r.Stored.Args...)
	list, err := sqldb.Collect(rows, err, sqldb.ScanInbox)
	if err == nil && len(list) != 1 {
		err = fmt.Errorf("stored event %s/%s: found %d rows, want 1", e.Source, e.EventID, len(list))
	}
	if err != nil {
		return false, fail("record inbox", err)
	}
	duplicate := sqldb.Recorded(e, list[0])
	if !duplicate {
		tx.topics.Add(approval.TopicInbox)
	}
	return duplicate, fail("record inbox", tx.commit())
}
