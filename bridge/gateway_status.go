package bridge

import (
	"sort"
	"time"

	"github.com/rbridge/rbridge/bridge/leg"
	"github.com/rbridge/rbridge/roce/transport"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/internal/portcounters"
)

// Status is what a gateway runs, at one moment: its legs, its routes and
// every session, with the numbers Prometheus must not carry as labels
// (clients, QPNs). The admin server serves it as JSON on /status.
type Status struct {
	// State is what the gateway is doing: running, reloading, draining
	// (SIGTERM: it accepts nothing more and ends its sessions) or stopped.
	State RunState `json:"state"`
	// Version is the binary's (BuildInfo: version, commit, Go).
	Version string `json:"version,omitempty"`
	// Started is when the gateway started, and Uptime how long ago.
	Started       time.Time       `json:"started"`
	UptimeSeconds float64         `json:"uptime_seconds"`
	Legs          []leg.Status    `json:"legs"`
	Routes        []RouteStatus   `json:"routes"`
	Sessions      []SessionStatus `json:"sessions"`
	// UDClients are the UD routes' clients relaying now (ud.go).
	UDClients []UDClientStatus `json:"ud_clients,omitempty"`
	// Groups are the multicast groups relayed (mcast.go).
	Groups []GroupStatus `json:"groups,omitempty"`
	// Joined are the groups entries with joined_on (joined.go): where
	// they listen, what they found and heard.
	Joined []JoinedStatus `json:"joined,omitempty"`
}

// RouteStatus describes one route.
type RouteStatus struct {
	Name      string   `json:"name"`
	ListenLeg string   `json:"listen_leg"`
	Listen    string   `json:"listen"`
	TargetLeg string   `json:"target_leg"`
	Target    string   `json:"target"`
	Allow     []string `json:"allow,omitempty"`
	// Protocol is the upper-layer protocol the route carries (its
	// sessions parse its messages), when it names one.
	Protocol string `json:"protocol,omitempty"`
	Sessions int    `json:"sessions"` // running now
	// Stopped is why the route's accept loop ended, when it did.
	Stopped string `json:"stopped,omitempty"`
	// Fallback is the route's fallback, when it has one, and whether new
	// sessions go there now.
	Fallback *FallbackStatus `json:"fallback,omitempty"`
	// UD is a UD route's: its clients now and its counters.
	UD *UDRouteStatus `json:"ud,omitempty"`
}

// UDRouteStatus is a UD route's clients and counters.
type UDRouteStatus struct {
	Clients int `json:"clients"`
	// Rate is the route's rate limit in force, each direction, shared by
	// its clients (absent: none).
	Rate  *config.Rate    `json:"rate,omitempty"`
	Stats UDStatsSnapshot `json:"stats"`
}

// SessionStatus describes one running session.
type SessionStatus struct {
	Route  string `json:"route"`
	Client string `json:"client"`
	Target string `json:"target"`
	// ClientSide and TargetSide describe the two connections: the QPNs,
	// the path MTU and how it was chosen.
	ClientSide string          `json:"client_side"`
	TargetSide string          `json:"target_side"`
	Started    time.Time       `json:"started"`
	AgeSeconds float64         `json:"age_seconds"`
	ToTarget   DirectionStatus `json:"to_target"` // the client's requests
	ToClient   DirectionStatus `json:"to_client"` // the target's requests
	// ClientSideDCQCN and TargetSideDCQCN are a side's congestion control
	// when it is on a userspace leg with ecn: true.
	ClientSideDCQCN *DCQCNStatus `json:"client_side_dcqcn,omitempty"`
	TargetSideDCQCN *DCQCNStatus `json:"target_side_dcqcn,omitempty"`
	// Fallback says the session goes through the route's fallback.
	Fallback bool `json:"fallback,omitempty"`
	// ClientSideXDP and TargetSideXDP are what the XDP classifier counted
	// for a side's QP on an AF_XDP leg (per QP, so here and not on
	// /metrics).
	ClientSideXDP *XDPQPStatus `json:"client_side_xdp,omitempty"`
	TargetSideXDP *XDPQPStatus `json:"target_side_xdp,omitempty"`
}

// XDPQPStatus is the XDP classifier's count of one QP's packets.
type XDPQPStatus struct {
	Packets uint64 `json:"packets"` // redirected to the leg's socket, or answered with a CNP
	Bytes   uint64 `json:"bytes"`   // their Ethernet frames' bytes
	ECNCE   uint64 `json:"ecn_ce"`  // of which marked ECN Congestion Experienced
	CNPs    uint64 `json:"cnps"`    // CNPs the classifier sent in answer
}

// xdpStatus is the classifier's count of c's QP, when c is on an AF_XDP
// leg.
func xdpStatus(c leg.Conn) *XDPQPStatus {
	q, ok := leg.XDPCounters(c)
	if !ok {
		return nil
	}
	return &XDPQPStatus{Packets: q.Packets, Bytes: q.Bytes, ECNCE: q.ECNCE, CNPs: q.CNPs}
}

// DCQCNStatus is a userspace QP's DCQCN reaction point.
type DCQCNStatus struct {
	// RateBytesPerSecond is the rate the QP may send at now.
	RateBytesPerSecond float64 `json:"rate_bytes_per_second"`
	// Limited says CNPs hold it below its line rate.
	Limited bool   `json:"limited"`
	CNPs    uint64 `json:"cnps"` // CNPs the QP received
	Cuts    uint64 `json:"cuts"` // rate cuts they caused
}

// dcqcnStatus is c's DCQCN, when it has one.
func dcqcnStatus(c leg.Conn) *DCQCNStatus {
	st, ok := leg.QPStats(c)
	if !ok {
		return nil
	}
	if st.Rate == 0 { // no DCQCN: the leg has no ecn
		return nil
	}
	return &DCQCNStatus{RateBytesPerSecond: st.Rate / 8, Limited: st.Limited, CNPs: st.CNPs, Cuts: st.Cuts}
}

// DirectionStatus is one direction of a session: its counters and its
// relay's state.
type DirectionStatus struct {
	Ops   uint64 `json:"ops"`
	Bytes uint64 `json:"bytes"`
	// OpsByOpcode counts Ops by opcode (as the metrics' opcode label
	// names them), those with any.
	OpsByOpcode map[string]uint64 `json:"ops_by_opcode,omitempty"`
	Copied      uint64            `json:"copied_bytes"`
	Failed      uint64            `json:"failed"`
	NoCredit    uint64            `json:"no_credit"`
	TooLong     uint64            `json:"too_long"`
	Queued      int               `json:"queued"`
	Posted      int               `json:"posted"`
}

// legStatus is what a leg's configuration says of it; the leg adds what
// it knows (leg.status).
func legStatus(l *config.Leg) leg.Status {
	return leg.Status{Name: l.Name, Kind: l.Kind, IP: l.IP.String(), Interface: l.Interface, Netns: l.Netns, IO: l.IO, Device: l.Device, Port: l.Port}
}

// Status returns what the gateway runs now. Sessions are sorted by route,
// then age (oldest first).
func (g *Gateway) Status() Status {
	g.mu.Lock()
	cfg := g.cfg // a reload replaces it
	g.mu.Unlock()
	st := Status{Legs: make([]leg.Status, 0, len(cfg.Legs)), Routes: make([]RouteStatus, 0, len(cfg.Routes)), Sessions: []SessionStatus{},
		Version: g.build.String(), Started: g.started, UptimeSeconds: time.Since(g.started).Round(time.Millisecond).Seconds()}
	for i := range cfg.Legs {
		st.Legs = append(st.Legs, g.legNow(cfg.Legs[i].Name))
	}
	now := time.Now()
	var udOpen map[string]int
	st.UDClients, udOpen = g.udClients()
	st.Groups = g.groupStatus()
	st.Joined = g.joinedStatus()
	g.mu.Lock()
	open := map[string]int{}
	var sides [][2]leg.Conn // each session's, in st.Sessions' order: asked after the lock
	for s, info := range g.sessions {
		sides = append(sides, [2]leg.Conn{info.in, info.out})
		open[info.route]++
		ss := s.Stats().Snapshot()
		rs := s.State()
		dir := func(d int) DirectionStatus {
			ds := DirectionStatus{Ops: ss.TotalOps(d), Bytes: ss.TotalBytes(d), Copied: ss.Copied[d], Failed: ss.Failed[d], NoCredit: ss.NoCredit[d],
				TooLong: ss.TooLong[d], Queued: rs[d].Queued, Posted: rs[d].Posted}
			for o, n := range ss.Ops[d] {
				if n > 0 {
					if ds.OpsByOpcode == nil {
						ds.OpsByOpcode = map[string]uint64{}
					}
					ds.OpsByOpcode[leg.OpcodeName(transport.Opcode(o))] = n
				}
			}
			return ds
		}
		st.Sessions = append(st.Sessions, SessionStatus{Route: info.route, Client: info.client.String(), Target: info.target.String(),
			ClientSide: info.desc[0], TargetSide: info.desc[1], Started: info.started, AgeSeconds: now.Sub(info.started).Seconds(),
			ToTarget: dir(0), ToClient: dir(1), Fallback: info.fallback})
	}
	stopped := map[string]string{}
	for name, err := range g.stopped {
		stopped[name] = err.Error()
	}
	st.State = g.runStateLocked()
	fallbacks := map[string]*fallbackState{}
	for name, f := range g.fallbacks {
		fallbacks[name] = f
	}
	g.mu.Unlock()
	for i, c := range sides {
		st.Sessions[i].ClientSideDCQCN, st.Sessions[i].TargetSideDCQCN = dcqcnStatus(c[0]), dcqcnStatus(c[1])
		st.Sessions[i].ClientSideXDP, st.Sessions[i].TargetSideXDP = xdpStatus(c[0]), xdpStatus(c[1])
	}
	for i := range cfg.Routes {
		r := &cfg.Routes[i]
		rs := RouteStatus{Name: r.Name, ListenLeg: r.Listen.Leg, Listen: r.Listen.Addr.String(), TargetLeg: r.Target.Leg, Target: r.Target.Addr.String(),
			Protocol: r.Protocol, Sessions: open[r.Name], Stopped: stopped[r.Name]}
		if f := fallbacks[r.Name]; f != nil && r.Fallback.Leg != "" {
			rs.Fallback = f.status(r)
		}
		for _, p := range r.Allow {
			rs.Allow = append(rs.Allow, p.String())
		}
		if s := g.UDStats(r.Name); r.UD && s != nil {
			rs.UD = &UDRouteStatus{Clients: udOpen[r.Name], Stats: *s}
			if rt := g.udRate(r.Name); rt.Limited() {
				rs.UD.Rate = &rt
			}
		}
		st.Routes = append(st.Routes, rs)
	}
	sort.Slice(st.Sessions, func(i, j int) bool {
		a, b := &st.Sessions[i], &st.Sessions[j]
		if a.Route != b.Route {
			return a.Route < b.Route
		}
		return a.Started.Before(b.Started)
	})
	return st
}

// linkState reads leg name's link: its state and whether it is up, and,
// withPort, a verbs leg's port as read with its counters (nil for other
// legs, or when unreadable). The link watch, /status and /healthz read the
// state only; a scrape reads the counters too.
func (g *Gateway) linkState(name string, withPort bool) (string, bool, *portcounters.Port) {
	l := g.legs[name]
	if l == nil {
		return "unknown leg", false, nil
	}
	root := g.sysRoot
	if root == "" {
		root = "/sys"
	}
	return l.Link(root, withPort)
}
