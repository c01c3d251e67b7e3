package approval_test

import (
	"strings"
	"testing"
	"unicode"

	"github.com/approvald/approval"
)

// TestNormalizeName: the one normalisation of names. Case and width variants are mapped to
// one form; what could pass for another name is refused, with the field and the character.
func TestNormalizeName(t *testing.T) {
	for _, c := range []struct {
		name, in, want, refusal string
	}{
		{"plain ASCII", "ci-bot", "ci-bot", ""},
		{"an e-mail address", "deploy@example.com", "deploy@example.com", ""},
		{"capitals", "CI-BOT", "ci-bot", ""},
		{"mixed case", "Alice", "alice", ""},
		{"full-width letters", "ＡＬＩＣＥ", "alice", ""},
		{"two words", "Zoë Martín", "zoë martín", ""},
		{"decomposed accents", "Zoe\u0308", "zoë", ""},
		{"Greek alone", "Σωκράτης", "σωκράτης", ""},
		{"Cyrillic alone", "Ольга", "ольга", ""},
		{"Japanese with Latin", "田中taro", "田中taro", ""},
		{"ASCII punctuation", "o'brien_2.0+ops", "o'brien_2.0+ops", ""},
		{"a zero-width space", "ci-bot\u200b", "", "subject contains the invisible character U+200B at character 7"},
		{"a zero-width joiner", "al\u200dice", "", "invisible character U+200D"},
		{"a soft hyphen", "ci\u00adbot", "", "invisible character U+00AD"},
		{"a byte order mark", "\ufeffalice", "", "invisible character U+FEFF"},
		{"a variation selector", "alice\ufe0f", "", "invisible character U+FE0F"},
		{"a Hangul filler", "alice\u3164", "", "invisible character U+3164"},
		{"a right-to-left override", "ci-bot\u202e", "", "bidirectional control character U+202E"},
		{"a left-to-right mark", "\u200ealice", "", "bidirectional control character U+200E"},
		{"a first strong isolate", "alice\u2068", "", "bidirectional control character U+2068"},
		{"a Cyrillic с in a Latin name", "ali\u0441e", "", "subject mixes the Latin and Cyrillic scripts (U+0441 с at character 4)"},
		{"a Cyrillic first letter", "\u0441i-bot", "", "mixes the Cyrillic and Latin scripts"},
		{"a Greek omicron in a Latin name", "b\u03bfb", "", "mixes the Latin and Greek scripts"},
		{"a Unicode hyphen", "ci\u2010bot", "", "subject contains the character U+2010 (‐) at character 3"},
		{"a non-breaking hyphen", "ci\u2011bot", "", "U+2011"},
		{"a ligature", "\ufb01sh", "", "U+FB01"},
		{"trailing no-break spaces", "ci-bot\u00a0\u00a0", "", "white space character U+00A0 at character 7"},
		{"an ideographic space", "zoë\u3000martín", "", "white space character U+3000"},
		{"a trailing space", "ci-bot ", "", "leading or trailing white space"},
		{"a leading space", " ci-bot", "", "leading or trailing white space"},
		{"two spaces", "zoë  martín", "", "two spaces in a row"},
		{"a tab", "ci\tbot", "", "control character U+0009"},
		{"empty", "", "", "subject is required"},
		{"101 characters", strings.Repeat("a", 101), "", "at most 100"},
	} {
		got, err := approval.NormalizeName("subject", c.in)
		switch {
		case c.refusal == "" && err != nil:
			t.Errorf("%s: NormalizeName(%q): got %v, want %q", c.name, c.in, err, c.want)
		case c.refusal == "" && got != c.want:
			t.Errorf("%s: NormalizeName(%q): got %q, want %q", c.name, c.in, got, c.want)
		case c.refusal != "" && err == nil:
			t.Errorf("%s: NormalizeName(%q): got %q, want a refusal saying %q", c.name, c.in, got, c.refusal)
		case c.refusal != "" && (approval.ErrorCode(err) != approval.EINVALID || !strings.Contains(err.Error(), c.refusal)):
			t.Errorf("%s: NormalizeName(%q): got %v, want EINVALID saying %q", c.name, c.in, err, c.refusal)
		}
	}
}

// TestSameName: names that normalise alike are one person; a name that does not normalise is
// only itself.
func TestSameName(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"ci-bot", "CI-BOT", true},
		{"alice", "Alice", true},
		{"alice", "ＡＬＩＣＥ", true},
		{"ci-bot", "ci-bot\u200b", false},
		{"ci-bot\u200b", "ci-bot\u200b", true},
		{"alice", "ali\u0441e", false},
		{"alice", "bob", false},
	} {
		if got := approval.SameName(c.a, c.b); got != c.want {
			t.Errorf("SameName(%q, %q): got %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

// FuzzNormalizeName: a normalised name normalises to itself, and never holds an invisible
// character, a bidirectional control or white space other than single inner spaces.
func FuzzNormalizeName(f *testing.F) {
	for _, s := range []string{"ci-bot", "CI-BOT", "Zoë Martín", "ci-bot\u200b", "ali\u0441e", "ci\u2010bot",
		"ci-bot\u00a0", "\u202ealice", "田中taro", "ＡＬＩＣＥ", "Zoe\u0308", "İstanbul", "ß", "ﬁ", "ǅemal", "ΣΑΣ"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := approval.NormalizeName("name", s)
		if err != nil {
			if approval.ErrorCode(err) != approval.EINVALID {
				t.Fatalf("NormalizeName(%q): got %v, want EINVALID", s, err)
			}
			return
		}
		again, err := approval.NormalizeName("name", n)
		if err != nil || again != n {
			t.Fatalf("NormalizeName(%q) = %q, which normalises to %q, %v", s, n, again, err)
		}
		if strings.HasPrefix(n, " ") || strings.HasSuffix(n, " ") || strings.Contains(n, "  ") {
			t.Fatalf("NormalizeName(%q) = %q has outer or doubled spaces", s, n)
		}
		for _, r := range n {
			if unicode.In(r, unicode.Cf, unicode.Bidi_Control, unicode.Variation_Selector, unicode.Other_Default_Ignorable_Code_Point, unicode.Zl, unicode.Zp) ||
				(unicode.IsSpace(r) && r != ' ') || (unicode.Is(unicode.Zs, r) && r != ' ') {
				t.Fatalf("NormalizeName(%q) = %q holds %U", s, n, r)
			}
		}
	})
}
