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
	// SigninLimit links per person per SigninWindow are made at once, whoever asks, and
	// SigninPerClient of them per requesting client: past either, a request gets a link only
	// when the person has no unused link made in the last SigninSpacing. A request that gets
	// none is dropped silently, so that nobody can bomb a mailbox with links: a person gets
	// at most SigninLimit + SigninWindow/SigninSpacing links a window, however many clients
	// ask. And nobody can lock a person out by asking for them: a request dropped because
	// others asked finds a link made less than SigninSpacing ago, good for at least
	// SigninTTL - SigninSpacing more, already on its way to the person's mailbox.
	SigninLimit     = 5
	SigninPerClient = 3
	SigninWindow    = time.Hour
	SigninSpacing   = 3 * time.Minute
	// SigninKeep is how long a sign-in link and a request for one are kept after they were
	// made, used or not: past the link's expiry, and past the window of the limits, which
	// count them. The sweeper deletes older ones (Service.PurgeSigninTokens).
	SigninKeep = max(SigninTTL, SigninWindow)
	// MaxSigninNext bounds, in characters, the page a sign-in link returns to.
	MaxSigninNext = 2000
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
	// the person has no e-mail address, or their limits were reached (Limited).
	Queued  bool
	Limited bool
}

// SigninCountParams names what Tx.SigninAskCountsForUpdate counts.
type SigninCountParams struct {
	Subject string // the person asked for; "" when the request matched nobody
	Client  string // the requesting client; "" when unknown
	// Since starts the window of the limits; RecentSince the spacing of the links past them.
	Since, RecentSince time.Time
}

// SigninCounts are the counts a request for a sign-in link is judged by.
type SigninCounts struct {
	ClientAsks int // requests from the client for the subject made since Since
	Links      int // links made for the subject since Since
	// RecentUnused is the subject's links made after RecentSince and not used yet.
	RecentUnused int
}

// RequestSignin makes a sign-in link for the person named by who (their name in the
// configuration, or their e-mail address there), asked for by client (the requesting
// client as the caller counts it, such as its address; "" when unknown), to return to next
// once used (the page the person was on, which the caller vouches for as one of its own; ""
// for the caller's default; at most MaxSigninNext characters), and queues its mail
// in the same transaction, unless nobody with an e-mail address matches or the limits hold
// it back (SigninLimit). Neither of those is an error: the caller must answer the same
// whatever happened, so that the answer tells nobody who has an account.
//
// Every request, matched or not, does the same work up to the link itself: it makes a token
// and its hash, and in one write transaction counts and records the request. Only a link
// made adds its two inserts (the link, its mail) to that transaction, so that how long the
// answer takes tells little about whether the name exists (docs/security.md, "Sign-in
// links").
func (s *Service) RequestSignin(ctx context.Context, who, client, next string) (SigninRequest, error) {
	who = strings.TrimSpace(who)
	if err := CheckName("name or e-mail address", who, 254); err != nil {
		return SigninRequest{}, err
	}
	if next != "" {
		if err := CheckName("the page to return to", next, MaxSigninNext); err != nil {
			return SigninRequest{}, err
		}
	}
	// Only the configuration's addresses: a person known by the address an identity provider
	// verified signs in through that provider, so that removing them there ends their access
	// (a link mailed to a stored address would outlive it).
	person := s.Routing.emailPerson(who)
	token := newSigninToken()
	hash := HashToken(token)
	tx, err := s.Store.Begin(ctx)
	if err != nil {
		return SigninRequest{}, err
	}
	defer tx.Rollback(ctx)
	now := tx.Now()
	c, err := tx.SigninAskCountsForUpdate(ctx, SigninCountParams{
		Subject: person, Client: client, Since: now.Add(-SigninWindow), RecentSince: now.Add(-SigninSpacing),
	})
	if err != nil {
		return SigninRequest{}, err
	}
	if err := tx.SigninAskInsert(ctx, person, client); err != nil {
		return SigninRequest{}, err
	}
	res := SigninRequest{Person: person}
	switch {
	case person == "":
		// Nobody: the request is recorded, as any, and nothing more.
	case c.ClientAsks < SigninPerClient && c.Links < SigninLimit, c.RecentUnused == 0:
		if err := s.queueSignin(ctx, tx, person, token, hash, next); err != nil {
			return SigninRequest{}, err
		}
		res.Queued = true
	default:
		res.Limited = true
	}
	if err := tx.Commit(ctx); err != nil {
		return SigninRequest{}, err
	}
	return res, nil
}

// queueSignin stores a sign-in link for person, returning to next, and queues its mail in tx.
func (s *Service) queueSignin(ctx context.Context, tx Tx, person, token string, hash []byte, next string) error {
	now := tx.Now()
	expires := now.Add(SigninTTL)
	if err := tx.SigninTokenInsert(ctx, hash, person, expires); err != nil {
		return err
	}
	payload, err := json.Marshal(Signin{Token: token, ExpiresAt: expires, Next: next})
	if err != nil {
		return Errorf(EINTERNAL, "encode sign-in link: %v", err)
	}
	if err := tx.OutboxInsert(ctx, &OutboxMessage{
		ID: NewID("sig"), NaturalKey: "signin\x1f" + hex.EncodeToString(hash), Kind: OutboxSignin,
		Recipient: person, Channel: ChannelEmail, Event: EventSignin, Payload: payload,
		Status: OutboxPending, NextAttemptAt: &now, CreatedAt: now, UpdatedAt: now,
	}); err != nil {
		return err
	}
	return tx.Notify(ctx, TopicOutbox)
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
	if p := s.Routing.emailPerson(person); p != person {
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
	if _, ok := r.Emails[NameKey(who)]; ok {
		// Configured names are normalised (docs/security.md, "Names"): "Alice" asks for alice.
		person = NameKey(who)
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
