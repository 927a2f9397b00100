package bridge

import (
	"time"

	"golang.org/x/time/rate"

	"github.com/rbridge/rbridge/bridge/config"
)

// A group's rate limit (config Rate): per direction, a token bucket of
// datagrams and one of payload bytes (golang.org/x/time/rate), each only
// when configured. A datagram crosses when both hold enough for it and
// takes from both; else it is dropped and counted (DropRate). Only the
// direction's relay goroutine takes tokens, so the look and the take
// cannot race with another taker. A reload that changes the rate swaps in
// new buckets (full ones) at once.

// groupLimit is a group's rate limit in force.
type groupLimit struct {
	rate config.Rate
	dirs [2]dirLimit
}

// dirLimit is one direction's buckets; nil where the rate has no limit.
type dirLimit struct {
	packets, bytes *rate.Limiter
}

// newGroupLimit makes the buckets of r for both directions (nil: no
// limit at all).
func newGroupLimit(r config.Rate) *groupLimit {
	if !r.Limited() {
		return nil
	}
	l := &groupLimit{rate: r}
	for d := range l.dirs {
		if r.Packets > 0 {
			l.dirs[d].packets = rate.NewLimiter(rate.Limit(r.Packets), int(r.BurstPackets))
		}
		if r.Bytes > 0 {
			l.dirs[d].bytes = rate.NewLimiter(rate.Limit(r.Bytes), int(r.BurstBytes))
		}
	}
	return l
}

// allow reports whether a datagram of n bytes may cross at now, and takes
// its tokens when it may.
func (l *dirLimit) allow(now time.Time, n int) bool {
	if l.packets != nil && l.packets.TokensAt(now) < 1 {
		return false
	}
	if l.bytes != nil && l.bytes.TokensAt(now) < float64(n) {
		return false
	}
	if l.packets != nil {
		l.packets.AllowN(now, 1)
	}
	if l.bytes != nil {
		l.bytes.AllowN(now, n)
	}
	return true
}
