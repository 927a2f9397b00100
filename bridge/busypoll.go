package bridge

import (
	"runtime"
	"sync/atomic"

	"github.com/rbridge/rbridge/bridge/leg"

	"github.com/rbridge/rbridge/bridge/config"
)

// Busy-poll (a group's busy_poll): each of the group's receive loops (one
// per direction relayed) polls in a loop instead of sleeping until a
// completion wakes it, so nothing is woken on the way of a datagram.
// A leg's busy_poll does the same for its RC sessions with one loop for
// the leg (leg.SpinLoop): a userspace leg's device is polled (its socket
// read without waiting) and its sessions' send CQs with it, a verbs leg's
// sessions' CQs have no completion channel and are polled; the relay runs
// on the loop's thread. Both take their CPUs from busy_poll_cpus through
// leg.Spins, pin and lock the same way, and count towards the GOMAXPROCS
// warning (busyLoopStarted). On a
// verbs leg it polls the HCA's CQ, which has no completion channel then;
// on a userspace leg it reads the group's socket without waiting (the
// transport's polled group: no goroutine of the device reads it) and
// polls the QP's CQ, in the one loop.
//
// A loop locks its goroutine to an OS thread (pinned to its CPU with
// sched_setaffinity when busy_poll_cpus names one) and never yields it:
// it holds a CPU and one of Go's Ps while the gateway runs, traffic or
// not, as ib2roce's busy-poll cores do; a leg's or a group's
// busy_poll_idle has its loop nap when it found no traffic for that long
// (leg.SpinLoop, leg.Spin.Wait), the CPU and the P given back until a
// round finds work. Yielding between polls
// (runtime.Gosched) would hand the CPU on, but a goroutine always
// runnable keeps Go's scheduler from polling the network (it looks at
// its run queues first, and sysmon polls only every 10 ms), which delays
// every other socket of the process; so it does not yield. The process
// therefore needs more Ps (GOMAXPROCS) than busy-poll loops: the gateway
// warns when it has not. The thread is never unlocked: it ends with its
// loop (Go parks it for good if it was the main thread), and its
// affinity with it.

// groupSpins is the spin of each of a group's directions (0 roce_to_ib,
// 1 ib_to_roce): busy_poll_cpus in the order of the directions relayed,
// napping after busy_poll_idle, counted in naps.
func groupSpins(gc *config.Group, relays func(dir int) bool, naps *[2]atomic.Uint64) ([2]leg.Spin, error) {
	s, err := leg.Spins(gc.BusyPoll, gc.BusyPollCPUs, []bool{relays(0), relays(1)})
	for i := range s {
		if s[i].On {
			s[i].Idle, s[i].Naps = gc.BusyPollIdle, &naps[i]
		}
	}
	return [2]leg.Spin{s[0], s[1]}, err
}

// busyLoopStarted counts a busy-poll loop started for a leg or a group
// (what: "leg", "group"; name its name) and warns when the process has
// no P (GOMAXPROCS) left for the rest of the gateway.
func (g *Gateway) busyLoopStarted(what, name string) {
	if n, procs := g.busyLoops.Add(1), runtime.GOMAXPROCS(0); int(n) >= procs {
		g.log.Warn("more busy-poll loops than the process has Ps to spare: each holds one while the gateway runs, and the rest of the gateway is left none (raise GOMAXPROCS, give the process more CPUs)",
			what, name, "busy_poll_loops", n, "gomaxprocs", procs)
	}
}
