package sqlite

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/approvald/approval"
	"github.com/approvald/approval/internal/sqldb"
)

// RecordInbox stores a verified webhook delivery under its unique (source, event_id), or
// reports a duplicate; see approval.InboxStore. On success e holds the stored state; on a
// duplicate, the event stored first.
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
		return false, fmt.Errorf("record inbox: encode headers: %w", err)
	}
	// NULL means purged, so an empty body is stored as an empty BLOB.
	body := e.Body
	if body == nil {
		body = []byte{}
	}

	tx, err := s.beginWrite(ctx)
	if err != nil {
		return false, fail("record inbox", err)
	}
	defer tx.Rollback()

	receivedAt := e.ReceivedAt
	if receivedAt.IsZero() {
		receivedAt = tx.now
	}
	res, err := tx.ExecContext(ctx, `
		INSERT INTO inbox_events (id, source, event_id, type, headers, body, body_hash, received_at,
			status, next_attempt_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?)
		ON CONFLICT DO NOTHING -- (source, event_id), or (source, body_hash) when set`,
		e.ID, e.Source, e.EventID, e.Type, string(headersJSON), body, bodyHash(e.BodyHash), micros(receivedAt), micros(tx.now))
	if err != nil {
		return false, fail("record inbox", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fail("record inbox", err)
	}
	duplicate := n == 0
	var stored *approval.InboxEvent
	if duplicate {
		// The first body stays; a different one under the same id is recorded for operators
		// (a provider bug, or someone replaying an id with forged content). Once the stored
		// body is purged there is nothing left to compare with.
		if _, err := tx.ExecContext(ctx, `
			UPDATE inbox_events SET conflicts = conflicts + 1, last_conflict_at = ?
			WHERE source = ? AND event_id = ? AND body IS NOT NULL AND body <> ?`,
			micros(tx.now), e.Source, e.EventID, body,
		); err != nil {
			return false, fail("record inbox", err)
		}
		// Failing an id match, the event with the same body hash is the one kept (a replay:
		// its event id differs from e's).
		rows, err := tx.query(ctx, `
			SELECT `+sqldb.InboxColumns+`, i.body FROM inbox_events i
			WHERE i.source = ?1 AND (i.event_id = ?2 OR i.body_hash = ?3)
			ORDER BY i.event_id = ?2 DESC
			LIMIT 1`, e.Source, e.EventID, bodyHash(e.BodyHash))
		list, err := sqldb.Collect(rows, err, sqldb.ScanInbox)
		if err != nil {
			return false, fail("record inbox", err)
		} else if len(list) != 1 {
			return false, fail("record inbox", fmt.Errorf("stored event %s/%s: found %d rows, want 1", e.Source, e.EventID, len(list)))
		}
		stored = list[0]
		// A worker's claim token is not the caller's to hold.
		stored.LeaseToken = ""
	} else {
		tx.signal(approval.TopicInbox)
	}
	if err := tx.commit(); err != nil {
		return false, fail("record inbox", err)
	}
	if duplicate {
		*e = *stored
		return true, nil
	}
	next := tx.now
	e.Headers, e.Body, e.ReceivedAt = headers, body, receivedAt
	e.Status, e.Attempts, e.NextAttemptAt = approval.InboxPending, 0, &next
	return false, nil
}

// bodyHash is the body_hash to store: NULL when the scheme asks for none, so that the unique
// index leaves the event out.
func bodyHash(h []byte) any {
	if len(h) == 0 {
		return nil
	}
	return h
}
