package bridge

import (
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge/leg"

	"github.com/rbridge/rbridge/bridge/config"
)

// TestGroupSpins: busy_poll_cpus go to the directions relayed, in order,
// and busy_poll_idle to each, its naps counted in the group's own counter
// of that direction; a CPU the process may not run on is refused.
func TestGroupSpins(t *testing.T) {
	allowed, err := leg.AllowedCPUs()
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
		idle      time.Duration
		want      [2]leg.Spin
	}{
		{"off", config.DirectionBoth, false, nil, 0, [2]leg.Spin{{CPU: -1}, {CPU: -1}}},
		{"both unpinned", config.DirectionBoth, true, nil, 0, [2]leg.Spin{{On: true, CPU: -1}, {On: true, CPU: -1}}},
		{"both, one CPU", config.DirectionBoth, true, []int{cpu}, 0, [2]leg.Spin{{On: true, CPU: cpu}, {On: true, CPU: -1}}},
		{"ib_to_roce pinned", config.DirectionIBToRoCE, true, []int{cpu}, 0, [2]leg.Spin{{CPU: -1}, {On: true, CPU: cpu}}},
		{"roce_to_ib", config.DirectionRoCEToIB, true, nil, 0, [2]leg.Spin{{On: true, CPU: -1}, {CPU: -1}}},
		{"both napping", config.DirectionBoth, true, nil, time.Millisecond, [2]leg.Spin{{On: true, CPU: -1, Idle: time.Millisecond}, {On: true, CPU: -1, Idle: time.Millisecond}}},
		{"ib_to_roce napping", config.DirectionIBToRoCE, true, nil, time.Millisecond, [2]leg.Spin{{CPU: -1}, {On: true, CPU: -1, Idle: time.Millisecond}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &groupRun{cfg: &config.Group{Direction: tc.direction, BusyPoll: tc.busy, BusyPollCPUs: tc.cpus, BusyPollIdle: tc.idle}}
			got, err := groupSpins(r.cfg, r.relays, &r.naps)
			if err != nil {
				t.Fatal(err)
			}
			for i := range got {
				if want := &r.naps[i]; got[i].On && got[i].Naps != want || !got[i].On && got[i].Naps != nil {
					t.Errorf("direction %d: naps counted in %p, want %p (nil when not polled)", i, got[i].Naps, want)
				}
				got[i].Naps = nil
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
	r := &groupRun{cfg: gc}
	if _, err := groupSpins(gc, r.relays, &r.naps); err == nil {
		t.Errorf("busy_poll_cpus [%d], which the process may not run on: no error", notAllowed)
	}
}
