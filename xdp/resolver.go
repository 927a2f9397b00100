package xdp

import (
	"fmt"
	"log/slog"
	"net/netip"
	"sync/atomic"
	"time"
)

// ResolverOptions configures a Resolver.
type ResolverOptions struct {
	// Ifindex is the interface the AF_XDP Conn sends on, in the calling
	// thread's network namespace: every peer must be reached through it.
	Ifindex int
	// Src, if valid, is the source address routes are looked up from (the
	// Conn's local address), as policy routing may choose by source.
	Src netip.Addr
	// Timeout bounds one resolution: a neighbour that has not answered by
	// then failed. 0 means DefaultResolveTimeout.
	Timeout time.Duration
	// Hold is how long a neighbour that failed is answered with an error
	// at once, without asking again, so that a dead peer costs one
	// resolution per Hold rather than one per packet. 0 means
	// DefaultResolveHold.
	Hold time.Duration
	// Logger receives neighbours that did not answer and the neighbour
	// subscription's troubles; nil means slog.Default().
	Logger *slog.Logger
}

const (
	// DefaultResolveTimeout is the kernel's own time for a neighbour to
	// answer: 3 probes (mcast_solicit, mcast_probes) 1 s apart.
	DefaultResolveTimeout = 3 * time.Second
	// DefaultResolveHold is how long a failed neighbour is not asked for
	// again.
	DefaultResolveHold = time.Second
)

func (o *ResolverOptions) check() error {
	switch {
	case o.Ifindex <= 0:
		return fmt.Errorf("xdp: neighbour resolver: ifindex %d", o.Ifindex)
	case o.Timeout < 0:
		return fmt.Errorf("xdp: neighbour resolver: timeout %v", o.Timeout)
	case o.Hold < 0:
		return fmt.Errorf("xdp: neighbour resolver: hold %v", o.Hold)
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultResolveTimeout
	}
	if o.Hold == 0 {
		o.Hold = DefaultResolveHold
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return nil
}

// ResolverStats counts a Resolver's resolutions: neighbours the kernel was
// asked to resolve (a miss or an incomplete entry in its table), and of
// those the ones that answered and the ones that failed (no answer within
// the timeout, the kernel gave up, or the ask itself failed). A neighbour
// the table knew is not counted; neither is an error answered from the
// hold.
type ResolverStats struct {
	Asked, Answered, Failed atomic.Uint64
}

// ResolverStatsSnapshot is ResolverStats read at one moment, as plain
// values.
type ResolverStatsSnapshot struct {
	Asked, Answered, Failed uint64
}

// Snapshot reads every counter.
func (s *ResolverStats) Snapshot() ResolverStatsSnapshot {
	return ResolverStatsSnapshot{Asked: s.Asked.Load(), Answered: s.Answered.Load(), Failed: s.Failed.Load()}
}
