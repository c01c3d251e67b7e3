package webhook_test

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"net/http"
	"testing"

	"github.com/approvald/approval"
	"github.com/approvald/approval/webhook"
)

// The example of GitHub's documentation, "Validating webhook deliveries", section "Testing
// the webhook payload validation".
const (
	githubDocsSecret    = "It's a Secret to Everybody"
	githubDocsPayload   = "Hello, World!"
	githubDocsSignature = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
)

const (
	githubDelivery    = "72d3162e-cc78-11e3-81ab-4c9367dc0958"
	githubNewSecret   = "rotated secret"
	githubOtherSecret = "not the secret"
)

// githubSign signs a body the way GitHub documents, independently of our code.
func githubSign(secret string, body []byte, newHash func() hash.Hash, prefix string) string {
	m := hmac.New(newHash, []byte(secret))
	m.Write(body)
	return prefix + hex.EncodeToString(m.Sum(nil))
}

func githubHeader(sig256 string) http.Header {
	h := http.Header{}
	h.Set("X-GitHub-Delivery", githubDelivery)
	if sig256 != "" {
		h.Set("X-Hub-Signature-256", sig256)
	}
	return h
}

func githubVerifier(secrets ...string) *webhook.Verifier {
	return &webhook.Verifier{Scheme: webhook.SchemeGitHub, Secrets: secrets}
}

func TestGitHubDocsExample(t *testing.T) {
	t.Parallel()
	d := mustVerify(t, githubVerifier(githubDocsSecret), githubHeader(githubDocsSignature), []byte(githubDocsPayload), now)
	if d.EventID != githubDelivery {
		t.Errorf("event id: got %q, want %q", d.EventID, githubDelivery)
	}
	if !d.Timestamp.IsZero() {
		t.Errorf("timestamp: got %v, want zero", d.Timestamp)
	}
	// GitHub signs no timestamp: a delivery verifies the same years later.
	mustVerify(t, githubVerifier(githubDocsSecret), githubHeader(githubDocsSignature), []byte(githubDocsPayload), now.AddDate(5, 0, 0))
}

func TestGitHubRotation(t *testing.T) {
	t.Parallel()
	body := []byte(`{"action":"opened"}`)
	v := githubVerifier(githubNewSecret, githubDocsSecret)
	for _, secret := range []string{githubDocsSecret, githubNewSecret} {
		mustVerify(t, v, githubHeader(githubSign(secret, body, sha256.New, "sha256=")), body, now)
	}
	_, err := v.Verify(githubHeader(githubSign(githubOtherSecret, body, sha256.New, "sha256=")), body, now)
	assertCode(t, err, approval.EUNAUTHORIZED)
}

func TestGitHubRefusesChangedBody(t *testing.T) {
	t.Parallel()
	body := []byte(githubDocsPayload)
	v := githubVerifier(githubDocsSecret)
	for i := range body {
		if _, err := v.Verify(githubHeader(githubDocsSignature), flip(body, i), now); approval.ErrorCode(err) != approval.EUNAUTHORIZED {
			t.Fatalf("body byte %d changed: got %v, want %s", i, err, approval.EUNAUTHORIZED)
		}
	}
}

func TestGitHubHeaders(t *testing.T) {
	t.Parallel()
	body := []byte(githubDocsPayload)
	sha1Sig := githubSign(githubDocsSecret, body, sha1.New, "sha1=")
	tests := []struct {
		name string
		edit func(h http.Header)
		code string
	}{
		{"both signatures", func(h http.Header) { h.Set("X-Hub-Signature", sha1Sig) }, ""},
		{"upper-case hex", func(h http.Header) {
			h.Set("X-Hub-Signature-256", "sha256=757107EA0EB2509FC211221CCE984B8A37570B6D7586C22C46F4379C8B043E17")
		}, ""},
		{"sha1 only", func(h http.Header) {
			h.Del("X-Hub-Signature-256")
			h.Set("X-Hub-Signature", sha1Sig)
		}, approval.EUNAUTHORIZED},
		{"sha1 in the sha256 header", func(h http.Header) { h.Set("X-Hub-Signature-256", sha1Sig) }, approval.EINVALID},
		{"hex of the wrong length", func(h http.Header) { h.Set("X-Hub-Signature-256", "sha256=757107ea") }, approval.EUNAUTHORIZED},
		{"no signature", func(h http.Header) { h.Del("X-Hub-Signature-256") }, approval.EINVALID},
		{"empty signature", func(h http.Header) { h.Set("X-Hub-Signature-256", "") }, approval.EINVALID},
		{"not hex", func(h http.Header) { h.Set("X-Hub-Signature-256", "sha256=xyz") }, approval.EINVALID},
		{"bare hex", func(h http.Header) { h.Set("X-Hub-Signature-256", githubDocsSignature[len("sha256="):]) }, approval.EINVALID},
		{"two signatures", func(h http.Header) { h.Add("X-Hub-Signature-256", githubDocsSignature) }, approval.EINVALID},
		{"no delivery", func(h http.Header) { h.Del("X-GitHub-Delivery") }, approval.EINVALID},
		{"no delivery, sha1 only", func(h http.Header) {
			h.Del("X-GitHub-Delivery")
			h.Del("X-Hub-Signature-256")
			h.Set("X-Hub-Signature", sha1Sig)
		}, approval.EINVALID},
		{"two deliveries", func(h http.Header) { h.Add("X-GitHub-Delivery", "other") }, approval.EINVALID},
		{"delivery not printable", func(h http.Header) { h.Set("X-GitHub-Delivery", "d\x7f") }, approval.EINVALID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := githubHeader(githubDocsSignature)
			tt.edit(h)
			_, err := githubVerifier(githubDocsSecret).Verify(h, body, now)
			assertCode(t, err, tt.code)
		})
	}
}
