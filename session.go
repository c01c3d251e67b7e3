package approval

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"time"
)

// Page sessions (docs/security.md, "Page sessions"): a sign-in on the approver's pages is a
// row of sessions, named by a random id that the page's signed cookie carries. The row is the
// truth: every page request reads it (Service.CheckSession), so that ending it (sign-out,
// POST /v1/sessions/revoke) ends the session on every replica at once, and a token's session
// ends with its token.

// How a session was started.
const (
	SessionViaToken = "token" // an API token pasted into the sign-in form
	SessionViaOIDC  = "oidc"  // an OpenID Connect provider
	SessionViaLink  = "link"  // an e-mailed sign-in link
)

// Session is one sign-in on the pages.
type Session struct {
	ID      string
	Subject string
	Role    Role // as signed in; for OIDC and link sessions the pages recompute it per request
	Via     string
	// TokenHash is the hash of the API token a SessionViaToken session signed in with (never
	// the token); nil for the others.
	TokenHash []byte
	CreatedAt time.Time
	ExpiresAt time.Time
	// EndedAt, when set, is when the session was ended (signed out or revoked).
	EndedAt *time.Time
	// Token is the token whose hash is TokenHash, read with the session in the same
	// statement (Store.Session); nil when it no longer exists or the session has none.
	Token *Token
}

// SessionStore is the read of a session. Store.Session is it.
type SessionStore interface {
	// Session returns one session, with the token it signed in with (Session.Token) in the
	// same statement, or ENOTFOUND: one read of the session's primary key and of the
	// tokens' unique index of the hash.
	Session(ctx context.Context, id string) (*Session, error)
}

// StartSession stores a new session for p, started via via (a SessionVia constant), lasting
// ttl from now; tokenHash is the hash of the token signed in with, for SessionViaToken.
func (s *Service) StartSession(ctx context.Context, p Principal, via string, tokenHash []byte, ttl time.Duration) (*Session, error) {
	if p.Subject == "" || !p.Role.Valid() || ttl <= 0 {
		return nil, Errorf(EINVALID, "a session needs a subject, a known role and a positive lifetime")
	}
	switch via {
	case SessionViaToken:
		if len(tokenHash) == 0 {
			return nil, Errorf(EINVALID, "a token's session needs the token's hash")
		}
	case SessionViaOIDC, SessionViaLink:
		tokenHash = nil
	default:
		return nil, Errorf(EINVALID, "unknown sign-in method %q", via)
	}
	now := s.now().UTC().Truncate(Precision)
	sess := &Session{
		ID: newSessionID(), Subject: p.Subject, Role: p.Role, Via: via, TokenHash: tokenHash,
		CreatedAt: now, ExpiresAt: now.Add(ttl),
	}
	_, err := inTx(ctx, s, func(tx Tx) (int, error) { return 0, tx.SessionInsert(ctx, sess) })
	if err != nil {
		return nil, err
	}
	return sess, nil
}

// CheckSession returns the live session id names, or EUNAUTHORIZED saying why it is not:
// unknown, ended, expired, or (signed in with a token) its token is gone, revoked, expired or
// no longer of the session's subject and role; a link session's person is no longer in the
// configuration. One statement (Store.Session). The Service's clock decides expiry.
func (s *Service) CheckSession(ctx context.Context, id string) (*Session, error) {
	sess, err := s.Store.Session(ctx, id)
	if ErrorCode(err) == ENOTFOUND {
		return nil, Errorf(EUNAUTHORIZED, "the session is not known; sign in again")
	} else if err != nil {
		return nil, err
	}
	now := s.now()
	switch {
	case sess.EndedAt != nil:
		return nil, Errorf(EUNAUTHORIZED, "the session was ended; sign in again")
	case !now.Before(sess.ExpiresAt):
		return nil, Errorf(EUNAUTHORIZED, "the session has expired; sign in again")
	}
	switch sess.Via {
	case SessionViaToken:
		t := sess.Token
		if t == nil || !bytes.Equal(t.Hash, sess.TokenHash) {
			return nil, Errorf(EUNAUTHORIZED, "the token this session signed in with no longer exists; sign in again")
		}
		if why := t.Usable(now); why != "" {
			return nil, Errorf(EUNAUTHORIZED, "the token this session signed in with no longer works (%s); sign in again", why)
		}
		if !SameName(t.Subject, sess.Subject) || t.Role != sess.Role {
			return nil, Errorf(EUNAUTHORIZED, "the token this session signed in with has changed; sign in again")
		}
	case SessionViaLink:
		// The rule of UseSignin, at every request: a person taken out of the configuration
		// loses the sessions their links gave them.
		if s.Routing.emailPerson(sess.Subject) != sess.Subject {
			return nil, Errorf(EUNAUTHORIZED, "%s is no longer configured to sign in by link; sign in again", sess.Subject)
		}
	}
	return sess, nil
}

// EndSession ends one session (sign-out). Ending an ended or unknown session changes nothing.
func (s *Service) EndSession(ctx context.Context, id string) error {
	_, err := inTx(ctx, s, func(tx Tx) (int, error) { return tx.SessionSetEndedIfLive(ctx, id) })
	return err
}

// RevokeSessions ends every live session of subject, for p, and returns how many it ended.
// Operators and admins only (EFORBIDDEN); a subject that cannot be a name is EINVALID.
func (s *Service) RevokeSessions(ctx context.Context, p Principal, subject string) (int, error) {
	if !p.MayOperate() {
		return 0, Errorf(EFORBIDDEN, "role %s may not end sessions; use an operator or admin token", p.Role)
	}
	// Sessions hold normalised names (docs/security.md, "Names"): "Alice" ends alice's.
	subject, err := NormalizeName("subject", subject)
	if err != nil {
		return 0, err
	}
	return inTx(ctx, s, func(tx Tx) (int, error) { return tx.SessionSetEndedIfLiveBySubject(ctx, subject) })
}

// PurgeSessions deletes up to limit sessions that expired more than keep ago, ended or not,
// and returns how many (the sweeper passes SessionKeep). An expired session no longer signs
// anyone in, so its row only tells an operator when it was.
func (s *Service) PurgeSessions(ctx context.Context, keep time.Duration, limit int) (int, error) {
	if limit <= 0 || keep < 0 {
		return 0, Errorf(EINVALID, "limit must be positive and keep not negative")
	}
	return inTx(ctx, s, func(tx Tx) (int, error) {
		return tx.SessionDeleteExpired(ctx, tx.Now().Add(-keep), limit)
	})
}

// SessionKeyLength is the length in bytes of the session key StoredSessionKey makes.
const SessionKeyLength = 32

// sessionKeyName is the stored session key's name in the secrets table.
const sessionKeyName = "web.session_key"

// StoredSessionKey returns the pages' session key kept in the store, making it first when
// there is none: random bytes, inserted if absent and read back in one transaction, so that
// every start of the service on this database, and every process sharing it (replicas
// starting at once included), signs sessions with the one key (docs/web.md, "Session").
func (s *Service) StoredSessionKey(ctx context.Context) ([]byte, error) {
	key := make([]byte, SessionKeyLength)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("make session key: %w", err)
	}
	return inTx(ctx, s, func(tx Tx) ([]byte, error) {
		if err := tx.SecretInsertIfAbsent(ctx, sessionKeyName, key); err != nil {
			return nil, err
		}
		return tx.SecretGet(ctx, sessionKeyName)
	})
}

// SessionKeep is how long an expired session's row is kept before the sweeper deletes it.
const SessionKeep = 24 * time.Hour

// newSessionID returns a random session id: 144 bits, URL-safe.
func newSessionID() string {
	var b [18]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return "ses_" + base64.RawURLEncoding.EncodeToString(b[:])
}
