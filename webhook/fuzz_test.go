package webhook_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/webhook"
)

// The fuzz targets hold Verify to its contract on any input: it never panics, and it either
// accepts or fails with EINVALID or EUNAUTHORIZED, never with an internal error. Their seeds
// run with every go test; `go test -fuzz FuzzXxx ./webhook` explores further.

// checkOutcome fails unless err is nil, EINVALID or EUNAUTHORIZED.
func checkOutcome(t *testing.T, err error) {
	t.Helper()
	switch code := approval.ErrorCode(err); code {
	case "", approval.EINVALID, approval.EUNAUTHORIZED:
	default:
		t.Fatalf("error code: got %q (%v), want %q or %q", code, err, approval.EINVALID, approval.EUNAUTHORIZED)
	}
}

func FuzzStandardHeaders(f *testing.F) {
	body := []byte(vectorPayload)
	ts := strconv.Itoa(vectorTimestamp)
	f.Add(vectorID, ts, vectorSignature, body)
	f.Add(vectorID, ts, "v1,!!! v2,abc "+vectorSignature, body)
	f.Add(vectorID, ts, vectorSignature, []byte(`{"test": 2432232315}`))
	f.Add(vectorID, "hello", vectorSignature, body)
	f.Add(vectorID, "+1614265330", vectorSignature, body)
	f.Add(vectorID, "99999999999999999999999", vectorSignature, body)
	f.Add(vectorID, "0", vectorSignature, body)
	f.Add("", ts, vectorSignature, body)
	f.Add("msg\x00", ts, vectorSignature, body)
	f.Add(vectorID, ts, "", body)
	f.Add(vectorID, ts, ",,, v1, ,x v1,====", body)
	f.Add(vectorID, ts, "v1a,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", body)

	v := &webhook.Verifier{Scheme: webhook.SchemeStandard, Secrets: []string{standardNewSecret, vectorSecret}}
	at := time.Unix(vectorTimestamp, 0)
	f.Fuzz(func(t *testing.T, id, ts, sig string, body []byte) {
		h := http.Header{}
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", ts)
		h.Set("webhook-signature", sig)
		d, err := v.Verify(h, body, at)
		checkOutcome(t, err)
		if err == nil && (d.EventID == "" || d.Timestamp.Sub(at).Abs() > webhook.DefaultTolerance) {
			t.Fatalf("accepted %+v: want an event id and a timestamp inside the window", d)
		}
	})
}

func FuzzStripeHeader(f *testing.F) {
	ts := strconv.FormatInt(now.Unix(), 10)
	good := "v1=" + stripeHex(stripeSecret, now, stripeBody)
	f.Add("t="+ts+","+good, stripeBody)
	f.Add("t="+ts+",v1=zz,v0=abcd,"+good, stripeBody)
	f.Add("t="+ts+","+good, []byte(`{"id":"evt_changed"}`))
	f.Add("t="+ts+",v0="+stripeHex(stripeSecret, now, stripeBody), stripeBody)
	f.Add("t="+ts, stripeBody)
	f.Add("t=hello,"+good, stripeBody)
	f.Add("t=,v1=", stripeBody)
	f.Add("t="+ts+",t="+ts+","+good, stripeBody)
	f.Add(",,,==,=", stripeBody)
	f.Add("", stripeBody)

	v := &webhook.Verifier{Scheme: webhook.SchemeStripe, Secrets: []string{stripeNewSecret, stripeSecret}}
	f.Fuzz(func(t *testing.T, sig string, body []byte) {
		d, err := v.Verify(stripeHeader(sig), body, now)
		checkOutcome(t, err)
		if err == nil && d.EventID == "" {
			t.Fatalf("accepted %+v without an event id", d)
		}
	})
}

// FuzzStripeBody signs every input properly, so that the fuzzer reaches the body parsing
// behind the signature check: a signed body is accepted with its top-level "id", or refused
// as malformed.
func FuzzStripeBody(f *testing.F) {
	f.Add(stripeBody)
	for _, s := range []string{``, `null`, `[]`, `{}`, `{"id":1}`, `{"id":""}`, `{"ID":"evt"}`,
		`{"id":"evt_1","id":"evt_2"}`, `{"id":"evt_\u00e9"}`, `{"id":"evt"`, `{"data":{"id":"x"}}`} {
		f.Add([]byte(s))
	}

	v := &webhook.Verifier{Scheme: webhook.SchemeStripe, Secrets: []string{stripeSecret}}
	f.Fuzz(func(t *testing.T, body []byte) {
		sig := "t=" + strconv.FormatInt(now.Unix(), 10) + ",v1=" + stripeHex(stripeSecret, now, body)
		d, err := v.Verify(stripeHeader(sig), body, now)
		if err != nil {
			assertCode(t, err, approval.EINVALID)
			return
		}
		var top map[string]json.RawMessage
		if json.Unmarshal(body, &top) != nil {
			t.Fatalf("accepted %q, which is not a JSON object", body)
		}
		var id string
		if json.Unmarshal(top["id"], &id) != nil || id != d.EventID {
			t.Fatalf("event id: got %q, want the top-level id of %q", d.EventID, body)
		}
	})
}

func FuzzGitHubHeader(f *testing.F) {
	body := []byte(githubDocsPayload)
	f.Add(githubDelivery, githubDocsSignature, "", body)
	f.Add(githubDelivery, githubDocsSignature, "sha1=0000", body)
	f.Add(githubDelivery, "", "sha1=0000", body)
	f.Add(githubDelivery, githubDocsSignature, "", []byte("Hello, World?"))
	f.Add(githubDelivery, "sha256=zz", "", body)
	f.Add(githubDelivery, "sha256=", "", body)
	f.Add(githubDelivery, "sha1=757107ea", "", body)
	f.Add("", githubDocsSignature, "", body)
	f.Add("d\r\n", githubDocsSignature, "", body)

	v := &webhook.Verifier{Scheme: webhook.SchemeGitHub, Secrets: []string{githubNewSecret, githubDocsSecret}}
	f.Fuzz(func(t *testing.T, delivery, sig256, sig1 string, body []byte) {
		h := http.Header{}
		h.Set("X-GitHub-Delivery", delivery)
		if sig256 != "" {
			h.Set("X-Hub-Signature-256", sig256)
		}
		if sig1 != "" {
			h.Set("X-Hub-Signature", sig1)
		}
		d, err := v.Verify(h, body, now)
		checkOutcome(t, err)
		if err != nil {
			return
		}
		if d.EventID == "" {
			t.Fatalf("accepted %+v without an event id", d)
		}
		if sig256 == githubDocsSignature && string(body) != githubDocsPayload {
			t.Fatalf("accepted the signature of %q for body %q", githubDocsPayload, body)
		}
	})
}
