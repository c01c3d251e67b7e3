package approval

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/secure/precis"
)

// Names of people (docs/security.md, "Names"): token subjects, requesters, approvers, the
// people of the configuration, OIDC subjects and the approver of an inbox decision are all
// one kind of name, and two names that normalise alike are the same person everywhere: who
// may vote, who may not approve their own request, who sees what, and what the audit trail
// says. A name is normalised by the PRECIS UsernameCaseMapped profile (RFC 8265: width
// folded, lower-cased, NFC), applied to each part between single spaces so that "Zoë Martín"
// stays one name, and is refused when it could pass for another person's: invisible
// characters, bidirectional controls, spaces other than single U+0020 between parts,
// characters outside the profile (a Unicode hyphen, a ligature) and letters of several
// scripts in one name.

// NormalizeName returns the normalised form of a person's name, which is the name approvald
// stores and shows, or an EINVALID error naming field and the offending character. A case or
// width variant ("CI-BOT", full-width letters) is mapped, not refused. NormalizeName of a
// name it returned returns it unchanged.
func NormalizeName(field, s string) (string, error) {
	if plainName(s) {
		return s, nil
	}
	if err := CheckName(field, s, MaxNameLength); err != nil {
		return "", err
	}
	if err := checkNameRunes(field, s); err != nil {
		return "", err
	}
	n, err := normalizeParts(field, s)
	if err != nil {
		return "", err
	}
	if err := checkScripts(field, n); err != nil {
		return "", err
	}
	// The profile is meant to be idempotent; a name it is not idempotent on, if any, is refused,
	// so that a stored name always compares equal to itself normalised again.
	if again, err := normalizeParts(field, n); err != nil || again != n {
		return "", Errorf(EINVALID, "%s %q does not keep one form under normalisation; choose a plainer name", field, s)
	}
	if c := utf8.RuneCountInString(n); c > MaxNameLength {
		return "", Errorf(EINVALID, "%s has %d characters once normalised; at most %d are allowed", field, c, MaxNameLength)
	}
	return n, nil
}

// SameName reports whether a and b name the same person: they normalise alike. A name that
// does not normalise (one stored before names were checked) is the same only as itself, so
// that a twin such as "ci-bot\u200b" is never taken for "ci-bot".
func SameName(a, b string) bool {
	return a == b || NameKey(a) == NameKey(b)
}

// NameKey returns the normalised form of name, or name itself when it does not normalise: the
// form to compare and look up names by.
func NameKey(name string) string {
	if n, err := NormalizeName("name", name); err == nil {
		return n
	}
	return name
}

// plainName reports whether s is its own normalised form at a glance: 1 to MaxNameLength
// printable ASCII characters, no space and no capital, which the profile keeps as they are.
// Most names are, and comparisons run on every vote and read.
func plainName(s string) bool {
	if s == "" || len(s) > MaxNameLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c >= 'A' && c <= 'Z' {
			return false
		}
	}
	return true
}

// checkNameRunes refuses the characters a reader cannot see or that reorder what they see,
// with a message naming each: invisible characters (format characters and the default
// ignorable ones), bidirectional controls, and white space other than one U+0020 between
// two parts.
func checkNameRunes(field, s string) error {
	i, prevSpace := 0, false
	for _, r := range s {
		i++
		switch {
		case unicode.Is(unicode.Bidi_Control, r):
			return Errorf(EINVALID, "%s contains the bidirectional control character %U at character %d; names may not reorder text", field, r, i)
		case invisible(r):
			return Errorf(EINVALID, "%s contains the invisible character %U at character %d; names may hold only visible characters", field, r, i)
		case r == ' ':
			if i == 1 || i == utf8.RuneCountInString(s) {
				return Errorf(EINVALID, "%s has leading or trailing white space", field)
			} else if prevSpace {
				return Errorf(EINVALID, "%s has two spaces in a row at character %d; separate words with one space", field, i)
			}
		case unicode.Is(unicode.White_Space, r) || unicode.Is(unicode.Zs, r):
			return Errorf(EINVALID, "%s contains the white space character %U at character %d; only one plain space (U+0020) may separate words", field, r, i)
		}
		prevSpace = r == ' '
	}
	return nil
}

// invisible reports whether r is drawn as nothing: a format character (Cf: zero-width space
// and joiners, the soft hyphen, the byte order mark, tags), a variation selector, or another
// default ignorable code point (the Hangul fillers, the combining grapheme joiner).
func invisible(r rune) bool {
	return unicode.Is(unicode.Cf, r) || unicode.Is(unicode.Variation_Selector, r) ||
		unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r) || r == '\u3164' || r == '\uffa0'
}

// normalizeParts applies the profile to each space-separated part of s (RFC 8265, section
// 3.5) and joins them with one space.
func normalizeParts(field, s string) (string, error) {
	parts := strings.Split(s, " ")
	at := 1 // the character the part starts at, for a message
	for i, part := range parts {
		n, err := precis.UsernameCaseMapped.String(part)
		if err != nil {
			return "", refusedByProfile(field, part, at)
		}
		at += utf8.RuneCountInString(part) + 1
		parts[i] = n
	}
	return strings.Join(parts, " "), nil
}

// refusedByProfile explains why the profile refused part, which starts at character at of
// the name: the first character it refuses alone, or else the bidirectional rule, which
// concerns the part as a whole.
func refusedByProfile(field, part string, at int) error {
	for _, r := range part {
		if _, err := precis.UsernameCaseMapped.String(string(r)); err != nil {
			return Errorf(EINVALID, "%s contains the character %U (%s) at character %d, which names may not hold: use letters, digits and ASCII punctuation", field, r, printable(r), at)
		}
		at++
	}
	return Errorf(EINVALID, "%s mixes right-to-left and left-to-right text in %q in a way that displays ambiguously (RFC 5893)", field, part)
}

// printable returns r quoted for a message, or its code point alone when it does not print.
func printable(r rune) string {
	if unicode.IsPrint(r) {
		return string(r)
	}
	return "unprintable"
}

// scriptSets are the scripts one name may mix, beside Common and Inherited (digits, ASCII
// punctuation, combining marks): the combinations Unicode's "highly restrictive" level allows
// (UTS #39, section 5.2), in which Japanese, Chinese and Korean names may hold Latin letters.
// Any other mix, such as a Cyrillic "с" in a Latin name, is refused: it is how a name passes
// for another.
var scriptSets = [][]string{
	{"Latin", "Han", "Hiragana", "Katakana"},
	{"Latin", "Han", "Bopomofo"},
	{"Latin", "Han", "Hangul"},
}

// checkScripts refuses a name whose letters come from scripts no single writing system
// mixes, naming the first character of the script that breaks the mix.
func checkScripts(field, n string) error {
	var seen []string
	i := 0
	for _, r := range n {
		i++
		script := scriptOf(r)
		if script == "" || script == "Common" || script == "Inherited" || slices.Contains(seen, script) {
			continue
		}
		next := append(slices.Clone(seen), script)
		if !mixAllowed(next) {
			return Errorf(EINVALID, "%s mixes the %s and %s scripts (%U %s at character %d); a name must be written in one script", field, strings.Join(seen, ", "), script, r, printable(r), i)
		}
		seen = next
	}
	return nil
}

// mixAllowed reports whether the scripts may appear together in one name.
func mixAllowed(scripts []string) bool {
	if len(scripts) <= 1 {
		return true
	}
	for _, set := range scriptSets {
		all := true
		for _, s := range scripts {
			if !slices.Contains(set, s) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

// scriptOf returns the name of the Unicode script r belongs to, or "" (ASCII letters are
// Latin; every other ASCII character is Common).
func scriptOf(r rune) string {
	if r < utf8.RuneSelf {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return "Latin"
		}
		return "Common"
	}
	for name, table := range unicode.Scripts {
		if unicode.Is(table, r) {
			return name
		}
	}
	return ""
}

// NameCollision is a group of distinct names that normalise alike: stored before names were
// normalised, they are now one person.
type NameCollision struct {
	Normalized string
	Names      []string // sorted
}

// RefusedName is a name NormalizeName now refuses, with its reason.
type RefusedName struct {
	Name   string
	Reason string
}

// AuditNames sorts stored names (token subjects, requesters, approvers) into the groups of
// distinct names that normalise alike and the names now refused, each sorted, for the check
// command: rows that collide are reported for a person to settle, never merged silently.
func AuditNames(names []string) ([]NameCollision, []RefusedName) {
	groups := map[string][]string{}
	var refused []RefusedName
	for _, name := range names {
		n, err := NormalizeName("name", name)
		if err != nil {
			if !slices.ContainsFunc(refused, func(r RefusedName) bool { return r.Name == name }) {
				refused = append(refused, RefusedName{Name: name, Reason: ErrorMessage(err)})
			}
			continue
		}
		if !slices.Contains(groups[n], name) {
			groups[n] = append(groups[n], name)
		}
	}
	var collisions []NameCollision
	for n, g := range groups {
		if len(g) > 1 {
			slices.Sort(g)
			collisions = append(collisions, NameCollision{Normalized: n, Names: g})
		}
	}
	slices.SortFunc(collisions, func(a, b NameCollision) int { return strings.Compare(a.Normalized, b.Normalized) })
	slices.SortFunc(refused, func(a, b RefusedName) int { return strings.Compare(a.Name, b.Name) })
	return collisions, refused
}
