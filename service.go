package approval

import (
	"context"
	"sync"
	"time"
)

// Service holds the rules that sit above the store: what a create means for an
// idempotency key, and who a bearer token is. Consumers (the HTTP API, the commands) call
// it instead of composing store methods themselves, so each rule is written once, whatever
// the store. See docs/architecture.md.
type Service struct {
	// Store is the durable state. Both stores (sqlite, postgres) pass the contract suite in
	// storetest.
	Store Store

	// Now is the service's clock, time.Now by default. It stamps new approvals; the store
	// reads its own clock for everything decided inside a transaction.
	Now func() time.Time

	// Retention is how long a create's stored response is replayed byte for byte; after it
	// a retry is answered from the approval itself. DefaultRetention when zero.
	Retention time.Duration

	// TokenCacheTTL is how long a successful token lookup is reused without asking the
	// store again: the longest a change to a token (a revocation) can go unnoticed by this
	// process. DefaultTokenCacheTTL when zero; negative disables the cache.
	TokenCacheTTL time.Duration

	tokensMu sync.RWMutex
	tokens   map[string]cachedToken
}

// Defaults of the Service.
const (
	DefaultRetention     = 24 * time.Hour
	DefaultTokenCacheTTL = 5 * time.Second
	// maxCachedTokens bounds the token cache; past it the cache starts again empty.
	maxCachedTokens = 10_000
)

// CreatePath and CreateMethod are the route a create is fingerprinted under: the route, not
// the request's raw path, so that equivalent spellings of the URL are one operation.
const (
	CreateMethod = "POST"
	CreatePath   = "/v1/approvals"
)

// CreateCommand asks for one approval under an operation key.
type CreateCommand struct {
	Requester string
	Key       string // the Idempotency-Key, already checked for syntax
	// Body is the request body as sent: its fingerprint (with the requester and the route)
	// tells a retry of the same request from a different request under the same key.
	Body []byte
	// Request is Body decoded by the caller, which refuses unknown fields.
	Request CreateRequest
	Cause   Cause
	// Respond renders the answer to a new approval, the response kept for replays.
	Respond func(*Approval) (StoredResponse, error)
}

// CreateResult is the answer to a create.
type CreateResult struct {
	// Replayed reports that the key was already taken by this same request: the answer is
	// the original one, not a new approval.
	Replayed bool
	// Response is the answer to give: the new approval's, or the stored one replayed. It is
	// nil when the stored response outlived its retention; Approval is then the current
	// state of the approval the key made, to answer with instead.
	Response *StoredResponse
	// Approval is the new approval, or the one the key made when Response is nil.
	Approval *Approval
}

// Create runs the idempotent create (docs/invariants.md, invariant 2). The request is
// validated before anything is written, so a refused request stores nothing and the caller
// may correct it and reuse the key. Then one store transaction writes the approval with its
// idempotency record, unless the key is taken; and the rule is:
//
//   - the key was free: the new approval, with Respond's answer;
//   - the key is held by a request with another fingerprint: EMISMATCH (422);
//   - the key is held by this same request: its stored answer, Replayed; a concurrent
//     create under the key waited for the first one's commit and gets this too;
//   - the stored answer was purged after Retention: the approval's current state, Replayed.
func (s *Service) Create(ctx context.Context, c CreateCommand) (CreateResult, error) {
	fingerprint, err := Fingerprint(c.Requester, CreateMethod, CreatePath, c.Body)
	if err != nil {
		return CreateResult{}, err
	}
	a, err := NewApproval(c.Request, c.Requester, c.Key, fingerprint, s.now())
	if err != nil {
		return CreateResult{}, err
	}
	if a.CallbackURL != "" {
		if err := s.Store.Routes().CheckCallbackURL(a.CallbackURL); err != nil {
			return CreateResult{}, err
		}
	}
	resp, err := c.Respond(a)
	if err != nil {
		return CreateResult{}, err
	}
	outbox, err := createNotices(s.Store.Routes(), a)
	if err != nil {
		return CreateResult{}, err
	}
	holder, err := s.Store.InsertApproval(ctx, a, resp, s.retention(), c.Cause, outbox)
	if err != nil {
		return CreateResult{}, err
	}
	switch {
	case holder == nil:
		return CreateResult{Response: &resp, Approval: a}, nil
	case holder.Fingerprint != fingerprint:
		return CreateResult{}, Errorf(EMISMATCH, "the Idempotency-Key was already used for a different request")
	case holder.Response != nil:
		return CreateResult{Replayed: true, Response: holder.Response}, nil
	case holder.Approval != nil:
		return CreateResult{Replayed: true, Approval: holder.Approval}, nil
	}
	return CreateResult{}, Errorf(EINTERNAL, "the store found the key %q held by nothing", c.Key)
}

// Authenticate returns the token whose secret is given, or EUNAUTHORIZED for an unknown one.
// A token found is remembered for TokenCacheTTL, so that a busy caller costs the database
// one lookup per TTL instead of one per request; an unknown secret is asked about every
// time.
func (s *Service) Authenticate(ctx context.Context, secret string) (*Token, error) {
	hash := HashToken(secret)
	ttl := s.TokenCacheTTL
	if ttl == 0 {
		ttl = DefaultTokenCacheTTL
	}
	now := time.Now()
	if ttl > 0 {
		s.tokensMu.RLock()
		c, ok := s.tokens[string(hash)]
		s.tokensMu.RUnlock()
		if ok && now.Before(c.until) {
			t := c.token
			return &t, nil
		}
	}

	t, err := s.Store.TokenByHash(ctx, hash)
	if ErrorCode(err) == ENOTFOUND {
		return nil, Errorf(EUNAUTHORIZED, "unknown bearer token")
	} else if err != nil {
		return nil, err
	}
	if ttl > 0 {
		s.tokensMu.Lock()
		if s.tokens == nil || len(s.tokens) >= maxCachedTokens {
			s.tokens = make(map[string]cachedToken)
		}
		s.tokens[string(hash)] = cachedToken{token: *t, until: now.Add(ttl)}
		s.tokensMu.Unlock()
	}
	return t, nil
}

// cachedToken is a token lookup remembered until a time.
type cachedToken struct {
	token Token
	until time.Time
}

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Service) retention() time.Duration {
	if s.Retention > 0 {
		return s.Retention
	}
	return DefaultRetention
}
