package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/batch"
	"github.com/approvald/approval/internal/sqldb"
)

// RecordInbox stores a verified webhook delivery under the unique (source, event_id), or
// reports a duplicate and makes e the event stored first; see approval.InboxStore. A new
// event is stored by the store's batcher, with the deliveries arriving at the same moment, in
// one round trip; a duplicate, the exception, costs a second for the conflict's count and the
// read of the event kept (docs/architecture.md, "What is left in the drivers").
func (s *Store) RecordInbox(ctx context.Context, e *approval.InboxEvent) (bool, error) {
	out, err := s.intakes.Do(ctx, e)
	if err != nil {
		return false, translate("record inbox event", err)
	}
	if out.stored {
		e.Status, e.NextAttemptAt, e.LeaseToken = approval.InboxPending, &out.at, ""
		return false, nil
	}
	conn, _, err := s.acquire(ctx, s.pool)
	if err != nil {
		return false, err
	}
	defer conn.Release()
	r := out.record // the batch's statements, at its instant

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

// recorded is an intake's outcome in its batch: whether its event was stored, the batch's
// instant, at which a stored event is due for processing, and the event's statements at that
// instant (sqldb.RecordInbox), which a duplicate's count and read use.
type recorded struct {
	stored bool
	at     time.Time
	record sqldb.InboxRecord
}

// insertInboxSQL stores a batch of deliveries ($1 to $8, parallel arrays, one element per
// delivery; $9 the instant they are due for processing), skipping each whose key is taken
// (as sqldb.InboxRecord's Insert does), an earlier delivery of the batch's included. The rows
// go in in key order, so two batches that share keys lock them in the same order and cannot
// deadlock. It returns the ids it stored.
const insertInboxSQL = `
INSERT INTO inbox_events (id, source, event_id, type, headers, body, body_hash, received_at,
	status, next_attempt_at)
SELECT id, source, event_id, type, headers, body, body_hash, received_at, 'pending', next_attempt_at
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::jsonb[], $6::bytea[], $7::bytea[],
	$8::timestamptz[]) AS e(id, source, event_id, type, headers, body, body_hash, received_at),
	(SELECT $9::timestamptz AS next_attempt_at) AS due
ORDER BY source, event_id
ON CONFLICT DO NOTHING
RETURNING id`

// signalStoredInboxSQL is signalSQL for a batch of intakes: it signals only when one of
// the events $2 names was stored (a duplicate delivery stores nothing and wakes no one).
var signalStoredInboxSQL = signalSQL + ` WHERE EXISTS (SELECT 1 FROM inbox_events WHERE id = ANY($2::text[]))`

// recordInboxBatch completes calls' deliveries as sqldb.RecordInbox does (one it refuses
// fails alone), stores them with insertInboxSQL in a transaction of its own and signals the
// processors (in the same round trip, or through s.inboxSignals when the gate holds the
// batch's signal back), and sets each call's result.
func (s *Store) recordInboxBatch(ctx context.Context, calls []*batch.Call[*approval.InboxEvent, recorded]) error {
	conn, now, err := s.acquire(ctx, s.batchPool)
	if err != nil {
		return err
	}
	defer conn.Release()
	var ids, sources, eventIDs, types, headers []string
	var bodies, hashes [][]byte
	var received []time.Time
	records := make([]sqldb.InboxRecord, len(calls))
	for i, c := range calls {
		e := c.Req
		if records[i], c.Err = sqldb.RecordInbox(dialect, e, now); c.Err != nil {
			continue
		}
		ids, sources, eventIDs, types = append(ids, e.ID), append(sources, e.Source), append(eventIDs, e.EventID), append(types, e.Type)
		headers, bodies, hashes, received = append(headers, records[i].Headers), append(bodies, e.Body), append(hashes, records[i].BodyHash), append(received, e.ReceivedAt)
	}
	if len(ids) == 0 {
		return nil
	}
	// The batch signals the processors behind its commit, or is held and leaves its signal
	// to the gate (signalGate), which sends one for all it held once they have ended.
	signal := s.inboxSignals.pass()
	stored := make(map[string]bool, len(ids))
	signalled, finished := false, false
	defer func() {
		// A batch that did not signal behind its commit owes a signal if it stored an event
		// or may have: its commit's outcome unknown (err), or a panic after the pipeline
		// was sent (not finished).
		if !signalled {
			s.inboxSignals.done(len(stored) > 0 || err != nil || !finished)
		}
	}()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(insertInboxSQL, ids, sources, eventIDs, types, headers, bodies, hashes, received, now)
	b.Queue("COMMIT")
	if signal {
		b.Queue(signalStoredInboxSQL, []string{approval.TopicInbox}, ids)
	}
	err = func() error {
		br := conn.SendBatch(ctx, b)
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return err
		}
		rows, err := br.Query()
		if err := sqldb.Each(rows, err, func(r sqldb.Row) error {
			var id string
			err := r.Scan(&id)
			stored[id] = true
			return err
		}); err != nil {
			return err
		}
		commit, err := br.Exec()
		if err == nil {
			err = committed(commit)
		}
		if err != nil {
			return err
		}
		if !signal {
			return nil
		}
		if _, err := br.Exec(); err != nil {
			// Stored: the signal is only a hint; the gate sends the one owed.
			s.logger().Warn("postgres: inbox signal failed", "err", err)
			return nil
		}
		signalled = true
		return nil
	}()
	finished = true
	if err != nil {
		// Leave no aborted transaction on the connection (the pool would close it anyway).
		rollback(ctx, conn)
		return err
	}
	for i, c := range calls {
		if c.Err == nil {
			c.Res = recorded{stored: stored[c.Req.ID], at: now, record: records[i]}
		}
	}
	return nil
}

// signalInbox signals the inbox processors in a round trip of its own (the signal
// s.inboxSignals owes to the batches that did not signal behind their commit): the signal is
// only a hint, so a failure is logged and the processors' polling covers it.
func (s *Store) signalInbox() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.pool.Exec(ctx, signalSQL, []string{approval.TopicInbox}); err != nil {
		s.logger().Warn("postgres: inbox signal failed", "err", err)
	}
}
