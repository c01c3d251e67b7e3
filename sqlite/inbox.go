package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/approvald/approval"
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
		INSERT INTO inbox_events (id, source, event_id, type, headers, body, received_at, status,
			next_attempt_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, 'pending', ?)
		ON CONFLICT (source, event_id) DO NOTHING`,
		e.ID, e.Source, e.EventID, e.Type, string(headersJSON), body, micros(receivedAt), micros(tx.now))
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
		rows, err := tx.QueryContext(ctx, `SELECT `+inboxColumns+` FROM inbox_events WHERE source = ? AND event_id = ?`, e.Source, e.EventID)
		if err != nil {
			return false, fail("record inbox", fmt.Errorf("query the stored event: %w", err))
		}
		list, err := scanInboxEvents(rows)
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
	// the select and the update see no other writer between them.
	rows, err := tx.QueryContext(ctx, `
		UPDATE inbox_events
		SET lease_token = 'lease_' || lower(hex(randomblob(16))), lease_expires_at = ?1,
			attempts = attempts + 1
		WHERE id IN (
			SELECT id FROM inbox_events
			WHERE status = 'pending' AND next_attempt_at <= ?2
				AND (lease_token = '' OR lease_expires_at <= ?2)
			ORDER BY received_at, id
			LIMIT ?3)
		RETURNING `+inboxColumns,
		micros(tx.now.Add(lease)), micros(tx.now), limit)
	if err != nil {
		return nil, fail("claim inbox", err)
	}
	list, err := scanInboxEvents(rows)
	if err != nil {
		return nil, fail("claim inbox", err)
	}
	if err := tx.commit(); err != nil {
		return nil, fail("claim inbox", err)
	}
	// RETURNING promises no order.
	slices.SortFunc(list, func(a, b *approval.InboxEvent) int {
		if c := a.ReceivedAt.Compare(b.ReceivedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return list, nil
}

// InboxEvent returns one event with its body, or ENOTFOUND.
func (s *Store) InboxEvent(ctx context.Context, id string) (*approval.InboxEvent, error) {
	tx, err := s.beginRead(ctx)
	if err != nil {
		return nil, fail("inbox event", err)
	}
	defer tx.Rollback()

	e, err := findInboxEvent(ctx, tx, id)
	if err != nil {
		return nil, fail("inbox event", err)
	}
	return e, nil
}

// InboxEvents lists events newest first ((received_at, id) descending) without their
// bodies, with the cursor of the next page ("" on the last page).
func (s *Store) InboxEvents(ctx context.Context, f approval.InboxFilter) ([]*approval.InboxEvent, string, error) {
	limit, err := pageLimit(f.Limit)
	if err != nil {
		return nil, "", err
	}
	where, args := []string{"1 = 1"}, []any{}
	if f.Status != "" {
		if !f.Status.Valid() {
			return nil, "", approval.Errorf(approval.EINVALID, "unknown inbox status %q", f.Status)
		}
		where, args = append(where, "status = ?"), append(args, string(f.Status))
	}
	if f.Source != "" {
		where, args = append(where, "source = ?"), append(args, f.Source)
	}
	return listPage(ctx, s, "inbox events", limit, f.Cursor, "(received_at, id) < (?, ?)", where, args,
		func(tx *tx, where string, args []any) ([]*approval.InboxEvent, error) {
			rows, err := tx.QueryContext(ctx, `
				SELECT `+inboxColumnsNoBody+` FROM inbox_events
				WHERE `+where+`
				ORDER BY received_at DESC, id DESC
				LIMIT ?`,
				args...)
			if err != nil {
				return nil, err
			}
			return scanInboxEvents(rows)
		},
		func(e *approval.InboxEvent) (time.Time, string) { return e.ReceivedAt, e.ID })
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

// InboxCounts returns the number of inbox events in every status, zero included.
func (s *Store) InboxCounts(ctx context.Context) (map[approval.InboxStatus]int, error) {
	tx, err := s.beginRead(ctx)
	if err != nil {
		return nil, fail("inbox counts", err)
	}
	defer tx.Rollback()

	counts := map[approval.InboxStatus]int{
		approval.InboxPending:   0,
		approval.InboxProcessed: 0,
		approval.InboxIgnored:   0,
		approval.InboxStale:     0,
		approval.InboxFailed:    0,
	}
	rows, err := tx.QueryContext(ctx, `SELECT status, count(*) FROM inbox_events GROUP BY status`)
	if err != nil {
		return nil, fail("inbox counts", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			status string
			n      int
		)
		if err := rows.Scan(&status, &n); err != nil {
			return nil, fail("inbox counts", err)
		}
		counts[approval.InboxStatus(status)] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fail("inbox counts", err)
	}
	return counts, nil
}

// findInboxEvent returns the event with id, body included, or ENOTFOUND.
func findInboxEvent(ctx context.Context, tx *tx, id string) (*approval.InboxEvent, error) {
	rows, err := tx.QueryContext(ctx, `SELECT `+inboxColumns+` FROM inbox_events WHERE id = ?`, id)
	if err != nil {
		return nil, fmt.Errorf("query inbox event: %w", err)
	}
	list, err := scanInboxEvents(rows)
	if err != nil {
		return nil, err
	}
	if len(list) == 0 {
		return nil, approval.Errorf(approval.ENOTFOUND, "inbox event %s not found", id)
	}
	return list[0], nil
}

// The columns scanInboxEvents reads, in order; listings read NULL in place of the body. They
// name no table alias so that UPDATE ... RETURNING can use them too.
const (
	inboxColumnsHead = `id, source, event_id, type, headers, `
	inboxColumnsTail = `, received_at, status, attempts, last_error, next_attempt_at,
		lease_token, lease_expires_at, processed_at, outcome, approval_id, conflicts,
		last_conflict_at`
	inboxColumns       = inboxColumnsHead + `body` + inboxColumnsTail
	inboxColumnsNoBody = inboxColumnsHead + `NULL` + inboxColumnsTail
)

// scanInboxEvents reads and closes rows of inboxColumns.
func scanInboxEvents(rows *sql.Rows) ([]*approval.InboxEvent, error) {
	defer rows.Close()
	list := []*approval.InboxEvent{}
	for rows.Next() {
		var (
			e                              approval.InboxEvent
			headers, status                string
			receivedAt                     int64
			next, lease, processed, confAt sql.NullInt64
			approvalID                     sql.NullString
			body                           sql.Null[[]byte]
		)
		if err := rows.Scan(&e.ID, &e.Source, &e.EventID, &e.Type, &headers, &body,
			&receivedAt, &status, &e.Attempts, &e.LastError, &next, &e.LeaseToken, &lease,
			&processed, &e.Outcome, &approvalID, &e.Conflicts, &confAt); err != nil {
			return nil, fmt.Errorf("scan inbox event: %w", err)
		}
		if err := json.Unmarshal([]byte(headers), &e.Headers); err != nil {
			return nil, fmt.Errorf("inbox event %s: decode headers: %w", e.ID, err)
		}
		// The driver reads an empty BLOB as a nil slice; only NULL means purged (or not
		// selected), so an empty body must stay non-nil.
		if body.Valid {
			e.Body = body.V
			if e.Body == nil {
				e.Body = []byte{}
			}
		}
		e.ReceivedAt = fromMicros(receivedAt)
		e.Status = approval.InboxStatus(status)
		e.NextAttemptAt = fromNullMicros(next)
		e.ProcessedAt = fromNullMicros(processed)
		e.ApprovalID = approvalID.String
		e.LastConflictAt = fromNullMicros(confAt)
		list = append(list, &e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("query inbox events: %w", err)
	}
	return list, nil
}
