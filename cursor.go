package approval

import (
	"encoding/base64"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// EncodeCursor names the position after the row (at, id) in a newest-first listing: every
// listing (Approvals, Executions, InboxEvents) orders by a time and then an id. A cursor is
// the base64url of "<at in Unix microseconds>:<id>"; callers treat it as opaque.
func EncodeCursor(at time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(at.UnixMicro(), 10) + ":" + id))
}

// DecodeCursor is the inverse of EncodeCursor. A cursor it could not have made is
// InvalidCursor: one that does not decode, and one whose time no store can compare (outside
// years 1-9999) or whose id no store can hold (a NUL, bytes that are not UTF-8). The stores
// share it, so that such a cursor is refused by both rather than by PostgreSQL alone.
func DecodeCursor(cursor string) (at time.Time, id string, err error) {
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return time.Time{}, "", InvalidCursor()
	}
	micros, id, ok := strings.Cut(string(raw), ":")
	if !ok || id == "" {
		return time.Time{}, "", InvalidCursor()
	}
	n, err := strconv.ParseInt(micros, 10, 64)
	if err != nil {
		return time.Time{}, "", InvalidCursor()
	}
	at = time.UnixMicro(n).UTC()
	if at.Year() < 1 || at.Year() > 9999 || !utf8.ValidString(id) || strings.ContainsRune(id, 0) {
		return time.Time{}, "", InvalidCursor()
	}
	return at, id, nil
}

// InvalidCursor is the error of a listing given a cursor that no page of it made, the same
// text from both stores.
func InvalidCursor() *Error {
	return Errorf(EINVALID, "invalid cursor; pass the next_cursor of a previous page unchanged")
}
