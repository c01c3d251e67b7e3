package approval

import (
	"time"

	"github.com/approvald/approval/internal/id"
)

// NewID returns a new opaque id with the given prefix ("apr", "exe", ...): 48 bits of
// millisecond time, so ids sort roughly by creation, then 80 random bits.
func NewID(prefix string) string { return id.New(prefix, time.Now()) }
