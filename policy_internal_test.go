package approval

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// TestCheckJSONAgreesWithTheDecoder checks CheckJSON, one pass over the bytes, against the
// same policy written over encoding/json's tokens (checkJSONByTokens, its first version), on
// random documents full of what the policy refuses: repeated keys, also written with escapes,
// NULs, numbers beyond a float, unpaired surrogates, invalid UTF-8 and deep nesting. Both must
// accept the same documents and refuse the others with the same words.
func TestCheckJSONAgreesWithTheDecoder(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	strs := []string{`"a"`, `"\u0061"`, `"b"`, `"a\u0000"`, `"\u0000"`, `"x y"`, `"\ud800"`, `"\ud83d\ude00"`,
		`"\udc00x"`, "\"\xff\"", "\"\xfe\"", `"\n\t\\\""`, `"é"`, `""`, `"a.b"`, `"-_9"`}
	nums := []string{"0", "-1", "1.5", "1e400", "-1e400", "1e-400", "1E308", "2e308", "12345678901234567890",
		strings.Repeat("9", 320), strings.Repeat("9", 300), "-0.0e+0"}
	ws := []string{"", " ", "\n\t ", "\r\n"}
	var gen func(depth int) string
	gen = func(depth int) string {
		w := func() string { return ws[r.IntN(len(ws))] }
		switch k := r.IntN(10); {
		case depth < 5 && k < 3:
			n := r.IntN(5)
			if depth < 2 && r.IntN(4) == 0 {
				n = r.IntN(40) // past the keys kept in a list
			}
			parts := make([]string, n)
			for i := range parts {
				key := strs[r.IntN(len(strs))]
				if n > 16 && r.IntN(8) > 0 {
					key = fmt.Sprintf(`"k%d"`, r.IntN(100))
				}
				parts[i] = w() + key + w() + ":" + gen(depth+1)
			}
			return w() + "{" + strings.Join(parts, ",") + w() + "}" + w()
		case depth < 5 && k < 5:
			parts := make([]string, r.IntN(5))
			for i := range parts {
				parts[i] = gen(depth + 1)
			}
			return w() + "[" + strings.Join(parts, ",") + w() + "]" + w()
		case k < 7:
			return w() + strs[r.IntN(len(strs))] + w()
		case k < 9:
			return w() + nums[r.IntN(len(nums))] + w()
		default:
			return w() + []string{"true", "false", "null"}[r.IntN(3)] + w()
		}
	}
	// Objects with more keys than CheckJSON keeps in a list, each repeating one of them.
	var many []string
	for _, again := range []int{1, 15, 16, 17, 29} {
		var members []string
		for k := range 30 {
			members = append(members, fmt.Sprintf(`"k%d": %d`, k, k))
		}
		members = append(members, fmt.Sprintf(`"k%d": 0`, again))
		many = append(many, `{"context": {`+strings.Join(members, ", ")+`}}`)
	}
	refused := 0
	for n := 0; n < 20000; n++ {
		doc := []byte(gen(0))
		if n < len(many) {
			doc = []byte(many[n])
		}
		if !json.Valid(doc) {
			t.Fatalf("the generator made invalid JSON: %s", doc)
		}
		got, want := CheckJSON("body", doc), checkJSONByTokens("body", doc)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("CheckJSON(%s):\n got %v\nwant %v", doc, got, want)
		}
		if got != nil {
			refused++
		}
	}
	t.Logf("%d of 20,000 documents refused", refused)
	if refused < 2000 || refused > 18000 {
		t.Fatalf("%d of 20,000 documents refused: the generator does not test both sides", refused)
	}
}

func checkJSONByTokens(where string, doc []byte) error {
	if err := checkEscapes(where, doc); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	type frame struct {
		object bool
		keys   map[string]bool
		index  int    // next element of an array
		key    string // last key of an object
		isKey  bool   // the next string token of an object is a key
		path   string // where this container is
	}
	var stack []*frame
	path := func() string {
		if len(stack) == 0 {
			return where
		}
		f := stack[len(stack)-1]
		if f.object {
			return joinPath(f.path, f.key)
		}
		return fmt.Sprintf("%s[%d]", f.path, f.index)
	}
	// value is called for every value before it is read, to name its place.
	value := func() string {
		if len(stack) == 0 {
			return where
		}
		f := stack[len(stack)-1]
		p := path()
		if f.object {
			f.isKey = true
		} else {
			f.index++
		}
		return p
	}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return Errorf(EINVALID, "%s is not valid JSON: %v", where, err)
		}
		if len(stack) > 0 {
			if f := stack[len(stack)-1]; f.object && f.isKey {
				if d, ok := tok.(json.Delim); ok && d == '}' {
					stack = stack[:len(stack)-1]
					continue
				}
				key := tok.(string) // an object's member starts with its key
				if strings.IndexByte(key, 0) >= 0 {
					return Errorf(EINVALID, "%s has a key containing a NUL character", f.path)
				}
				if f.keys[key] {
					return Errorf(EINVALID, "%s has the key %q twice; each key may appear once", f.path, key)
				}
				f.keys[key], f.key, f.isKey = true, key, false
				continue
			}
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				p := value()
				stack = append(stack, &frame{object: t == '{', keys: map[string]bool{}, isKey: t == '{', path: p})
			case ']':
				stack = stack[:len(stack)-1]
			}
		case string:
			p := value()
			if strings.IndexByte(t, 0) >= 0 {
				return Errorf(EINVALID, "%s contains a NUL character", p)
			}
		case json.Number:
			p := value()
			if f, err := strconv.ParseFloat(string(t), 64); err != nil || math.IsInf(f, 0) {
				return Errorf(EINVALID, "%s is the number %.40s, out of the range of a 64-bit float", p, t)
			}
		default:
			value()
		}
	}
}

// BenchmarkCheckJSON checks a create's body as the bench sends it, by CheckJSON and by the
// first version over encoding/json's tokens.
func BenchmarkCheckJSON(b *testing.B) {
	body := []byte(`{"action":"deploy","title":"Deploy api v1.2.3 to production","approvers":["alice","bob"],` +
		`"required_approvals":1,"context":{"service":"api","version":"1.2.3","env":"production","ticket":"OPS-1234","replicas":3}}`)
	for _, c := range []struct {
		name  string
		check func(string, []byte) error
	}{{"bytes", CheckJSON}, {"tokens", checkJSONByTokens}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := c.check("body", body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestCheckJSONRefusesInvalidJSON: every caller checks the document first, but CheckJSON
// walks the bytes on the word that they are valid JSON, and must refuse, not fail, when a
// caller forgets.
func TestCheckJSONRefusesInvalidJSON(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{``, `{`, `{"a":`, `{"a" 1}`, `[1,]`, `"abc`, `{"a":1}}`, `tru`, `1e`} {
		if err := CheckJSON("body", []byte(doc)); ErrorCode(err) != EINVALID {
			t.Errorf("CheckJSON(%q) = %v, want an EINVALID error", doc, err)
		}
	}
}
