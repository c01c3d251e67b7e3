package approval

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"time"
)

// Role is what a token's subject may do.
type Role string

// The four roles (docs/http-api.md, "Authentication and roles").
const (
	RoleRequester Role = "requester" // create, cancel own, read own
	RoleApprover  Role = "approver"  // decide where listed, read where listed
	RoleOperator  Role = "operator"  // executions, inbox, read all
	RoleAdmin     Role = "admin"     // everything
)

// Valid reports whether r is a known role.
func (r Role) Valid() bool {
	switch r {
	case RoleRequester, RoleApprover, RoleOperator, RoleAdmin:
		return true
	}
	return false
}

// ReadsAll reports whether the role may read every approval.
func (r Role) ReadsAll() bool { return r == RoleOperator || r == RoleAdmin }

// Token is a stored bearer credential. Only the SHA-256 of the secret is kept: tokens are
// 256-bit random values, so a fast hash is enough to make a stolen table useless.
type Token struct {
	ID      string `json:"id"`
	Name    string `json:"name"` // what the token is for, so that a list means something; may be ""
	Subject string `json:"subject"`
	Role    Role   `json:"role"`
	Hash    []byte `json:"-"`
	// CreatedAt is when the token was made; ExpiresAt, when set, when it stops working.
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at"`
	// LastUsedAt is when a request last authenticated with it, to within TokenTouchEvery.
	LastUsedAt *time.Time `json:"last_used_at"`
	// RevokedAt, when set, is when it was revoked: it no longer authenticates anyone.
	RevokedAt *time.Time `json:"revoked_at"`
}

// MaxTokenNameLength bounds a token's name (characters).
const MaxTokenNameLength = 200

// TokenTouchEvery is how stale a token's LastUsedAt may get: a request writes it only when the
// stored value is older than this (docs/http-api.md, "Tokens").
const TokenTouchEvery = time.Minute

// Principal returns the caller t authenticates: its subject as a name compares (NameKey), so
// that a token stored with a subject in capitals acts as the person its normalised form names,
// and its role.
func (t *Token) Principal() Principal {
	return Principal{Subject: NameKey(t.Subject), Role: t.Role}
}

// Usable reports why t does not authenticate anyone at now ("" when it does): it is revoked,
// or it has expired.
func (t *Token) Usable(now time.Time) string {
	switch {
	case t.RevokedAt != nil:
		return "the bearer token was revoked"
	case t.ExpiresAt != nil && !now.Before(*t.ExpiresAt):
		return "the bearer token has expired"
	}
	return ""
}

// TokenSpec is what a new token is made from: by `approvald token create` or POST /v1/tokens.
type TokenSpec struct {
	Subject string
	Role    Role
	Name    string
	// ExpiresIn, when positive, makes the token expire that long after it is made.
	ExpiresIn time.Duration
}

// Validate checks a spec against the input policy: a subject that is a person's name
// (NormalizeName), a known role, a one-line name of at most MaxTokenNameLength characters, a
// lifetime not negative.
func (s TokenSpec) Validate() error {
	if _, err := NormalizeName("subject", s.Subject); err != nil {
		return err
	}
	if !s.Role.Valid() {
		return Errorf(EINVALID, "role %q is not one of requester, approver, operator, admin", s.Role)
	}
	if s.Name != "" {
		if err := CheckName("name", s.Name, MaxTokenNameLength); err != nil {
			return err
		}
	}
	if s.ExpiresIn < 0 {
		return Errorf(EINVALID, "expires_in must not be negative")
	}
	return nil
}

// TokenFilter selects tokens for Store.Tokens.
type TokenFilter struct {
	Limit  int    // 1..MaxPageSize; 0 means DefaultPageSize
	Cursor string // from a previous page; a malformed cursor is InvalidCursor
}

// TokenPrefix starts every token so that leaked ones are easy to recognise and scan for.
const TokenPrefix = "apv_"

// NewToken makes a random bearer token for subject and role and returns the secret (to show
// once) and the record to store.
func NewToken(subject string, role Role, now time.Time) (secret string, t Token) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	secret = TokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return secret, Token{ID: NewID("tok"), Subject: subject, Role: role, Hash: HashToken(secret), CreatedAt: now}
}

// HashToken returns the stored form of a token secret.
func HashToken(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// CreateToken makes a token from spec and stores it, and returns the secret (to show once)
// and the record. The subject is stored normalised (NormalizeName): "CI-BOT" makes a token
// for ci-bot. p is who creates it: EFORBIDDEN, before anything else, unless p may manage
// tokens (Principal.MayManageTokens).
func (s *Service) CreateToken(ctx context.Context, p Principal, spec TokenSpec) (string, *Token, error) {
	if err := mayManageTokens(p); err != nil {
		return "", nil, err
	}
	if err := spec.Validate(); err != nil {
		return "", nil, err
	}
	spec.Subject, _ = NormalizeName("subject", spec.Subject)
	now := s.now().UTC().Truncate(Precision)
	secret, t := NewToken(spec.Subject, spec.Role, now)
	t.Name = spec.Name
	if spec.ExpiresIn > 0 {
		at := now.Add(spec.ExpiresIn)
		t.ExpiresAt = &at
	}
	if err := s.insertToken(ctx, t); err != nil {
		return "", nil, err
	}
	return secret, &t, nil
}

// insertToken stores t in a transaction of its own, one statement (Tx.TokenInsert):
// ECONFLICT for a duplicate id or hash.
func (s *Service) insertToken(ctx context.Context, t Token) error {
	tx, err := s.Store.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)

	if err := tx.TokenInsert(ctx, t); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// RevokeToken revokes a token, or ENOTFOUND. Revoking a revoked token changes nothing and
// answers it as it is. From the commit on, Authenticate refuses it on every replica. p is
// who revokes it: EFORBIDDEN, before anything is read, unless p may manage tokens.
func (s *Service) RevokeToken(ctx context.Context, p Principal, id string) (*Token, error) {
	if err := mayManageTokens(p); err != nil {
		return nil, err
	}
	tx, err := s.Store.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)
	t, err := tx.TokenGetForUpdate(ctx, id)
	if err != nil {
		return nil, err
	}
	if t.RevokedAt != nil {
		return t, nil
	}
	if err := tx.TokenSetRevokedIfActive(ctx, id); err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	now := tx.Now()
	t.RevokedAt = &now
	return t, nil
}

// RotateToken replaces a token with a new secret for the same subject, role and name, and
// returns the new secret (to show once) and record. The old token is revoked in the same
// transaction, so exactly one of the two works at any instant. A token with an expiry gives
// the new one the same lifetime, counted from now. A revoked token cannot be rotated
// (ECONFLICT); an unknown one is ENOTFOUND. p is who rotates it: EFORBIDDEN, before
// anything is read, unless p may manage tokens.
func (s *Service) RotateToken(ctx context.Context, p Principal, id string) (string, *Token, error) {
	if err := mayManageTokens(p); err != nil {
		return "", nil, err
	}
	tx, err := s.Store.Begin(ctx)
	if err != nil {
		return "", nil, err
	}
	defer tx.Rollback(ctx)
	old, err := tx.TokenGetForUpdate(ctx, id)
	if err != nil {
		return "", nil, err
	}
	if old.RevokedAt != nil {
		return "", nil, Errorf(ECONFLICT, "token %s is revoked; create a new one instead", id)
	}
	now := tx.Now()
	secret, t := NewToken(old.Subject, old.Role, now)
	t.Name = old.Name
	if old.ExpiresAt != nil {
		at := now.Add(old.ExpiresAt.Sub(old.CreatedAt))
		t.ExpiresAt = &at
	}
	if err := tx.TokenSetRevokedIfActive(ctx, id); err != nil {
		return "", nil, err
	}
	if err := tx.TokenInsert(ctx, t); err != nil {
		return "", nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return "", nil, err
	}
	return secret, &t, nil
}

// Bootstrap stores t only if no token was ever bootstrapped on this database, and reports
// whether it did. The mark and the token commit together, and of several processes starting
// at once on a new database exactly one marks it (Tx.BootstrapInsert), so exactly one gets
// true.
func (s *Service) Bootstrap(ctx context.Context, t Token) (bool, error) {
	if !t.Role.Valid() {
		return false, Errorf(EINVALID, "unknown role %q", t.Role)
	}
	tx, err := s.Store.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(ctx)

	if won, err := tx.BootstrapInsert(ctx, t.ID); err != nil || !won {
		return false, err
	}
	if err := tx.TokenInsert(ctx, t); err != nil {
		return false, err
	}
	if err := tx.Commit(ctx); err != nil {
		return false, err
	}
	return true, nil
}
