package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/approvald/approval"
)

// The Standard Webhooks headers (https://www.standardwebhooks.com, "Signature scheme").
const (
	standardID        = "webhook-id"
	standardTimestamp = "webhook-timestamp"
	standardSignature = "webhook-signature"
)

// standardSecretPrefix starts a Standard Webhooks secret; the rest is base64.
const standardSecretPrefix = "whsec_"

// SignStandard signs an outbound call the Standard Webhooks way, with a "whsec_" secret, and
// returns the webhook-id, webhook-timestamp and webhook-signature headers to send with body.
// id should stay the same on every retry of one message, so the receiver can deduplicate.
func SignStandard(secret, id string, ts time.Time, body []byte) (http.Header, error) {
	key, err := standardKey(secret)
	if err != nil {
		return nil, fmt.Errorf("sign webhook: %w", err)
	}
	// A plain error, not an EINVALID: a bad id here is the caller's bug, not a bad request.
	if problem := eventIDProblem(id); problem != "" {
		return nil, fmt.Errorf("sign webhook: message id %s", problem)
	}
	if ts.Unix() < 0 {
		return nil, fmt.Errorf("sign webhook: timestamp %s is before 1970", ts)
	}
	mac := standardMAC(key, id, ts.Unix(), body)
	h := make(http.Header, 3)
	h.Set(standardID, id)
	h.Set(standardTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(standardSignature, "v1,"+base64.StdEncoding.EncodeToString(mac))
	return h, nil
}

// verifyStandard checks a Standard Webhooks delivery: HMAC-SHA256 of "id.timestamp.body"
// under any secret, matching any v1 entry of the signature list.
func (v *Verifier) verifyStandard(h http.Header, body []byte, now time.Time) (Delivery, error) {
	id, err := header(h, standardID)
	if err != nil {
		return Delivery{}, err
	}
	if err := checkEventID(id, standardID); err != nil {
		return Delivery{}, err
	}
	text, err := header(h, standardTimestamp)
	if err != nil {
		return Delivery{}, err
	}
	ts, err := parseUnix(text, standardTimestamp)
	if err != nil {
		return Delivery{}, err
	}
	text, err = header(h, standardSignature)
	if err != nil {
		return Delivery{}, err
	}
	sigs, err := parseStandardSignatures(text)
	if err != nil {
		return Delivery{}, err
	}
	if err := checkWindow(ts, now, v.tolerance()); err != nil {
		return Delivery{}, err
	}

	keys, err := v.keys()
	if err != nil {
		return Delivery{}, fmt.Errorf("verify standard webhook: %w", err)
	}
	if !matchAny(keys, sigs, func(key []byte) []byte { return standardMAC(key, id, ts.Unix(), body) }) {
		return Delivery{}, approval.Errorf(approval.EUNAUTHORIZED, "no webhook signature matches")
	}
	return Delivery{EventID: id, Timestamp: ts}, nil
}

// parseStandardSignatures returns the decoded v1 signatures of a webhook-signature header,
// a space-separated list of "version,base64" entries. Like the reference libraries it skips
// entries it cannot use (another version such as the asymmetric v1a, bad base64, a wrong
// length) so that a sender may list new kinds next to v1. A header with no
// "version,signature" entry at all is malformed; one with only unusable entries is signed
// in a way we do not accept.
func parseStandardSignatures(header string) ([][]byte, error) {
	var sigs [][]byte
	entries := 0
	for _, entry := range strings.Fields(header) {
		version, value, ok := strings.Cut(entry, ",")
		if !ok || version == "" || value == "" {
			continue
		}
		entries++
		if version != "v1" {
			continue
		}
		// Strict: one signature has one encoding, so no other string passes for it.
		sig, err := base64.StdEncoding.Strict().DecodeString(value)
		if err != nil || len(sig) != sha256.Size {
			continue
		}
		sigs = append(sigs, sig)
	}
	if entries == 0 {
		return nil, approval.Errorf(approval.EINVALID, "%s header has no version,signature entry", standardSignature)
	}
	if len(sigs) == 0 {
		return nil, approval.Errorf(approval.EUNAUTHORIZED, "%s header has no usable v1 signature", standardSignature)
	}
	return sigs, nil
}

// standardMAC is the HMAC-SHA256 of "id.timestamp.body", written piece by piece so that a
// large body is not copied.
func standardMAC(key []byte, id string, ts int64, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	var buf [20]byte
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write(strconv.AppendInt(buf[:0], ts, 10))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// standardKey decodes a Standard Webhooks secret: "whsec_" then standard base64 of the key.
// The prefix is optional, as in the reference libraries, which strip it if present.
func standardKey(secret string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, standardSecretPrefix))
	if err != nil {
		return nil, fmt.Errorf("%w: not whsec_ followed by base64", ErrBadSecret)
	}
	if len(key) == 0 {
		return nil, fmt.Errorf("%w: empty key", ErrBadSecret)
	}
	return key, nil
}
