package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/approvald/approval"
)

// stripeSignature is Stripe's header: "t=<unix>,v1=<hex>[,v1=<hex>...][,v0=<hex>]".
const stripeSignature = "Stripe-Signature"

// verifyStripe checks a Stripe delivery: HMAC-SHA256 of "t.body" under any secret, matching
// any v1 entry. The event id is the body's "id", read only once the body is authenticated:
// nothing an unsigned sender writes is parsed beyond the headers, and a body altered in
// transit reads as a bad signature (401) however it was altered.
func (v *Verifier) verifyStripe(h http.Header, body []byte, now time.Time) (Delivery, error) {
	text, err := header(h, stripeSignature)
	if err != nil {
		return Delivery{}, err
	}
	ts, sigs, err := parseStripeHeader(text)
	if err != nil {
		return Delivery{}, err
	}
	if err := checkWindow(ts, now, v.tolerance()); err != nil {
		return Delivery{}, err
	}

	keys, err := v.keys()
	if err != nil {
		return Delivery{}, fmt.Errorf("verify stripe webhook: %w", err)
	}
	if !matchAny(keys, sigs, func(key []byte) []byte { return stripeMAC(key, ts.Unix(), body) }) {
		return Delivery{}, approval.Errorf(approval.EUNAUTHORIZED, "no webhook signature matches")
	}
	id, err := stripeEventID(body)
	if err != nil {
		return Delivery{}, err
	}
	return Delivery{EventID: id, Timestamp: ts}, nil
}

// parseStripeHeader reads the timestamp and the decoded v1 signatures of a Stripe-Signature
// header. As in stripe-go, v1 entries that are not hex are skipped and other schemes (v0, a
// test-mode leftover that Stripe no longer verifies, or ones not yet invented) are ignored,
// so a header with only those is refused as unsigned (401). A header that is not a list of
// key=value pairs, lacks t or has two, or carries no signature entry at all is malformed.
func parseStripeHeader(header string) (time.Time, [][]byte, error) {
	var (
		ts      time.Time
		haveT   bool
		sigs    [][]byte
		entries int
	)
	for _, item := range strings.Split(header, ",") {
		key, value, ok := strings.Cut(item, "=")
		key = strings.TrimSpace(key)
		if !ok || key == "" {
			return time.Time{}, nil, approval.Errorf(approval.EINVALID, "%s header is not a list of key=value pairs", stripeSignature)
		}
		value = strings.TrimSpace(value)
		switch key {
		case "t":
			if haveT {
				return time.Time{}, nil, approval.Errorf(approval.EINVALID, "%s header has more than one t", stripeSignature)
			}
			var err error
			if ts, err = parseUnix(value, stripeSignature+" t"); err != nil {
				return time.Time{}, nil, err
			}
			haveT = true
		case "v1":
			entries++
			if sig, err := hex.DecodeString(value); err == nil && len(sig) == sha256.Size {
				sigs = append(sigs, sig)
			}
		default:
			entries++
		}
	}
	switch {
	case !haveT:
		return time.Time{}, nil, approval.Errorf(approval.EINVALID, "%s header has no t", stripeSignature)
	case entries == 0:
		return time.Time{}, nil, approval.Errorf(approval.EINVALID, "%s header has no signature", stripeSignature)
	case len(sigs) == 0:
		return time.Time{}, nil, approval.Errorf(approval.EUNAUTHORIZED, "%s header has no usable v1 signature", stripeSignature)
	}
	return ts, sigs, nil
}

// stripeMAC is the HMAC-SHA256 of "t.body", written piece by piece so that a large body is
// not copied.
func stripeMAC(key []byte, ts int64, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	var buf [20]byte
	m.Write(strconv.AppendInt(buf[:0], ts, 10))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// stripeEventID returns the top-level "id" of a Stripe event body. Only the top level is
// decoded, into raw values, and the key is matched exactly; a struct field would also take
// "ID" or "Id", which Stripe never sends and which must not stand in for the real id.
func stripeEventID(body []byte) (string, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil || top == nil {
		return "", approval.Errorf(approval.EINVALID, "stripe webhook body is not a JSON object")
	}
	var id string
	raw, ok := top["id"]
	if !ok || json.Unmarshal(raw, &id) != nil {
		return "", approval.Errorf(approval.EINVALID, "stripe webhook body has no string id")
	}
	if err := checkEventID(id, "stripe webhook body"); err != nil {
		return "", err
	}
	return id, nil
}
