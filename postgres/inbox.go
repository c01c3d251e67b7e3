package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/sqldb"
)

// RecordInbox stores a verified webhook delivery under the unique (source, event_id), or
// reports a duplicate and makes e the event stored first; see approval.InboxStore.
//
// A new event is one round trip with one statement of work: BEGIN, the insert, COMMIT and
// the signal (see signalSQL), which is sent only when e was stored. A duplicate costs a second
// round trip, for the conflict's count and the read of the event kept: a duplicate is the
// exception, so the usual intake pays for neither.
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
	b.Queue("COMMIT")
	b.Queue(signalStoredInboxSQL, []string{approval.TopicInbox}, e.ID)
	var inserted bool
	err = func() error {
		br := conn.SendBatch(ctx, b)
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return err
		}
		tag, err := br.Exec()
		if err != nil {
			return err
		}
		inserted = tag.RowsAffected() == 1
		if commit, err := br.Exec(); err != nil {
			return err
		} else if commit.String() != "COMMIT" {
			return fmt.Errorf("the transaction was rolled back (%s)", commit)
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
	if inserted {
		e.Status, e.NextAttemptAt, e.LeaseToken = approval.InboxPending, &now, ""
		return false, nil
	}

	// A duplicate: the conflict's count and the read of the event kept, in one batch (one
	// implicit transaction, so the read sees the count).
	b = &pgx.Batch{}
	b.Queue(r.Conflict.SQL, r.Conflict.Args...)
	b.Queue(r.Stored.SQL, r.Stored.Args...)
	var stored *approval.InboxEvent
	err = func() error {
		br := conn.SendBatch(ctx, b)
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
