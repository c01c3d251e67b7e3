package approval

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"strings"
	"time"
)

var idEncoding = base32.NewEncoding("0123456789abcdefghjkmnpqrstvwxyz").WithPadding(base32.NoPadding)

// NewID returns a new opaque id with the given prefix ("apr", "exe", ...): 48 bits of
// millisecond time, so ids sort roughly by creation, then 80 random bits.
func NewID(prefix string) string { return NewIDAt(prefix, time.Now()) }

// NewIDAt returns a new id as NewID does, with t as its time: for rows made in bulk with
// the times they would have had (approvald bench --seed), whose ids must sort as theirs would.
func NewIDAt(prefix string, t time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(t.UnixMilli())<<16)
	if _, err := rand.Read(b[6:]); err != nil {
		panic(err)
	}
	var sb strings.Builder
	sb.WriteString(prefix)
	sb.WriteByte('_')
	sb.WriteString(idEncoding.EncodeToString(b[:]))
	return sb.String()
}
