package webhook_test

import (
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/webhook"
	stripewebhook "github.com/stripe/stripe-go/v82/webhook"
)

const (
	stripeSecret      = "whsec_test_9f8e7d6c5b4a"
	stripeNewSecret   = "whsec_test_rotated_0123"
	stripeOtherSecret = "whsec_test_someone_else"
)

var stripeBody = []byte(`{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","object":"event","api_version":"2025-07-30.basil","type":"charge.refunded","data":{"object":{"id":"ch_1"}}}`)

// stripeSign signs with stripe-go's own test helper, not with our code.
func stripeSign(secret string, ts time.Time, body []byte, scheme string) string {
	return stripewebhook.GenerateTestSignedPayload(&stripewebhook.UnsignedPayload{
		Payload: body, Secret: secret, Timestamp: ts, Scheme: scheme,
	}).Header
}

func stripeHeader(sig string) http.Header {
	h := http.Header{}
	h.Set("Stripe-Signature", sig)
	return h
}

func stripeVerifier(secrets ...string) *webhook.Verifier {
	return &webhook.Verifier{Scheme: webhook.SchemeStripe, Secrets: secrets}
}

func TestStripeLibrary(t *testing.T) {
	t.Parallel()
	h := stripeHeader(stripeSign(stripeSecret, now, stripeBody, ""))
	d := mustVerify(t, stripeVerifier(stripeSecret), h, stripeBody, now)
	if want := "evt_1NG8Du2eZvKYlo2CUI79vXWy"; d.EventID != want {
		t.Errorf("event id: got %q, want %q", d.EventID, want)
	}
	if !d.Timestamp.Equal(now) {
		t.Errorf("timestamp: got %v, want %v", d.Timestamp, now)
	}
	// stripe-go agrees that what we accepted is signed.
	if err := stripewebhook.ValidatePayloadIgnoringTolerance(stripeBody, h.Get("Stripe-Signature"), stripeSecret); err != nil {
		t.Errorf("stripe-go: %v", err)
	}
}

func TestStripeRotation(t *testing.T) {
	t.Parallel()
	v := stripeVerifier(stripeNewSecret, stripeSecret)
	for _, secret := range []string{stripeSecret, stripeNewSecret} {
		mustVerify(t, v, stripeHeader(stripeSign(secret, now, stripeBody, "")), stripeBody, now)
	}
	_, err := v.Verify(stripeHeader(stripeSign(stripeOtherSecret, now, stripeBody, "")), stripeBody, now)
	assertCode(t, err, approval.EUNAUTHORIZED)
}

// TestStripeSignatureHeader covers the Stripe-Signature forms: during a secret roll Stripe
// sends one v1 per secret, test mode adds a v0, and anything but v1 is ignored.
func TestStripeSignatureHeader(t *testing.T) {
	t.Parallel()
	ts := strconv.FormatInt(now.Unix(), 10)
	v1 := func(secret string) string {
		_, sig, _ := strings.Cut(stripeSign(secret, now, stripeBody, ""), ",")
		return sig
	}
	good, wrong := v1(stripeSecret), v1(stripeOtherSecret)
	goodHex := strings.TrimPrefix(good, "v1=")
	v0 := "v0=" + goodHex // a v0 entry that would match if v0 counted
	tests := []struct {
		name, header, code string
	}{
		{"library form", "t=" + ts + "," + good, ""},
		{"several v1, good last", "t=" + ts + "," + wrong + "," + good + "," + v0, ""},
		{"signatures before t", good + ",t=" + ts, ""},
		{"bad hex skipped", "t=" + ts + ",v1=zz," + good, ""},
		{"unknown scheme skipped", "t=" + ts + ",v9=abc," + good, ""},
		{"spaces after commas", "t=" + ts + ", " + good, ""},
		{"upper-case hex", "t=" + ts + ",v1=" + strings.ToUpper(goodHex), ""},
		{"wrong secret only", "t=" + ts + "," + wrong, approval.EUNAUTHORIZED},
		{"v0 only", stripeSign(stripeSecret, now, stripeBody, "v0"), approval.EUNAUTHORIZED},
		{"v1 bad hex only", "t=" + ts + ",v1=nothex", approval.EUNAUTHORIZED},
		{"v1 truncated", "t=" + ts + ",v1=" + goodHex[:32], approval.EUNAUTHORIZED},
		{"t only", "t=" + ts, approval.EINVALID},
		{"no t", good, approval.EINVALID},
		{"t hello", "t=hello," + good, approval.EINVALID},
		{"t negative", "t=-" + ts + "," + good, approval.EINVALID},
		{"two t", "t=" + ts + ",t=" + ts + "," + good, approval.EINVALID},
		{"not key=value", "t=" + ts + ",v1," + good, approval.EINVALID},
		{"empty key", "t=" + ts + ",=abc," + good, approval.EINVALID},
		{"garbage", "hello", approval.EINVALID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := stripeVerifier(stripeSecret).Verify(stripeHeader(tt.header), stripeBody, now)
			assertCode(t, err, tt.code)
		})
	}
}

func TestStripeHeaders(t *testing.T) {
	t.Parallel()
	v := stripeVerifier(stripeSecret)
	_, err := v.Verify(http.Header{}, stripeBody, now)
	assertCode(t, err, approval.EINVALID)
	_, err = v.Verify(stripeHeader(" "), stripeBody, now)
	assertCode(t, err, approval.EINVALID)
	h := stripeHeader(stripeSign(stripeSecret, now, stripeBody, ""))
	h.Add("Stripe-Signature", h.Get("Stripe-Signature"))
	_, err = v.Verify(h, stripeBody, now)
	assertCode(t, err, approval.EINVALID)
}

func TestStripeRefusesChangedBody(t *testing.T) {
	t.Parallel()
	v := stripeVerifier(stripeSecret)
	h := stripeHeader(stripeSign(stripeSecret, now, stripeBody, ""))
	// Every change reads 401, also those that break the JSON: the body is parsed only once
	// it is known to be signed.
	for i := range stripeBody {
		if _, err := v.Verify(h, flip(stripeBody, i), now); approval.ErrorCode(err) != approval.EUNAUTHORIZED {
			t.Fatalf("body byte %d changed: got %v, want %s", i, err, approval.EUNAUTHORIZED)
		}
	}
	// The timestamp is signed: moving it to look fresh breaks the signature.
	ts := strconv.FormatInt(now.Unix()+60, 10)
	sig := strings.Replace(h.Get("Stripe-Signature"), strconv.FormatInt(now.Unix(), 10), ts, 1)
	_, err := v.Verify(stripeHeader(sig), stripeBody, now)
	assertCode(t, err, approval.EUNAUTHORIZED)
}

// TestStripeEventID covers the body's id: signed bodies that are not an event with a string
// id are malformed, whatever their signature.
func TestStripeEventID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, body, id, code string
	}{
		{"top-level id", `{"object":"event","data":{"object":{"id":"ch_1"}},"id":"evt_2"}`, "evt_2", ""},
		{"white space", " \n{ \"id\" : \"evt_3\" }\n", "evt_3", ""},
		{"nested id only", `{"data":{"id":"evt_4"}}`, "", approval.EINVALID},
		{"ID in capitals", `{"ID":"evt_5"}`, "", approval.EINVALID},
		{"id a number", `{"id":5}`, "", approval.EINVALID},
		{"id null", `{"id":null}`, "", approval.EINVALID},
		{"id empty", `{"id":""}`, "", approval.EINVALID},
		{"id with newline", `{"id":"evt\n6"}`, "", approval.EINVALID},
		{"array", `[{"id":"evt_7"}]`, "", approval.EINVALID},
		{"null", `null`, "", approval.EINVALID},
		{"empty", ``, "", approval.EINVALID},
		{"truncated", `{"id":"evt_8"`, "", approval.EINVALID},
		{"trailing data", `{"id":"evt_9"} {}`, "", approval.EINVALID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			body := []byte(tt.body)
			d, err := stripeVerifier(stripeSecret).Verify(stripeHeader(stripeSign(stripeSecret, now, body, "")), body, now)
			assertCode(t, err, tt.code)
			if d.EventID != tt.id {
				t.Fatalf("event id: got %q, want %q", d.EventID, tt.id)
			}
		})
	}
}

func TestStripeWindow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		tolerance time.Duration
		sent      time.Time
		code      string
	}{
		{"default, exactly 5m old", 0, now.Add(-5 * time.Minute), ""},
		{"default, 5m1s old", 0, now.Add(-5*time.Minute - time.Second), approval.EUNAUTHORIZED},
		{"default, exactly 5m ahead", 0, now.Add(5 * time.Minute), ""},
		{"default, 5m1s ahead", 0, now.Add(5*time.Minute + time.Second), approval.EUNAUTHORIZED},
		{"10m, 9m59s old", 10 * time.Minute, now.Add(-10*time.Minute + time.Second), ""},
		{"10m, 10m1s ahead", 10 * time.Minute, now.Add(10*time.Minute + time.Second), approval.EUNAUTHORIZED},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := &webhook.Verifier{Scheme: webhook.SchemeStripe, Secrets: []string{stripeSecret}, Tolerance: tt.tolerance}
			_, err := v.Verify(stripeHeader(stripeSign(stripeSecret, tt.sent, stripeBody, "")), stripeBody, now)
			assertCode(t, err, tt.code)
		})
	}
}

// stripeHex is the hex v1 signature stripe-go computes, for the fuzz seeds.
func stripeHex(secret string, ts time.Time, body []byte) string {
	return hex.EncodeToString(stripewebhook.ComputeSignature(ts, body, secret))
}
