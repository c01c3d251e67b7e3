package approval

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The input policy (docs/http-api.md, "Input policy"): what text and JSON approvald accepts,
// checked before anything reaches a store, so that both stores are given only what both can
// keep and answer alike. Reads never re-validate: anything stored before a limit existed stays
// readable.
const (
	MaxNameLength         = 100      // characters: approver, requester and token subject names
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
	if err := CheckName("approver", d.Approver, MaxNameLength); err != nil {
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
