package bridge

import (
	"testing"

	"github.com/rbridge/rbridge/bridge/leg"

	"github.com/rbridge/rbridge/bridge/config"
)

// TestGroupSpins: busy_poll_cpus go to the directions relayed, in order;
// a CPU the process may not run on is refused.
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
		want      [2]leg.Spin
	}{
		{"off", config.DirectionBoth, false, nil, [2]leg.Spin{{CPU: -1}, {CPU: -1}}},
		{"both unpinned", config.DirectionBoth, true, nil, [2]leg.Spin{{On: true, CPU: -1}, {On: true, CPU: -1}}},
		{"both, one CPU", config.DirectionBoth, true, []int{cpu}, [2]leg.Spin{{On: true, CPU: cpu}, {On: true, CPU: -1}}},
		{"ib_to_roce pinned", config.DirectionIBToRoCE, true, []int{cpu}, [2]leg.Spin{{CPU: -1}, {On: true, CPU: cpu}}},
		{"roce_to_ib", config.DirectionRoCEToIB, true, nil, [2]leg.Spin{{On: true, CPU: -1}, {CPU: -1}}},
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
