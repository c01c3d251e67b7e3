// Package webhook verifies signed inbound webhooks and signs outbound ones, for the three
// schemes of docs/http-api.md, "Webhook intake": Standard Webhooks, Stripe and GitHub.
//
// A Verifier checks one delivery over its raw body and returns the provider's event id, which
// the intake stores under a unique constraint. Every check is an HMAC-SHA256 over exactly the
// content the scheme signs, compared in constant time against each configured secret, so a
// source can carry an old and a new secret while it rotates. Headers are parsed completely
// before any HMAC work, so a malformed delivery costs nothing but the parse.
//
// Errors from Verify are *approval.Error: EINVALID (400) for a missing or malformed required
// header, EUNAUTHORIZED (401) for a signature that matches no secret, a delivery signed only
// with a version we do not accept, or a timestamp outside the tolerance. A Verifier that is
// itself misconfigured fails with a plain error (500): that is our fault, not the sender's.
package webhook

import (
	"crypto/hmac"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/approvald/approval"
)

// Scheme names a webhook signature scheme.
type Scheme string

// The supported schemes, spelled as in the configuration file.
const (
	SchemeStandard Scheme = "standard-webhooks"
	SchemeStripe   Scheme = "stripe"
	SchemeGitHub   Scheme = "github"
)

// Valid reports whether s is a supported scheme.
func (s Scheme) Valid() bool {
	switch s {
	case SchemeStandard, SchemeStripe, SchemeGitHub:
		return true
	}
	return false
}

// DefaultTolerance is how far a signed timestamp may be from now, either way, when a
// Verifier does not say. It is the value of the Standard Webhooks and Stripe libraries.
const DefaultTolerance = 5 * time.Minute

// Configuration errors returned, wrapped with the offending field, by Verifier.Validate.
var (
	ErrUnknownScheme     = errors.New("unknown webhook scheme")
	ErrNoSecrets         = errors.New("no secrets")
	ErrBadSecret         = errors.New("bad secret")
	ErrNegativeTolerance = errors.New("negative tolerance")
)

// Verifier checks deliveries from one configured source. It holds no state besides its
// configuration, so one value may serve any number of requests at once.
type Verifier struct {
	Scheme Scheme
	// Secrets are all accepted at once, so a source can rotate: add the new secret, switch
	// the provider, then remove the old one. For standard-webhooks each is "whsec_" followed
	// by base64 (the prefix may be left off, as the reference libraries allow); for stripe
	// the whole "whsec_..." string is the key, as Stripe uses it; for github any string.
	Secrets []string
	// Tolerance bounds |now - signed timestamp|; 0 means DefaultTolerance. GitHub deliveries
	// carry no timestamp, so it does not apply to them.
	Tolerance time.Duration
}

// Delivery is what a verified webhook delivery says about itself.
type Delivery struct {
	// EventID is the provider's id for the event, the same on every redelivery: the
	// webhook-id header, the "id" of a Stripe event body, or the X-GitHub-Delivery header.
	EventID string
	// Timestamp is the signed send time, in UTC; zero for github, which signs none.
	Timestamp time.Time
	// BodyHash is the SHA-256 of the signed body when the scheme signs nothing but the body
	// (github): the id and the time are not signed, so a captured body can come back under a
	// new id, and the intake deduplicates on this as well. Nil for the schemes that sign the
	// id and a timestamp, whose replays the id and the tolerance already bound.
	BodyHash []byte
}

// Validate reports whether v is usable: a known scheme, at least one secret, each of the
// form the scheme needs, and a tolerance that is not negative. The configuration loader
// calls it so that a bad secret stops startup instead of failing every delivery.
func (v *Verifier) Validate() error {
	if !v.Scheme.Valid() {
		return fmt.Errorf("scheme %q: %w", v.Scheme, ErrUnknownScheme)
	}
	if v.Tolerance < 0 {
		return fmt.Errorf("tolerance %s: %w", v.Tolerance, ErrNegativeTolerance)
	}
	_, err := v.keys()
	return err
}

// Verify checks one delivery, whose headers are h and whose raw body is body, at time now,
// and returns its event id and signed timestamp. See the package documentation for the
// errors.
func (v *Verifier) Verify(h http.Header, body []byte, now time.Time) (Delivery, error) {
	if v.Tolerance < 0 {
		return Delivery{}, fmt.Errorf("verify %s webhook: tolerance %s: %w", v.Scheme, v.Tolerance, ErrNegativeTolerance)
	}
	switch v.Scheme {
	case SchemeStandard:
		return v.verifyStandard(h, body, now)
	case SchemeStripe:
		return v.verifyStripe(h, body, now)
	case SchemeGitHub:
		return v.verifyGitHub(h, body)
	}
	return Delivery{}, fmt.Errorf("verify webhook: scheme %q: %w", v.Scheme, ErrUnknownScheme)
}

// keys turns the configured secrets into HMAC keys. Verify calls it per delivery rather than
// caching, which keeps Verifier a plain value; decoding a short secret costs far less than
// the HMAC over a body.
func (v *Verifier) keys() ([][]byte, error) {
	if len(v.Secrets) == 0 {
		return nil, fmt.Errorf("secrets: %w", ErrNoSecrets)
	}
	keys := make([][]byte, len(v.Secrets))
	for i, s := range v.Secrets {
		var err error
		switch {
		case v.Scheme == SchemeStandard:
			keys[i], err = standardKey(s)
		case s == "":
			err = fmt.Errorf("%w: empty", ErrBadSecret)
		default:
			keys[i] = []byte(s)
		}
		if err != nil {
			// The index, never the secret, goes into the error: errors end up in logs.
			return nil, fmt.Errorf("secrets[%d]: %w", i, err)
		}
	}
	return keys, nil
}

// tolerance returns the configured window, or the default.
func (v *Verifier) tolerance() time.Duration {
	if v.Tolerance == 0 {
		return DefaultTolerance
	}
	return v.Tolerance
}

// matchAny reports whether any of sigs is the MAC under any of keys. Each comparison is
// constant-time (hmac.Equal), so timing tells nothing about how close a forgery came;
// stopping at the first match reveals only that some secret matched, which the answer says
// anyway. The MAC is computed once per key, however many signatures a header lists.
func matchAny(keys, sigs [][]byte, mac func(key []byte) []byte) bool {
	for _, key := range keys {
		want := mac(key)
		for _, sig := range sigs {
			if hmac.Equal(sig, want) {
				return true
			}
		}
	}
	return false
}

// checkWindow refuses a signed timestamp more than tol away from now in either direction:
// too old is a replay, too new is a clock that cannot be trusted. The signed timestamp has
// whole-second resolution, so now is cut to the second too; a delivery exactly tol away is
// still accepted.
func checkWindow(ts, now time.Time, tol time.Duration) error {
	// Sub saturates for timestamps centuries away, so no arithmetic here can overflow.
	d := now.Truncate(time.Second).Sub(ts)
	if d > tol || d < -tol {
		return approval.Errorf(approval.EUNAUTHORIZED, "webhook timestamp is outside the accepted window of %s", tol)
	}
	return nil
}

// header returns the single value of a required header, trimmed. Two values are refused
// rather than one picked: which copy a proxy forwards first is nothing a signature check
// should depend on.
func header(h http.Header, name string) (string, error) {
	vs := h.Values(name)
	if len(vs) > 1 {
		return "", approval.Errorf(approval.EINVALID, "more than one %s header", name)
	}
	if len(vs) == 0 || strings.TrimSpace(vs[0]) == "" {
		return "", approval.Errorf(approval.EINVALID, "missing %s header", name)
	}
	return strings.TrimSpace(vs[0]), nil
}

// MaxEventIDLength bounds an event id, which is stored and indexed.
const MaxEventIDLength = 255

// checkEventID holds provider event ids to the rule of Idempotency-Key: 1 to 255 printable
// ASCII characters. Every provider's ids fit (evt_..., msg_..., UUIDs), and the rule keeps
// control characters out of the store, the operator pages and the logs.
func checkEventID(id, where string) error {
	if problem := eventIDProblem(id); problem != "" {
		return approval.Errorf(approval.EINVALID, "event id in %s %s", where, problem)
	}
	return nil
}

// eventIDProblem says what is wrong with id, or "" when it is a good event id.
func eventIDProblem(id string) string {
	if id == "" {
		return "is missing"
	}
	if len(id) > MaxEventIDLength {
		return fmt.Sprintf("is longer than %d bytes", MaxEventIDLength)
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x20 || id[i] > 0x7e {
			return "is not printable ASCII"
		}
	}
	return ""
}

// parseUnix parses a signed unix time in seconds. Only digits are accepted, no sign: the
// reference libraries sign the number they parsed, so "+17..." would be signed as "17..." and
// the header would not be what was signed.
func parseUnix(s, name string) (time.Time, error) {
	if s == "" {
		return time.Time{}, approval.Errorf(approval.EINVALID, "missing %s", name)
	}
	if strings.TrimLeft(s, "0123456789") != "" {
		return time.Time{}, approval.Errorf(approval.EINVALID, "%s is not a unix time in seconds", name)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil { // only overflow is left
		return time.Time{}, approval.Errorf(approval.EINVALID, "%s is out of range", name)
	}
	return time.Unix(n, 0).UTC(), nil
}
