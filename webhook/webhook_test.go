package webhook_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/approvald/approval"
	"github.com/approvald/approval/webhook"
)

// now is the clock of every test: verification takes the time as an argument, so no test
// reads the wall clock.
var now = time.Unix(1_700_000_000, 0).UTC()

// assertCode fails the test unless err carries the application error code want.
func assertCode(tb testing.TB, err error, want string) {
	tb.Helper()
	if got := approval.ErrorCode(err); got != want {
		tb.Fatalf("error code: got %q (%v), want %q", got, err, want)
	}
}

// mustVerify verifies and fails the test on any error.
func mustVerify(tb testing.TB, v *webhook.Verifier, h http.Header, body []byte, at time.Time) webhook.Delivery {
	tb.Helper()
	d, err := v.Verify(h, body, at)
	if err != nil {
		tb.Fatalf("verify: got error %v, want none", err)
	}
	return d
}

// flip returns a copy of b with one bit changed.
func flip(b []byte, i int) []byte {
	c := append([]byte(nil), b...)
	c[i] ^= 0x01
	return c
}

func TestSchemeValid(t *testing.T) {
	t.Parallel()
	for _, s := range []webhook.Scheme{webhook.SchemeStandard, webhook.SchemeStripe, webhook.SchemeGitHub} {
		if !s.Valid() {
			t.Errorf("%q.Valid(): got false, want true", s)
		}
	}
	for _, s := range []webhook.Scheme{"", "svix", "Stripe", "github "} {
		if s.Valid() {
			t.Errorf("%q.Valid(): got true, want false", s)
		}
	}
}

func TestVerifierValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		v    webhook.Verifier
		want error
	}{
		{"standard with prefix", webhook.Verifier{Scheme: webhook.SchemeStandard, Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}}, nil},
		{"standard without prefix", webhook.Verifier{Scheme: webhook.SchemeStandard, Secrets: []string{"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}}, nil},
		{"stripe", webhook.Verifier{Scheme: webhook.SchemeStripe, Secrets: []string{"whsec_anything at all"}, Tolerance: time.Minute}, nil},
		{"github", webhook.Verifier{Scheme: webhook.SchemeGitHub, Secrets: []string{"It's a Secret to Everybody"}}, nil},
		{"unknown scheme", webhook.Verifier{Scheme: "svix", Secrets: []string{"x"}}, webhook.ErrUnknownScheme},
		{"no secrets", webhook.Verifier{Scheme: webhook.SchemeGitHub}, webhook.ErrNoSecrets},
		{"empty secret", webhook.Verifier{Scheme: webhook.SchemeStripe, Secrets: []string{"whsec_a", ""}}, webhook.ErrBadSecret},
		{"standard not base64", webhook.Verifier{Scheme: webhook.SchemeStandard, Secrets: []string{"whsec_not base64!"}}, webhook.ErrBadSecret},
		{"standard empty key", webhook.Verifier{Scheme: webhook.SchemeStandard, Secrets: []string{"whsec_"}}, webhook.ErrBadSecret},
		{"negative tolerance", webhook.Verifier{Scheme: webhook.SchemeStripe, Secrets: []string{"a"}, Tolerance: -time.Second}, webhook.ErrNegativeTolerance},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.v.Validate()
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}
}

// TestValidateKeepsSecretsOutOfErrors checks that a bad secret is named by its position only:
// configuration errors are printed and logged.
func TestValidateKeepsSecretsOutOfErrors(t *testing.T) {
	t.Parallel()
	v := webhook.Verifier{Scheme: webhook.SchemeStandard, Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_hunter2!"}}
	err := v.Validate()
	if err == nil {
		t.Fatal("got no error, want one")
	}
	if got, want := err.Error(), "secrets[1]: bad secret: not whsec_ followed by base64"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// TestVerifyMisconfigured checks that a verifier that would not validate fails as our own
// fault (500), not as the sender's.
func TestVerifyMisconfigured(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	h.Set("X-GitHub-Delivery", "d1")
	h.Set("X-Hub-Signature-256", "sha256=00")
	for _, v := range []webhook.Verifier{
		{Scheme: "svix", Secrets: []string{"x"}},
		{Scheme: webhook.SchemeGitHub},
		{Scheme: webhook.SchemeGitHub, Secrets: []string{"x"}, Tolerance: -1},
	} {
		_, err := v.Verify(h, []byte("{}"), now)
		assertCode(t, err, approval.EINTERNAL)
	}
}
