package webhook_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"net/http"
	"testing"

	"github.com/approvald/approval/webhook"
)

// BenchmarkVerify measures one accepted delivery per scheme, with two secrets configured and
// the matching one second, the cost during a rotation.
func BenchmarkVerify(b *testing.B) {
	for _, size := range []int{1 << 10, 64 << 10} {
		body := bytes.Repeat([]byte("x"), size)
		copy(body, `{"id":"evt_bench","pad":"`)
		body[size-2], body[size-1] = '"', '}'

		cases := []struct {
			scheme webhook.Scheme
			v      *webhook.Verifier
			h      http.Header
		}{
			{webhook.SchemeStandard, standardVerifier(standardNewSecret, vectorSecret), librarySign(b, vectorSecret, "msg_bench", now, body)},
			{webhook.SchemeStripe, stripeVerifier(stripeNewSecret, stripeSecret), stripeHeader(stripeSign(stripeSecret, now, body, ""))},
			{webhook.SchemeGitHub, githubVerifier(githubNewSecret, githubDocsSecret), githubHeader(githubSign(githubDocsSecret, body, sha256.New, "sha256="))},
		}
		for _, c := range cases {
			b.Run(fmt.Sprintf("%s/%dKiB", c.scheme, size>>10), func(b *testing.B) {
				mustVerify(b, c.v, c.h, body, now)
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := c.v.Verify(c.h, body, now); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
