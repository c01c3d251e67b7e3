package approval

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The input policy (docs/http-api.md, "Input policy"): what text and JSON approvald accepts,
// checked before anything reaches a store, so that both stores are given only what both can
// keep and answer alike. Reads never re-validate: anything stored before a limit existed stays
// readable.
const (
	MaxNameLength         = 100      // characters: approver, requester and token subject names (see NormalizeName)
	MaxOperationKeyLength = 255      // characters of an operation key
	MaxCommentLength      = 2000     // characters of a vote's comment
	MaxNoteLength         = 4096     // bytes of an operator's note
	MaxContextBytes       = 64 << 10 // bytes of the context, compacted
)

// CheckName checks a required identifier or one-line text (a name, an action, a title, an
// operation key): valid UTF-8, not blank, no control character (C0, DEL or C1; so no newline
// and no tab), and at most max characters (runes, not bytes, so that every script gets the
// same allowance). Errors are EINVALID and name field.
func CheckName(field, s string, max int) error {
	if s == "" {
		return Errorf(EINVALID, "%s is required", field)
	} else if err := CheckText(field, s); err != nil {
		return err
	} else if i, r := controlChar(s, ""); i >= 0 {
		return Errorf(EINVALID, "%s contains the control character %U at character %d; it must be one line of printable text", field, r, i+1)
	} else if strings.TrimSpace(s) == "" {
		return Errorf(EINVALID, "%s is blank", field)
	} else if n := utf8.RuneCountInString(s); n > max {
		return Errorf(EINVALID, "%s has %d characters; at most %d are allowed", field, n, max)
	}
	return nil
}

// CheckProse checks optional free text (a comment, a note): valid UTF-8, no control character
// except tab, line feed and carriage return, and at most max characters.
func CheckProse(field, s string, max int) error {
	if err := CheckText(field, s); err != nil {
		return err
	} else if i, r := controlChar(s, "\t\n\r"); i >= 0 {
		return Errorf(EINVALID, "%s contains the control character %U at character %d; only tabs and line breaks are allowed", field, r, i+1)
	} else if n := utf8.RuneCountInString(s); n > max {
		return Errorf(EINVALID, "%s has %d characters; at most %d are allowed", field, n, max)
	}
	return nil
}

// CheckText refuses text that not every store can keep: bytes that are not UTF-8, and the NUL
// character, which PostgreSQL's text and jsonb cannot hold while SQLite would store it. It is
// the least every string that reaches a store must pass, as an EINVALID error naming field.
func CheckText(field, s string) error {
	if strings.IndexByte(s, 0) >= 0 {
		return Errorf(EINVALID, "%s contains a NUL character", field)
	} else if !utf8.ValidString(s) {
		return Errorf(EINVALID, "%s is not valid UTF-8", field)
	}
	return nil
}

// controlChar returns the index in characters and the value of the first control character
// of s (C0, DEL or C1) not in allowed, or -1.
func controlChar(s, allowed string) (int, rune) {
	i := 0
	for _, r := range s {
		if (r < 0x20 || (r >= 0x7f && r <= 0x9f)) && !strings.ContainsRune(allowed, r) {
			return i, r
		}
		i++
	}
	return -1, 0
}

// Validate checks a vote against the input policy before any store work: the approver's name,
// the approval's id or operation key, and the comment. The rules of the vote itself (who may
// vote, a repeat, the approval's state) are Decide's.
func (d DecideRequest) Validate() error {
	if _, err := NormalizeName("approver", d.Approver); err != nil {
		return err
	}
	if err := CheckText("approval_id", d.ApprovalID); err != nil {
		return err
	}
	if d.OperationKey != "" {
		if err := CheckName("operation_key", d.OperationKey, MaxOperationKeyLength); err != nil {
			return err
		}
	}
	return CheckProse("comment", d.Comment, MaxCommentLength)
}

// CheckNote checks an operator's note: required (it is the audit trail's only account of how
// the operator knows), at most MaxNoteLength bytes, and free text as CheckProse allows.
func CheckNote(note string) error {
	if strings.TrimSpace(note) == "" {
		return Errorf(EINVALID, "note is required: say how you know what happened")
	} else if len(note) > MaxNoteLength {
		return Errorf(EINVALID, "note is longer than %d bytes", MaxNoteLength)
	}
	return CheckProse("note", note, MaxNoteLength)
}

// CheckJSON checks a valid JSON document against the JSON part of the input policy, the rules
// of I-JSON (RFC 7493) plus one: no object has a key twice, at any depth (which one would win
// differs between readers, so an approver and a target could see different values); no
// string escapes an unpaired UTF-16 surrogate; every number fits a 64-bit float; and no key or
// string holds a NUL character (PostgreSQL's jsonb cannot). where names the document in the
// EINVALID error ("body", "context"), which also gives the path of the offending key.
func CheckJSON(where string, doc []byte) error {
	if !json.Valid(doc) {
		return Errorf(EINVALID, "%s is not valid JSON", where)
	}
	if err := checkEscapes(where, doc); err != nil {
		return err
	}
	// One pass over the bytes, which are valid JSON, with a stack of the containers open.
	// Where a value is (its path) is worked out only for an error.
	type frame struct {
		object bool
		index  int      // the current element of an array
		key    string   // the current member's key of an object
		keys   []string // an object's keys so far, until there are many
		set    map[string]bool
	}
	var stack []frame
	// path names the value at depth n: the document itself at 0, else the current member or
	// element of the container at n-1.
	path := func(n int) string {
		p := where
		for _, f := range stack[:n] {
			if f.object {
				p = joinPath(p, f.key)
			} else {
				p = fmt.Sprintf("%s[%d]", p, f.index)
			}
		}
		return p
	}
	i := 0
	space := func() {
		for i < len(doc) && (doc[i] == ' ' || doc[i] == '\t' || doc[i] == '\n' || doc[i] == '\r') {
			i++
		}
	}
	// key reads the member key at doc[i] into the object on top of the stack.
	key := func() error {
		f := &stack[len(stack)-1]
		k := string(jsonString(doc, &i))
		if strings.IndexByte(k, 0) >= 0 {
			return Errorf(EINVALID, "%s has a key containing a NUL character", path(len(stack)-1))
		}
		seen := f.set[k]
		if f.set == nil {
			seen = slices.Contains(f.keys, k)
		}
		if seen {
			return Errorf(EINVALID, "%s has the key %q twice; each key may appear once", path(len(stack)-1), k)
		}
		if f.set == nil && len(f.keys) < 16 {
			f.keys = append(f.keys, k)
		} else {
			if f.set == nil {
				f.set = make(map[string]bool, 2*len(f.keys))
				for _, k := range f.keys {
					f.set[k] = true
				}
			}
			f.set[k] = true
		}
		f.key = k
		space()
		i++ // the colon
		return nil
	}
	for {
		// A value starts at doc[i].
		space()
		switch c := doc[i]; {
		case c == '{' || c == '[':
			i++
			stack = append(stack, frame{object: c == '{'})
			space()
			if doc[i] == '}' || doc[i] == ']' {
				i++
				stack = stack[:len(stack)-1]
				break
			}
			if c == '{' {
				if err := key(); err != nil {
					return err
				}
			}
			continue
		case c == '"':
			if s := jsonString(doc, &i); bytes.IndexByte(s, 0) >= 0 {
				return Errorf(EINVALID, "%s contains a NUL character", path(len(stack)))
			}
		case c == 't' || c == 'n':
			i += 4
		case c == 'f':
			i += 5
		default:
			start, float := i, false
			for i < len(doc) && strings.IndexByte("+-0123456789.eE", doc[i]) >= 0 {
				float = float || doc[i] == 'e' || doc[i] == 'E'
				i++
			}
			// Without an exponent, a number beyond a float needs over 300 digits.
			if n := doc[start:i]; float || len(n) > 300 {
				if f, err := strconv.ParseFloat(string(n), 64); err != nil || math.IsInf(f, 0) {
					return Errorf(EINVALID, "%s is the number %.40s, out of the range of a 64-bit float", path(len(stack)), n)
				}
			}
		}
		// A value has ended: go on to the next one, closing the containers that end here.
		for {
			if len(stack) == 0 {
				return nil
			}
			space()
			f := &stack[len(stack)-1]
			if doc[i] == ',' {
				i++
				if f.object {
					space()
					if err := key(); err != nil {
						return err
					}
				} else {
					f.index++
				}
				break
			}
			i++ // '}' or ']'
			stack = stack[:len(stack)-1]
		}
	}
}

// jsonString reads the JSON string at doc[*i], which is valid, moves *i past it and returns
// its value: a string without escapes, in valid UTF-8, is its own bytes; any other is decoded
// as encoding/json decodes it (invalid UTF-8 as U+FFFD).
func jsonString(doc []byte, i *int) []byte {
	start, escaped := *i, false
	j := start + 1
	for doc[j] != '"' {
		if doc[j] == '\\' {
			escaped = true
			j++
		}
		j++
	}
	*i = j + 1
	raw := doc[start+1 : j]
	if !escaped && utf8.Valid(raw) {
		return raw
	}
	var s string
	json.Unmarshal(doc[start:j+1], &s)
	return []byte(s)
}

// joinPath names the member key of the container at path.
func joinPath(path, key string) string {
	simple := key != ""
	for _, r := range key {
		if !(r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			simple = false
			break
		}
	}
	if simple {
		return path + "." + key
	}
	return fmt.Sprintf("%s[%q]", path, key)
}

// checkEscapes refuses \u escapes that encoding/json would silently turn into U+FFFD but
// PostgreSQL's jsonb refuses: an unpaired surrogate. In valid JSON a backslash occurs only in
// strings, so the whole document can be scanned.
func checkEscapes(where string, doc []byte) error {
	for i := 0; i < len(doc); i++ {
		if doc[i] != '\\' || i+1 >= len(doc) {
			continue
		}
		if doc[i+1] != 'u' {
			i++ // \" \\ \/ \b \f \n \r \t
			continue
		}
		r, ok := hex4(doc, i+2)
		if !ok {
			continue // not valid JSON; the decoder says so
		}
		switch {
		case r >= 0xd800 && r <= 0xdbff:
			if lo, ok := hex4(doc, i+8); ok && i+7 < len(doc) && doc[i+6] == '\\' && doc[i+7] == 'u' && lo >= 0xdc00 && lo <= 0xdfff {
				i += 11
				continue
			}
			return Errorf(EINVALID, "%s holds an unpaired UTF-16 surrogate (\\u%04x)", where, r)
		case r >= 0xdc00 && r <= 0xdfff:
			return Errorf(EINVALID, "%s holds an unpaired UTF-16 surrogate (\\u%04x)", where, r)
		}
		i += 5
	}
	return nil
}

// hex4 reads four hex digits at doc[i:].
func hex4(doc []byte, i int) (rune, bool) {
	if i+4 > len(doc) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(doc[i:i+4]), 16, 16)
	return rune(n), err == nil
}
