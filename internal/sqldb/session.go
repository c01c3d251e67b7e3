package sqldb

import (
	"context"
	"fmt"
	"time"

	"github.com/approvald/approval"
)

// Page sessions (sessions, migration 0015): written by Service.StartSession, EndSession and
// RevokeSessions, read by Service.CheckSession at every page request (docs/security.md,
// "Page sessions").

// sessionSelect reads a session with the token it signed in with, NULL columns where it has
// none: the session by its primary key, the token by the unique index of its hash.
const sessionSelect = `SELECT s.id, s.subject, s.role, s.via, s.token_hash, s.created_at, s.expires_at, s.ended_at,
	t.id, t.name, t.subject, t.role, t.hash, t.created_at, t.expires_at, t.last_used_at, t.revoked_at
	FROM sessions s LEFT JOIN tokens t ON t.hash = s.token_hash WHERE s.id = `

// Session returns one session with its token, or ENOTFOUND: one statement.
func (r Reads) Session(ctx context.Context, id string) (*approval.Session, error) {
	rows, err := r.DB.Query(ctx, sessionSelect+r.Dialect.Param(1), id)
	sess, err := first(Collect(rows, err, scanSession))("session not found")
	return sess, r.Translate("read session", err)
}

// scanSession reads a row of sessionSelect.
func scanSession(row Row) (*approval.Session, error) {
	var s approval.Session
	var role string
	var tID, tName, tSubject, tRole *string
	var t approval.Token
	var tCreated *time.Time
	if err := row.Scan(&s.ID, &s.Subject, &role, &s.Via, Bytes(&s.TokenHash), Time(&s.CreatedAt), Time(&s.ExpiresAt), NullTime(&s.EndedAt),
		&tID, &tName, &tSubject, &tRole, Bytes(&t.Hash), NullTime(&tCreated), NullTime(&t.ExpiresAt), NullTime(&t.LastUsedAt), NullTime(&t.RevokedAt)); err != nil {
		return nil, fmt.Errorf("scan session: %w", err)
	}
	s.Role = approval.Role(role)
	if tID != nil && tName != nil && tSubject != nil && tRole != nil && tCreated != nil {
		t.ID, t.Name, t.Subject, t.Role, t.CreatedAt = *tID, *tName, *tSubject, approval.Role(*tRole), *tCreated
		s.Token = &t
	}
	return &s, nil
}

// SessionInsert stores a new session.
func (t Tx) SessionInsert(ctx context.Context, s *approval.Session) error {
	d := t.Dialect
	return t.write(ctx, "insert session", `
		INSERT INTO sessions (id, subject, role, via, token_hash, created_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		s.ID, s.Subject, string(s.Role), s.Via, nullBytes(s.TokenHash), d.Time(s.CreatedAt), d.Time(s.ExpiresAt))
}

// SessionSetEndedIfLive ends one session where it is live; guarded by ended_at.
func (t Tx) SessionSetEndedIfLive(ctx context.Context, id string) (int, error) {
	n, err := t.exec(ctx, "end session", `UPDATE sessions SET ended_at = $2 WHERE id = $1 AND ended_at IS NULL`,
		id, t.Dialect.Time(t.At))
	return int(n), err
}

// SessionSetEndedIfLiveBySubject ends the subject's live sessions, read through the partial
// index of the live ones.
func (t Tx) SessionSetEndedIfLiveBySubject(ctx context.Context, subject string) (int, error) {
	n, err := t.exec(ctx, "end sessions", `UPDATE sessions SET ended_at = $2 WHERE subject = $1 AND ended_at IS NULL`,
		subject, t.Dialect.Time(t.At))
	return int(n), err
}

// SessionDeleteExpired deletes a batch of expired sessions, oldest expiry first, skipping
// those another transaction holds.
func (t Tx) SessionDeleteExpired(ctx context.Context, expiredBefore time.Time, limit int) (int, error) {
	n, err := t.exec(ctx, "purge sessions", `
		WITH old AS (
			SELECT id FROM sessions WHERE expires_at < $1 ORDER BY expires_at LIMIT $2`+t.Dialect.SkipLocked+`
		)
		DELETE FROM sessions WHERE id IN (SELECT id FROM old)`,
		t.Dialect.Time(expiredBefore), limit)
	return int(n), err
}
