package approval

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"
)

// E-mailed sign-in links (docs/web.md, "Sign-in links"): a person without an identity
// provider asks for a link by name or address, gets a single-use token by e-mail, and trades
// it for a session. Only the token's SHA-256 is stored (signin_tokens); the clear token lives
// in the outbox message's payload until the mail is sent, then is removed (FinishOutbox).
const (
	SigninTTL = 15 * time.Minute // how long a link works
	// SigninLimit links per person per SigninWindow: more requests are dropped silently, so
	// that nobody can bomb a mailbox with links.
	SigninLimit  = 5
	SigninWindow = time.Hour
	// SigninKeep is how long a sign-in link is kept after it was made, used or not: past its
	// expiry, and past the window of the per-person limit, which counts the links made in it.
	// The sweeper deletes older ones (Service.PurgeSigninTokens).
	SigninKeep = max(SigninTTL, SigninWindow)
	// SigninTokenPrefix starts every sign-in token.
	SigninTokenPrefix = "lnk_"
	// EventSignin is the outbox event of a sign-in link.
	EventSignin = "signin"
)

// SigninRequest is what became of a request for a sign-in link. The page answers every
// request alike; this is for the log and the tests.
type SigninRequest struct {
	Person string // whom the link was made for; "" when nobody matched
	// Queued reports that a link was made and its mail queued; false when nobody matched,
	// the person has no e-mail address, or their limit was reached (Limited).
	Queued  bool
	Limited bool
}

// RequestSignin makes a sign-in link for the person named by who (their name in the
// configuration, or their e-mail address there) and queues its mail in the same transaction,
// unless
// nobody with an e-mail address matches or they asked for SigninLimit links in the last
// SigninWindow. Neither of those is an error: the caller must answer the same whatever
// happened, so that the answer tells nobody who has an account.
func (s *Service) RequestSignin(ctx context.Context, who string) (SigninRequest, error) {
	who = strings.TrimSpace(who)
	if err := CheckName("name or e-mail address", who, 254); err != nil {
		return SigninRequest{}, err
	}
	// Only the configuration's addresses: a person known by the address an identity provider
	// verified signs in through that provider, so that removing them there ends their access
	// (a link mailed to a stored address would outlive it).
	person := s.Store.Routes().emailPerson(who)
	if person == "" {
		return SigninRequest{}, nil
	}
	tx, err := s.Store.Begin(ctx)
	if err != nil {
		return SigninRequest{}, err
	}
	defer tx.Rollback(ctx)
	now := tx.Now()
	n, err := tx.SigninTokenCountSinceForUpdate(ctx, person, now.Add(-SigninWindow))
	if err != nil {
		return SigninRequest{}, err
	}
	if n >= SigninLimit {
		return SigninRequest{Person: person, Limited: true}, nil
	}
	token := newSigninToken()
	hash := HashToken(token)
	expires := now.Add(SigninTTL)
	if err := tx.SigninTokenInsert(ctx, hash, person, expires); err != nil {
		return SigninRequest{}, err
	}
	payload, err := json.Marshal(Signin{Token: token, ExpiresAt: expires})
	if err != nil {
		return SigninRequest{}, Errorf(EINTERNAL, "encode sign-in link: %v", err)
	}
	if err := tx.OutboxInsert(ctx, &OutboxMessage{
		ID: NewID("sig"), NaturalKey: "signin\x1f" + hex.EncodeToString(hash), Kind: OutboxSignin,
		Recipient: person, Channel: ChannelEmail, Event: EventSignin, Payload: payload,
		Status: OutboxPending, NextAttemptAt: &now, CreatedAt: now, UpdatedAt: now,
	}); err != nil {
		return SigninRequest{}, err
	}
	if err := tx.Notify(ctx, TopicOutbox); err != nil {
		return SigninRequest{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return SigninRequest{}, err
	}
	return SigninRequest{Person: person, Queued: true}, nil
}

// UseSignin consumes a sign-in link and returns the person it was made for. Of any number
// of uses of one link, at once or one after the other, exactly one succeeds: the store's
// conditional write marks it used only while it is unused and unexpired. Every other use, an
// expired link and an unknown one are EUNAUTHORIZED, alike.
func (s *Service) UseSignin(ctx context.Context, token string) (string, error) {
	refused := Errorf(EUNAUTHORIZED, "this sign-in link was already used, has expired or is not known; ask for a new one")
	if !strings.HasPrefix(token, SigninTokenPrefix) || len(token) > 100 {
		return "", refused
	}
	tx, err := s.Store.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer tx.Rollback(ctx)
	person, err := tx.SigninTokenUseIfValid(ctx, HashToken(token))
	if ErrorCode(err) == ENOTFOUND {
		return "", refused
	} else if err != nil {
		return "", err
	}
	if p := s.Store.Routes().emailPerson(person); p != person {
		// Taken out of the configuration since the link was sent: the link is void.
		return "", refused
	}
	if err := tx.Commit(ctx); err != nil {
		return "", err
	}
	return person, nil
}

// newSigninToken returns a random sign-in token: 256 bits, URL-safe.
func newSigninToken() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return SigninTokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// emailPerson returns the person who is who, by name or by e-mail address (case aside), and
// is notified by e-mail; "" when there is none.
func (r Routing) emailPerson(who string) string {
	person := ""
	if _, ok := r.Emails[who]; ok {
		person = who
	} else {
		for name, addr := range r.Emails {
			if strings.EqualFold(addr, who) {
				person = name
				break
			}
		}
	}
	if person == "" || r.Emails[person] == "" {
		return ""
	}
	for _, ch := range r.Channels[person] {
		if ch == ChannelEmail {
			return person
		}
	}
	return ""
}
