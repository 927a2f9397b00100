package bridge

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rbridge/rbridge/bridge/leg"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/internal/igmp"
	"github.com/rbridge/rbridge/internal/netns"
)

// Groups joined on one side (config joined_on). The gateway hears every
// IGMP (IPv6: MLD) message on the members' side's Ethernet link (the
// userspace leg's interface, or the netdev of a verbs leg's RoCE port:
// rdma_join_multicast there makes the kernel send IGMP, cma_igmp_send)
// with an AF_PACKET socket (internal/igmp), and keeps the link's membership as its querier
// would (igmp.Table: general queries every 125 s, a group gone 260 s
// after its last report, or 2 s after a leave that no other member
// answered). Each group a member joins, within the entry's prefix and up
// to its max_groups, becomes a group of its own, "<entry>/<address>",
// relayed from the other side to the members' side exactly as a group
// named in the file (groupRun: joined on the other side to receive,
// send-only on the members' side, the entry's rate, peers and loop
// window), with its counters in /status and on /metrics while it lasts;
// when the table says it is gone the group stops and its memberships are
// left. What is outside the prefix, over the bound, or named by another
// entry of the file between the same legs is counted and logged, not
// joined.
//
// A native InfiniBand side has no IGMP (membership is the subnet
// administrator's): startJoined refuses a verbs leg on an InfiniBand port.
//
// Concurrency: routineJoined owns the table and the entry's groups map (it
// alone adds and removes; status readers take mu); routineReadIGMP hands
// it what the socket reads.

// JoinedStats counts what a joined_on entry heard and did.
type JoinedStats struct {
	// Heard counts the IGMP messages heard on the members' link (not the
	// gateway's own); Malformed those that did not parse.
	Heard, Malformed atomic.Uint64
	// QueriesSent counts the queries the gateway sent as the link's
	// querier; SendFailed those that could not be sent.
	QueriesSent, SendFailed atomic.Uint64
	// Joined counts the groups taken (joined on the other side, relayed);
	// Left those a leave ended; Expired those no report refreshed.
	Joined, Left, Expired atomic.Uint64
	// Outside, OverMax, Configured and JoinFailed count the groups not
	// taken, once per report that found them: outside within, over
	// max_groups, named by a group of the file, or whose join on the
	// other side failed.
	Outside, OverMax, Configured, JoinFailed atomic.Uint64
}

// JoinedStatsSnapshot is JoinedStats read at one moment.
type JoinedStatsSnapshot struct {
	Heard       uint64 `json:"heard"`
	Malformed   uint64 `json:"malformed"`
	QueriesSent uint64 `json:"queries_sent"`
	SendFailed  uint64 `json:"send_failed"`
	Joined      uint64 `json:"joined"`
	Left        uint64 `json:"left"`
	Expired     uint64 `json:"expired"`
	Outside     uint64 `json:"outside"`
	OverMax     uint64 `json:"over_max"`
	Configured  uint64 `json:"configured"`
	JoinFailed  uint64 `json:"join_failed"`
}

// Snapshot reads every counter.
func (s *JoinedStats) Snapshot() JoinedStatsSnapshot {
	return JoinedStatsSnapshot{Heard: s.Heard.Load(), Malformed: s.Malformed.Load(), QueriesSent: s.QueriesSent.Load(), SendFailed: s.SendFailed.Load(),
		Joined: s.Joined.Load(), Left: s.Left.Load(), Expired: s.Expired.Load(), Outside: s.Outside.Load(), OverMax: s.OverMax.Load(),
		Configured: s.Configured.Load(), JoinFailed: s.JoinFailed.Load()}
}

// JoinedStatus describes a joined_on entry: where it listens and the
// groups it relays now (each also in Status.Groups, by its name).
type JoinedStatus struct {
	Name      string `json:"name"`
	JoinedOn  string `json:"joined_on"`
	Leg       string `json:"leg"`
	Interface string `json:"interface"`
	Within    string `json:"within"`
	MaxGroups int    `json:"max_groups"`
	// Querier says whether the gateway queries the link (no querier with
	// a lower address was heard lately).
	Querier bool                `json:"querier"`
	Groups  []string            `json:"groups"`
	Stats   JoinedStatsSnapshot `json:"stats"`
}

// joinedRun is a running joined_on entry.
type joinedRun struct {
	cfg    *config.Group
	leg    string     // the members' leg
	ifname string     // its link's interface, in netns
	addr   netip.Addr // the gateway's address there: its queries' source
	conn   *igmp.Conn
	stats  JoinedStats
	// rate is the rate of the groups found from now (a reload swaps it).
	rate atomic.Pointer[config.Rate]
	// querier mirrors the table's Querier for Status.
	querier atomic.Bool

	mu     sync.Mutex               // guards groups
	groups map[netip.Addr]*groupRun // added and removed by routineJoined only

	// noted are the refused groups already logged (bounded; routineJoined's).
	noted map[netip.Addr]bool
}

// maxNoted bounds the refused groups whose first refusal is logged.
const maxNoted = 256

// joinedLink finds the Ethernet link of the members' leg: its interface,
// network namespace and the gateway's address there.
func (g *Gateway) joinedLink(name string) (ifname, ns string, addr netip.Addr, err error) {
	if l, ok := g.legs[name].(leg.GroupLeg); ok {
		return l.JoinedLink()
	}
	return "", "", netip.Addr{}, fmt.Errorf("leg %q: groups are on userspace and verbs legs", name)
}

// linkLocalOf is the IPv6 link-local address of interface ifname in
// network namespace ns.
func linkLocalOf(ns, ifname string) (netip.Addr, error) {
	var a netip.Addr
	err := netns.Do(ns, func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		as, err := ifi.Addrs()
		if err != nil {
			return err
		}
		for _, x := range as {
			if p, err := netip.ParsePrefix(x.String()); err == nil && p.Addr().Is6() && p.Addr().IsLinkLocalUnicast() {
				a = p.Addr()
				return nil
			}
		}
		return fmt.Errorf("interface %s has no IPv6 link-local address (MLD's queries are sent from one)", ifname)
	})
	return a, err
}

// startJoined starts finding the groups of a joined_on entry.
func (g *Gateway) startJoined(gc *config.Group) error {
	j := &joinedRun{cfg: gc, leg: gc.IB, groups: map[netip.Addr]*groupRun{}, noted: map[netip.Addr]bool{}}
	if gc.JoinedOn == config.SideRoCE {
		j.leg = gc.RoCE
	}
	rate := gc.Rate
	j.rate.Store(&rate)
	ifname, ns, addr, err := g.joinedLink(j.leg)
	if err != nil {
		return fmt.Errorf("joined_on %s: %w", gc.JoinedOn, err)
	}
	if gc.Within.Addr().Is6() {
		// MLD: hosts take queries from a link-local address only.
		if addr, err = linkLocalOf(ns, ifname); err != nil {
			return fmt.Errorf("joined_on %s: leg %q: %w", gc.JoinedOn, j.leg, err)
		}
	}
	j.ifname, j.addr = ifname, addr
	if err := netns.Do(ns, func() error {
		j.conn, err = igmp.Listen(ifname, addr.Is6())
		return err
	}); err != nil {
		return fmt.Errorf("joined_on %s: leg %q: %w", gc.JoinedOn, j.leg, err)
	}
	g.mu.Lock()
	g.joined[gc.Name] = j
	g.mu.Unlock()
	g.log.Info("finding the multicast groups joined on a side", "group", gc.Name, "joined_on", gc.JoinedOn, "leg", j.leg,
		"interface", ifname, "within", gc.Within, "max_groups", gc.MaxGroups, "direction", gc.Direction)
	pkts := make(chan igmp.Packet, 64)
	g.wg.Add(2)
	go func() {
		defer g.wg.Done()
		j.routineReadIGMP(g, pkts)
	}()
	go func() {
		defer g.wg.Done()
		j.routineJoined(g.ctx, g, pkts)
	}()
	return nil
}

// routineReadIGMP parses what the socket reads and hands it on, until the
// socket is closed.
func (j *joinedRun) routineReadIGMP(g *Gateway, pkts chan<- igmp.Packet) {
	defer close(pkts)
	buf := make([]byte, 65536)
	for {
		n, err := j.conn.Read(buf)
		if err != nil {
			if g.ctx.Err() == nil {
				g.log.Error("multicast group discovery stopped: the IGMP socket failed", "group", j.cfg.Name, "interface", j.ifname, "err", err)
				g.mu.Lock()
				g.halted[j.cfg.Name] = fmt.Errorf("finding members on %s: %w", j.ifname, err)
				g.mu.Unlock()
			}
			return
		}
		p, err := igmp.ParsePacket(buf[:n])
		if err != nil {
			j.stats.Malformed.Add(1)
			g.log.Debug("IGMP message dropped", "group", j.cfg.Name, "interface", j.ifname, "err", err)
			continue
		}
		if p.Src == j.addr {
			continue // the gateway's own, sent by another socket
		}
		j.stats.Heard.Add(1)
		pkts <- p
	}
}

// routineJoined runs the entry's table: what is heard, the queries and
// the timeouts, each group found started and each group gone stopped.
func (j *joinedRun) routineJoined(ctx context.Context, g *Gateway, pkts <-chan igmp.Packet) {
	table := igmp.NewTable(igmp.Options{Addr: j.addr}, time.Now())
	timer := time.NewTimer(0)
	defer timer.Stop()
	defer func() {
		_ = j.conn.Close()
		for range pkts { // until the reader is done
		}
		for _, a := range table.Groups() {
			j.drop(g, a, "the gateway stops")
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case p, ok := <-pkts:
			if !ok {
				return
			}
			for _, ev := range table.Heard(p, time.Now()) {
				if !j.take(ctx, g, ev.Group, p.Src) {
					table.Forget(ev.Group)
				}
			}
		case <-timer.C:
		}
		qs, gone := table.Advance(time.Now())
		for _, q := range qs {
			if err := j.conn.WriteTo(table.AppendQuery(nil, q), q.Dst()); err != nil {
				j.stats.SendFailed.Add(1)
				g.log.Warn("IGMP query not sent", "group", j.cfg.Name, "interface", j.ifname, "query_group", q.Group, "err", err)
				continue
			}
			j.stats.QueriesSent.Add(1)
		}
		for _, ev := range gone {
			if ev.Kind == igmp.Left {
				j.stats.Left.Add(1)
			} else {
				j.stats.Expired.Add(1)
			}
			j.drop(g, ev.Group, ev.Kind.String())
		}
		if q := table.Querier(); q != j.querier.Swap(q) {
			g.log.Info("IGMP querier on the members' link", "group", j.cfg.Name, "interface", j.ifname, "querier", map[bool]string{true: "this gateway", false: "another router (a lower address)"}[q])
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(max(time.Until(table.Next()), time.Millisecond))
	}
}

// take starts relaying group, which from heard first joined on the
// members' side, and reports whether it did (else the group is counted,
// its first refusal logged, and the table forgets it).
func (j *joinedRun) take(ctx context.Context, g *Gateway, group, from netip.Addr) bool {
	refuse := func(c *atomic.Uint64, why string) bool {
		c.Add(1)
		if !j.noted[group] && len(j.noted) < maxNoted {
			j.noted[group] = true
			g.log.Info("multicast group joined on the members' side not relayed", "group", j.cfg.Name, "address", group, "member", from, "why", why)
		}
		return false
	}
	if !j.cfg.Within.Contains(group) {
		return refuse(&j.stats.Outside, fmt.Sprintf("outside within %v", j.cfg.Within))
	}
	g.mu.Lock()
	cfg := g.cfg
	g.mu.Unlock()
	for i := range cfg.Groups {
		o := &cfg.Groups[i]
		if o.Group == group && ((o.RoCE == j.cfg.RoCE && o.IB == j.cfg.IB) || (o.RoCE == j.cfg.IB && o.IB == j.cfg.RoCE)) {
			return refuse(&j.stats.Configured, fmt.Sprintf("group %q of the file relays it between the same legs", o.Name))
		}
	}
	j.mu.Lock()
	n := len(j.groups)
	j.mu.Unlock()
	if n >= j.cfg.MaxGroups {
		return refuse(&j.stats.OverMax, fmt.Sprintf("max_groups %d reached (it is taken at a later report once one leaves)", j.cfg.MaxGroups))
	}
	gc := &config.Group{Name: j.cfg.Name + "/" + group.String(), Group: group, RoCE: j.cfg.RoCE, IB: j.cfg.IB, Direction: j.cfg.Direction,
		MGID: j.cfg.MGID, Rate: *j.rate.Load(), Peers: j.cfg.Peers, LoopWindow: j.cfg.LoopWindow}
	r, err := g.openGroup(ctx, gc)
	if err != nil {
		if ctx.Err() == nil {
			g.log.Warn("multicast group joined on the members' side could not be joined on the other: not relayed (tried again at its next report)",
				"group", j.cfg.Name, "address", group, "member", from, "err", err)
		}
		j.stats.JoinFailed.Add(1)
		return false
	}
	delete(j.noted, group)
	j.mu.Lock()
	j.groups[group] = r
	j.mu.Unlock()
	g.mu.Lock()
	g.groups[gc.Name] = r
	g.mu.Unlock()
	j.stats.Joined.Add(1)
	g.log.Info("multicast group joined on the members' side: relayed to it", "group", gc.Name, "joined_on", j.cfg.JoinedOn, "member", from, "direction", gc.Direction)
	return true
}

// drop stops relaying group (its memberships are left).
func (j *joinedRun) drop(g *Gateway, group netip.Addr, why string) {
	j.mu.Lock()
	r := j.groups[group]
	delete(j.groups, group)
	j.mu.Unlock()
	if r == nil {
		return
	}
	g.mu.Lock()
	delete(g.groups, r.cfg.Name)
	delete(g.halted, r.cfg.Name) // a group found is gone with its members
	g.mu.Unlock()
	r.stop()
	st := r.stats.Snapshot()
	g.log.Info("multicast group gone from the members' side: no longer relayed", "group", r.cfg.Name, "why", why,
		"datagrams", st.Datagrams[0]+st.Datagrams[1], "bytes", st.Bytes[0]+st.Bytes[1])
}

// runs returns the entry's groups relaying now, in address order.
func (j *joinedRun) runs() []*groupRun {
	j.mu.Lock()
	defer j.mu.Unlock()
	rs := make([]*groupRun, 0, len(j.groups))
	for _, r := range j.groups {
		rs = append(rs, r)
	}
	slices.SortFunc(rs, func(a, b *groupRun) int { return a.cfg.Group.Compare(b.cfg.Group) })
	return rs
}

// setRate puts rate in force for the entry's groups and those it finds
// from now.
func (j *joinedRun) setRate(rate config.Rate) {
	j.rate.Store(&rate)
	for _, r := range j.runs() {
		r.limit.set(rate)
	}
}

// status describes the entry.
func (j *joinedRun) status() JoinedStatus {
	st := JoinedStatus{Name: j.cfg.Name, JoinedOn: j.cfg.JoinedOn, Leg: j.leg, Interface: j.ifname, Within: j.cfg.Within.String(),
		MaxGroups: j.cfg.MaxGroups, Querier: j.querier.Load(), Groups: []string{}, Stats: j.stats.Snapshot()}
	for _, r := range j.runs() {
		st.Groups = append(st.Groups, r.cfg.Group.String())
	}
	return st
}

// joinedStatus returns the joined_on entries, in the config's order.
func (g *Gateway) joinedStatus() []JoinedStatus {
	g.mu.Lock()
	cfg := g.cfg
	js := make(map[string]*joinedRun, len(g.joined))
	for n, j := range g.joined {
		js[n] = j
	}
	g.mu.Unlock()
	var out []JoinedStatus
	for i := range cfg.Groups {
		if j := js[cfg.Groups[i].Name]; j != nil {
			out = append(out, j.status())
		}
	}
	return out
}

// JoinedStats returns a joined_on entry's counters (nil for no such entry).
func (g *Gateway) JoinedStats(name string) *JoinedStatsSnapshot {
	g.mu.Lock()
	j := g.joined[name]
	g.mu.Unlock()
	if j == nil {
		return nil
	}
	s := j.stats.Snapshot()
	return &s
}
