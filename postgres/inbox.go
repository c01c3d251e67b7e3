package postgres

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/sqldb"
)

// RecordInbox stores a verified webhook delivery under the unique (source, event_id), or
// reports a duplicate and makes e the event stored first. A redelivery never replaces the
// first body; one that differs from it is counted as a conflict for operators.
func (s *Store) RecordInbox(ctx context.Context, e *approval.InboxEvent) (bool, error) {
	if e.ID == "" || e.Source == "" || e.EventID == "" {
		return false, approval.Errorf(approval.EINVALID, "an inbox event needs an id, a source and an event id")
	}
	headers := e.Headers
	if headers == nil {
		headers = map[string]string{}
	}
	headersJSON, err := json.Marshal(headers)
	if err != nil {
		return false, fmt.Errorf("encode inbox headers: %w", err)
	}

	conn, now, err := s.acquire(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Release()

	// One statement in one round trip, its signal behind the COMMIT (see signalSQL). A
	// concurrent delivery of the same event makes this insert wait for that transaction and
	// then do nothing: exactly one of them stores the event.
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(`
		WITH stored AS (
			INSERT INTO inbox_events (id, source, event_id, type, headers, body, body_hash, received_at, status, next_attempt_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'pending', $9)
			ON CONFLICT DO NOTHING -- (source, event_id), or (source, body_hash) when set
			RETURNING 1
		)
		SELECT count(*) FROM stored`,
		e.ID, e.Source, e.EventID, e.Type, headersJSON, e.Body, bodyHash(e.BodyHash), e.ReceivedAt, now)
	b.Queue("COMMIT")
	b.Queue(signalStoredInboxSQL, []string{approval.TopicInbox}, e.ID)
	var inserted int
	var commit pgconn.CommandTag
	err = func() error {
		br := conn.SendBatch(ctx, b)
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return err
		}
		if err := br.QueryRow().Scan(&inserted); err != nil {
			return err
		}
		if commit, err = br.Exec(); err != nil {
			return err
		}
		if _, err := br.Exec(); err != nil {
			// Stored: the signal is only a hint, and the inbox processors also poll.
			s.logger().Warn("postgres: inbox signal failed", "event", e.ID, "err", err)
		}
		return nil
	}()
	if err == nil && commit.String() != "COMMIT" {
		err = fmt.Errorf("the transaction was rolled back (%s)", commit)
	}
	if err != nil {
		// Leave no aborted transaction on the connection (the pool would close it anyway).
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		conn.Exec(rctx, "ROLLBACK")
		cancel()
		return false, translate("insert inbox event", err)
	}
	if inserted == 1 {
		e.Status, e.NextAttemptAt = approval.InboxPending, &now
		return false, nil
	}

	// A duplicate: the second statement sees the event the first one waited for. A different
	// body under the same id counts as a conflict (a purged body cannot be compared, so a
	// redelivery after the purge is not one); the answer is the event as stored, after that
	// count. Failing an id match, the event with the same body hash is the one kept (a replay:
	// its event id differs from e's).
	stored, err := sqldb.ScanInbox(conn.QueryRow(ctx, `
		WITH conflicted AS (
			UPDATE inbox_events i SET conflicts = conflicts + 1, last_conflict_at = $3
			WHERE i.source = $1 AND i.event_id = $2 AND i.body IS NOT NULL AND i.body <> $4
			RETURNING `+sqldb.InboxColumns+`, i.body
		)
		SELECT * FROM conflicted
		UNION ALL
		(SELECT `+sqldb.InboxColumns+`, i.body FROM inbox_events i
		WHERE i.source = $1 AND (i.event_id = $2 OR i.body_hash = $5) AND NOT EXISTS (SELECT 1 FROM conflicted)
		ORDER BY i.event_id = $2 DESC
		LIMIT 1)`,
		e.Source, e.EventID, now, e.Body, bodyHash(e.BodyHash)))
	if err != nil {
		return false, translate("read the stored inbox event", err)
	}
	// A worker's claim token is not the caller's to hold.
	stored.LeaseToken = ""
	*e = *stored
	return true, nil
}

// bodyHash is the body_hash to store: NULL when the scheme asks for none, so that the unique
// index leaves the event out.
func bodyHash(h []byte) any {
	if len(h) == 0 {
		return nil
	}
	return h
}
