package approval

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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
func CanonicalJSON(body []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, Errorf(EINVALID, "body is not valid JSON: %v", err)
	}
	if dec.More() {
		return nil, Errorf(EINVALID, "body has data after the JSON value")
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // encoding/json sorts map keys
		return nil, Errorf(EINVALID, "body cannot be re-encoded: %v", err)
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}
