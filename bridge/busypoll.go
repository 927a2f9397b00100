package bridge

import (
	"fmt"

	"github.com/rbridge/rbridge/bridge/leg"

	"github.com/rbridge/rbridge/bridge/config"
)

// Busy-poll (a group's busy_poll): each of the group's receive loops (one
// per direction relayed) polls in a loop instead of sleeping until a
// completion wakes it, so nothing is woken on the way of a datagram. On a
// verbs leg it polls the HCA's CQ, which has no completion channel then;
// on a userspace leg it reads the group's socket without waiting (the
// transport's polled group: no goroutine of the device reads it) and
// polls the QP's CQ, in the one loop.
//
// A loop locks its goroutine to an OS thread (pinned to its CPU with
// sched_setaffinity when busy_poll_cpus names one) and never yields it:
// it holds a CPU and one of Go's Ps while the gateway runs, traffic or
// not, as ib2roce's busy-poll cores do. Yielding between polls
// (runtime.Gosched) would hand the CPU on, but a goroutine always
// runnable keeps Go's scheduler from polling the network (it looks at
// its run queues first, and sysmon polls only every 10 ms), which delays
// every other socket of the process; so it does not yield. The process
// therefore needs more Ps (GOMAXPROCS) than busy-poll loops: the gateway
// warns when it has not. The thread is never unlocked: it ends with its
// loop (Go parks it for good if it was the main thread), and its
// affinity with it.

// groupSpins is the spin of each of a group's directions (0 roce_to_ib,
// 1 ib_to_roce): busy_poll_cpus in the order of the directions relayed.
func groupSpins(gc *config.Group, relays func(dir int) bool) ([2]leg.Spin, error) {
	s := [2]leg.Spin{{CPU: -1}, {CPU: -1}}
	if !gc.BusyPoll {
		return s, nil
	}
	var allowed map[int]bool
	if len(gc.BusyPollCPUs) > 0 {
		var err error
		if allowed, err = leg.AllowedCPUs(); err != nil {
			return s, fmt.Errorf("busy_poll_cpus: %w", err)
		}
	}
	next := 0
	for dir := range 2 {
		if !relays(dir) {
			continue
		}
		s[dir].On = true
		if next < len(gc.BusyPollCPUs) {
			c := gc.BusyPollCPUs[next]
			if !allowed[c] {
				return s, fmt.Errorf("busy_poll_cpus: CPU %d is not one this process may run on (%d allowed)", c, len(allowed))
			}
			s[dir].CPU = c
			next++
		}
	}
	return s, nil
}
