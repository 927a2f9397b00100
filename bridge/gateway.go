package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rbridge/rbridge/bridge/leg"

	"github.com/rbridge/rbridge/bridge/pool"
	"github.com/rbridge/rbridge/bridge/session"
	"github.com/rbridge/rbridge/bridge/staging"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/ibv"
	"github.com/rbridge/rbridge/internal/netns"
	"github.com/rbridge/rbridge/ipoib"
	"github.com/rbridge/rbridge/roce/cm"
	"github.com/rbridge/rbridge/tunnel"
)

// A Gateway runs a configuration: it opens every leg, listens on every
// route's listen address, and for each connection a client opens there it
// connects to the route's target through the other leg, accepts the client
// only once the target accepted (the target's private data and the
// resources both ends allow reach the client), and joins the two with a
// Session. A target that rejects gives the client a reject of the same
// kind; one that does not answer, a timeout reject; a client outside the
// route's allow list is rejected and logged.
//
// Concurrency: one goroutine per route accepts (routineAccept), one per
// connection being set up connects it through (connect); sessions run on
// their endpoints' goroutines. Gateway.mu guards the sessions.
type Gateway struct {
	// busyLoops counts the busy-poll receive loops started: legs' and
	// groups'.
	busyLoops atomic.Int64

	cfg  *config.Config
	log  *slog.Logger
	pool *pool.Pool
	// build and started are what the binary is and when the gateway
	// started (/status, rbridge_build_info); set once.
	build   BuildInfo
	started time.Time
	legs    map[string]leg.Leg
	// legStatus describes each leg as opened (for Status).
	legStatus map[string]leg.Status
	// sysRoot is where sysfs is mounted ("/sys"); nics are the verbs
	// legs' ports whose counters /metrics exports, by leg name.
	sysRoot string
	nics    map[string]*nicPort

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// reloadMu serializes Reload (SIGHUP and the admin server's /reload
	// may ask at once).
	reloadMu sync.Mutex

	mu        sync.Mutex // guards the fields below
	sessions  map[*session.Session]*sessionInfo
	closing   bool             // Close began: draining
	closed    bool             // Close ended
	reloading bool             // a Reload runs
	stopped   map[string]error // routes whose accept loop ended on its own, and why
	// halted are the groups (and joined_on entries) whose relay or
	// discovery ended on its own, and why: Health names them.
	halted  map[string]error
	routes  map[string]*routeRun // the routes accepting, by name
	timeout time.Duration        // ConnectTimeout
	stall   time.Duration        // StallAfter
	// ended sums, per route, the counters of its sessions that ended (a
	// session's own are added in when it leaves sessions, so a route's
	// totals never go back); routeStats counts each route's connections.
	// A route's entries are made when it starts and kept when a reload
	// removes it (its totals stay).
	ended      map[string]*session.StatsSnapshot
	routeStats map[string]*GatewayStats
	// fallbacks is each route's choice between target and fallback (for
	// routes with one), kept across reloads like routeStats.
	fallbacks map[string]*fallbackState
	// protocols counts, per route and protocol, what the sessions of a
	// route with a protocol saw of it: made when such a route starts,
	// kept across reloads like routeStats (a route whose protocol changed
	// counts anew under the new one).
	protocols map[routeProtocol]*staging.Stats

	fallbackAfter, fallbackRetry time.Duration

	// udRoutes holds each UD route's counters (kept across reloads like
	// routeStats); udPairs the UD clients relaying now (ud.go). Guarded
	// by mu.
	udRoutes map[string]*udRoute
	udPairs  map[*udPair]struct{}
	udIdle   time.Duration
	// linkDown are the userspace and verbs legs whose link is down, and
	// why (linkdown.go).
	linkDown map[string]error
	// linkDowns counts, per leg, the link-down events seen and the
	// sessions they ended (kept for /metrics).
	linkDowns map[string]*linkCounts
	// ipHeld is whether each freebind leg's interface held its floating
	// address at the links' last reading (linkdown.go). Used by
	// routineLinks alone.
	ipHeld map[string]bool
	// addrLeft are the freebind legs whose floating address left since
	// the gateway last saw it arrive, and why (linkdown.go); guarded by
	// mu, as linkDown.
	addrLeft map[string]error
	// linkWatch is each watched leg's Status.LinkWatch, as routineLinks
	// set it (name -> string).
	linkWatch sync.Map
	// linkPoll is LinkPoll (a test sets it longer, to see a link read
	// on its leg's word alone); linkResub is LinkResubscribe (a test
	// sets it shorter).
	linkPoll, linkResub time.Duration
	// beforeTable, when a test sets it, is called as a session or a UD
	// client's pair is about to enter its table, its connections made.
	beforeTable atomic.Pointer[func()]
	// groups are the multicast groups relaying (mcast.go), by name: the
	// file's and those the joined_on entries found; joined are those
	// entries (joined.go), by name.
	groups map[string]*groupRun
	joined map[string]*joinedRun

	stats GatewayStats
}

// GatewayStats counts a gateway's connections; updated atomically.
type GatewayStats struct {
	Accepted, Rejected, Refused, Failed, Ended atomic.Uint64
	// Fallbacks counts a route's switches to its fallback; FellBack the
	// connections made through it.
	Fallbacks, FellBack atomic.Uint64
}

// GatewayStatsSnapshot is GatewayStats read at one moment, as plain values.
type GatewayStatsSnapshot struct {
	Accepted, Rejected, Refused, Failed, Ended uint64
	Fallbacks, FellBack                        uint64
}

// Snapshot reads every counter.
func (s *GatewayStats) Snapshot() GatewayStatsSnapshot {
	return GatewayStatsSnapshot{Accepted: s.Accepted.Load(), Rejected: s.Rejected.Load(), Refused: s.Refused.Load(),
		Failed: s.Failed.Load(), Ended: s.Ended.Load(), Fallbacks: s.Fallbacks.Load(), FellBack: s.FellBack.Load()}
}

// BuildInfo names the binary a gateway runs in.
type BuildInfo struct {
	Version   string // a release, or "devel"
	Commit    string // the VCS revision, "" when not recorded
	GoVersion string
}

// String is the build as one line: "v1.2.3 (commit abc) go1.26", or ""
// when nothing is known.
func (b BuildInfo) String() string {
	var parts []string
	if b.Version != "" {
		parts = append(parts, b.Version)
	}
	if b.Commit != "" {
		parts = append(parts, "(commit "+b.Commit+")")
	}
	if b.GoVersion != "" {
		parts = append(parts, b.GoVersion)
	}
	return strings.Join(parts, " ")
}

// GatewayOptions configures StartGateway.
type GatewayOptions struct {
	Config *config.Config
	// Pool sizes the gateway's memory pool (default: the file's pool.size,
	// else 128 MiB, in classes of 256 B, 4 KiB and 64 KiB).
	Pool pool.Options
	// ConnectTimeout bounds connecting to a target (default 30 s).
	ConnectTimeout time.Duration
	// StallAfter is how long a userspace leg's receive loop may go
	// without coming round before Health calls it stuck (default 5 s;
	// an idle loop comes round every second).
	StallAfter time.Duration
	// FallbackAfter is how long a route with a fallback waits for its
	// target to answer before it connects through the fallback
	// (DefaultFallbackAfter); FallbackRetry is how often, while on the
	// fallback, a new session tries the target again
	// (DefaultFallbackRetry).
	FallbackAfter, FallbackRetry time.Duration
	// UDIdle is how long a UD route's client keeps its pair of QPs
	// without a datagram either way (DefaultUDIdle).
	UDIdle time.Duration
	Logger *slog.Logger
	// Build names the binary that runs (rbridge_build_info, /status).
	Build BuildInfo
}

// sessionInfo is what the gateway knows of a session.
type sessionInfo struct {
	route          string
	client, target netip.AddrPort
	started        time.Time
	in, out        leg.Conn
	desc           [2]string // in's and out's describe(), as they came up
	fallback       bool      // connected through the route's fallback
	// inLeg and outLeg are the legs the session crosses: its route's
	// listen leg, and its target's or its fallback's.
	inLeg, outLeg string
}

// StartGateway opens the legs and starts listening on every route.
func StartGateway(o GatewayOptions) (*Gateway, error) {
	if o.Config == nil {
		return nil, errors.New("bridge: gateway: no config")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 30 * time.Second
	}
	if o.StallAfter <= 0 {
		o.StallAfter = 5 * time.Second
	}
	if o.FallbackAfter <= 0 {
		o.FallbackAfter = DefaultFallbackAfter
	}
	if o.FallbackRetry <= 0 {
		o.FallbackRetry = DefaultFallbackRetry
	}
	if o.UDIdle <= 0 {
		o.UDIdle = DefaultUDIdle
	}
	if o.Pool.Size == 0 {
		o.Pool.Size = int(o.Config.Pool.Size)
	}
	if o.Pool.Size == 0 {
		o.Pool.Size = DefaultPoolSize
	}
	if o.Pool.Classes == nil {
		o.Pool.Classes = DefaultPoolClasses
		if stages(o.Config) {
			o.Pool.Classes = StagingPoolClasses
		}
	}
	if o.Pool.Reserve == 0 && stages(o.Config) {
		o.Pool.Reserve = StagingPoolReserve
	}
	pl, err := pool.New(o.Pool)
	if err != nil {
		return nil, fmt.Errorf("bridge: gateway: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := &Gateway{cfg: o.Config, log: o.Logger, pool: pl, legs: map[string]leg.Leg{}, ctx: ctx, cancel: cancel, build: o.Build, started: time.Now(),
		sessions: map[*session.Session]*sessionInfo{}, stopped: map[string]error{}, halted: map[string]error{}, routes: map[string]*routeRun{}, timeout: o.ConnectTimeout, stall: o.StallAfter,
		ended: map[string]*session.StatsSnapshot{}, routeStats: map[string]*GatewayStats{}, legStatus: map[string]leg.Status{},
		fallbacks: map[string]*fallbackState{}, fallbackAfter: o.FallbackAfter, fallbackRetry: o.FallbackRetry, protocols: map[routeProtocol]*staging.Stats{},
		udRoutes: map[string]*udRoute{}, udPairs: map[*udPair]struct{}{}, udIdle: o.UDIdle, groups: map[string]*groupRun{}, joined: map[string]*joinedRun{},
		linkDown: map[string]error{}, linkDowns: map[string]*linkCounts{}, ipHeld: map[string]bool{}, addrLeft: map[string]error{}}
	fail := func(err error) (*Gateway, error) {
		g.Close(context.Background())
		return nil, err
	}
	for i := range o.Config.Legs {
		l := &o.Config.Legs[i]
		var lg leg.Leg
		switch l.Kind {
		case config.KindUserspace:
			lg, err = leg.OpenUserspace(l, pl, o.Logger)
		case config.KindVerbs:
			lg, err = leg.OpenVerbs(l, pl, o.Logger)
			err = leg.ExplainNoGID(l, "/sys", err)
		case config.KindQUIC:
			lg, err = leg.OpenQUIC(l, o.Config, pl, o.Logger)
		default:
			err = fmt.Errorf("kind %q", l.Kind)
		}
		if err != nil {
			return fail(fmt.Errorf("%s:%d: leg %q: %w", o.Config.File(), l.Line(), l.Name, err))
		}
		g.legs[l.Name] = lg
		g.legStatus[l.Name] = legStatus(l)
		o.Logger.Info("leg up", "leg", l.Name, "kind", l.Kind, "ip", l.IP)
		if l.BusyPoll {
			g.busyLoopStarted("leg", l.Name)
		}
	}
	g.openNICs("/sys")
	for i := range o.Config.Routes {
		if err := g.startRoute(o.Config, &o.Config.Routes[i]); err != nil {
			return fail(err)
		}
	}
	for i := range o.Config.Groups {
		if err := g.startGroup(o.Config, &o.Config.Groups[i]); err != nil {
			return fail(err)
		}
	}
	g.wg.Add(1)
	go g.routineLinks(ctx)
	return g, nil
}

// openNICs finds the counters of every verbs leg's port in the sysfs at
// root. A port whose counters cannot be read has none on /metrics (said
// in the log): the gateway runs all the same.
func (g *Gateway) openNICs(root string) {
	g.sysRoot, g.nics = root, map[string]*nicPort{}
	for name, l := range g.legs {
		dev, port, ok := l.NICPort()
		if !ok {
			continue
		}
		n, err := newNICPort(root, name, dev, port)
		if err != nil {
			g.log.Warn("verbs leg: the NIC's port counters are unreadable: /metrics goes without them", "leg", name, "err", err)
			continue
		}
		g.nics[name] = n
	}
}

// routeRun is a route's accept loop.
type routeRun struct {
	r      *config.Route
	cancel context.CancelFunc
	done   chan struct{} // closed when the loop ended and its listener closed
}

// routeProtocol names a route's protocol counters.
type routeProtocol struct{ route, protocol string }

// startRoute listens on r's address and starts its accept loop.
func (g *Gateway) startRoute(c *config.Config, r *config.Route) error {
	if r.UD {
		return g.startUDRoute(c, r)
	}
	ln, err := g.legs[r.Listen.Leg].Listen(r.Listen.Addr)
	if err != nil {
		return fmt.Errorf("%s:%d: route %q: listen on %v: %w", c.File(), r.Line(), r.Name, r.Listen.Addr, err)
	}
	g.log.Info("route listening", "route", r.Name, "listen", r.Listen.Addr, "leg", r.Listen.Leg, "target", r.Target.Addr, "via", r.Target.Leg)
	ctx, cancel := context.WithCancel(g.ctx)
	run := &routeRun{r: r, cancel: cancel, done: make(chan struct{})}
	g.mu.Lock()
	g.routes[r.Name] = run
	if g.routeStats[r.Name] == nil {
		g.routeStats[r.Name] = &GatewayStats{}
		g.ended[r.Name] = &session.StatsSnapshot{}
	}
	if g.fallbacks[r.Name] == nil {
		g.fallbacks[r.Name] = &fallbackState{}
	}
	if rp := (routeProtocol{r.Name, r.Protocol}); r.Protocol != "" && g.protocols[rp] == nil {
		g.protocols[rp] = &staging.Stats{}
	}
	g.mu.Unlock()
	g.wg.Add(1)
	go g.routineAccept(ctx, run, ln)
	return nil
}

// CheckLegs checks what only the machine can tell of a configuration: that
// each userspace leg's interface exists (in its network namespace) and
// holds the leg's address, and that an RDMA device holds each verbs leg's
// address (on the device and port named, if named). Every problem is
// reported with the file and line of its leg.
func CheckLegs(cfg *config.Config) error {
	var errs []error
	for i := range cfg.Legs {
		l := &cfg.Legs[i]
		var err error
		switch l.Kind {
		case config.KindUserspace:
			err = netns.Do(l.Netns, func() error {
				ifi, err := net.InterfaceByName(l.Interface)
				if err != nil {
					return fmt.Errorf("interface %s: %w", l.Interface, err)
				}
				err = leg.HasAddr(ifi, l.IP)
				switch {
				case err != nil && l.FreeBind:
					return nil // a floating address, on another gateway now
				case err != nil && l.IO == config.IOUDP:
					return fmt.Errorf("%w (a floating address that another gateway holds until this one takes over, a VRRP virtual IP, needs freebind: true)", err)
				}
				return err
			})
		case config.KindVerbs:
			_, err = leg.FindGID(l)
			err = leg.ExplainNoGID(l, "/sys", err)
		case config.KindQUIC:
			_, err = tunnel.LoadCredentials(l.Cert, l.Key, l.CA, l.PeerName)
			if v, ok := cfg.Leg(l.Over); ok && err == nil {
				_, err = leg.IPoIBOf(l, v, ipoib.NewHost(ipoib.Options{}))
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: leg %q: %w", cfg.File(), l.Line(), l.Name, err))
		}
	}
	return errors.Join(errs...)
}

// Stats returns the gateway's counters.
func (g *Gateway) Stats() *GatewayStats { return &g.stats }

// Sessions returns how many sessions run.
func (g *Gateway) Sessions() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.sessions)
}

// GatewayState counts what a gateway holds at one moment: what must come
// back to its idle values once every connection ended (nothing leaked).
type GatewayState struct {
	Sessions   int
	Goroutines int // the whole process's (runtime.NumGoroutine)
	// PoolInUse is how many pool buffers are held, over every class,
	// but for PoolReceiving: those the userspace legs' UDP sockets hold
	// for their next reads (leg.ReceiveHolder), which move with the
	// traffic.
	PoolInUse, PoolReceiving int
	// UserspaceQPs and UserspaceCMConns count over every userspace leg:
	// its device's QPs (QP 1 among them) and its CM's connections.
	UserspaceQPs, UserspaceCMConns int
	// VerbsQPs, VerbsCQs, VerbsCMIDs and VerbsEventChannels are the
	// process's open objects of package ibv (ibv.LiveObjects): every
	// verbs leg's, and nothing else in rbridge run makes them.
	VerbsQPs, VerbsCQs, VerbsCMIDs, VerbsEventChannels int64
}

// State counts what the gateway holds now.
func (g *Gateway) State() GatewayState {
	st := GatewayState{Goroutines: runtime.NumGoroutine()}
	g.mu.Lock()
	st.Sessions = len(g.sessions)
	g.mu.Unlock()
	// The sockets take their receive buffers as they start reading, and
	// as traffic moves: the pool is read between two counts of what they
	// hold that agree (a few tries), so that one taken in between is not
	// counted as held by the sessions.
	receiving := func() int {
		n := 0
		for _, l := range g.legs {
			if r, ok := l.(leg.ReceiveHolder); ok {
				n += r.ReceiveFrames()
			}
		}
		return n
	}
	for try, before := 0, receiving(); ; try++ {
		st.PoolInUse = 0
		for _, c := range g.pool.Stats() {
			st.PoolInUse += c.Total - c.Free
		}
		after := receiving()
		st.PoolReceiving = after
		if after == before || try == 3 {
			break
		}
		before = after
	}
	st.PoolInUse -= st.PoolReceiving
	for _, l := range g.legs {
		qps, conns := l.Objects()
		st.UserspaceQPs += qps
		st.UserspaceCMConns += conns
	}
	v := ibv.LiveObjects()
	st.VerbsQPs, st.VerbsCQs, st.VerbsCMIDs, st.VerbsEventChannels = v["QP"], v["CQ"], v["CMID"], v["EventChannel"]
	return st
}

// LogState logs the gateway's State and every session's state at info
// level: each direction's queue and what is posted, and each userspace
// QP's responder (rbridge run does it on SIGUSR1).
func (g *Gateway) LogState() {
	st := g.State()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.log.Info("gateway state", "sessions", st.Sessions, "goroutines", st.Goroutines, "pool_in_use", st.PoolInUse,
		slog.Group("userspace", "qps", st.UserspaceQPs, "cm_conns", st.UserspaceCMConns),
		slog.Group("verbs", "qps", st.VerbsQPs, "cqs", st.VerbsCQs, "cm_ids", st.VerbsCMIDs, "event_channels", st.VerbsEventChannels),
		"pool_receiving", st.PoolReceiving, poolAttrs(g.pool.Stats()))
	for s, info := range g.sessions {
		st := s.State()
		attrs := []any{"route", info.route, "client", info.client, "age", time.Since(info.started).Round(time.Millisecond),
			"to_target", st[0], "to_client", st[1]}
		for side, c := range map[string]leg.Conn{"client_side": info.in, "target_side": info.out} {
			attrs = append(attrs, leg.StateAttrs(c, side)...)
		}
		g.log.Info("session state", attrs...)
	}
}

// poolAttrs are the pool's classes as log attributes, one group a class
// ("pool.4096.in_use=3 pool.4096.total=512 ..."), key=value as the rest.
func poolAttrs(cs []pool.ClassStats) slog.Attr {
	attrs := make([]any, 0, len(cs))
	for _, c := range cs {
		attrs = append(attrs, slog.Group(strconv.Itoa(c.Size), "in_use", c.Total-c.Free, "total", c.Total, "gets", c.Gets, "exhausted", c.Exhausted, "overreleased", c.Overreleased))
	}
	return slog.Group("pool", attrs...)
}

// RunState is what a gateway is doing, as Status shows it.
type RunState string

// A gateway runs from StartGateway; a Reload makes it reloading while it
// applies a file; Close makes it draining (it accepts nothing more, its
// sessions are being ended) and then stopped.
const (
	StateRunning   RunState = "running"
	StateReloading RunState = "reloading"
	StateDraining  RunState = "draining"
	StateStopped   RunState = "stopped"
)

// RunState says what the gateway is doing now.
func (g *Gateway) RunState() RunState {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.runStateLocked()
}

func (g *Gateway) runStateLocked() RunState {
	switch {
	case g.closed:
		return StateStopped
	case g.closing:
		return StateDraining
	case g.reloading:
		return StateReloading
	}
	return StateRunning
}

// Health is nil while the gateway serves every route: each route's accept
// loop still runs, each userspace leg's receive loop comes round (it does
// at least every second while idle; one stuck in a QP, a session or a send
// for StallAfter is named), and the gateway's lock, which every session's
// start and end takes, can be had (a deadlock there blocks Health itself).
// rbridge run feeds systemd's watchdog only while it is nil.
func (g *Gateway) Health() error {
	now := time.Now()
	var errs []error
	for name, l := range g.legs {
		if err := l.Health(now, g.stall); err != nil {
			errs = append(errs, fmt.Errorf("bridge: gateway: leg %q: %w", name, err))
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closing {
		return errors.New("bridge: gateway: closing")
	}
	for name, err := range g.stopped {
		errs = append(errs, fmt.Errorf("bridge: gateway: route %q stopped accepting: %w", name, err))
	}
	for name, err := range g.halted {
		errs = append(errs, fmt.Errorf("bridge: gateway: group %q stopped: %w", name, err))
	}
	return errors.Join(errs...)
}

// Pool returns the gateway's memory pool.
func (g *Gateway) Pool() *pool.Pool { return g.pool }

// routineAccept takes the route's connection requests, one goroutine each.
// It ends with the gateway, or when a reload removes the route (ctx);
// sessions it started go on until they end.
func (g *Gateway) routineAccept(ctx context.Context, run *routeRun, ln leg.Listener) {
	defer g.wg.Done()
	defer close(run.done)
	defer ln.Close()
	r, timeout := run.r, g.timeout
	for {
		in, err := ln.Next(ctx)
		if err != nil {
			if ctx.Err() == nil {
				g.log.Error("route stopped accepting", "route", r.Name, "err", err)
				g.mu.Lock()
				g.stopped[r.Name] = err
				g.mu.Unlock()
			}
			return
		}
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			g.connect(r, in, timeout)
		}()
	}
}

// connect connects a client's request through to the route's target.
func (g *Gateway) connect(r *config.Route, in leg.Incoming, timeout time.Duration) {
	client := in.Remote()
	base := g.log.With("route", r.Name, "client", client)
	log := base.With("target", r.Target.Addr)
	g.mu.Lock()
	rs := g.routeStats[r.Name]
	g.mu.Unlock()
	if !r.Allowed(client.Addr()) {
		g.stats.Refused.Add(1)
		rs.Refused.Add(1)
		log.Warn("client not allowed by the route: rejected")
		_ = in.Reject(&leg.Rejected{Reason: cm.RejectConsumerDefined})
		return
	}
	if err := g.targetDown(r); err != nil {
		g.stats.Rejected.Add(1)
		rs.Rejected.Add(1)
		log.Warn("the route's target is through a leg that is down or lost its floating address: client rejected", "err", err)
		_ = in.Reject(&leg.Rejected{Reason: cm.RejectConsumerDefined})
		return
	}
	// The protocol the route carries: one Protocol a session (a queue
	// pair), the host's side the client's (A).
	var proto session.Protocol
	if r.Protocol != "" {
		g.mu.Lock()
		ps := g.protocols[routeProtocol{r.Name, r.Protocol}]
		g.mu.Unlock()
		var err error
		if proto, err = staging.New(staging.Options{Protocol: r.Protocol, Route: r.Name, Host: 0, Stats: ps, Logger: base, MaxTransfer: g.pool.Largest()}); err != nil {
			// Cannot happen: config checked the protocol, startRoute made
			// its counters.
			g.stats.Rejected.Add(1)
			rs.Rejected.Add(1)
			log.Error("the route's protocol cannot be served: client rejected", "err", err)
			_ = in.Reject(&leg.Rejected{Reason: cm.RejectConsumerDefined})
			return
		}
	}
	ctx, cancel := context.WithTimeout(g.ctx, timeout)
	defer cancel()
	p := in.Params()
	p.Client = client
	// A protocol's queue sizes the receives on both sides of the session
	// (what a storage queue's peers may send at once), and those toward
	// the target to its responses' size.
	queue, sized := staging.QueueOf(r.Protocol, p.PrivateData)
	if sized {
		p.Receives, p.ReceiveSize = queue.Depth, queue.ResponseSize
	}
	stages := g.legStatus[r.Target.Leg].Kind == config.KindVerbs
	var err error
	if p.PrivateData, err = staging.ConnectDataOf(proto, r.Protocol, true, stages, p.PrivateData); err != nil {
		g.stats.Rejected.Add(1)
		rs.Rejected.Add(1)
		log.Warn("the client's connect request is not one the route's protocol takes: client rejected", "err", err)
		_ = in.Reject(&leg.Rejected{Reason: cm.RejectConsumerDefined})
		return
	}
	// The target's connection is where a protocol's staging is exposed (its
	// peer is the one-sided initiator), when it is on a verbs leg: the
	// route's own or its fallback's.
	p.Stages = proto != nil
	out, fellBack, err := g.dialTarget(ctx, r, p, log, rs)
	if err != nil {
		var rj *leg.Rejected
		if !errors.As(err, &rj) {
			rj = &leg.Rejected{Reason: cm.RejectTimeout}
		}
		g.stats.Rejected.Add(1)
		rs.Rejected.Add(1)
		log.Warn("target did not accept: client rejected with the same", "reason", rj.Reason, "err", err)
		_ = in.Reject(rj)
		return
	}
	if fellBack { // the session's lines name where it goes
		log = base.With("target", r.Fallback.Addr, "through", r.Fallback.Leg)
	}
	tp := out.Params()
	if tp.PrivateData, err = staging.ConnectDataOf(proto, r.Protocol, false, stages, tp.PrivateData); err != nil {
		g.stats.Rejected.Add(1)
		rs.Rejected.Add(1)
		log.Warn("the target's connect reply is not one the route's protocol takes: client rejected, the target's connection closed", "err", err)
		_ = in.Reject(&leg.Rejected{Reason: cm.RejectConsumerDefined})
		_ = out.Close()
		return
	}
	// What both ends allow: the client may have as many READs outstanding
	// here as the target takes, and take as many as the target issues.
	cp := leg.Params{PrivateData: tp.PrivateData,
		RespRes: min(orOne(p.InitDepth), orOne(tp.RespRes)), InitDepth: min(orOne(p.RespRes), orOne(tp.InitDepth))}
	if sized {
		cp.Receives, cp.ReceiveSize = queue.Depth, queue.RequestSize
	}
	c, err := in.Accept(ctx, cp)
	if err != nil {
		g.stats.Failed.Add(1)
		rs.Failed.Add(1)
		log.Warn("accepting the client failed: the target's connection is closed", "err", err)
		_ = out.Close()
		return
	}
	s, err := session.New(session.Options{A: c.Endpoint(), B: out.Endpoint(), Pool: g.pool, Logger: log, Protocol: proto,
		Liveness: max(r.Liveness, 0)})
	if err != nil {
		// Both connections are up, so this is one of them ending before
		// the session started (a peer that disconnected at once).
		g.stats.Failed.Add(1)
		rs.Failed.Add(1)
		log.Warn("the session could not start: both connections are closed", "err", err)
		_ = c.Close()
		_ = out.Close()
		return
	}
	info := &sessionInfo{route: r.Name, client: client, target: r.Target.Addr, started: time.Now(), in: c, out: out,
		desc: [2]string{c.Describe(), out.Describe()}, fallback: fellBack, inLeg: r.Listen.Leg, outLeg: r.Target.Leg}
	if fellBack {
		info.target, info.outLeg = r.Fallback.Addr, r.Fallback.Leg
	}
	if f := g.beforeTable.Load(); f != nil {
		(*f)()
	}
	g.mu.Lock()
	if g.closing {
		g.mu.Unlock()
		s.Close()
		_ = c.Close()
		_ = out.Close()
		return
	}
	g.sessions[s] = info
	// A leg that went down while the session was being made: the link
	// watch ended the sessions through it before this one was in the
	// table, and will not again until the link is up and down again.
	// Entered under the same lock as the watch marks a leg down, the
	// session is either in the table then or sees the mark now.
	downLeg, down := g.crossesDownLocked(info.outLeg, info.inLeg)
	if lc := g.linkDowns[downLeg]; lc != nil && errors.Is(down, ErrLinkDown) {
		lc.cut.Add(1)
	}
	g.mu.Unlock()
	g.stats.Accepted.Add(1)
	rs.Accepted.Add(1)
	log.Info("session up", "client_side", info.desc[0], "target_side", info.desc[1], "through_fallback", fellBack,
		"responder_resources", cp.RespRes, "initiator_depth", cp.InitDepth)
	if down != nil {
		log.Warn("a leg the session crosses went down, or its floating address left, while it was being made: it ends", "leg", downLeg, "why", down)
		s.End(down)
	}
	<-s.Done()
	st := s.Stats().Snapshot()
	log.Info("session ended", "why", s.Err(), "age", time.Since(info.started).Round(time.Millisecond),
		"ops_to_target", st.TotalOps(0), "ops_to_client", st.TotalOps(1), "bytes_to_target", st.TotalBytes(0),
		"bytes_to_client", st.TotalBytes(1), "failed", st.Failed[0]+st.Failed[1])
	_ = c.Close()
	_ = out.Close()
	g.mu.Lock()
	delete(g.sessions, s)
	g.ended[r.Name].Add(s.Stats().Snapshot())
	g.mu.Unlock()
	g.stats.Ended.Add(1)
	rs.Ended.Add(1)
}

func orOne(n int) int { return max(n, 1) }

// ErrSessionsCut matches Close's error when sessions were still closing
// (their peers not yet answering the disconnect) as its context ended:
// they were cut as the legs closed under them.
var ErrSessionsCut = errors.New("sessions cut")

// stopGrace bounds the wait for what the gateway runs itself (accept
// loops, relays, connections being made) to end once Close cancelled it:
// they end at once, so one still running then is stuck.
const stopGrace = 5 * time.Second

// Close stops accepting, ends every session (their connections are
// disconnected, ops in flight fail back), closes the legs and the pool.
// ctx bounds the wait for the sessions' connections to finish closing (the
// peers answering the disconnect); those still closing when it ends are
// cut as the legs close, and the error matches ErrSessionsCut. A ctx
// already done waits for none. What the gateway runs itself ends on Close
// whatever ctx, and is waited for (up to stopGrace): with no session, a
// ctx already done closes cleanly.
func (g *Gateway) Close(ctx context.Context) error {
	g.mu.Lock()
	g.closing = true
	var ss []*session.Session
	for s := range g.sessions {
		ss = append(ss, s)
	}
	g.mu.Unlock()
	g.cancel()
	for _, s := range ss {
		// End it without waiting (Session.Close would, unbounded): its
		// teardown runs on a goroutine of its own, and its connect
		// goroutine, in wg, waits for it, then closes its connections.
		s.Cut()
	}
	done := make(chan struct{})
	go func() { g.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		// Sessions leave the table once their connections closed; the
		// rest of the wait group ends on the cancel above.
		if n := g.Sessions(); n > 0 {
			err = fmt.Errorf("bridge: gateway: %w: %d sessions still closing (%v)", ErrSessionsCut, n, ctx.Err())
			break
		}
		select {
		case <-done:
		case <-time.After(stopGrace):
			err = fmt.Errorf("bridge: gateway: its accept loops, relays or connections being made still running %v after Close", stopGrace)
		}
	}
	for name, l := range g.legs {
		if cerr := l.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("leg %q: %w", name, cerr))
		}
	}
	// A buffer may come back a moment after its session ended (a lease
	// released by a device's goroutine, a leg's receives as it closed):
	// give them a second, whatever ctx (the sessions ended above), before
	// calling what is left a leak.
	wait, stop := context.WithTimeout(context.Background(), time.Second)
	defer stop()
	for !g.pool.Idle() && wait.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	if perr := g.pool.Close(); perr != nil {
		err = errors.Join(err, perr)
	}
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	return err
}

// stages says whether a route of cfg carries a protocol: its sessions
// stage requests' data in the pool.
func stages(cfg *config.Config) bool {
	for i := range cfg.Routes {
		if cfg.Routes[i].Protocol != "" {
			return true
		}
	}
	return false
}
