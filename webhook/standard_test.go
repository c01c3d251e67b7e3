package webhook_test

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/webhook"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	svix "github.com/svix/svix-webhooks/go"
)

// The Standard Webhooks test vector, used by every reference library of the specification
// (github.com/standard-webhooks/standard-webhooks, libraries/go/webhook_test.go TestWebhookSign,
// and the same values in the C#, Java, PHP, Python and Ruby tests).
const (
	vectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTimestamp = 1614265330
	vectorPayload   = `{"test": 2432232314}`
	vectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

// Two more secrets, for rotation and for a sender that signs with the wrong one.
const (
	standardNewSecret   = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
	standardOtherSecret = "whsec_dGhpcyBpcyBub3QgdGhlIHNlY3JldCBhdCBhbGw="
)

var standardBody = []byte(`{"type":"approval.decision","data":{"approval_id":"apr_1","approver":"alice","verdict":"approve"}}`)

// librarySign signs with the specification's reference Go library, not with our code.
func librarySign(tb testing.TB, secret, id string, ts time.Time, body []byte) http.Header {
	tb.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		tb.Fatalf("new webhook: %v", err)
	}
	sig, err := wh.Sign(id, ts, body)
	if err != nil {
		tb.Fatalf("sign: %v", err)
	}
	h := http.Header{}
	h.Set(standardwebhooks.HeaderWebhookID, id)
	h.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(standardwebhooks.HeaderWebhookSignature, sig)
	return h
}

func standardVerifier(secrets ...string) *webhook.Verifier {
	return &webhook.Verifier{Scheme: webhook.SchemeStandard, Secrets: secrets}
}

func TestStandardSpecVector(t *testing.T) {
	t.Parallel()
	ts := time.Unix(vectorTimestamp, 0)
	h := http.Header{}
	h.Set("webhook-id", vectorID)
	h.Set("webhook-timestamp", strconv.Itoa(vectorTimestamp))
	h.Set("webhook-signature", vectorSignature)

	d := mustVerify(t, standardVerifier(vectorSecret), h, []byte(vectorPayload), ts)
	if d.EventID != vectorID {
		t.Errorf("event id: got %q, want %q", d.EventID, vectorID)
	}
	if !d.Timestamp.Equal(ts) || d.Timestamp.Location() != time.UTC {
		t.Errorf("timestamp: got %v, want %v in UTC", d.Timestamp, ts.UTC())
	}

	got, err := webhook.SignStandard(vectorSecret, vectorID, ts, []byte(vectorPayload))
	if err != nil {
		t.Fatalf("sign: %v", err)
	}
	for _, name := range []string{"webhook-id", "webhook-timestamp", "webhook-signature"} {
		if got.Get(name) != h.Get(name) {
			t.Errorf("%s: got %q, want %q", name, got.Get(name), h.Get(name))
		}
	}
}

func TestStandardLibraries(t *testing.T) {
	t.Parallel()
	v := standardVerifier(vectorSecret)

	t.Run("standard-webhooks", func(t *testing.T) {
		t.Parallel()
		h := librarySign(t, vectorSecret, "msg_1", now, standardBody)
		if d := mustVerify(t, v, h, standardBody, now); d.EventID != "msg_1" || !d.Timestamp.Equal(now) {
			t.Fatalf("got %+v, want msg_1 at %v", d, now)
		}
	})
	t.Run("svix", func(t *testing.T) {
		t.Parallel()
		wh, err := svix.NewWebhook(vectorSecret)
		if err != nil {
			t.Fatal(err)
		}
		sig, err := wh.Sign("msg_2", now, standardBody)
		if err != nil {
			t.Fatal(err)
		}
		h := http.Header{}
		h.Set("webhook-id", "msg_2")
		h.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
		h.Set("webhook-signature", sig)
		if d := mustVerify(t, v, h, standardBody, now); d.EventID != "msg_2" {
			t.Fatalf("event id: got %q, want msg_2", d.EventID)
		}
	})
	t.Run("secret without prefix", func(t *testing.T) {
		t.Parallel()
		h := librarySign(t, vectorSecret, "msg_3", now, standardBody)
		mustVerify(t, standardVerifier(strings.TrimPrefix(vectorSecret, "whsec_")), h, standardBody, now)
	})
}

// TestSignStandardInterop checks our outbound signature with both libraries' verifiers.
// They read the wall clock when checking the timestamp, so that check is left to our own
// tests and these verify the signature alone.
func TestSignStandardInterop(t *testing.T) {
	t.Parallel()
	h, err := webhook.SignStandard(standardNewSecret, "exe_01", now, standardBody)
	if err != nil {
		t.Fatal(err)
	}
	sw, err := standardwebhooks.NewWebhook(standardNewSecret)
	if err != nil {
		t.Fatal(err)
	}
	if err := sw.VerifyIgnoringTimestamp(standardBody, h); err != nil {
		t.Errorf("standard-webhooks library: %v", err)
	}
	sx, err := svix.NewWebhook(standardNewSecret)
	if err != nil {
		t.Fatal(err)
	}
	if err := sx.VerifyIgnoringTimestamp(standardBody, h); err != nil {
		t.Errorf("svix library: %v", err)
	}
	if err := sx.VerifyIgnoringTimestamp(flip(standardBody, 3), h); err == nil {
		t.Error("svix library accepted a changed body")
	}
	mustVerify(t, standardVerifier(standardNewSecret), h, standardBody, now)
}

func TestSignStandardRefuses(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, secret, id string
		ts               time.Time
	}{
		{"bad secret", "whsec_!!", "msg_1", now},
		{"empty id", vectorSecret, "", now},
		{"control character in id", vectorSecret, "msg\n1", now},
		{"before 1970", vectorSecret, "msg_1", time.Unix(-1, 0)},
	} {
		if _, err := webhook.SignStandard(tt.secret, tt.id, tt.ts, standardBody); err == nil {
			t.Errorf("%s: got no error, want one", tt.name)
		}
	}
}

func TestStandardRotation(t *testing.T) {
	t.Parallel()
	v := standardVerifier(standardNewSecret, vectorSecret)
	for _, secret := range []string{vectorSecret, standardNewSecret} {
		mustVerify(t, v, librarySign(t, secret, "msg_r", now, standardBody), standardBody, now)
	}
	_, err := v.Verify(librarySign(t, standardOtherSecret, "msg_r", now, standardBody), standardBody, now)
	assertCode(t, err, approval.EUNAUTHORIZED)
}

// TestStandardSignatureList checks the webhook-signature list rules: entries are separated by
// white space, unusable ones are skipped, and any one good v1 entry is enough.
func TestStandardSignatureList(t *testing.T) {
	t.Parallel()
	good := librarySign(t, vectorSecret, "msg_l", now, standardBody).Get("webhook-signature")
	wrong := librarySign(t, standardOtherSecret, "msg_l", now, standardBody).Get("webhook-signature")
	b64 := strings.TrimPrefix(good, "v1,")
	tests := []struct {
		name, sig, code string
	}{
		{"good alone", good, ""},
		{"bad entries before the good one", "v1,!!!notbase64 v1,AAAA v1a,bXlzaWduYXR1cmU= junk , v2," + b64 + " " + wrong + " " + good, ""},
		{"good first", good + " " + wrong, ""},
		{"extra white space", "  " + good + "\t ", ""},
		{"wrong secret only", wrong, approval.EUNAUTHORIZED},
		{"other versions only", "v2," + b64 + " v1a," + b64, approval.EUNAUTHORIZED},
		{"v1 with bad base64 only", "v1,@@@@", approval.EUNAUTHORIZED},
		{"v1 truncated", "v1," + b64[:20], approval.EUNAUTHORIZED},
		{"v1 unpadded", "v1," + strings.TrimRight(b64, "="), approval.EUNAUTHORIZED},
		{"no entry", "garbage", approval.EINVALID},
		{"commas without parts", ", v1, ,sig", approval.EINVALID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := librarySign(t, vectorSecret, "msg_l", now, standardBody)
			h.Set("webhook-signature", tt.sig)
			_, err := standardVerifier(vectorSecret).Verify(h, standardBody, now)
			assertCode(t, err, tt.code)
		})
	}
}

func TestStandardRefusesChangedDelivery(t *testing.T) {
	t.Parallel()
	v := standardVerifier(vectorSecret)
	h := librarySign(t, vectorSecret, "msg_c", now, standardBody)
	for i := range standardBody {
		if _, err := v.Verify(h, flip(standardBody, i), now); approval.ErrorCode(err) != approval.EUNAUTHORIZED {
			t.Fatalf("body byte %d changed: got %v, want %s", i, err, approval.EUNAUTHORIZED)
		}
	}
	_, err := v.Verify(h, append(bytes.Clone(standardBody), ' '), now)
	assertCode(t, err, approval.EUNAUTHORIZED)

	// The id and the timestamp are signed too: a replay under a fresh id or time fails.
	h2 := h.Clone()
	h2.Set("webhook-id", "msg_d")
	_, err = v.Verify(h2, standardBody, now)
	assertCode(t, err, approval.EUNAUTHORIZED)
	h3 := h.Clone()
	h3.Set("webhook-timestamp", strconv.FormatInt(now.Unix()+1, 10))
	_, err = v.Verify(h3, standardBody, now)
	assertCode(t, err, approval.EUNAUTHORIZED)
}

func TestStandardHeaders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit func(h http.Header)
		code string
	}{
		{"missing id", func(h http.Header) { h.Del("webhook-id") }, approval.EINVALID},
		{"blank id", func(h http.Header) { h.Set("webhook-id", "  ") }, approval.EINVALID},
		{"id too long", func(h http.Header) { h.Set("webhook-id", strings.Repeat("a", 256)) }, approval.EINVALID},
		{"id not printable", func(h http.Header) { h.Set("webhook-id", "msg\x00") }, approval.EINVALID},
		{"two ids", func(h http.Header) { h.Add("webhook-id", "msg_2") }, approval.EINVALID},
		{"missing timestamp", func(h http.Header) { h.Del("webhook-timestamp") }, approval.EINVALID},
		{"timestamp hello", func(h http.Header) { h.Set("webhook-timestamp", "hello") }, approval.EINVALID},
		{"timestamp with sign", func(h http.Header) { h.Set("webhook-timestamp", "+"+strconv.FormatInt(now.Unix(), 10)) }, approval.EINVALID},
		{"timestamp negative", func(h http.Header) { h.Set("webhook-timestamp", "-1") }, approval.EINVALID},
		{"timestamp in milliseconds overflowing", func(h http.Header) { h.Set("webhook-timestamp", "99999999999999999999") }, approval.EINVALID},
		{"timestamp fractional", func(h http.Header) { h.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10)+".5") }, approval.EINVALID},
		{"two timestamps", func(h http.Header) { h.Add("webhook-timestamp", "1") }, approval.EINVALID},
		{"missing signature", func(h http.Header) { h.Del("webhook-signature") }, approval.EINVALID},
		{"two signatures", func(h http.Header) { h.Add("webhook-signature", h.Get("webhook-signature")) }, approval.EINVALID},
		// Malformed beats stale: the headers are read before the window is checked.
		{"stale and malformed", func(h http.Header) {
			h.Set("webhook-timestamp", "1")
			h.Set("webhook-signature", "x")
		}, approval.EINVALID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := librarySign(t, vectorSecret, "msg_h", now, standardBody)
			tt.edit(h)
			_, err := standardVerifier(vectorSecret).Verify(h, standardBody, now)
			assertCode(t, err, tt.code)
		})
	}
}

func TestStandardWindow(t *testing.T) {
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
		{"30s, exactly 30s old", 30 * time.Second, now.Add(-30 * time.Second), ""},
		{"30s, 31s old", 30 * time.Second, now.Add(-31 * time.Second), approval.EUNAUTHORIZED},
		{"30s, 31s ahead", 30 * time.Second, now.Add(31 * time.Second), approval.EUNAUTHORIZED},
		{"1970", 0, time.Unix(0, 0), approval.EUNAUTHORIZED},
		{"far future", 0, time.Unix(1<<40, 0), approval.EUNAUTHORIZED},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := &webhook.Verifier{Scheme: webhook.SchemeStandard, Secrets: []string{vectorSecret}, Tolerance: tt.tolerance}
			h := librarySign(t, vectorSecret, "msg_w", tt.sent, standardBody)
			_, err := v.Verify(h, standardBody, now)
			assertCode(t, err, tt.code)
		})
	}

	// Sub-second parts of now do not move the boundary: the signed time has whole seconds.
	h := librarySign(t, vectorSecret, "msg_w", now.Add(-5*time.Minute), standardBody)
	mustVerify(t, standardVerifier(vectorSecret), h, standardBody, now.Add(999*time.Millisecond))
}
