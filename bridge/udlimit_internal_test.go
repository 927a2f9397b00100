package bridge

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/bridge/config"
)

// TestUDLimit: a direction's buckets, on a clock passed in: the burst
// crosses at once, then the rate; a datagram that one bucket refuses
// takes nothing from the other; each direction has buckets of its own.
func TestUDLimit(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	type step struct {
		at    time.Duration // after t0
		dir   int
		bytes int
		want  bool
	}
	for _, tc := range []struct {
		name  string
		rate  config.Rate
		steps []step
	}{
		{"packets", config.Rate{Packets: 10, BurstPackets: 2}, []step{
			{0, 0, 100, true}, {0, 0, 100, true}, {0, 0, 100, false}, // the burst, then nothing
			{0, 1, 100, true},                      // the other direction's own bucket
			{50 * time.Millisecond, 0, 100, false}, // half a token
			{100 * time.Millisecond, 0, 100, true}, // one token a tenth of a second
			{100 * time.Millisecond, 0, 100, false},
			{time.Hour, 0, 100, true}, {time.Hour, 0, 100, true}, {time.Hour, 0, 100, false}, // refilled to the burst, no more
		}},
		{"bytes", config.Rate{Bytes: 1000, BurstBytes: 4096}, []step{
			{0, 0, 4096, true}, {0, 0, 1, false},
			{time.Second, 0, 1000, true}, {time.Second, 0, 1, false},
		}},
		{"both", config.Rate{Packets: 100, BurstPackets: 3, Bytes: 1000, BurstBytes: 4096}, []step{
			{0, 0, 4000, true},
			{0, 0, 200, false}, // the bytes refuse it: the packet bucket keeps its token
			{0, 0, 96, true},
			{0, 0, 0, true}, // the third packet token was still there
			{0, 0, 0, false},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newUDLimit(tc.rate)
			if l == nil {
				t.Fatal("no limit for a rate that limits")
			}
			var got, want []bool
			for _, s := range tc.steps {
				got = append(got, l.dirs[s.dir].allow(t0.Add(s.at), s.bytes))
				want = append(want, s.want)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("allowed, step by step (-want +got):\n%s", d)
			}
		})
	}
	if l := newUDLimit(config.Rate{}); l != nil {
		t.Errorf("a rate without limits made buckets: %+v", l)
	}
}

// TestUDLimitShared: a UD route's clients take from one direction's
// buckets at once; together they never get more than the burst, and
// every datagram is either taken or refused.
func TestUDLimitShared(t *testing.T) {
	const takers, each, burst = 8, 200, 50
	l := newUDLimit(config.Rate{Packets: 1, BurstPackets: burst, Bytes: 1, BurstBytes: burst * 100})
	now := time.Unix(1_800_000_000, 0) // no refill: the buckets hold what they start with
	var wg sync.WaitGroup
	var allowed atomic.Int64
	for range takers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if l.dirs[0].allow(now, 100) {
					allowed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if got := allowed.Load(); got != burst {
		t.Errorf("%d takers of %d datagrams each got %d through buckets of %d: want exactly the burst", takers, each, got, burst)
	}
}
