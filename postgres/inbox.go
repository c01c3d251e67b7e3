package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/sqldb"
)

// RecordInbox stores a verified webhook delivery under the unique (source, event_id), or
// reports a duplicate and makes e the event stored first; see approval.InboxStore.
//
// One round trip, new or duplicate: BEGIN, the insert and the conflict's count, COMMIT, then
// the read of the event kept (outside the transaction, once it is visible) and the signal
// (see signalSQL), which is sent only when e was stored: a duplicate wakes no one.
func (s *Store) RecordInbox(ctx context.Context, e *approval.InboxEvent) (bool, error) {
	conn, now, err := s.acquire(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Release()
	r, err := sqldb.RecordInbox(dialect, e, now)
	if err != nil {
		return false, err
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(r.Insert.SQL, r.Insert.Args...)
	b.Queue(r.Conflict.SQL, r.Conflict.Args...)
	b.Queue("COMMIT")
	b.Queue(r.Stored.SQL, r.Stored.Args...)
	b.Queue(signalStoredInboxSQL, []string{approval.TopicInbox}, e.ID)
	var stored *approval.InboxEvent
	err = func() error {
		br := conn.SendBatch(ctx, b)
		defer br.Close()
		var commit pgconn.CommandTag
		for range 4 { // BEGIN, the insert, the count, COMMIT
			if commit, err = br.Exec(); err != nil {
				return err
			}
		}
		if commit.String() != "COMMIT" {
			return fmt.Errorf("the transaction was rolled back (%s)", commit)
		}
		if stored, err = sqldb.ScanInbox(br.QueryRow()); err != nil {
			return err
		}
		if _, err := br.Exec(); err != nil {
			// Stored: the signal is only a hint, and the inbox processors also poll.
			s.logger().Warn("postgres: inbox signal failed", "event", e.ID, "err", err)
		}
		return nil
	}()
	if err != nil {
		// Leave no aborted transaction on the connection (the pool would close it anyway).
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		conn.Exec(rctx, "ROLLBACK")
		cancel()
		return false, translate("record inbox event", err)
	}
	return sqldb.Recorded(e, stored), nil
}
