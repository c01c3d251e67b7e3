package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"

	"github.com/approvald/approval"
)

// The GitHub headers ("Validating webhook deliveries" in GitHub's documentation).
const (
	githubDelivery    = "X-GitHub-Delivery"
	githubSignature   = "X-Hub-Signature-256" // "sha256=<hex>"
	githubSignatureV1 = "X-Hub-Signature"     // "sha1=<hex>", legacy, never accepted
)

// verifyGitHub checks a GitHub delivery: HMAC-SHA256 of the body under any secret. GitHub
// signs no timestamp and not the delivery id, so the delivery carries the SHA-256 of the body
// too: the intake refuses a second event with the same body from the source within its
// retention, whatever its delivery id (docs/http-api.md, "Replays under the github scheme").
func (v *Verifier) verifyGitHub(h http.Header, body []byte) (Delivery, error) {
	id, err := header(h, githubDelivery)
	if err != nil {
		return Delivery{}, err
	}
	if err := checkEventID(id, githubDelivery); err != nil {
		return Delivery{}, err
	}
	if len(h.Values(githubSignature)) == 0 && len(h.Values(githubSignatureV1)) > 0 {
		// Present but SHA-1 only: signed, just not in a way we trust, hence 401 not 400.
		return Delivery{}, approval.Errorf(approval.EUNAUTHORIZED, "only an SHA-1 signature; %s is required", githubSignature)
	}
	text, err := header(h, githubSignature)
	if err != nil {
		return Delivery{}, err
	}
	hexSig, ok := strings.CutPrefix(text, "sha256=")
	if !ok {
		return Delivery{}, approval.Errorf(approval.EINVALID, "%s header is not sha256=<hex>", githubSignature)
	}
	sig, err := hex.DecodeString(hexSig)
	if err != nil {
		return Delivery{}, approval.Errorf(approval.EINVALID, "%s header is not sha256=<hex>", githubSignature)
	}

	keys, err := v.keys()
	if err != nil {
		return Delivery{}, fmt.Errorf("verify github webhook: %w", err)
	}
	if !matchAny(keys, [][]byte{sig}, func(key []byte) []byte { return githubMAC(key, body) }) {
		return Delivery{}, approval.Errorf(approval.EUNAUTHORIZED, "no webhook signature matches")
	}
	sum := sha256.Sum256(body)
	return Delivery{EventID: id, BodyHash: sum[:]}, nil
}

// githubMAC is the HMAC-SHA256 of the body.
func githubMAC(key, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(body)
	return m.Sum(nil)
}
