package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/batch"
	"github.com/approvald/approval/internal/sqldb"
)

// RecordInbox stores a verified webhook delivery under the unique (source, event_id), or
// reports a duplicate and makes e the event stored first; see approval.InboxStore.
//
// A new event goes through the store's batcher: the deliveries arriving at the same moment
// are stored by one statement in one transaction, one round trip (BEGIN, the insert, COMMIT
// and the signal, see signalSQL, which wakes the processors only when an event was stored).
// A duplicate costs a second round trip, for the conflict's count and the read of the event
// kept: a duplicate is the exception, so the usual intake pays for neither.
func (s *Store) RecordInbox(ctx context.Context, e *approval.InboxEvent) (bool, error) {
	now := s.now()
	r, err := sqldb.RecordInbox(dialect, e, now)
	if err != nil {
		return false, err
	}
	inserted, err := s.intakes.Do(intake{e: e, now: now})
	if err != nil {
		return false, translate("record inbox event", err)
	}
	if inserted {
		e.Status, e.NextAttemptAt, e.LeaseToken = approval.InboxPending, &now, ""
		return false, nil
	}
	conn, _, err := s.acquire(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Release()

	// A duplicate: the conflict's count and the read of the event kept, in one batch (one
	// implicit transaction, so the read sees the count).
	b := &pgx.Batch{}
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

// intake is one new delivery handed to the batcher, completed by sqldb.RecordInbox, and the
// instant it is due for processing.
type intake struct {
	e   *approval.InboxEvent
	now time.Time
}

// insertInboxSQL stores a batch of deliveries ($1 to $9, parallel arrays, one element per
// delivery), skipping each whose (source, event_id) or (source, body_hash) is taken, by an
// event stored before, by a concurrent intake (after waiting for it: skipped if it commits)
// or by an earlier delivery of the same batch. The rows go in in key order, so two batches
// that share keys take their locks in the same order and cannot deadlock. It returns the
// ids it stored.
const insertInboxSQL = `
INSERT INTO inbox_events (id, source, event_id, type, headers, body, body_hash, received_at,
	status, next_attempt_at)
SELECT id, source, event_id, type, headers, body, body_hash, received_at, 'pending', next_attempt_at
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::jsonb[], $6::bytea[], $7::bytea[],
	$8::timestamptz[], $9::timestamptz[])
	AS e(id, source, event_id, type, headers, body, body_hash, received_at, next_attempt_at)
ORDER BY source, event_id
ON CONFLICT DO NOTHING
RETURNING id`

// signalStoredInboxSQL is signalSQL for a batch of intakes: it signals only when one of
// the events $2 names was stored (a duplicate delivery stores nothing and wakes no one).
const signalStoredInboxSQL = signalSQL + ` WHERE EXISTS (SELECT 1 FROM inbox_events WHERE id = ANY($2::text[]))`

// recordInboxes runs one batch of intakes (the batcher's run; see eachAlone).
func (s *Store) recordInboxes(calls []*batch.Call[intake, bool]) {
	eachAlone(calls, s.recordInboxBatch)
}

// recordInboxBatch stores calls' deliveries with insertInboxSQL in a transaction of its own
// and signals the processors, in one round trip, and sets each call's result: whether its
// event was stored.
func (s *Store) recordInboxBatch(ctx context.Context, calls []*batch.Call[intake, bool]) error {
	n := len(calls)
	ids, sources, eventIDs, types, headers := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	bodies, hashes := make([][]byte, n), make([][]byte, n)
	received, due := make([]time.Time, n), make([]time.Time, n)
	for i, c := range calls {
		e := c.Req.e
		h, err := json.Marshal(e.Headers)
		if err != nil {
			return fmt.Errorf("encode inbox headers: %w", err)
		}
		ids[i], sources[i], eventIDs[i], types[i], headers[i] = e.ID, e.Source, e.EventID, e.Type, string(h)
		bodies[i], received[i], due[i] = e.Body, e.ReceivedAt, c.Req.now
		if len(e.BodyHash) > 0 { // NULL otherwise, which the unique index leaves out
			hashes[i] = e.BodyHash
		}
	}
	conn, _, err := s.acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(insertInboxSQL, ids, sources, eventIDs, types, headers, bodies, hashes, received, due)
	b.Queue("COMMIT")
	b.Queue(signalStoredInboxSQL, []string{approval.TopicInbox}, ids)
	stored := make(map[string]bool, n)
	err = func() error {
		br := conn.SendBatch(ctx, b)
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return err
		}
		rows, err := br.Query()
		if _, err := sqldb.Collect(sqldb.Rows(rows), err, func(r sqldb.Row) (struct{}, error) {
			var id string
			err := r.Scan(&id)
			stored[id] = true
			return struct{}{}, err
		}); err != nil {
			return err
		}
		if commit, err := br.Exec(); err != nil {
			return err
		} else if commit.String() != "COMMIT" {
			return fmt.Errorf("the transaction was rolled back (%s)", commit)
		}
		if _, err := br.Exec(); err != nil {
			// Stored: the signal is only a hint, and the inbox processors also poll.
			s.logger().Warn("postgres: inbox signal failed", "err", err)
		}
		return nil
	}()
	if err != nil {
		// Leave no aborted transaction on the connection (the pool would close it anyway).
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		conn.Exec(rctx, "ROLLBACK")
		cancel()
		return err
	}
	for _, c := range calls {
		c.Res = stored[c.Req.e.ID]
	}
	return nil
}
