package bridge

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"

	"github.com/rbridge/rbridge/bridge/config"
)

// Busy-poll (a leg's busy_poll): the leg's UD receive loops (a multicast
// group's QP on the leg, either QP of a UD route's client that is on the
// leg) poll their completion queue in a loop instead of sleeping until a
// completion wakes them: no wake-up on the way of a datagram, for a CPU
// kept busy by each loop while the gateway runs, traffic or not. On a
// verbs leg the CQs have no completion channel then (the HCA's CQ is read
// by ibv_poll_cq alone); on a userspace leg the transport's CQ is polled,
// and the leg's sockets spin too (udpconn's BusyPoll).
//
// Without busy_poll_cpus a spinning loop yields to other goroutines
// between polls (runtime.Gosched): it takes a CPU only while the Go
// scheduler has nothing else for it. With them each loop locks its
// goroutine to an OS thread pinned to the next CPU of the list
// (sched_setaffinity) and never yields: the ib2roce way of running, for
// cores kept away from everything else (isolcpus, systemd's CPUAffinity
// for the rest). The thread is never unlocked: it ends with its loop, and
// its affinity with it.

// busyPoll is a leg's busy-poll setting.
type busyPoll struct {
	on   bool
	cpus []int
	next atomic.Uint64 // the next loop's index into cpus
}

// newBusyPoll checks a leg's busy_poll_cpus against the CPUs the process
// may run on.
func newBusyPoll(l *config.Leg) (*busyPoll, error) {
	b := &busyPoll{on: l.BusyPoll, cpus: l.BusyPollCPUs}
	if len(b.cpus) > 0 {
		allowed, err := allowedCPUs()
		if err != nil {
			return nil, fmt.Errorf("busy_poll_cpus: %w", err)
		}
		for _, c := range b.cpus {
			if !allowed[c] {
				return nil, fmt.Errorf("busy_poll_cpus: CPU %d is not one this process may run on (%d allowed)", c, len(allowed))
			}
		}
	}
	return b, nil
}

// port is the spin of the leg's next UD receive loop.
func (b *busyPoll) port() spin {
	if b == nil || !b.on {
		return spin{cpu: -1}
	}
	s := spin{on: true, cpu: -1}
	if len(b.cpus) > 0 {
		s.cpu = b.cpus[(b.next.Add(1)-1)%uint64(len(b.cpus))]
	}
	return s
}

// spin is how one UD port's receive loop waits: sleeping (on false), or
// spinning, pinned to cpu (-1: not pinned, yielding between polls).
type spin struct {
	on  bool
	cpu int
}

// String describes the spin for a port's description.
func (s spin) String() string {
	switch {
	case !s.on:
		return ""
	case s.cpu < 0:
		return ", busy-polled"
	}
	return fmt.Sprintf(", busy-polled on CPU %d", s.cpu)
}

// pin locks the calling goroutine, the port's receiver, to an OS thread
// on the port's CPU, when it has one. The goroutine must not unlock it.
func (s spin) pin() error {
	if !s.on || s.cpu < 0 {
		return nil
	}
	runtime.LockOSThread()
	return pinThread(s.cpu)
}

// wait polls with poll until it returns a completion or an error, or ctx
// ends; it yields between polls unless pinned.
func (s spin) wait(ctx context.Context, poll func() (int, error)) (int, error) {
	done := ctx.Done()
	for {
		if n, err := poll(); n > 0 || err != nil {
			return n, err
		}
		select {
		case <-done:
			return 0, ctx.Err()
		default:
		}
		if s.cpu < 0 {
			runtime.Gosched()
		}
	}
}
