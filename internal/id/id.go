// Package id makes the opaque ids of approvald's rows (approval.NewID), with the time of
// the caller's choosing for rows made in bulk with the times they would have had (approvald
// bench --seed), whose ids must sort as theirs would.
package id

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"strings"
	"time"
)

var encoding = base32.NewEncoding("0123456789abcdefghjkmnpqrstvwxyz").WithPadding(base32.NoPadding)

// New returns a new id with the given prefix ("apr", "exe", ...): 48 bits of t's millisecond
// time, so ids sort roughly by creation, then 80 random bits.
func New(prefix string, t time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(t.UnixMilli())<<16)
	if _, err := rand.Read(b[6:]); err != nil {
		panic(err)
	}
	var sb strings.Builder
	sb.WriteString(prefix)
	sb.WriteByte('_')
	sb.WriteString(encoding.EncodeToString(b[:]))
	return sb.String()
}
