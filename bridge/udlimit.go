package bridge

import (
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/rbridge/rbridge/bridge/config"
)

// A rate limit (config Rate) of a multicast group or a UD route: per
// direction, a token bucket of datagrams and one of payload bytes
// (golang.org/x/time/rate), each only when configured. A datagram crosses
// when both hold enough for it and takes from both; else it is dropped and
// counted (DropRate). A group's direction has one taker (its relay
// goroutine); a UD route's has one per client (each pair's relay
// goroutine), so the look at both buckets and the take are made under the
// direction's mutex. A reload that changes the rate swaps in new buckets
// (full ones) at once.

// udLimit is a group's or a UD route's rate limit in force.
type udLimit struct {
	rate config.Rate
	dirs [2]dirLimit
}

// dirLimit is one direction's buckets; nil where the rate has no limit.
type dirLimit struct {
	mu             sync.Mutex // held over the look and the take
	packets, bytes *rate.Limiter
}

// newUDLimit makes the buckets of r for both directions (nil: no limit at
// all).
func newUDLimit(r config.Rate) *udLimit {
	if !r.Limited() {
		return nil
	}
	l := &udLimit{rate: r}
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
	l.mu.Lock()
	defer l.mu.Unlock()
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

// limitSlot holds the limit in force of a group or a UD route; a reload
// swaps it while relay goroutines read it.
type limitSlot struct {
	p atomic.Pointer[udLimit] // nil: no limit
}

// set puts r in force, with full buckets.
func (s *limitSlot) set(r config.Rate) { s.p.Store(newUDLimit(r)) }

// allow reports whether a datagram of n bytes may cross in direction dir,
// taking its share when it may.
func (s *limitSlot) allow(dir, n int) bool {
	l := s.p.Load()
	return l == nil || l.dirs[dir].allow(time.Now(), n)
}

// rate is the limit in force (the zero Rate: none).
func (s *limitSlot) rate() config.Rate {
	if l := s.p.Load(); l != nil {
		return l.rate
	}
	return config.Rate{}
}
