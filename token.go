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
	ID        string    `json:"id"`
	Subject   string    `json:"subject"`
	Role      Role      `json:"role"`
	Hash      []byte    `json:"-"`
	CreatedAt time.Time `json:"created_at"`
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

// CreateToken stores a token record: EINVALID for an unknown role, ECONFLICT for a duplicate
// id or hash.
func (s *Service) CreateToken(ctx context.Context, t Token) error {
	if !t.Role.Valid() {
		return Errorf(EINVALID, "unknown role %q", t.Role)
	}
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
