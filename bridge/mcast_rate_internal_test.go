package bridge

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/bridge/config"
)

// TestGroupLimit: a direction's buckets, on a clock passed in: the burst
// crosses at once, then the rate; a datagram that one bucket refuses
// takes nothing from the other; each direction has buckets of its own.
func TestGroupLimit(t *testing.T) {
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
			l := newGroupLimit(tc.rate)
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
	if l := newGroupLimit(config.Rate{}); l != nil {
		t.Errorf("a rate without limits made buckets: %+v", l)
	}
}

// TestGroupSpins: busy_poll_cpus go to the directions relayed, in order;
// a CPU the process may not run on is refused.
func TestGroupSpins(t *testing.T) {
	allowed, err := allowedCPUs()
	if err != nil {
		t.Fatal(err)
	}
	var cpu int
	for c := range allowed {
		cpu = c
	}
	for _, tc := range []struct {
		name      string
		direction string
		busy      bool
		cpus      []int
		want      [2]spin
	}{
		{"off", config.DirectionBoth, false, nil, [2]spin{{cpu: -1}, {cpu: -1}}},
		{"both unpinned", config.DirectionBoth, true, nil, [2]spin{{on: true, cpu: -1}, {on: true, cpu: -1}}},
		{"both, one CPU", config.DirectionBoth, true, []int{cpu}, [2]spin{{on: true, cpu: cpu}, {on: true, cpu: -1}}},
		{"ib_to_roce pinned", config.DirectionIBToRoCE, true, []int{cpu}, [2]spin{{cpu: -1}, {on: true, cpu: cpu}}},
		{"roce_to_ib", config.DirectionRoCEToIB, true, nil, [2]spin{{on: true, cpu: -1}, {cpu: -1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &groupRun{cfg: &config.Group{Direction: tc.direction, BusyPoll: tc.busy, BusyPollCPUs: tc.cpus}}
			got, err := groupSpins(r.cfg, r.relays)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("spins %+v, want %+v", got, tc.want)
			}
		})
	}
	if len(allowed) == config.MaxCPU {
		return // no CPU the process may not run on
	}
	notAllowed := config.MaxCPU - 1
	for allowed[notAllowed] {
		notAllowed--
	}
	gc := &config.Group{Direction: config.DirectionBoth, BusyPoll: true, BusyPollCPUs: []int{notAllowed}}
	if _, err := groupSpins(gc, (&groupRun{cfg: gc}).relays); err == nil {
		t.Errorf("busy_poll_cpus [%d], which the process may not run on: no error", notAllowed)
	}
}
