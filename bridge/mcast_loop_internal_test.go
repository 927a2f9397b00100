package bridge

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestLoopFilter(t *testing.T) {
	member, member2 := netip.MustParseAddr("198.18.1.5"), netip.MustParseAddr("198.18.1.6")
	gwB := netip.MustParseAddr("198.18.3.9")
	type arrival struct {
		payload string
		imm     uint32
		hasImm  bool
		side    int
		src     netip.Addr
		qpn     uint32
		at      time.Duration // since the first
	}
	ms := time.Millisecond
	for _, tc := range []struct {
		name     string
		arrivals []arrival
		want     []bool
	}{{
		name: "another gateway's copy on the far side is dropped",
		arrivals: []arrival{
			{payload: "tick", side: 0, src: member, qpn: 0x11},
			{payload: "tick", side: 1, src: gwB, qpn: 0x22, at: ms},
		},
		want: []bool{true, false},
	}, {
		// (A slow relay goroutine: the copy crosses back instead; the
		// gateway admits the bytes once either way.)
		name: "the copy first, then the original: the original is dropped",
		arrivals: []arrival{
			{payload: "tick", side: 1, src: gwB, qpn: 0x22},
			{payload: "tick", side: 0, src: member, qpn: 0x11, at: ms},
		},
		want: []bool{true, false},
	}, {
		name: "the same member sending the same bytes again crosses",
		arrivals: []arrival{
			{payload: "tick", side: 0, src: member, qpn: 0x11},
			{payload: "tick", side: 0, src: member, qpn: 0x11, at: 100 * ms},
			{payload: "tick", side: 1, src: gwB, qpn: 0x22, at: 101 * ms},
		},
		want: []bool{true, true, false},
	}, {
		name: "the same bytes from another member within the window: dropped (the false positive)",
		arrivals: []arrival{
			{payload: "tick", side: 0, src: member, qpn: 0x11},
			{payload: "tick", side: 0, src: member2, qpn: 0x11, at: 10 * ms},
			{payload: "tick", side: 0, src: member, qpn: 0x12, at: 20 * ms},
		},
		want: []bool{true, false, false},
	}, {
		name: "after the window the same bytes are new",
		arrivals: []arrival{
			{payload: "tick", side: 0, src: member, qpn: 0x11},
			{payload: "tick", side: 1, src: gwB, qpn: 0x22, at: 600 * ms},
		},
		want: []bool{true, true},
	}, {
		name: "copies that keep coming round stay dropped past the window",
		arrivals: []arrival{
			{payload: "tick", side: 0, src: member, qpn: 0x11},
			{payload: "tick", side: 1, src: gwB, qpn: 0x22, at: 400 * ms},
			{payload: "tick", side: 1, src: gwB, qpn: 0x22, at: 800 * ms},
		},
		want: []bool{true, false, false},
	}, {
		name: "immediate data is part of the datagram",
		arrivals: []arrival{
			{payload: "tick", side: 0, src: member, qpn: 0x11},
			{payload: "tick", imm: 7, hasImm: true, side: 1, src: gwB, qpn: 0x22},
			{payload: "tick", imm: 8, hasImm: true, side: 1, src: gwB, qpn: 0x22},
			{payload: "tick", imm: 7, hasImm: true, side: 0, src: member, qpn: 0x11},
			{payload: "tick", imm: 0, hasImm: true, side: 1, src: gwB, qpn: 0x22},
		},
		want: []bool{true, true, true, false, true},
	}, {
		name: "different payloads are different datagrams",
		arrivals: []arrival{
			{payload: "tick 1", side: 0, src: member, qpn: 0x11},
			{payload: "tick 2", side: 1, src: gwB, qpn: 0x22},
			{payload: "", side: 1, src: gwB, qpn: 0x22},
		},
		want: []bool{true, true, true},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newLoopFilter(500 * time.Millisecond)
			t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
			var got []bool
			for _, a := range tc.arrivals {
				got = append(got, f.admit(f.key([]byte(a.payload), a.imm, a.hasImm), a.side, a.src, a.qpn, t0+int64(a.at)))
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("admitted (-want +got):\n%s", d)
			}
		})
	}
}

// TestLoopFilterBounded: a set holds loopWays records; a new key replaces
// the oldest, which is forgotten before its window ends.
func TestLoopFilterBounded(t *testing.T) {
	f := newLoopFilter(time.Second)
	member, gwB := netip.MustParseAddr("198.18.1.5"), netip.MustParseAddr("198.18.3.9")
	now := int64(1)
	// Keys chosen directly: loopWays+1 of them in set 5.
	var keys []uint64
	for i := range loopWays + 1 {
		keys = append(keys, uint64(5+i*loopSets))
	}
	for i, k := range keys {
		if !f.admit(k, 0, member, 1, now+int64(i)) {
			t.Fatalf("key %#x: new, but dropped", k)
		}
	}
	// The first was replaced: its copy is new to the filter now.
	if !f.admit(keys[0], 1, gwB, 2, now+10) {
		t.Errorf("key %#x replaced, yet its copy was dropped", keys[0])
	}
	for _, k := range keys[2:] {
		if f.admit(k, 1, gwB, 2, now+11) {
			t.Errorf("key %#x: its copy crossed within the window", k)
		}
	}
}

func TestLoopFilterAllocs(t *testing.T) {
	f := newLoopFilter(500 * time.Millisecond)
	payload := make([]byte, 1024)
	src := netip.MustParseAddr("2001:db8::5")
	i := 0
	if n := testing.AllocsPerRun(1000, func() {
		payload[0], i = byte(i), i+1
		f.admit(f.key(payload, uint32(i), true), i%2, src, 7, time.Now().UnixNano())
	}); n != 0 {
		t.Errorf("%v allocations per datagram, want 0", n)
	}
}

func BenchmarkLoopFilter(b *testing.B) {
	f := newLoopFilter(500 * time.Millisecond)
	payload := make([]byte, 256)
	src := netip.MustParseAddr("198.18.1.5")
	b.ReportAllocs()
	b.SetBytes(int64(len(payload)))
	for i := 0; b.Loop(); i++ {
		payload[0], payload[1] = byte(i), byte(i>>8)
		f.admit(f.key(payload, 0, false), 0, src, 7, time.Now().UnixNano())
	}
}
