package approval

import (
	"bytes"
	"context"
	"crypto/sha256"
	"sync"
	"time"

	"github.com/approvald/approval/internal/batch"
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

	// Retention is how long after a create a retry of it is answered with the original
	// answer, byte for byte; after it a retry is answered with the approval as it is then.
	// DefaultRetention when zero.
	Retention time.Duration

	// Targeted reports whether an action has a downstream target, which decides whether
	// approving queues its execution or records it as not_configured. Nil means no action
	// has one. Replicas sharing a database must agree on it.
	Targeted func(action string) bool

	// Routing says who is told of what, and how: the rules that cause notifications and
	// callbacks queue them by it. Zero: nobody is told.
	Routing Routing

	// Policies decide who must approve what (docs/policies.md): a create is resolved by them
	// before anything is written, and an approval created under a policy keeps the rules it
	// resolved to. Nil: requesters name their approvers.
	Policies Policies

	// Members tells who is in which group now. A vote on an approval created under a policy
	// asks it when the vote is counted, so that someone removed from a group has no say from
	// then on. Nil: the groups have no members.
	Members Members

	// Clock, when set, holds back every claim of work (executions, inbox events, outbox
	// messages) while this process's clock is too far off the database's to judge leases by
	// (ClockWatch). Nil: the clock is trusted.
	Clock *ClockWatch

	// touchMu guards touched: when this process last sent each token's last_used_at, so
	// that a busy token costs one write a minute, not one per request (see Authenticate).
	touchMu sync.Mutex
	touched map[string]time.Time
	touches sync.WaitGroup

	// knownMu guards known: the tokens this process has authenticated, by the hash of their
	// secret, which AuthenticateFirstTrip re-checks in the request's first round trip rather
	// than looking them up first (see TokenCheck).
	knownMu sync.Mutex
	known   map[string]*Token

	// recent remembers which approval holds the keys of the creates this process answered
	// lately, and the newest answers, so that a retry is answered from memory or from a read
	// (see recentKeys).
	recent recentKeys

	// voteBatcher casts the votes that arrive together in one transaction (see castVote),
	// made on first use under votesOnce.
	votesOnce   sync.Once
	voteBatcher *batch.Batcher[voteCall, decided]
}

// Defaults of the Service.
const (
	DefaultRetention = 24 * time.Hour
	// maxTouched bounds the memory of last-use writes; past it the memory starts again empty
	// (the store's guard still keeps the writes to one a minute per token).
	maxTouched = 10_000
	// touchTimeout bounds one last-use write, which no request waits for.
	touchTimeout = 10 * time.Second
	// maxKnown bounds the memory of known tokens; past it the memory starts again empty (a
	// token it forgot is looked up again on its next use).
	maxKnown = 10_000
)

// CreatePath and CreateMethod are the route a create is fingerprinted under: the route, not
// the request's raw path, so that equivalent spellings of the URL are one operation.
const (
	CreateMethod = "POST"
	CreatePath   = "/v1/approvals"
)

// CreateCommand asks for one approval under an operation key; its requester is the
// principal Service.Create acts for.
type CreateCommand struct {
	Key string // the Idempotency-Key, already checked for syntax
	// Body is the request body as sent: its fingerprint (with the requester and the route)
	// tells a retry of the same request from a different request under the same key.
	Body []byte
	// Decode decodes Body as the caller's contract says (refusing unknown fields, say). It is
	// not called for a retry that sends the very bytes this process accepted under the key
	// (see recentKeys); otherwise it runs before anything else looks at Body, so that a body
	// it refuses is refused whatever the key holds.
	Decode func() (CreateRequest, error)
	Cause  Cause
	// Respond renders the answer to a new approval, the response kept for replays.
	Respond func(*Approval) (StoredResponse, error)

	// requester is the principal's subject as a name compares (NameKey), set by Create.
	requester string
}

// CreateResult is the answer to a create.
type CreateResult struct {
	// Replayed reports that the key was already taken by this same request: the answer is
	// the original one, not a new approval.
	Replayed bool
	// Response is the answer to give: the new approval's, or the original one replayed. It
	// is nil when the create is older than Retention; Approval is then the current state of
	// the approval the key made, to answer with instead.
	Response *StoredResponse
	// Approval is the new approval, or the one the key made in its current state; nil for a
	// replay answered from the answer this process kept (see recentKeys), which reads no
	// approval.
	Approval *Approval
}

// Create runs the idempotent create (docs/invariants.md, invariant 2) for p, who becomes the
// approval's requester: EFORBIDDEN, before anything else, unless p may create approvals
// (Principal.MayCreate). The request is validated, and resolved by the Policies when there
// are any (docs/policies.md), before anything is written, so a refused request stores nothing
// and the caller may correct it and reuse the key; a request the policies refuse whose key
// already holds its approval (the policies changed since) is answered as a retry. Then one
// store statement or transaction writes the approval, unless the key is taken; and the rule
// is:
//
//   - the key was free: the new approval, with Respond's answer;
//   - the key is held by a request with another fingerprint: EMISMATCH (422);
//   - the key is held by this same request, made less than Retention ago: the original
//     answer, Replayed, rendered again by Respond from the approval as it was created (the
//     same bytes: the approval row keeps every field the answer shows); a concurrent create
//     under the key waited for the first one's commit and gets this too;
//   - the same, made Retention ago or more: the approval's current state, Replayed.
func (s *Service) Create(ctx context.Context, p Principal, c CreateCommand) (CreateResult, error) {
	if err := mayCreate(p); err != nil {
		return CreateResult{}, err
	}
	// The requester as a name compares: its key and fingerprint are the normalised name's, so a
	// token stored with its subject in capitals holds the same keys as its normalised twin.
	c.requester = NameKey(p.Subject)
	sum := sha256.Sum256(c.Body)
	known, remembered := s.recent.get(c.requester, c.Key, s.Store.Incarnation())
	if remembered && known.body == sum {
		// The very bytes this process accepted under the key: valid, and of the fingerprint
		// it remembers.
		if res, ok, err := s.replayRecent(ctx, c, known, known.fingerprint); ok || err != nil {
			return res, err
		}
	}
	req, err := c.Decode()
	if err != nil {
		return CreateResult{}, err
	}
	fingerprint, err := Fingerprint(c.requester, CreateMethod, CreatePath, c.Body)
	if err != nil {
		return CreateResult{}, err
	}
	if remembered && known.body != sum && known.fingerprint == fingerprint {
		// Other bytes of the same request (white space, the order of keys).
		if res, ok, err := s.replayRecent(ctx, c, known, fingerprint); ok || err != nil {
			return res, err
		}
	}
	// Under policies the request is resolved here, before anything is written; a refusal
	// of a request whose key already holds its approval replays that approval.
	refused := false
	a, err := newApproval(req, c.requester, c.Key, fingerprint, s.now(), s.resolver(ctx, req, &refused))
	if refused {
		if res, ok, err := s.replayHeld(ctx, c, fingerprint, sum); ok || err != nil {
			return res, err
		}
	}
	if err != nil {
		return CreateResult{}, err
	}
	if a.CallbackURL != "" {
		if err := s.Routing.CheckCallbackURL(a.CallbackURL); err != nil {
			return CreateResult{}, err
		}
	}
	// Rendered before the write, so that an answer that cannot be rendered writes nothing.
	resp, err := c.Respond(a)
	if err != nil {
		return CreateResult{}, err
	}
	// The provider's addresses are read before the create's one statement, outside it: an
	// address stored by a sign-in at this moment may miss this approval's notification.
	stored, err := providerEmails(ctx, s.Routing, s.Store.PersonEmails, a.Approvers)
	if err != nil {
		return CreateResult{}, err
	}
	outbox, err := createNotices(s.Routing, a, s.Members, stored)
	if err != nil {
		return CreateResult{}, err
	}
	at := s.Store.Incarnation()
	holder, err := s.Store.InsertApproval(ctx, a, c.Cause, outbox)
	switch {
	case err != nil:
		return CreateResult{}, err
	case holder == nil:
		s.rememberKey(c, recentKey{id: a.ID, fingerprint: fingerprint, body: sum, incarnation: at,
			answer: &resp, expires: a.CreatedAt.Add(s.retention())})
		return CreateResult{Response: &resp, Approval: a}, nil
	case holder.Approval == nil:
		return CreateResult{}, Errorf(EINTERNAL, "the store found the key %q held by nothing", c.Key)
	case holder.Fingerprint != fingerprint:
		return CreateResult{}, Errorf(EMISMATCH, "the Idempotency-Key was already used for a different request")
	}
	return s.replayRemembered(c, holder.Approval, fingerprint, sum, at)
}

// replayRecent answers a create whose key this process remembers (see recentKeys) under
// fingerprint, the create's: from the answer remembered while it is replayed as it was given,
// after nothing but the request's token check (ConfirmToken, a lookup of the token), provided
// the store's incarnation is still the one the key was remembered at once the check is done
// (its round trip may be the first to a server that took the old one's place); otherwise
// from one read of the approval remembered, when that approval holds the key under
// fingerprint; ok reports that it did. Otherwise (the approval gone, or the key used for
// another request) the create goes on by the write path, which answers it as if nothing were
// remembered. The read runs the request's token check, as the write would have.
func (s *Service) replayRecent(ctx context.Context, c CreateCommand, known recentKey, fingerprint string) (CreateResult, bool, error) {
	if known.answer != nil && s.now().Before(known.expires) {
		if check := PendingTokenCheck(ctx); check != nil {
			if err := s.ConfirmToken(ctx, check); err != nil {
				return CreateResult{}, false, err
			}
		}
		if s.Store.Incarnation() == known.incarnation {
			again := *known.answer
			again.Body = bytes.Clone(again.Body) // the caller's to keep; the memory's stays as it is
			return CreateResult{Replayed: true, Response: &again}, true, nil
		}
	}
	at := s.Store.Incarnation()
	a, err := s.Store.Approval(ctx, known.id)
	switch {
	case ErrorCode(err) == ENOTFOUND:
		s.recent.forget(c.requester, c.Key)
		return CreateResult{}, false, nil
	case err != nil:
		return CreateResult{}, false, err
	case a.Requester != c.requester || a.OperationKey != c.Key || a.Fingerprint != fingerprint:
		s.recent.forget(c.requester, c.Key)
		return CreateResult{}, false, nil
	}
	res, err := s.replayRemembered(c, a, fingerprint, sha256.Sum256(c.Body), at)
	return res, err == nil, err
}

// replayRemembered replays a, which holds c's key under fingerprint, and remembers the key
// with the answer, whose body has the SHA-256 sum; at is the store's incarnation before a was
// read.
func (s *Service) replayRemembered(c CreateCommand, a *Approval, fingerprint string, sum [sha256.Size]byte, at string) (CreateResult, error) {
	res, err := s.replay(c, a)
	if err != nil {
		return res, err
	}
	s.rememberKey(c, recentKey{id: a.ID, fingerprint: fingerprint, body: sum, incarnation: at,
		answer: res.Response, expires: a.CreatedAt.Add(s.retention())})
	return res, nil
}

// rememberKey puts what c's key holds in the memory of recent keys, unless the store's
// incarnation moved since known's, read before the round trip that wrote or found the
// approval: that approval may be on the server the store no longer talks to.
func (s *Service) rememberKey(c CreateCommand, known recentKey) {
	if s.Store.Incarnation() == known.incarnation {
		s.recent.put(c.requester, c.Key, known)
	}
}

// replay answers a retry of the create that made a: the original answer when a was created
// less than Retention ago, rendered again from a as it was created, and otherwise a as it is.
func (s *Service) replay(c CreateCommand, a *Approval) (CreateResult, error) {
	if s.now().Before(a.CreatedAt.Add(s.retention())) {
		again, err := c.Respond(a.AsCreated())
		if err != nil {
			return CreateResult{}, err
		}
		return CreateResult{Replayed: true, Response: &again, Approval: a}, nil
	}
	return CreateResult{Replayed: true, Approval: a}, nil
}

// Authenticate returns the token whose secret is given, or EUNAUTHORIZED for an unknown,
// revoked or expired one. It asks the store every time, one statement on the hash's unique
// index (one round trip on PostgreSQL), and trusts no memory: so a revocation or an expiry
// holds on every replica from the moment it commits (docs/http-api.md, "Tokens"). Expiry is
// compared with the Service's clock. A token that authenticates is remembered for
// AuthenticateFirstTrip, which re-checks it in the request's own first round trip instead.
//
// The token's last_used_at is brought up to date when it is older than TokenTouchEvery, by a
// write no request waits for (Wait waits for those in flight).
func (s *Service) Authenticate(ctx context.Context, secret string) (*Token, error) {
	t, err := s.Store.TokenByHash(ctx, HashToken(secret))
	if ErrorCode(err) == ENOTFOUND {
		return nil, Errorf(EUNAUTHORIZED, "unknown bearer token")
	} else if err != nil {
		return nil, err
	}
	now := s.now()
	if why := t.Usable(now); why != "" {
		s.forget(t.Hash)
		return nil, Errorf(EUNAUTHORIZED, "%s", why)
	}
	s.remember(t)
	s.touch(ctx, t, now)
	return t, nil
}

// AuthenticateFirstTrip is Authenticate without a round trip of its own for a token this
// process has authenticated before: it answers from memory (subject, role, expiry) and
// returns ctx carrying a TokenCheck, which the store runs in the request's first round trip,
// beside the request's own work, refusing that work when the token was revoked, has expired
// or is gone (docs/architecture.md, "Round trips"). A token first seen is looked up as
// Authenticate does, and ctx is returned as it is.
//
// The caller must let the check run before it answers: by a store call that honours it
// (Store.Approval, Store.InsertApproval, Store.Begin), or else by ConfirmToken.
func (s *Service) AuthenticateFirstTrip(ctx context.Context, secret string) (context.Context, *Token, error) {
	hash := HashToken(secret)
	s.knownMu.Lock()
	t := s.known[string(hash)]
	s.knownMu.Unlock()
	if t == nil {
		t, err := s.Authenticate(ctx, secret)
		return ctx, t, err
	}
	now := s.now()
	if why := t.Usable(now); why != "" {
		s.forget(hash)
		return ctx, nil, Errorf(EUNAUTHORIZED, "%s", why)
	}
	c := &TokenCheck{
		ID: t.ID, Hash: hash, Now: now,
		passed: func() { s.touch(ctx, t, now) },
		forget: func() { s.forget(hash) },
	}
	return WithTokenCheck(ctx, c), t, nil
}

// ConfirmToken settles c when no store call ran it, or finds why a store refused it: one
// lookup of the token, as Authenticate makes. It returns nil when the token is still good,
// and otherwise the EUNAUTHORIZED error Authenticate would have answered.
func (s *Service) ConfirmToken(ctx context.Context, c *TokenCheck) error {
	if !c.Pending() && !c.Refused() {
		return nil
	}
	t, err := s.Store.TokenByHash(ctx, c.Hash)
	switch {
	case ErrorCode(err) == ENOTFOUND || (err == nil && t.ID != c.ID):
		s.forget(c.Hash)
		c.Refuse()
		return Errorf(EUNAUTHORIZED, "unknown bearer token")
	case err != nil:
		return err
	}
	if why := t.Usable(c.Now); why != "" {
		c.Refuse()
		return Errorf(EUNAUTHORIZED, "%s", why)
	}
	if c.Refused() {
		// Refused by a store a moment ago, good now: only a token whose revocation was rolled
		// back could be so. The refusal stands; the request changed nothing.
		return Errorf(EUNAUTHORIZED, "the bearer token was revoked or has expired")
	}
	c.Pass()
	return nil
}

// remember keeps a token that authenticated, for AuthenticateFirstTrip.
func (s *Service) remember(t *Token) {
	s.knownMu.Lock()
	defer s.knownMu.Unlock()
	if s.known == nil || len(s.known) >= maxKnown {
		s.known = make(map[string]*Token)
	}
	s.known[string(t.Hash)] = t
}

// forget drops a token that no longer authenticates.
func (s *Service) forget(hash []byte) {
	s.knownMu.Lock()
	delete(s.known, string(hash))
	s.knownMu.Unlock()
}

// touch sends the token's last-use write in the background when the stored value is stale
// and this process has not sent one in the last TokenTouchEvery.
func (s *Service) touch(ctx context.Context, t *Token, now time.Time) {
	if t.LastUsedAt != nil && now.Sub(*t.LastUsedAt) < TokenTouchEvery {
		return
	}
	s.touchMu.Lock()
	if last, ok := s.touched[t.ID]; ok && now.Sub(last) < TokenTouchEvery && !now.Before(last) {
		s.touchMu.Unlock()
		return
	}
	if s.touched == nil || len(s.touched) >= maxTouched {
		s.touched = make(map[string]time.Time)
	}
	s.touched[t.ID] = now
	s.touchMu.Unlock()

	id := t.ID
	s.touches.Go(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), touchTimeout)
		defer cancel()
		if err := s.Store.TokenSetLastUsedIfOlder(ctx, id, TokenTouchEvery); err != nil {
			// Forget the send so that the next request tries again; the use itself stands.
			s.touchMu.Lock()
			delete(s.touched, id)
			s.touchMu.Unlock()
		}
	})
}

// Wait returns when the tokens' last-use writes started so far have ended. A server calls it
// when it has stopped serving, before closing the store.
func (s *Service) Wait() { s.touches.Wait() }

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
