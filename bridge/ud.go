package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rbridge/rbridge/bridge/leg"

	"github.com/rbridge/rbridge/bridge/session"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/roce/cm"
)

// UD routes (config: ud: true) cross rdma_cm's UDP port space.
//
// A client resolves the route's listen address with a SIDR_REQ. The
// gateway resolves the target on the other leg the same way first (SIDR
// there, with the client's private data), and answers the client only
// then: with the target's status when it refused, with SIDRNoQP when it
// did not answer or the gateway has no room, and on success with the QPN
// of a UD QP it made for this client, the target's private data and
// rdma_cm's Q_Key.
//
// Each resolution gets a pair of the gateway's UD QPs (a udPair): one on
// the listen leg that the client sends to, one on the target leg that
// sends to the target and that the target answers. One pair per client
// keeps addressing plain in both directions: the target sees one peer (the
// target-side QP) per client and answers it; a reply arriving there can
// only be for that client, so no table keyed by the target's QPN is
// needed, and the client sees the gateway's client-side QP as the
// service's. The client-side QP takes datagrams from the resolving
// client's address only, and from the first QP there that sends (its QPN
// is not in the SIDR_REQ); the target-side QP takes them from the
// target's address (any QP there: a service may answer from another).
// Anything else is an unknown peer, dropped and counted.
//
// A datagram crosses with its immediate data. rdma_cm's UD examples
// (udaddy) put their own QPN there for the peer to answer to; across the
// gateway that QPN is on the other fabric, so immediate data equal to the
// datagram's source QPN is replaced by the QPN of the gateway's QP that
// sends it on (counted in ImmQPNRewritten). Q_Keys are translated: the
// target gets the Q_Key its SIDR_REP named, the client rdma_cm's
// (RDMAUDPQKey, what its SIDR_REP from the gateway named and what an
// rdma_cm UD QP has).
//
// UD stays UD: nothing is acknowledged, resent or queued. A datagram
// leaves once admitted: what a QP received is posted on the other at
// once, in batches, with up to leg.UDSendWindow sends outstanding there
// (udrelay.go). What cannot
// cross is dropped and counted by cause (UDStats): longer than the other
// leg's MTU (never truncated), from an unknown peer, over the route's rate
// limit (rate:, per direction, shared by all the route's clients: it
// bounds what the target gets whatever the number of clients), no pool
// buffer to keep the receive queue full, or (userspace legs) no receive
// posted when it arrived. A pair ends after UDIdle without a datagram
// either way, or with the gateway.

// DefaultUDIdle is how long a UD client's pair of QPs lives without
// traffic.
const DefaultUDIdle = 2 * time.Minute

// maxUDPairs bounds a route's UD clients at once; beyond it a SIDR_REQ is
// answered SIDRNoQP.
const maxUDPairs = 256

// UDStats counts a UD route's resolutions and datagrams; updated
// atomically. Index 0 of the arrays is toward the target, 1 toward the
// client.
type UDStats struct {
	// Resolved counts the clients answered with a QP (pairs made);
	// Refused the SIDR_REQs answered with the target's refusal or, for a
	// client the route's allow list does not hold, SIDRReject; NoQP
	// those answered SIDRNoQP (the target did not answer, or no room).
	Resolved, Refused, NoQP atomic.Uint64
	Datagrams, Bytes        [2]atomic.Uint64
	ImmQPNRewritten         [2]atomic.Uint64
	// Drops by cause. DropOwn, DropLoop and DropPeer (multicast groups)
	// are loop prevention: what the gateway itself sent to the group,
	// received back; a copy of what it relayed, come back through another
	// gateway (the same bytes from another source within the group's
	// loop_window); and what a gateway the group lists in peers sent.
	// DropRate is what the group's or the UD route's rate limit did not
	// let cross.
	DropTooLong, DropUnknownPeer, DropPoolEmpty, DropNoReceive, DropSendFailed, DropOwn, DropLoop, DropPeer, DropRate [2]atomic.Uint64
}

// UDStatsSnapshot is UDStats read at one moment, as plain values.
// (In /status, each array is [to_target, to_client].)
type UDStatsSnapshot struct {
	Resolved        uint64    `json:"resolved"`
	Refused         uint64    `json:"refused"`
	NoQP            uint64    `json:"no_qp"`
	Datagrams       [2]uint64 `json:"datagrams"`
	Bytes           [2]uint64 `json:"bytes"`
	ImmQPNRewritten [2]uint64 `json:"imm_qpn_rewritten"`
	DropTooLong     [2]uint64 `json:"dropped_too_long"`
	DropUnknownPeer [2]uint64 `json:"dropped_unknown_peer"`
	DropPoolEmpty   [2]uint64 `json:"dropped_pool_empty"`
	DropNoReceive   [2]uint64 `json:"dropped_no_receive"`
	DropSendFailed  [2]uint64 `json:"dropped_send_failed"`
	DropOwn         [2]uint64 `json:"dropped_own,omitempty"`
	DropLoop        [2]uint64 `json:"dropped_loop,omitempty"`
	DropPeer        [2]uint64 `json:"dropped_peer,omitempty"`
	DropRate        [2]uint64 `json:"dropped_rate,omitempty"`
}

// Snapshot reads every counter.
func (s *UDStats) Snapshot() UDStatsSnapshot {
	out := UDStatsSnapshot{Resolved: s.Resolved.Load(), Refused: s.Refused.Load(), NoQP: s.NoQP.Load()}
	for d := range 2 {
		out.Datagrams[d], out.Bytes[d], out.ImmQPNRewritten[d] = s.Datagrams[d].Load(), s.Bytes[d].Load(), s.ImmQPNRewritten[d].Load()
		out.DropTooLong[d], out.DropUnknownPeer[d], out.DropPoolEmpty[d] = s.DropTooLong[d].Load(), s.DropUnknownPeer[d].Load(), s.DropPoolEmpty[d].Load()
		out.DropNoReceive[d], out.DropSendFailed[d], out.DropOwn[d] = s.DropNoReceive[d].Load(), s.DropSendFailed[d].Load(), s.DropOwn[d].Load()
		out.DropLoop[d], out.DropPeer[d] = s.DropLoop[d].Load(), s.DropPeer[d].Load()
		out.DropRate[d] = s.DropRate[d].Load()
	}
	return out
}

// UDDrop is what a UD route or a group dropped for one cause, each way
// (the arrays' directions as UDStatsSnapshot's).
type UDDrop struct {
	Cause string // as /metrics' cause label: too_long, unknown_peer, pool_empty, no_receive, send_failed, own, loop, peer, rate
	N     [2]uint64
}

// Drops returns the drops by cause, every cause, in /metrics' order.
func (s *UDStatsSnapshot) Drops() []UDDrop {
	out := make([]UDDrop, len(udDropCauses))
	for i, c := range udDropCauses {
		out[i] = UDDrop{Cause: c.cause, N: *c.val(s)}
	}
	return out
}

// udPair relays one client's datagrams: client (the listen leg's QP, the
// one the client resolved) and target (the target leg's).
type udPair struct {
	route     string
	legs      [2]string // the route's listen and target legs
	stats     *UDStats
	limit     *limitSlot // the route's, shared by its clients
	log       *slog.Logger
	client    leg.UDPort
	target    leg.UDPort
	requester netip.Addr // who resolved: the only address the client side takes
	svc       leg.UDService
	started   time.Time
	idle      time.Duration

	last atomic.Int64 // UnixNano of the last datagram either way

	mu       sync.Mutex // guards peer, havePeer
	peer     leg.UDDest // the client's QP, from its first datagram
	havePeer bool

	// cancel ends the pair (set before the pair is known to the
	// gateway: a leg whose link goes down ends it through this); why, set
	// before, says what ended it.
	cancel context.CancelFunc
	why    atomic.Pointer[error]
	done   chan struct{}
}

// end ends the pair because of err (a leg whose link went down).
func (p *udPair) end(err error) {
	p.why.CompareAndSwap(nil, &err)
	p.cancel()
}

// UDClientStatus describes one UD client of a route: its pair of gateway
// QPs.
type UDClientStatus struct {
	Route      string    `json:"route"`
	Client     string    `json:"client"`
	ClientQPN  uint32    `json:"client_qpn,omitempty"` // learned from its first datagram
	ClientSide string    `json:"client_side"`
	TargetSide string    `json:"target_side"`
	TargetQPN  uint32    `json:"target_qpn"`
	Started    time.Time `json:"started"`
}

func (p *udPair) status() UDClientStatus {
	p.mu.Lock()
	qpn := p.peer.QPN
	p.mu.Unlock()
	return UDClientStatus{Route: p.route, Client: p.requester.String(), ClientQPN: qpn, ClientSide: p.client.Describe(),
		TargetSide: p.target.Describe(), TargetQPN: p.svc.QPN, Started: p.started}
}

// run relays until ctx ends or the pair has been idle for p.idle.
func (p *udPair) run(ctx context.Context) {
	p.last.Store(time.Now().UnixNano())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.routineRelay(ctx, 0) }()
	go func() { defer wg.Done(); p.routineRelay(ctx, 1) }()
	tick := time.NewTicker(max(p.idle/4, 10*time.Millisecond))
	defer tick.Stop()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case now := <-tick.C:
			if now.Sub(time.Unix(0, p.last.Load())) > p.idle {
				p.log.Info("UD client idle: its QPs are closed", "idle", p.idle)
				p.cancel()
			}
		}
	}
	p.cancel()
	wg.Wait()
	for _, port := range []leg.UDPort{p.client, p.target} {
		if err := port.Close(); err != nil {
			p.log.Warn("UD client's QP not closed cleanly", "qp", port.Describe(), "err", err)
		}
	}
}

// routineRelay moves datagrams one way: dir 0 from the client to the
// target, 1 back.
func (p *udPair) routineRelay(ctx context.Context, dir int) {
	from, to := p.client, p.target
	if dir == 1 {
		from, to = p.target, p.client
	}
	r := &udRelay{from: from, to: to, dir: dir, stats: p.stats,
		admit: func(ds []leg.Datagram) (int, leg.UDDest) { return p.admit(dir, ds, to) },
		sendFailed: func(n uint64, err error) {
			p.log.Warn("UD send failed", "direction", directions[dir], "datagrams", n, "err", err)
		}}
	if err := r.run(ctx); ctx.Err() == nil {
		p.log.Warn("UD receive failed: the client's QPs are closed", "direction", directions[dir], "err", err)
		p.cancel()
	}
}

// admit keeps the datagrams of ds that cross toward to, at the front of
// ds, and returns how many and where they go; the others are counted by
// cause and released. Immediate data equal to a datagram's source QPN is
// rewritten to to's QPN.
func (p *udPair) admit(dir int, ds []leg.Datagram, to leg.UDPort) (int, leg.UDDest) {
	p.last.Store(time.Now().UnixNano())
	k := 0
	for i := range ds {
		d := &ds[i]
		if d.PoolEmpty {
			p.stats.DropPoolEmpty[dir].Add(1)
			continue
		}
		if !p.crosses(dir, d, to) {
			d.Buf.Release()
			continue
		}
		if d.HasImm && d.Imm == d.SrcQPN {
			d.Imm = to.QPN()
			p.stats.ImmQPNRewritten[dir].Add(1)
		}
		ds[k] = *d
		k++
	}
	if dir == 0 {
		return k, leg.UDDest{Addr: p.svc.Addr, QPN: p.svc.QPN, QKey: p.svc.QKey}
	}
	// Toward the client only once it sent (admitted only then): its QP
	// is known for good.
	p.mu.Lock()
	defer p.mu.Unlock()
	return k, p.peer
}

// crosses reports whether d may cross toward to, counting the cause when
// it may not; the client's first datagram makes its QP known.
func (p *udPair) crosses(dir int, d *leg.Datagram, to leg.UDPort) bool {
	p.mu.Lock()
	known := true
	switch {
	case dir == 1:
		// From the target's address only, and once the client sent
		// something (before, there is nowhere to send it).
		known = p.havePeer && d.Src == p.svc.Addr
	case !p.havePeer && d.Src == p.requester:
		p.peer, p.havePeer = leg.UDDest{Addr: d.Src, QPN: d.SrcQPN, QKey: cm.RDMAUDPQKey}, true
		p.log.Info("UD client's QP", "qpn", d.SrcQPN)
	default:
		known = p.havePeer && d.Src == p.peer.Addr && d.SrcQPN == p.peer.QPN
	}
	p.mu.Unlock()
	switch {
	case !known:
		p.stats.DropUnknownPeer[dir].Add(1)
		return false
	case d.N > to.MTU() || d.TooLongHere:
		p.stats.DropTooLong[dir].Add(1)
		return false
	case !p.limit.allow(dir, d.N):
		p.stats.DropRate[dir].Add(1)
		return false
	}
	return true
}

// udRoute is what the gateway keeps of a UD route, across reloads.
type udRoute struct {
	stats *UDStats
	// limit is the route's rate limit in force, per direction, which all
	// its clients' pairs take from; a reload may swap it.
	limit limitSlot
}

// startUDRoute listens on r's address in the UDP port space and starts
// its resolution loop.
func (g *Gateway) startUDRoute(c *config.Config, r *config.Route) error {
	from, ok1 := g.legs[r.Listen.Leg].(leg.UDLeg)
	_, ok2 := g.legs[r.Target.Leg].(leg.UDLeg)
	if !ok1 || !ok2 {
		return fmt.Errorf("%s:%d: route %q: ud: legs %q and %q must both be userspace or verbs legs", c.File(), r.Line(), r.Name, r.Listen.Leg, r.Target.Leg)
	}
	ln, err := from.ListenUD(r.Listen.Addr)
	if err != nil {
		return fmt.Errorf("%s:%d: route %q: listen for SIDR on %v: %w", c.File(), r.Line(), r.Name, r.Listen.Addr, err)
	}
	g.log.Info("UD route listening", "route", r.Name, "listen", r.Listen.Addr, "leg", r.Listen.Leg, "target", r.Target.Addr, "via", r.Target.Leg)
	ctx, cancel := context.WithCancel(g.ctx)
	run := &routeRun{r: r, cancel: cancel, done: make(chan struct{})}
	g.mu.Lock()
	g.routes[r.Name] = run
	if g.routeStats[r.Name] == nil {
		g.routeStats[r.Name] = &GatewayStats{}
		g.ended[r.Name] = &session.StatsSnapshot{}
	}
	ur := g.udRoutes[r.Name]
	if ur == nil {
		ur = &udRoute{stats: &UDStats{}}
		g.udRoutes[r.Name] = ur
	}
	g.mu.Unlock()
	if ur.limit.rate() != r.Rate {
		ur.limit.set(r.Rate)
	}
	g.wg.Add(1)
	go g.routineResolve(ctx, run, ln)
	return nil
}

// routineResolve takes the route's SIDR_REQs, one goroutine each.
func (g *Gateway) routineResolve(ctx context.Context, run *routeRun, ln leg.UDListener) {
	defer g.wg.Done()
	defer close(run.done)
	defer ln.Close()
	for {
		in, err := ln.Next(ctx)
		if err != nil {
			if ctx.Err() == nil {
				g.log.Error("UD route stopped resolving", "route", run.r.Name, "err", err)
				g.mu.Lock()
				g.stopped[run.r.Name] = err
				g.mu.Unlock()
			}
			return
		}
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			g.resolveUD(run.r, in)
		}()
	}
}

// resolveUD answers a client's SIDR_REQ once the target answered the
// gateway's, and relays the client's datagrams until the pair ends.
func (g *Gateway) resolveUD(r *config.Route, in leg.UDIncoming) {
	client := in.Remote()
	log := g.log.With("route", r.Name, "client", client, "target", r.Target.Addr)
	g.mu.Lock()
	ur, closing := g.udRoutes[r.Name], g.closing
	n := 0
	for p := range g.udPairs {
		if p.route == r.Name {
			n++
		}
	}
	g.mu.Unlock()
	st := ur.stats
	noQP := func(why string, err error) {
		st.NoQP.Add(1)
		log.Warn("UD client answered \"no QP\": "+why, "err", err)
		_ = in.Reject(cm.SIDRNoQP, nil)
	}
	switch {
	case closing:
		in.Drop()
		return
	case !r.Allowed(client.Addr()):
		st.Refused.Add(1)
		log.Warn("UD client not allowed by the route: rejected")
		_ = in.Reject(cm.SIDRReject, nil)
		return
	case n >= maxUDPairs:
		noQP("the route has its most clients", fmt.Errorf("%d UD clients", n))
		return
	}
	if err := g.targetDown(r); err != nil {
		noQP("the route's target is through a leg that is down or lost its floating address", err)
		return
	}
	ctx, cancel := context.WithTimeout(g.ctx, g.timeout)
	out, svc, err := g.legs[r.Target.Leg].(leg.UDLeg).DialUD(ctx, r.Target.Addr, in.PrivateData())
	cancel()
	if err != nil {
		var rf *leg.UDRefused
		if errors.As(err, &rf) {
			st.Refused.Add(1)
			log.Warn("target refused the UD client's resolution: the client gets the same", "status", rf.Status)
			_ = in.Reject(rf.Status, rf.PrivateData)
			return
		}
		noQP("the target could not be resolved", err)
		return
	}
	c, err := in.Accept(svc.PrivateData)
	if err != nil {
		_ = out.Close()
		noQP("the client-side QP could not be made", err)
		return
	}
	p := &udPair{route: r.Name, legs: [2]string{r.Listen.Leg, r.Target.Leg}, stats: st, limit: &ur.limit, log: log, client: c, target: out,
		requester: client.Addr(), svc: svc, started: time.Now(), idle: g.udIdle}
	pctx, pcancel := context.WithCancel(g.ctx)
	defer pcancel()
	p.cancel = pcancel
	if f := g.beforeTable.Load(); f != nil {
		(*f)()
	}
	g.mu.Lock()
	if g.closing {
		g.mu.Unlock()
		_ = c.Close()
		_ = out.Close()
		return
	}
	g.udPairs[p] = struct{}{}
	downLeg, down := g.crossesDownLocked(p.legs[:]...)
	g.mu.Unlock()
	st.Resolved.Add(1)
	log.Info("UD client resolved", "client_side", c.Describe(), "target_side", out.Describe(), "target_qpn", svc.QPN, "target_qkey", fmt.Sprintf("%#x", svc.QKey))
	if down != nil {
		log.Warn("a leg the UD client's pair crosses went down, or its floating address left, while it was being made: it ends", "leg", downLeg, "why", down)
		p.end(down)
	}
	p.run(pctx)
	s := st.Snapshot()
	var why any = "idle, or the gateway stopped"
	if e := p.why.Load(); e != nil {
		why = *e
	}
	log.Info("UD client ended", "why", why, "age", time.Since(p.started).Round(time.Millisecond), "route_datagrams_to_target", s.Datagrams[0], "route_datagrams_to_client", s.Datagrams[1])
	g.mu.Lock()
	delete(g.udPairs, p)
	// Under the lock with the delete: UDStats adds running pairs' own.
	st.DropNoReceive[0].Add(c.NoReceive())
	st.DropNoReceive[1].Add(out.NoReceive())
	g.mu.Unlock()
}

// UDStats returns a UD route's counters (nil for a route that is not UD
// or never ran); the no-receive drops of running pairs are added in.
func (g *Gateway) UDStats(route string) *UDStatsSnapshot {
	g.mu.Lock()
	defer g.mu.Unlock()
	ur := g.udRoutes[route]
	if ur == nil {
		return nil
	}
	s := ur.stats.Snapshot()
	for p := range g.udPairs {
		if p.route == route {
			s.DropNoReceive[0] += p.client.NoReceive()
			s.DropNoReceive[1] += p.target.NoReceive()
		}
	}
	return &s
}

// udRate is a UD route's rate limit in force (the zero Rate: none, or no
// such route).
func (g *Gateway) udRate(route string) config.Rate {
	g.mu.Lock()
	ur := g.udRoutes[route]
	g.mu.Unlock()
	if ur == nil {
		return config.Rate{}
	}
	return ur.limit.rate()
}

// udClients returns the UD clients running now, and how many per route.
func (g *Gateway) udClients() ([]UDClientStatus, map[string]int) {
	g.mu.Lock()
	ps := make([]*udPair, 0, len(g.udPairs))
	for p := range g.udPairs {
		ps = append(ps, p)
	}
	g.mu.Unlock()
	out, per := make([]UDClientStatus, 0, len(ps)), map[string]int{}
	for _, p := range ps {
		out = append(out, p.status())
		per[p.route]++
	}
	return out, per
}
