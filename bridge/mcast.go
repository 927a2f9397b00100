package bridge

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rbridge/rbridge/bridge/leg"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/roce/cm"
	"github.com/rbridge/rbridge/roce/transport"
)

// Multicast groups (config groups:). For each group the gateway has one UD
// QP on each of its two legs: on the userspace (RoCE) leg a transport QP
// attached to the group, whose packets a socket bound to the group and
// joined on the leg's interface receives (IGMP/MLD: the interface's
// Ethernet multicast filter follows), or on an AF_XDP leg the leg's own
// socket, its classifier redirecting the group's datagrams while a kernel
// socket holds the membership; on the other leg, a verbs one, an
// rdma_cm id in the UDP port space joined with rdma_join_multicast (as
// mckey joins), whose QP the kernel attaches. A datagram one QP receives
// is sent to the group on the other leg (to QPN 0xFFFFFF with the group's
// Q_Key), in the directions configured; the side that only sends joins
// send-only on a verbs leg and does not attach on a userspace one.
//
// Loop prevention does not lower the hop limit (RoCE multicast must cross
// routers; the userspace leg sends with a TTL of 64): a datagram whose
// source is one of the group's own QPs (its QPN and the leg's address) is
// what the gateway sent, come back, and is dropped (DropOwn): its own send
// heard by its receiver on the other leg (both legs on one wire), or
// looped back by the HCA or the IP stack. Another gateway's copy of what
// this one relayed (two gateways on the same pair of fabrics) is dropped
// by the group's loopFilter (DropLoop, mcast_loop.go), and what a
// gateway listed in the group's peers sends is never relayed (DropPeer).

// groupDirs names a group's directions: 0 from the RoCE leg to the IB
// leg, 1 back.
var groupDirs = [2]string{config.DirectionRoCEToIB, config.DirectionIBToRoCE}

// groupRun is a running group.
type groupRun struct {
	cfg   *config.Group
	stats *UDStats
	ports [2]leg.UDPort // 0 the RoCE leg's, 1 the IB leg's
	own   [2]netip.Addr // each leg's address: a datagram from it and the port's QPN is the gateway's
	qkey  [2]uint32     // the group's Q_Key on each leg
	loops *loopFilter   // what the group admitted lately, both ways (nil: loop_window 0)
	// limit is the rate limit in force; a reload may swap it.
	limit limitSlot
	// spins is how each direction's receive loop waits (busy_poll);
	// naps counts the quiet spells each napped through (busy_poll_idle).
	spins [2]leg.Spin
	naps  [2]atomic.Uint64
	// cancel ends the group's relaying; done is closed once it ended and
	// its QPs are closed.
	cancel context.CancelFunc
	done   chan struct{}
}

// relays reports whether the group crosses in direction dir.
func (r *groupRun) relays(dir int) bool {
	return r.cfg.Direction == config.DirectionBoth || r.cfg.Direction == groupDirs[dir]
}

// startGroup joins a group on both its legs and starts relaying; a group
// with joined_on starts finding its groups instead (joined.go).
func (g *Gateway) startGroup(c *config.Config, gc *config.Group) error {
	if gc.JoinedOn != "" {
		if err := g.startJoined(gc); err != nil {
			return fmt.Errorf("%s:%d: group %q: %w", c.File(), gc.Line(), gc.Name, err)
		}
		return nil
	}
	r, err := g.openGroup(g.ctx, gc)
	if err != nil {
		return fmt.Errorf("%s:%d: group %q: %w", c.File(), gc.Line(), gc.Name, err)
	}
	g.mu.Lock()
	g.groups[gc.Name] = r
	g.mu.Unlock()
	return nil
}

// openGroup joins gc on both its legs and starts relaying until ctx ends
// or stop is called.
func (g *Gateway) openGroup(ctx context.Context, gc *config.Group) (*groupRun, error) {
	r := &groupRun{cfg: gc, stats: &UDStats{}, qkey: [2]uint32{cm.RDMAUDPQKey, cm.RDMAUDPQKey}, done: make(chan struct{})}
	r.limit.set(gc.Rate)
	var err error
	if r.spins, err = groupSpins(gc, r.relays, &r.naps); err != nil {
		return nil, err
	}
	if gc.LoopWindow > 0 {
		r.loops = newLoopFilter(gc.LoopWindow)
	}
	fail := func(err error) (*groupRun, error) {
		for _, p := range r.ports {
			if p != nil {
				_ = p.Close()
			}
		}
		return nil, err
	}
	for side, name := range [2]string{gc.RoCE, gc.IB} {
		// A side receives what it relays to the other.
		receive := r.relays(side)
		// A port is set only when made: a nil *port in the interface would
		// not be nil to fail.
		if l, ok := g.legs[name].(leg.GroupLeg); ok {
			var p leg.UDPort
			if p, r.own[side], r.qkey[side], err = l.GroupPort(ctx, gc, side, !receive, g.timeout, r.spins[side]); err == nil {
				r.ports[side] = p
			}
		} else {
			err = fmt.Errorf("leg %q: groups are on userspace and verbs legs", name)
		}
		if err != nil {
			return fail(fmt.Errorf("join on leg %q: %w", name, err))
		}
	}
	g.log.Info("multicast group joined", "group", gc.Name, "address", gc.Group, "direction", gc.Direction,
		"roce_side", r.ports[0].Describe(), "ib_side", r.ports[1].Describe())
	for _, s := range r.spins {
		if !s.On {
			continue
		}
		g.busyLoopStarted("group", gc.Name)
	}
	ctx, r.cancel = context.WithCancel(ctx)
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		defer close(r.done)
		r.run(ctx, g)
	}()
	return r, nil
}

// stop ends the group's relaying and waits until its QPs are closed (its
// memberships left).
func (r *groupRun) stop() {
	r.cancel()
	<-r.done
}

func (r *groupRun) run(ctx context.Context, g *Gateway) {
	var wg sync.WaitGroup
	for dir := range 2 {
		if !r.relays(dir) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.routineRelay(ctx, g, dir)
		}()
	}
	wg.Wait()
	for _, p := range r.ports {
		if err := p.Close(); err != nil {
			g.log.Warn("multicast group's QP not closed cleanly", "group", r.cfg.Name, "qp", p.Describe(), "err", err)
		}
	}
}

// routineRelay sends what one leg's QP receives from the group to the
// group on the other leg: dir 0 from the RoCE leg.
func (r *groupRun) routineRelay(ctx context.Context, g *Gateway, dir int) {
	from, to := r.ports[dir], r.ports[1-dir]
	dst := leg.UDDest{Addr: r.cfg.Group, QPN: transport.MulticastQPN, QKey: r.qkey[1-dir]}
	if err := r.spins[dir].Pin(); err != nil {
		g.log.Warn("multicast receive loop not pinned: it busy-polls where the kernel runs its thread", "group", r.cfg.Name, "qp", from.Describe(), "err", err)
	}
	rl := &udRelay{from: from, to: to, dir: dir, stats: r.stats,
		admit: func(ds []leg.Datagram) (int, leg.UDDest) { return r.admit(dir, ds, to), dst },
		sendFailed: func(n uint64, err error) {
			g.log.Warn("multicast send failed", "group", r.cfg.Name, "direction", groupDirs[dir], "datagrams", n, "err", err)
		}}
	if err := rl.run(ctx); ctx.Err() == nil {
		g.log.Error("multicast group stopped relaying", "group", r.cfg.Name, "direction", groupDirs[dir], "err", err)
		g.mu.Lock()
		g.halted[r.cfg.Name] = fmt.Errorf("relaying %s: %w", groupDirs[dir], err)
		g.mu.Unlock()
	}
}

// admit keeps the datagrams of ds that cross toward to, at the front of
// ds, and returns how many; the others are counted by cause and
// released.
func (r *groupRun) admit(dir int, ds []leg.Datagram, to leg.UDPort) int {
	k := 0
	for i := range ds {
		d := &ds[i]
		if d.PoolEmpty {
			r.stats.DropPoolEmpty[dir].Add(1)
			continue
		}
		switch {
		case r.isOwn(d):
			r.stats.DropOwn[dir].Add(1)
		case slices.Contains(r.cfg.Peers, d.Src):
			r.stats.DropPeer[dir].Add(1)
		case d.N > to.MTU() || d.TooLongHere:
			r.stats.DropTooLong[dir].Add(1)
		case r.loops != nil && !r.loops.admit(r.loops.key(d.Payload(), d.Imm, d.HasImm), dir, d.Src, d.SrcQPN, time.Now().UnixNano()):
			r.stats.DropLoop[dir].Add(1)
		case !r.limit.allow(dir, d.N):
			r.stats.DropRate[dir].Add(1)
		default:
			ds[k] = *d
			k++
			continue
		}
		d.Buf.Release()
	}
	return k
}

// isOwn reports whether d came from one of the group's own QPs.
func (r *groupRun) isOwn(d *leg.Datagram) bool {
	for side, p := range r.ports {
		if d.SrcQPN == p.QPN() && d.Src == r.own[side] {
			return true
		}
	}
	return false
}

// GroupStatus describes a multicast group the gateway relays.
type GroupStatus struct {
	Name      string `json:"name"`
	Group     string `json:"group"`
	RoCELeg   string `json:"roce_leg"`
	IBLeg     string `json:"ib_leg"`
	Direction string `json:"direction"`
	RoCESide  string `json:"roce_side"`
	IBSide    string `json:"ib_side"`
	// Rate is the rate limit in force, each direction (absent: none).
	Rate  *config.Rate    `json:"rate,omitempty"`
	Stats UDStatsSnapshot `json:"stats"` // arrays are [roce_to_ib, ib_to_roce]
	// RoCESideXDP and IBSideXDP are what the XDP classifier of a side on
	// an AF_XDP leg redirected of the group's datagrams (a side that
	// receives the group; per group, so here and not on /metrics).
	RoCESideXDP *XDPGroupStatus `json:"roce_side_xdp,omitempty"`
	IBSideXDP   *XDPGroupStatus `json:"ib_side_xdp,omitempty"`
	// FoundBy names the joined_on entry that found the group joined on
	// its members' side (absent: a group the file names).
	FoundBy string `json:"found_by,omitempty"`
	// BusyPollNaps counts the quiet spells each direction's receive loop
	// napped through ([roce_to_ib, ib_to_roce]; busy_poll_idle; absent
	// without it).
	BusyPollNaps *[2]uint64 `json:"busy_poll_naps,omitempty"`
}

// XDPGroupStatus is the XDP classifier's count of one group's datagrams.
type XDPGroupStatus struct {
	Packets uint64 `json:"packets"` // redirected to the leg's socket
	Bytes   uint64 `json:"bytes"`   // their Ethernet frames' bytes
	ECNCE   uint64 `json:"ecn_ce"`  // of which marked ECN Congestion Experienced
}

// xdpStatus is the classifier's count of the group on side's leg, when
// that side receives the group on an AF_XDP leg.
func (r *groupRun) xdpStatus(side int) *XDPGroupStatus {
	c, ok := leg.GroupXDPCounters(r.ports[side], r.cfg.Group)
	if !ok {
		return nil
	}
	return &XDPGroupStatus{Packets: c.Packets, Bytes: c.Bytes, ECNCE: c.ECNCE}
}

// groupStatus returns the running groups, in the config's order (a
// joined_on entry's groups at its place, in address order).
func (g *Gateway) groupStatus() []GroupStatus {
	g.mu.Lock()
	cfg := g.cfg
	runs := make(map[string]*groupRun, len(g.groups))
	for n, r := range g.groups {
		runs[n] = r
	}
	joined := make(map[string]*joinedRun, len(g.joined))
	for n, j := range g.joined {
		joined[n] = j
	}
	g.mu.Unlock()
	var out []GroupStatus
	for i := range cfg.Groups {
		if j := joined[cfg.Groups[i].Name]; j != nil {
			for _, r := range j.runs() {
				out = append(out, r.status(cfg.Groups[i].Name))
			}
			continue
		}
		if r := runs[cfg.Groups[i].Name]; r != nil {
			out = append(out, r.status(""))
		}
	}
	return out
}

// status describes the group; joinedOf names the joined_on entry that
// found it ("" for a group of the file).
func (r *groupRun) status(joinedOf string) GroupStatus {
	s := r.stats.Snapshot()
	s.DropNoReceive[0] += r.ports[0].NoReceive()
	s.DropNoReceive[1] += r.ports[1].NoReceive()
	gs := GroupStatus{Name: r.cfg.Name, Group: r.cfg.Group.String(), RoCELeg: r.cfg.RoCE, IBLeg: r.cfg.IB,
		Direction: r.cfg.Direction, RoCESide: r.ports[0].Describe(), IBSide: r.ports[1].Describe(), Stats: s,
		RoCESideXDP: r.xdpStatus(0), IBSideXDP: r.xdpStatus(1), FoundBy: joinedOf}
	if rt := r.limit.rate(); rt.Limited() {
		gs.Rate = &rt
	}
	if r.cfg.BusyPollIdle > 0 {
		gs.BusyPollNaps = &[2]uint64{r.naps[0].Load(), r.naps[1].Load()}
	}
	return gs
}

// GroupStats returns a group's counters (nil for no such group).
func (g *Gateway) GroupStats(name string) *UDStatsSnapshot {
	for _, s := range g.groupStatus() {
		if s.Name == name {
			return &s.Stats
		}
	}
	return nil
}
