package httpapi

import (
	"net/http"
	"strings"

	"github.com/approvald/approval"
)

// maxIdempotencyKeyLength bounds a key, counted after a quoted key is unwrapped.
const maxIdempotencyKeyLength = 255

// idempotencyKey returns the request's Idempotency-Key. The key may be sent bare or as an
// RFC 8941 Structured Field string ("deploy-prod-1042", with \" and \\ escapes); both forms
// name the same key. Exactly one key of 1-255 printable ASCII characters is accepted: two
// headers, or a comma-separated list in one, are refused rather than guessed between.
func idempotencyKey(h http.Header) (string, error) {
	values := h.Values("Idempotency-Key")
	if len(values) == 0 {
		return "", approval.Errorf(approval.EINVALID, "Idempotency-Key header is required; it names the operation, e.g. deploy-prod-1042")
	} else if len(values) > 1 {
		return "", approval.Errorf(approval.EINVALID, "send one Idempotency-Key header, not %d", len(values))
	}
	v := strings.Trim(values[0], " \t")

	key := v
	if strings.HasPrefix(v, `"`) {
		var err error
		if key, err = parseSFString(v); err != nil {
			return "", err
		}
	} else if strings.Contains(v, ",") {
		return "", approval.Errorf(approval.EINVALID, "Idempotency-Key holds a list; send exactly one key (quote it as a string if it contains a comma)")
	}

	if key == "" {
		return "", approval.Errorf(approval.EINVALID, "Idempotency-Key is empty; send 1 to %d printable ASCII characters", maxIdempotencyKeyLength)
	} else if len(key) > maxIdempotencyKeyLength {
		return "", approval.Errorf(approval.EINVALID, "Idempotency-Key has %d characters; at most %d are allowed", len(key), maxIdempotencyKeyLength)
	}
	for i := 0; i < len(key); i++ {
		if !printableASCII(key[i]) {
			return "", approval.Errorf(approval.EINVALID, "Idempotency-Key has a non-printable or non-ASCII byte 0x%02x at position %d", key[i], i)
		}
	}
	return key, nil
}

// parseSFString unwraps an RFC 8941 sf-string: DQUOTE *(unescaped / "\" ( DQUOTE / "\" ))
// DQUOTE, where unescaped is printable ASCII other than DQUOTE and "\".
func parseSFString(v string) (string, error) {
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\':
			i++
			if i == len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", approval.Errorf(approval.EINVALID, `Idempotency-Key is a quoted string with a bad escape at position %d; only \" and \\ are allowed`, i-1)
			}
			b.WriteByte(v[i])
		case c == '"':
			if rest := strings.TrimLeft(v[i+1:], " \t"); strings.HasPrefix(rest, ",") {
				return "", approval.Errorf(approval.EINVALID, "Idempotency-Key holds a list; send exactly one key")
			} else if rest != "" {
				return "", approval.Errorf(approval.EINVALID, "Idempotency-Key has characters after the closing quote")
			}
			return b.String(), nil
		case !printableASCII(c):
			return "", approval.Errorf(approval.EINVALID, "Idempotency-Key has a non-printable or non-ASCII byte 0x%02x at position %d", c, i)
		default:
			b.WriteByte(c)
		}
	}
	return "", approval.Errorf(approval.EINVALID, "Idempotency-Key is a quoted string without its closing quote")
}

func printableASCII(c byte) bool { return c >= 0x20 && c <= 0x7e }
