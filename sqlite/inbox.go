package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

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

// ClaimInbox claims up to limit due pending events that no live lease holds; see
// approval.InboxStore. Each event gets a new random lease token, made by SQLite row by row,
// so that a later claim of an event whose lease ran out fences the earlier holder out.
func (s *Store) ClaimInbox(ctx context.Context, lease time.Duration, limit int) ([]*approval.InboxEvent, error) {
	if lease <= 0 || limit < 1 {
		return nil, approval.Errorf(approval.EINVALID, "a claim needs a positive lease and limit")
	}
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return nil, fail("claim inbox", err)
	}
	defer tx.Rollback()

	// The write transaction holds the database's one write lock from its first statement, so
	// the statements see no other writer between them. The claimed rows are read back by a
	// statement of their own, oldest first: SQLite's RETURNING has no order and no alias.
	var claimed []byte
	if err := tx.QueryRowContext(ctx, `
		SELECT json_group_array(id) FROM (
			SELECT id FROM inbox_events
			WHERE status = 'pending' AND next_attempt_at <= ?1
				AND (lease_token = '' OR lease_expires_at <= ?1)
			ORDER BY received_at, id
			LIMIT ?2)`,
		micros(tx.now), limit).Scan(&claimed); err != nil {
		return nil, fail("claim inbox", err)
	}
	if _, err := tx.ExecContext(ctx, `
		UPDATE inbox_events
		SET lease_token = 'lease_' || lower(hex(randomblob(16))), lease_expires_at = ?, attempts = attempts + 1
		WHERE id IN (SELECT value FROM json_each(?))`,
		micros(tx.now.Add(lease)), string(claimed)); err != nil {
		return nil, fail("claim inbox", err)
	}
	rows, err := tx.query(ctx, `
		SELECT `+sqldb.InboxColumns+`, i.body FROM inbox_events i
		WHERE i.id IN (SELECT value FROM json_each(?)) ORDER BY i.received_at, i.id`, string(claimed))
	list, err := sqldb.Collect(rows, err, sqldb.ScanInbox)
	if err != nil {
		return nil, fail("claim inbox", err)
	}
	if err := tx.commit(); err != nil {
		return nil, fail("claim inbox", err)
	}
	return list, nil
}

// PurgeInbox deletes up to limit handled events (processed, ignored, stale) received more
// than keepIDs ago, then clears the bodies of up to limit handled events received more than
// keepBodies ago. Pending and failed events are never touched: a failed event waits, body
// and all, for an operator to retry it. It returns the number of events deleted plus the number of bodies
// cleared, so a sweeper may repeat it until the count falls below limit.
func (s *Store) PurgeInbox(ctx context.Context, keepIDs, keepBodies time.Duration, limit int) (int, error) {
	if limit < 1 || keepIDs < 0 || keepBodies < 0 {
		return 0, approval.Errorf(approval.EINVALID, "limit must be positive and retention periods not negative")
	}
	tx, err := s.beginWrite(ctx)
	if err != nil {
		return 0, fail("purge inbox", err)
	}
	defer tx.Rollback()

	deleted, err := tx.ExecContext(ctx, `
		DELETE FROM inbox_events WHERE rowid IN (
			SELECT rowid FROM inbox_events
			WHERE status IN ('processed', 'ignored', 'stale') AND received_at < ?
			ORDER BY received_at
			LIMIT ?)`,
		micros(tx.now.Add(-keepIDs)), limit)
	if err != nil {
		return 0, fail("purge inbox", err)
	}
	cleared, err := tx.ExecContext(ctx, `
		UPDATE inbox_events SET body = NULL WHERE rowid IN (
			SELECT rowid FROM inbox_events
			WHERE status IN ('processed', 'ignored', 'stale') AND received_at < ? AND body IS NOT NULL
			ORDER BY received_at
			LIMIT ?)`,
		micros(tx.now.Add(-keepBodies)), limit)
	if err != nil {
		return 0, fail("purge inbox", err)
	}
	n := 0
	for _, res := range []sql.Result{deleted, cleared} {
		k, err := res.RowsAffected()
		if err != nil {
			return 0, fail("purge inbox", err)
		}
		n += int(k)
	}
	if err := tx.commit(); err != nil {
		return 0, fail("purge inbox", err)
	}
	return n, nil
}
