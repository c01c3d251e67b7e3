package approval

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// canonicalSeeds are documents that reach each branch of the canonicalizer: keys out of
// order at several depths, keys twice (also once escaped), strings encoding/json writes
// otherwise than as sent, numbers as written, white space everywhere, nesting past
// canonicalDepth, and documents that are not JSON.
var canonicalSeeds = []string{
	`{"b": "<&>", "a": 1.50, "c": [true, null]}`,
	" {\n\"c\":{\"y\":[1,{\"b\":2,\"a\":1}],\"x\":\"y\"},\t\"b\":[1,2],\"a\":-0.0e+10} ",
	`{"a":1,"a":2}`,
	`{"a":1,"\u0061":2}`,
	`{"b":{"z":1,"z":2},"a":0}`,
	`{"\u00e9":"\u00e9","e\u0301":"\ud83d\ude00","\u2028":"\u2029 \u2028"}`,
	"{\"\xe2\x80\xa8\":\"\xe2\x80\xa9\",\"x\":\"caf\xc3\xa9\"}",
	"{\"bad\":\"\xff\xfe\",\"\xc3\":1}",
	`{"esc":"\" \\ \/ \b \f \n \r \t \u0000 \u001f \u007f","\"":1,"\\":2}`,
	`{"ab":1,"a":2,"":3,"a\u0000":4,"B":5}`,
	`["x",{"k":[],"j":{}},[[]],1e400,-1E-7,12345678901234567890]`,
	`"just a string"`,
	`  42  `,
	`true`,
	`null`,
	`{}`,
	`[]`,
	strings.Repeat(`{"b":1,"a":`, 40) + "0" + strings.Repeat("}", 40),
	strings.Repeat("[", 33) + strings.Repeat("]", 33),
	strings.Repeat(`{"k":`, canonicalDepth) + `{"b":1,"a":2}` + strings.Repeat("}", canonicalDepth),
	"",
	"{",
	`{"a":1} {"b":2}`,
	`{"a":1} ]`,
	"nope",
	`{"a":01}`,
	"{\"a\":\"\x01\"}",
}

// FuzzCanonicalJSON holds CanonicalJSON to canonicalDecoded, the canonical form's
// definition: the same bytes for every document, the same error for every non-document.
// Fingerprints already stored with approvals depend on it.
func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range canonicalSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		got, err := CanonicalJSON(doc)
		want, wantErr := canonicalDecoded(doc)
		if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() {
			t.Fatalf("CanonicalJSON(%q): error %v, want %v", doc, err, wantErr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("CanonicalJSON(%q)\n got %q\nwant %q", doc, got, want)
		}
	})
}

// TestCanonicalJSONRandomDocuments compares CanonicalJSON with canonicalDecoded on generated
// documents, which (unlike most of what the fuzzer makes of bytes) are JSON: objects with keys
// out of order, sometimes twice, strings with escapes, non-ASCII and invalid UTF-8, numbers
// in every notation, white space between tokens, nesting near canonicalDepth.
func TestCanonicalJSONRandomDocuments(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 2026))
	// JSON text: escapes as sent (`\u00e9`), and raw bytes, some not UTF-8.
	pieces := []string{"a", "b", "A", "é", `\u00e9`, `\n`, `\\`, `\"`, `\u2028`, "\u2028", `\u0000`, "<", "&", `\ud83d\ude00`, `\ud800`, "\xff", "\xc3", `\u001f`, `\t`, "/", `\/`, `\u0061`, "~", "\x7f"}
	text := func() string {
		var sb strings.Builder
		sb.WriteByte('"')
		for range rng.IntN(4) {
			sb.WriteString(pieces[rng.IntN(len(pieces))])
		}
		sb.WriteByte('"')
		return sb.String()
	}
	numbers := []string{"0", "-0", "1.50", "-12e3", "1E+2", "3.0e-10", "12345678901234567890", "1e400", "7"}
	space := func() string { return []string{"", "", "", " ", "\n\t", "\r "}[rng.IntN(6)] }
	var doc func(depth int) string
	doc = func(depth int) string {
		switch k := rng.IntN(10); {
		case k < 3 && depth < canonicalDepth+2:
			var parts []string
			for range rng.IntN(6) {
				parts = append(parts, space()+text()+space()+":"+doc(depth+1))
			}
			return "{" + strings.Join(parts, ",") + space() + "}"
		case k < 5 && depth < canonicalDepth+2:
			var parts []string
			for range rng.IntN(4) {
				parts = append(parts, doc(depth+1))
			}
			return "[" + strings.Join(parts, ",") + space() + "]"
		case k < 7:
			return space() + text() + space()
		case k < 9:
			return space() + numbers[rng.IntN(len(numbers))] + space()
		default:
			return space() + []string{"true", "false", "null"}[rng.IntN(3)] + space()
		}
	}
	fast := 0
	for range 5000 {
		d := []byte(doc(0))
		got, err := CanonicalJSON(d)
		want, wantErr := canonicalDecoded(d)
		if (err == nil) != (wantErr == nil) || !bytes.Equal(got, want) {
			t.Fatalf("CanonicalJSON(%q)\n got %q, %v\nwant %q, %v", d, got, err, want, wantErr)
		}
		if c := (canonicalizer{doc: d}); json.Valid(d) && c.value(0) {
			fast++
		}
	}
	if fast < 2000 {
		t.Fatalf("only %d of 5000 documents took the one-pass rewrite", fast)
	}
}

// TestCanonicalizerTakesOnlyWhatItCan checks which seeds the one-pass rewrite takes and which
// it leaves to the decoding path, so that the fuzz test compares the rewrite and not only
// the decoding path with itself.
func TestCanonicalizerTakesOnlyWhatItCan(t *testing.T) {
	for _, tt := range []struct {
		doc  string
		fast bool
	}{
		{canonicalSeeds[0], true},
		{canonicalSeeds[1], true},
		{canonicalSeeds[5], true},
		{canonicalSeeds[7], true},
		{canonicalSeeds[8], true},
		{canonicalSeeds[10], true},
		{canonicalSeeds[12], true},
		{`{"a":1,"a":2}`, false},
		{`{"a":1,"\u0061":2}`, false},
		{`{"b":{"z":1,"z":2},"a":0}`, false},
		{strings.Repeat("[", canonicalDepth) + strings.Repeat("]", canonicalDepth), true},
		{strings.Repeat("[", canonicalDepth+1) + strings.Repeat("]", canonicalDepth+1), false},
	} {
		c := canonicalizer{doc: []byte(tt.doc)}
		if fast := c.value(0); fast != tt.fast {
			t.Errorf("%.40q: rewritten in one pass %v, want %v", tt.doc, fast, tt.fast)
		}
	}
}

func BenchmarkCanonicalJSON(b *testing.B) {
	doc := []byte(`{"action":"deploy","title":"Deploy build 4812 of payments-api to production","approvers":["alice","bob"],` +
		`"required_approvals":1,"expires_in":"24h","context":{"service":"payments-api","build":4812,"commit":"9f1c2e7",` +
		`"environment":"production","changes":["a","b","c"],"owner":{"team":"payments","oncall":"carol"}}}`)
	for _, tt := range []struct {
		name string
		f    func([]byte) ([]byte, error)
	}{{"one-pass", CanonicalJSON}, {"decoded", canonicalDecoded}} {
		b.Run(tt.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tt.f(doc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkJSONValid(b *testing.B) {
	doc := []byte(`{"action":"deploy","title":"Deploy build 4812 of payments-api to production","approvers":["alice","bob"],` +
		`"required_approvals":1,"expires_in":"24h","context":{"service":"payments-api","build":4812,"commit":"9f1c2e7",` +
		`"environment":"production","changes":["a","b","c"],"owner":{"team":"payments","oncall":"carol"}}}`)
	for b.Loop() {
		json.Valid(doc)
	}
}
