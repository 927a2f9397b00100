package bridge

import (
	"hash/maphash"
	"net/netip"
	"sync"
	"time"
)

// Loop prevention across gateways. Two gateways that relay one group
// between the same two fabrics hear each other's copies: A relays a
// member's datagram from X to Y, B hears it on Y and (its source is A's,
// not B's own) would relay it back to X, where A hears B's copy, and so
// on forever. Dropping the gateway's own sources (DropOwn) does not stop
// that, and lowering the hop limit would stop RoCE at the first router.
//
// So each group remembers, for its loop_window (default 500 ms; 0 turns
// this off), a key of every datagram it admitted (a hash of the payload
// and immediate data, the two things a relay keeps), with the side it
// arrived on and its source (address and QPN). A datagram with the same
// key that arrives within the window from another source, or on the other
// side, is a copy that went round through another gateway and is dropped
// (DropLoop); one from the same source on the same side is that member
// sending the same bytes again, and crosses. In the example: B's copy on
// Y, source B, matches what A admitted from the member on X: dropped.
// Each gateway relays a datagram once; members on the far side get one
// copy from each gateway that relays that way.
//
// The filter is one per group, over both directions. Were it per
// direction (drop what arrives on a side if it matches what was relayed
// onto that side), a gateway A that heard B's copy on Y before the
// original on X (its goroutine for X late) would relay the copy to X and
// then drop the original; B, which relayed the original to Y, hears A's
// copy on X, matches nothing it relayed onto X, and relays it to Y again;
// A hears that on Y, matches nothing it relayed onto Y, and so on: one
// copy going round for ever. With one filter each gateway admits the bytes
// once, whichever side they came from first, so copies stop after one
// round in every order; only which copies members get changes.
//
// False positives: a datagram whose payload and immediate data equal what
// another source sent within the window (two members sending the same
// bytes, or one sending them from X and Y) is dropped. Memory is bounded:
// loopSets*loopWays records (640 KiB), set-associative, the oldest of a
// set replaced; beyond loopWays records per set within a window (about
// 16k distinct datagrams in 500 ms over the whole group) records live
// less than the window, and a copy slower than what is left is relayed
// once more (and remembered again). Nothing is allocated per datagram.

const (
	loopSets = 4096 // a power of two
	loopWays = 4
)

// loopRecord is one datagram a group admitted.
type loopRecord struct {
	key    uint64
	at     int64    // UnixNano when it was last seen; 0: empty
	src    [16]byte // its source address (IPv4 mapped)
	srcQPN uint32
	side   uint8 // the side it arrived on: 0 RoCE, 1 IB
}

// loopFilter is a group's memory of what it admitted. Its methods are
// safe for concurrent use (the group's two relay goroutines share it).
type loopFilter struct {
	seed   maphash.Seed
	window int64 // nanoseconds

	mu   sync.Mutex // guards sets
	sets [loopSets][loopWays]loopRecord
}

func newLoopFilter(window time.Duration) *loopFilter {
	return &loopFilter{seed: maphash.MakeSeed(), window: int64(window)}
}

// key hashes what a relay carries unchanged: the payload and the
// immediate data.
func (f *loopFilter) key(payload []byte, imm uint32, hasImm bool) uint64 {
	h := maphash.Bytes(f.seed, payload)
	if hasImm {
		h = mix64(h ^ (uint64(imm) | 1<<32))
	}
	return h
}

// mix64 is splitmix64's finalizer.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// admit reports whether a datagram with key that arrived on side from
// src (QPN srcQPN) at now (UnixNano) may be relayed: false when a record
// of the same key younger than the window has another source or side (a
// copy of what the group admitted, come round through another gateway),
// true otherwise, recording it. Either way the record's time becomes now,
// so copies that keep coming round stay dropped.
func (f *loopFilter) admit(key uint64, side int, src netip.Addr, srcQPN uint32, now int64) bool {
	s16 := src.As16()
	set := &f.sets[key&(loopSets-1)]
	f.mu.Lock()
	defer f.mu.Unlock()
	oldest := 0
	for i := range set {
		r := &set[i]
		if r.at != 0 && r.key == key && now-r.at < f.window {
			r.at = now
			return r.side == uint8(side) && r.src == s16 && r.srcQPN == srcQPN
		}
		if r.at < set[oldest].at {
			oldest = i
		}
	}
	set[oldest] = loopRecord{key: key, at: now, src: s16, srcQPN: srcQPN, side: uint8(side)}
	return true
}
