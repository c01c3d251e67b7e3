package approval

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"unicode/utf8"
)

// KeyHolder is what already holds an operation key when Store.InsertApproval finds it taken.
type KeyHolder struct {
	// Fingerprint is the fingerprint of the request that took the key.
	Fingerprint string
	// Approval is the approval made under the key, in its current state.
	Approval *Approval
}

// StoredResponse is the answer to a create: what a retry of it is answered with, byte for
// byte, rendered again from the approval as it was created (Approval.AsCreated).
type StoredResponse struct {
	StatusCode int
	Location   string
	Body       []byte
}

// Fingerprint identifies a create request: the requester, method, path and the body parsed as
// JSON, so that key order and white space do not matter. It returns an EINVALID error if the
// body is not JSON.
func Fingerprint(requester, method, path string, body []byte) (string, error) {
	canon, err := CanonicalJSON(body)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, part := range [][]byte{[]byte(requester), []byte(method), []byte(path), canon} {
		// Length-prefix each part so that no two different tuples hash alike.
		var n [8]byte
		for i, l := 0, uint64(len(part)); i < 8; i++ {
			n[i] = byte(l >> (56 - 8*i))
		}
		h.Write(n[:])
		h.Write(part)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// CanonicalJSON re-encodes a JSON document with object keys sorted and insignificant white
// space removed. Numbers keep their literal text.
//
// The canonical form is, byte for byte, what encoding/json makes of the document decoded into
// Go values (objects as maps, numbers as json.Number) and encoded again without HTML escapes:
// fingerprints stored with approvals were made that way (canonicalDecoded), and a retry made
// after an upgrade must match them. A valid document with distinct keys, nested at most
// canonicalDepth deep (every create the HTTP API accepts), is rewritten in one pass over its
// bytes instead (canonicalizer), with no decoded values; anything else takes the decoding
// path. FuzzCanonicalJSON holds the two to the same bytes.
func CanonicalJSON(body []byte) ([]byte, error) {
	if json.Valid(body) {
		c := canonicalizer{doc: body, out: make([]byte, 0, len(body))}
		if c.value(0) {
			return c.out, nil
		}
	}
	return canonicalDecoded(body)
}

// canonicalDecoded is CanonicalJSON by way of decoded values: the definition of the canonical
// form, and its error for a body that is not JSON.
func canonicalDecoded(body []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, Errorf(EINVALID, "body is not valid JSON: %v", err)
	}
	if dec.More() {
		return nil, Errorf(EINVALID, "body has data after the JSON value")
	}
	out, err := encodeCanonical(v) // encoding/json sorts map keys
	if err != nil {
		return nil, Errorf(EINVALID, "body cannot be re-encoded: %v", err)
	}
	return out, nil
}

// encodeCanonical encodes v as the canonical form writes values: encoding/json without HTML
// escapes, without the trailing newline of its Encoder.
func encodeCanonical(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// canonicalDepth is the deepest nesting the canonicalizer rewrites: each level may copy what
// it holds once to sort its keys, so the work is bounded by this many passes over the
// document. Deeper documents take the decoding path.
const canonicalDepth = 32

// canonicalizer rewrites a valid JSON document (doc, checked with json.Valid) into out in
// canonical form, in one pass: values are copied as they are, but for white space, which is
// dropped, strings that encoding/json would write otherwise (escapes, control characters,
// invalid UTF-8, U+2028 and U+2029), which are decoded and encoded again as it does, and
// object members, which are sorted by key once written.
type canonicalizer struct {
	doc []byte
	i   int
	out []byte
}

// member is an object member written to out[from:to] (its key, a colon and its value), whose
// key decoded is key.
type member struct {
	key      []byte
	from, to int
}

// value writes the value at doc[i:] and moves past it. It returns false, having written
// part of it, when the document must take the decoding path instead: a key twice in an
// object (which one encoding/json keeps is its rule) or nesting deeper than canonicalDepth.
func (c *canonicalizer) value(depth int) bool {
	c.space()
	switch b := c.doc[c.i]; b {
	case '{':
		return depth < canonicalDepth && c.object(depth+1)
	case '[':
		return depth < canonicalDepth && c.array(depth+1)
	case '"':
		c.str()
	case 't', 'n':
		c.out = append(c.out, c.doc[c.i:c.i+4]...)
		c.i += 4
	case 'f':
		c.out = append(c.out, "false"...)
		c.i += 5
	default: // a number, kept as written (json.Number)
		start := c.i
		for c.i < len(c.doc) && strings.IndexByte("+-0123456789.eE", c.doc[c.i]) >= 0 {
			c.i++
		}
		c.out = append(c.out, c.doc[start:c.i]...)
	}
	return true
}

func (c *canonicalizer) array(depth int) bool {
	c.i++
	c.out = append(c.out, '[')
	c.space()
	if c.doc[c.i] == ']' {
		c.i++
		c.out = append(c.out, ']')
		return true
	}
	for {
		if !c.value(depth) {
			return false
		}
		c.space()
		c.i++ // ',' or ']'
		if c.doc[c.i-1] == ']' {
			c.out = append(c.out, ']')
			return true
		}
		c.out = append(c.out, ',')
	}
}

func (c *canonicalizer) object(depth int) bool {
	c.i++
	start := len(c.out)
	c.out = append(c.out, '{')
	c.space()
	if c.doc[c.i] == '}' {
		c.i++
		c.out = append(c.out, '}')
		return true
	}
	var small [8]member
	members := small[:0]
	sorted := true
	for {
		c.space()
		from := len(c.out)
		key := c.str()
		c.space()
		c.i++ // ':'
		c.out = append(c.out, ':')
		if !c.value(depth) {
			return false
		}
		if n := len(members); n > 0 && bytes.Compare(key, members[n-1].key) <= 0 {
			sorted = false
		}
		members = append(members, member{key: key, from: from, to: len(c.out)})
		c.space()
		c.i++ // ',' or '}'
		if c.doc[c.i-1] == '}' {
			break
		}
		c.out = append(c.out, ',')
	}
	if !sorted {
		slices.SortFunc(members, func(a, b member) int { return bytes.Compare(a.key, b.key) })
		for k := 1; k < len(members); k++ {
			if bytes.Equal(members[k].key, members[k-1].key) {
				return false
			}
		}
		written := bytes.Clone(c.out[start:])
		c.out = c.out[:start+1]
		for k, m := range members {
			if k > 0 {
				c.out = append(c.out, ',')
			}
			c.out = append(c.out, written[m.from-start:m.to-start]...)
		}
	}
	c.out = append(c.out, '}')
	return true
}

// str writes the string at doc[i:] as encoding/json would write it decoded, moves past it
// and returns it decoded.
func (c *canonicalizer) str() []byte {
	start := c.i
	end := start + 1
	plain := true // as encoding/json writes it: no escape, no control character, valid UTF-8
	for ; c.doc[end] != '"'; end++ {
		switch b := c.doc[end]; {
		case b == '\\':
			plain = false
			end++
		case b < 0x20:
			plain = false
		case b >= utf8.RuneSelf:
			if r, size := utf8.DecodeRune(c.doc[end:]); r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
				plain = false
			} else {
				end += size - 1
			}
		}
	}
	c.i = end + 1
	if plain {
		c.out = append(c.out, c.doc[start:c.i]...)
		return c.doc[start+1 : end]
	}
	var s string
	json.Unmarshal(c.doc[start:c.i], &s) // valid: the document is
	encoded, _ := encodeCanonical(s)     // a string always encodes
	c.out = append(c.out, encoded...)
	return []byte(s)
}

func (c *canonicalizer) space() {
	for c.i < len(c.doc) && (c.doc[c.i] == ' ' || c.doc[c.i] == '\t' || c.doc[c.i] == '\n' || c.doc[c.i] == '\r') {
		c.i++
	}
}
