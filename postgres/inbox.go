package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/sqldb"
)

// RecordInbox stores a verified webhook delivery under the unique (source, event_id), or
// reports a duplicate and makes e the event stored first; see approval.InboxStore.
//
// A new event is one round trip with one statement of work: the pipelined transaction sends
// BEGIN, the insert, COMMIT and the signal (see signalSQL), which is sent only when e was
// stored. A duplicate costs a second round trip, for the conflict's count and the read of
// the event kept: a duplicate is the exception, so the usual intake pays for neither.
func (s *Store) RecordInbox(ctx context.Context, e *approval.InboxEvent) (bool, error) {
	t, err := s.begin(ctx)
	if err != nil {
		return false, err
	}
	defer t.Rollback(ctx)
	now := t.At
	r, err := sqldb.RecordInbox(dialect, e, now)
	if err != nil {
		return false, err
	}
	var inserted int64
	t.queue = append(t.queue, queued{op: "record inbox event", sql: r.Insert.SQL, args: r.Insert.Args, rows: &inserted})
	t.after = append(t.after, queued{op: "signal", sql: signalStoredInboxSQL, args: []any{[]string{approval.TopicInbox}, e.ID}})
	if err := t.Commit(ctx); err != nil {
		return false, err
	}
	if inserted == 1 {
		e.Status, e.NextAttemptAt, e.LeaseToken = approval.InboxPending, &now, ""
		return false, nil
	}

	// A duplicate: the conflict's count and the read of the event kept, in one batch (one
	// implicit transaction, so the read sees the count).
	b := &pgx.Batch{}
	b.Queue(r.Conflict.SQL, r.Conflict.Args...)
	b.Queue(r.Stored.SQL, r.Stored.Args...)
	var stored *approval.InboxEvent
	err = func() error {
		br := s.pool.SendBatch(ctx, b)
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return err
		}
		stored, err = sqldb.ScanInbox(br.QueryRow())
		return err
	}()
	if err != nil {
		return false, translate("read the stored inbox event", err)
	}
	return sqldb.Recorded(e, stored), nil
}
