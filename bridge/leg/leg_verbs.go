package leg

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/rbridge/rbridge/bridge/pool"
	"github.com/rbridge/rbridge/bridge/session"
	"github.com/rbridge/rbridge/internal/portcounters"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/ibv"
	"github.com/rbridge/rbridge/ipoib"
	"github.com/rbridge/rbridge/roce/cm"
	"github.com/rbridge/rbridge/ulp/rpcrdma"
)

// defaultDisconnectTimeout bounds a disconnect's wait for the peer.
const defaultDisconnectTimeout = 5 * time.Second

// verbsLeg is a leg on a libibverbs device, connected through librdmacm:
// an InfiniBand HCA, a RoCE HCA, rxe, or siw (two-sided operations only).
type verbsLeg struct {
	cfg  *config.Leg
	log  *slog.Logger
	pool *pool.Pool
	// gid is the device, port and GID the leg's address chose when it
	// opened (its port's counters and state are read there; the source GID
	// of its UD sends).
	gid ibv.GIDChoice
	// stats counts what the leg's endpoints could not relay, over all of
	// them.
	stats VerbsStats
	// loop polls the endpoints' CQs when the leg busy-polls (nil
	// otherwise).
	loop *SpinLoop

	mu   sync.Mutex // guards devs
	devs map[*ibv.Device]*verbsDevice
}

// verbsDevice is what the leg made on one device: a PD and the pool's MR
// in it (local access only).
type verbsDevice struct {
	pd    *ibv.PD
	mr    *ibv.MR
	iwarp bool
	// maxSGE is the SGEs a send work request gathers: a relayed message
	// from the frames it arrived in.
	maxSGE int
	// windows says the device has type 2 memory windows (staging is
	// exposed through them: endpoint_verbs_expose.go); mrs keeps the
	// registrations they are bound over.
	windows bool
	mrs     *stagingMRs
}

// memlockHint is MemlockHint for a registration on the device; on an
// iWARP device regardless of CAP_IPC_LOCK, as siw pins against
// RLIMIT_MEMLOCK even for root.
func (vd *verbsDevice) memlockHint(err error, what string, need int64) error {
	if vd.iwarp {
		return MemlockHintUncapped(err, what, need)
	}
	return MemlockHint(err, what, need)
}

func OpenVerbs(l *config.Leg, pl *pool.Pool, log *slog.Logger) (Leg, error) {
	sp, err := LegSpin(l)
	if err != nil {
		return nil, err
	}
	gid, err := FindGID(l)
	if err != nil {
		return nil, err
	}
	log.Info("verbs leg GID", "leg", l.Name, "device", gid.Device, "port", gid.Port, "index", gid.Index, "why", gid.Reason)
	v := &verbsLeg{cfg: l, log: log.With("leg", l.Name), pool: pl, gid: gid, devs: map[*ibv.Device]*verbsDevice{}}
	if sp.On {
		v.loop = NewSpinLoop(sp, v.log)
	}
	return v, nil
}

// FindGID finds the device, port and GID the leg's IP is on, checked
// against the device and port the config names: on a RoCE port the
// RoCEv2 GID that holds the IP; on an InfiniBand port, whose GIDs hold no
// IP, GID index 0 of the port under the IPoIB interface that holds it
// (chooseLegGID).
func FindGID(l *config.Leg) (ibv.GIDChoice, error) {
	names, err := ibv.DeviceNames()
	if err != nil {
		return ibv.GIDChoice{}, err
	}
	var table []ibv.GIDEntry
	for _, n := range names {
		d, err := ibv.OpenDevice(n)
		if err != nil {
			return ibv.GIDChoice{}, err
		}
		t, err := d.GIDTable()
		d.Close()
		if err != nil {
			return ibv.GIDChoice{}, fmt.Errorf("device %s: %w", n, err)
		}
		table = append(table, t...)
	}
	if len(names) == 0 {
		return ibv.GIDChoice{}, fmt.Errorf("no RDMA device on this host holds %v: %w", l.IP, ibv.ErrNoGID)
	}
	netdev, mac := ethernetWith(l.IP)
	return chooseLegGID(l, table, ipoib.NewHost(ipoib.Options{}), netdev, mac)
}

// ethernetWith returns the netdev that holds ip and its hardware address
// (ibv.LocalAddrs), when it is an Ethernet one ("" and nil otherwise, or
// when the interfaces cannot be read): an iWARP device's GID is that
// address.
func ethernetWith(ip netip.Addr) (string, net.HardwareAddr) {
	addrs, err := ibv.LocalAddrs()
	if err != nil {
		return "", nil
	}
	for _, a := range addrs {
		if len(a.MAC) == 6 && a.IP.WithZone("").Unmap() == ip.WithZone("").Unmap() {
			return a.Netdev, a.MAC
		}
	}
	return "", nil
}

// chooseLegGID chooses verbs leg l's GID from the devices' GID table.
// When an IPoIB interface of h (its netlink links of type
// ARPHRD_INFINIBAND and their addresses; the RDMA port from sysfs, under
// h's root) holds the leg's IP, the leg is on that interface's port, an
// InfiniBand one: ibv.ChooseGID takes its GID index 0 and checks the
// leg's device and port against it. Otherwise ibv.ChooseGID finds the
// RoCEv2 GID that holds the IP, as it always has, or else the iWARP
// device on the Ethernet netdev that holds it (netdev, whose hardware
// address is mac: ethernetWith). When the IPoIB interfaces cannot be
// searched, a RoCE or iWARP choice still stands; a failed one says the
// search failed too.
func chooseLegGID(l *config.Leg, table []ibv.GIDEntry, h *ipoib.Host, netdev string, mac net.HardwareAddr) (ibv.GIDChoice, error) {
	q := ibv.GIDQuery{IP: l.IP, Device: l.Device, Port: l.Port, MAC: mac, MACNetdev: netdev}
	ifc, err := h.InterfaceWith(l.IP)
	switch {
	case err == nil:
		p := ifc.RDMAPort()
		q.IPoIB = &p
		return ibv.ChooseGID(table, q)
	case errors.Is(err, ipoib.ErrNoInterface):
		return ibv.ChooseGID(table, q)
	}
	c, cerr := ibv.ChooseGID(table, q)
	if cerr == nil {
		return c, nil
	}
	return ibv.GIDChoice{}, fmt.Errorf("%v; among the IPoIB interfaces, where an InfiniBand port's address is: %w", cerr, err)
}

func (v *verbsLeg) Close() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	var errs []error
	for d, vd := range v.devs {
		if vd.mrs != nil {
			errs = append(errs, vd.mrs.close())
		}
		errs = append(errs, vd.mr.Close(), vd.pd.Close())
		delete(v.devs, d)
	}
	if v.loop != nil {
		v.loop.Close()
	}
	return errors.Join(errs...)
}

// device returns the PD and MR on the device an id resolved to, made on
// first use, and checks it against the leg's device and port.
func (v *verbsLeg) device(id *ibv.CMID) (*ibv.Device, *verbsDevice, error) {
	dev, err := id.Device()
	if err != nil {
		return nil, nil, err
	}
	if v.cfg.Device != "" && dev.Name() != v.cfg.Device {
		return nil, nil, fmt.Errorf("%v is on device %s, not the leg's %s", v.cfg.IP, dev.Name(), v.cfg.Device)
	}
	if v.cfg.Port != 0 && id.Port() != v.cfg.Port {
		return nil, nil, fmt.Errorf("%v is on %s port %d, not the leg's port %d", v.cfg.IP, dev.Name(), id.Port(), v.cfg.Port)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if vd := v.devs[dev]; vd != nil {
		return dev, vd, nil
	}
	vd := &verbsDevice{maxSGE: 1}
	if info, err := dev.Info(); err == nil {
		vd.iwarp = info.Transport == ibv.TransportIWARP
		vd.maxSGE = min(max(info.Attr.MaxSGE, 1), maxRelaySGE)
		vd.windows = info.Attr.MWType2()
	}
	pd, err := dev.AllocPD()
	if err != nil {
		return nil, nil, err
	}
	mr, err := pd.RegMR(v.pool.Arena(), ibv.AccessLocalWrite)
	if err != nil {
		pd.Close()
		return nil, nil, vd.memlockHint(err, "ibv_reg_mr of the pool on "+dev.Name(), int64(len(v.pool.Arena())))
	}
	vd.pd, vd.mr = pd, mr
	if vd.windows {
		vd.mrs = newStagingMRs(pd, stagingMRsKept)
	}
	v.devs[dev] = vd
	scope := "a memory window bound per command"
	if !vd.windows {
		scope = "a protection domain per connection, an MR per command"
	}
	v.log.Info("verbs device", "device", dev.Name(), "port", id.Port(), "iwarp", vd.iwarp, "max_sge", vd.maxSGE, "memory_windows", vd.windows,
		"staging_scope", scope)
	return dev, vd, nil
}

// noRemoteInvalidation returns the private data a verbs leg sends its
// peer: RPC-over-RDMA's (RFC 8797), with the promise to take Send With
// Invalidate cleared. The leg's HCA would execute a peer's invalidation
// itself, against a key of the far side's that the gateway's device does
// not hold, and fail the connection; without the promise the peer sends a
// plain SEND, and the far side invalidates its own key. Any other private
// data passes unchanged.
func noRemoteInvalidation(pd []byte) []byte { return rpcrdma.WithoutSendWithInvalidate(pd) }

// defaultReceives is the receive queue a connection's QP gets when the
// leg's receives do not ask for more (the endpoint posts 16 unless told).
const defaultReceives = 64

// maxRelaySGE bounds the pieces a relayed op gathers, a frame (a packet)
// each: a 64 KiB chunk at MTU 4096 takes 16, and at MTU 1024 each piece
// holds a quarter of a frame, so that 16 cut a 64 KiB WRITE into four
// work requests (four ACKs and completions; a software device's CPU each).
// Up to the device's own bound: rxe gathers 32, mlx5 30, siw 6.
const maxRelaySGE = 32

// endpoint makes the QP of a connection on id, and its endpoint (receives
// posted) before the connection is established.
func (v *verbsLeg) Endpoint(id *ibv.CMID, p Params) (*VerbsEndpoint, error) {
	dev, vd, err := v.device(id)
	if err != nil {
		return nil, err
	}
	pd, mr, own, err := v.scope(dev, vd, p.Stages)
	if err != nil {
		return nil, err
	}
	depth, size := receivesFor(v.cfg, p)
	recvs := max(depth, defaultReceives)
	// Busy-polled, the CQ has no completion channel: the leg's loop polls it.
	cq, err := dev.NewCQ(ibv.CQOptions{Entries: 128 + recvs + 1, BusyPoll: v.loop != nil})
	if err != nil {
		own.Close()
		return nil, err
	}
	qp, err := id.CreateQP(pd, ibv.QPOptions{Type: ibv.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: ibv.QPCap{MaxSendWR: 128, MaxRecvWR: uint32(recvs), MaxSendSGE: uint32(vd.maxSGE)}})
	if err != nil {
		cq.Close()
		own.Close()
		return nil, err
	}
	ep, err := NewVerbsEndpoint(VerbsOptions{QP: qp, CQ: cq, MR: mr, Pool: v.pool, IWARP: vd.iwarp, Disconnect: id.Disconnect, Stats: &v.stats,
		RecvDepth: depth, RecvSize: size, Windows: vd.windows, StagingMRs: vd.mrs, Loop: v.loop, OwnPD: own})
	if err != nil {
		qp.Close()
		cq.Close()
		own.Close()
		return nil, err
	}
	ep.unwatch = watchQP(dev, qp.QPN(), v.log, ep.asyncEvent)
	return ep, nil
}

// scope returns the protection domain a connection's QP is made in, and
// the pool's MR in it. A connection whose route stages (stages) on a
// device without memory windows gets a PD of its own, returned as own
// too (the endpoint frees it), with the pool's arena registered in it
// again: staging is exposed there as MRs with remote access (Expose),
// and an MR's key is valid on every QP of its PD, so in the device's
// shared PD another connection's peer could use a key it learnt. Any
// other connection takes the device's PD and MR (own is nil), where a
// memory window bound on the QP scopes each exposure to its peer.
func (v *verbsLeg) scope(dev *ibv.Device, vd *verbsDevice, stages bool) (pd *ibv.PD, mr *ibv.MR, own *ibv.PD, err error) {
	if !stages || vd.windows {
		return vd.pd, vd.mr, nil, nil
	}
	own, err = dev.AllocPD()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("a protection domain of the connection's own for staging on %s: %w", dev.Name(), err)
	}
	mr, err = own.RegMR(v.pool.Arena(), ibv.AccessLocalWrite)
	if err != nil {
		own.Close()
		return nil, nil, nil, vd.memlockHint(err, "ibv_reg_mr of the pool in a connection's own protection domain on "+dev.Name(), int64(len(v.pool.Arena())))
	}
	v.stats.OwnPDs.Add(1)
	return own, mr, own, nil
}

// maxProtocolReceives bounds the receives a protocol's queue depth asks
// of a connection (a peer announcing a queue of 65535 entries would
// otherwise take the pool's buffers for receives alone).
const maxProtocolReceives = 1024

// receivesFor is the receives a connection keeps posted and their size:
// the leg's, raised to what the route's protocol says its peer sends at
// once (p.Receives, at most maxProtocolReceives), and smaller where the
// protocol says its peer's SENDs are (p.ReceiveSize). 0 is the
// endpoint's default.
func receivesFor(l *config.Leg, p Params) (depth, size int) {
	depth, size = l.Receives, l.ReceiveSize
	if p.Receives > 0 {
		depth = max(cmp.Or(depth, defaultEndpointReceives), min(p.Receives, maxProtocolReceives))
	}
	if p.ReceiveSize > 0 {
		size = min(cmp.Or(size, defaultEndpointReceiveSize), p.ReceiveSize)
	}
	return depth, size
}

func (v *verbsLeg) Listen(addr netip.AddrPort) (Listener, error) {
	ch, err := ibv.NewEventChannel()
	if err != nil {
		return nil, err
	}
	id, err := ch.NewID(ibv.PortSpaceTCP)
	if err == nil {
		err = id.Bind(addr)
	}
	if err == nil {
		err = id.Listen(64)
	}
	if err != nil {
		ch.Close()
		return nil, err
	}
	l := &verbsListener{v: v, ch: ch, id: id, reqs: make(chan ibv.CMEvent, 64), conns: map[*ibv.CMID]chan ibv.CMEvent{}, done: make(chan struct{})}
	go l.routineEvents()
	return l, nil
}

// verbsListener demultiplexes its event channel: connection requests to
// next, the events of each connection to its own channel.
type verbsListener struct {
	v    *verbsLeg
	ch   *ibv.EventChannel
	id   *ibv.CMID
	reqs chan ibv.CMEvent
	done chan struct{}

	mu    sync.Mutex // guards conns
	conns map[*ibv.CMID]chan ibv.CMEvent
}

func (l *verbsListener) routineEvents() {
	defer close(l.done)
	for {
		ev, err := l.ch.Next(context.Background())
		if err != nil {
			return // the channel was closed
		}
		if ev.Type == ibv.CMConnectRequest {
			select {
			case l.reqs <- ev:
			default:
				l.v.log.Warn("too many connection requests waiting: rejected", "from", ev.ID.RemoteAddr())
				_ = ev.ID.Reject(nil)
				ev.ID.Close()
			}
			continue
		}
		// Sent under the lock: forget closes the channel.
		l.mu.Lock()
		if c := l.conns[ev.ID]; c != nil {
			select {
			case c <- ev:
			default:
			}
		}
		l.mu.Unlock()
	}
}

func (l *verbsListener) Next(ctx context.Context) (Incoming, error) {
	select {
	case ev := <-l.reqs:
		events := make(chan ibv.CMEvent, 8)
		l.mu.Lock()
		l.conns[ev.ID] = events
		l.mu.Unlock()
		return &verbsIncoming{l: l, id: ev.ID, p: ev.Param, events: events}, nil
	case <-l.done:
		return nil, errors.New("rdma_cm listener closed")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *verbsListener) Close() error {
	err := l.ch.Close() // closes the listening id too, and ends routineEvents
	<-l.done
	return err
}

// forget stops passing id's events on and closes its channel, which ends
// the watch of its connection: a connection the gateway disconnects first
// gets its DISCONNECTED event after it was forgotten, or never.
func (l *verbsListener) forget(id *ibv.CMID) {
	l.mu.Lock()
	if c := l.conns[id]; c != nil {
		close(c)
		delete(l.conns, id)
	}
	l.mu.Unlock()
}

type verbsIncoming struct {
	l      *verbsListener
	id     *ibv.CMID
	p      ibv.ConnParam
	events chan ibv.CMEvent
}

func (in *verbsIncoming) Remote() netip.AddrPort { return in.id.RemoteAddr() }

func (in *verbsIncoming) Params() Params { return peerParams(in.p) }

// peerParams are what the peer of a CM event asked or answered, in its
// own terms (Params). The kernel's IB CM hands the local side a REQ's or
// REP's initiator depth as its responder resources and the other way
// round, ready to accept or connect with (cm_format_req_event and
// cm_format_rep_event in drivers/infiniband/core/cm.c): swapped back
// here, as the userspace leg's CM reports them. A gateway that took them
// as they come offered a target, on a client's behalf, the client's
// initiator depth as its responder resources: 0 for an NVMe-oF host,
// and the target's READs of staging never left its QP.
func peerParams(p ibv.ConnParam) Params {
	return Params{PrivateData: p.PrivateData, RespRes: int(p.InitiatorDepth), InitDepth: int(p.ResponderResources)}
}

func (in *verbsIncoming) Accept(ctx context.Context, p Params) (Conn, error) {
	ep, err := in.l.v.Endpoint(in.id, p)
	if err != nil {
		_ = in.id.Reject(nil)
		in.l.forget(in.id)
		in.id.Close()
		return nil, err
	}
	pd := clip(noRemoteInvalidation(p.PrivateData), cm.REPPrivateDataLen)
	if err := in.id.Accept(ibv.ConnParam{PrivateData: pd, ResponderResources: uint8(min(p.RespRes, 255)),
		InitiatorDepth: uint8(min(p.InitDepth, 255)), RNRRetryCount: 7, NoMTUTrailer: true}); err != nil {
		ep.Close()
		in.l.forget(in.id)
		in.id.Close()
		return nil, err
	}
	for {
		select {
		case ev := <-in.events:
			switch ev.Type {
			case ibv.CMEstablished:
				c := &verbsConn{ep: ep, id: in.id, forget: func() { in.l.forget(in.id) }, p: in.p, passive: true}
				go c.watch(in.events)
				return c, nil
			case ibv.CMDisconnected:
				// The client connected and left before its ESTABLISHED
				// reached us (it sent at once and disconnected): what it
				// sent is on the CQ, acknowledged by the HCA. The session
				// relays it to the target, then ends.
				c := &verbsConn{ep: ep, id: in.id, forget: func() { in.l.forget(in.id) }, p: in.p, passive: true}
				ep.PeerDisconnected() // told to the session when it starts
				go c.watch(in.events)
				return c, nil
			}
			ep.Close()
			in.l.forget(in.id)
			in.id.Close()
			return nil, fmt.Errorf("accept: the client's connection ended in %v (status %d)", ev.Type, ev.Status)
		case <-ctx.Done():
			ep.Close()
			in.l.forget(in.id)
			in.id.Close()
			return nil, ctx.Err()
		}
	}
}

func (in *verbsIncoming) Reject(r *Rejected) error {
	defer in.id.Close()
	defer in.l.forget(in.id)
	// librdmacm rejects with the consumer-defined reason only; the reason
	// the target gave travels in the log.
	return in.id.Reject(r.PrivateData)
}

// resolve makes an rdma_cm id in port space ps on ch and resolves its
// address and route to to, from the leg's address.
func (v *verbsLeg) resolve(ctx context.Context, ch *ibv.EventChannel, ps ibv.PortSpace, to netip.AddrPort) (*ibv.CMID, error) {
	id, err := ch.NewID(ps)
	if err != nil {
		return nil, err
	}
	timeout := 5 * time.Second
	if err := id.ResolveAddr(v.cfg.IP, to, timeout); err != nil {
		return nil, err
	}
	if _, err := ch.Expect(ctx, ibv.CMAddrResolved); err != nil {
		return nil, fmt.Errorf("resolve %v: %w", to, err)
	}
	if err := id.ResolveRoute(timeout); err != nil {
		return nil, err
	}
	if _, err := ch.Expect(ctx, ibv.CMRouteResolved); err != nil {
		return nil, fmt.Errorf("route to %v: %w", to, err)
	}
	return id, nil
}

func (v *verbsLeg) Dial(ctx context.Context, to netip.AddrPort, p Params) (Conn, error) {
	ch, err := ibv.NewEventChannel()
	if err != nil {
		return nil, err
	}
	fail := func(err error) (Conn, error) {
		ch.Close()
		return nil, err
	}
	id, err := v.resolve(ctx, ch, ibv.PortSpaceTCP, to)
	if err != nil {
		return fail(err)
	}
	ep, err := v.Endpoint(id, p)
	if err != nil {
		return fail(err)
	}
	pd := clip(noRemoteInvalidation(p.PrivateData), cm.REQIPCMPrivateDataLen)
	// Six retries, not seven: rxe reads 7 as retry forever (ibv's
	// rb_cm_qp_rtr_rts), and the target's QP takes the REQ's count too.
	err = id.Connect(ibv.ConnParam{PrivateData: pd, ResponderResources: uint8(min(p.RespRes, 255)), InitiatorDepth: uint8(min(p.InitDepth, 255)),
		RetryCount: 6, RNRRetryCount: 7, NoMTUTrailer: true})
	if err != nil {
		ep.Close()
		return fail(err)
	}
	ev, err := ch.Next(ctx)
	if err == nil && ev.Type != ibv.CMEstablished {
		switch ev.Type {
		case ibv.CMRejected:
			err = &Rejected{Reason: cm.RejectReason(ev.Status), PrivateData: ev.Param.PrivateData}
		case ibv.CMUnreachable:
			err = &Rejected{Reason: cm.RejectTimeout}
		default:
			err = fmt.Errorf("connect to %v: %v (status %d): %w", to, ev.Type, ev.Status, ev.Err)
		}
	}
	if err != nil {
		ep.Close()
		return fail(err)
	}
	events := make(chan ibv.CMEvent, 8)
	c := &verbsConn{ep: ep, id: id, ch: ch, p: ev.Param}
	go func() {
		for {
			ev, err := ch.Next(context.Background())
			if err != nil {
				close(events)
				return
			}
			events <- ev
		}
	}()
	go c.watch(events)
	return c, nil
}

// verbsConn is an established rdma_cm connection of the verbs leg.
type verbsConn struct {
	ep      *VerbsEndpoint
	id      *ibv.CMID
	ch      *ibv.EventChannel // a dial's own channel; nil for an accepted one
	p       ibv.ConnParam     // the peer's
	passive bool              // accepted (the client's REQ), not dialled
	forget  func()
	once    sync.Once
}

// watch ends the session when the peer disconnects.
func (c *verbsConn) watch(events <-chan ibv.CMEvent) {
	for ev := range events {
		if ev.Type == ibv.CMDisconnected {
			c.ep.PeerDisconnected()
			return
		}
	}
}

func (c *verbsConn) Endpoint() session.Endpoint { return c.ep }

func (c *verbsConn) Params() Params { return peerParams(c.p) }

func (c *verbsConn) Describe() string {
	mtu := 0
	if a, err := c.ep.qp.Query(); err == nil {
		mtu = a.PathMTU.Bytes()
	}
	return fmt.Sprintf("verbs QP %d <-> %v, MTU %d: %s", c.ep.qp.QPN(), c.id.RemoteAddr(), mtu, c.mtuWhy())
}

// mtuWhy says where rdma_cm's path MTU came from: the port's active MTU
// (a RoCE port's follows its netdev's MTU), and for an accepted
// connection the client's REQ too (the smaller of the two).
func (c *verbsConn) mtuWhy() string {
	port := "the port's active MTU"
	if dev, err := c.id.Device(); err == nil {
		if pi, err := dev.QueryPort(c.id.Port()); err == nil {
			port = fmt.Sprintf("%s port %d's active MTU %d", dev.Name(), c.id.Port(), pi.ActiveMTU.Bytes())
		}
	}
	if c.passive {
		return "the smaller of the client's REQ and " + port
	}
	return port + ", as rdma_cm asks in the REQ"
}

func (c *verbsConn) Close() error {
	var err error
	c.once.Do(func() {
		err = c.ep.Close() // disconnects first
		if c.forget != nil {
			c.forget()
		}
		err = errors.Join(err, c.id.Close())
		if c.ch != nil {
			err = errors.Join(err, c.ch.Close())
		}
	})
	return err
}

func (v *verbsLeg) Status(st *Status) {
	// The choice openVerbsLeg made and logged.
	st.Device, st.Port, st.GIDIndex, st.GID, st.GIDWhy = v.gid.Device, v.gid.Port, v.gid.Index, v.gid.GID.String(), v.gid.Reason
	if v.loop != nil {
		st.BusyPoll, st.BusyPollThread, st.BusyPollNaps = v.loop.Describe(), v.loop.Thread(), v.loop.Naps()
	}
}

var _ LinkWatcher = (*verbsLeg)(nil)

// WatchLink is the port events of the leg's device (a port going active
// or down, its GIDs or LID changing, the device failing), read on a
// device context of the watch's own: the kernel tells every context of a
// device its port events.
func (v *verbsLeg) WatchLink(ctx context.Context, changed func(), lost func(error)) error {
	dev, err := ibv.OpenDevice(v.gid.Device)
	if err != nil {
		return fmt.Errorf("verbs device %s: port events: %w", v.gid.Device, err)
	}
	go func() {
		defer dev.Close()
		for {
			ev, err := dev.AsyncEvent(ctx)
			if err != nil {
				if ctx.Err() == nil {
					lost(fmt.Errorf("verbs device %s: port events: %w", v.gid.Device, err))
				}
				return
			}
			switch ev.Type {
			case ibv.EventPortActive, ibv.EventPortErr, ibv.EventLIDChange, ibv.EventGIDChange,
				ibv.EventPKeyChange, ibv.EventSMChange, ibv.EventClientReregister:
				if ev.Port == v.gid.Port {
					changed()
				}
			case ibv.EventDeviceFatal:
				changed()
			}
		}
	}()
	return nil
}

func (v *verbsLeg) Link(sysRoot string, withPort bool) (string, bool, *portcounters.Port) {
	if !withPort {
		return PortState(sysRoot, v.gid.Device, v.gid.Port)
	}
	return PortLink(sysRoot, v.gid.Device, v.gid.Port)
}

// PortState reads an RDMA port's state in the sysfs at sysRoot, and
// whether it is up (ACTIVE), without its counters.
func PortState(sysRoot, device string, port int) (string, bool, *portcounters.Port) {
	state, _, err := portcounters.ReadState(sysRoot, device, port)
	if err != nil {
		return "unreadable: " + err.Error(), false, nil
	}
	return state, state == "ACTIVE", nil
}

// PortLink reads an RDMA port's link in the sysfs at sysRoot: its state,
// whether it is up (ACTIVE), and the port as read (nil when unreadable).
func PortLink(sysRoot, device string, port int) (string, bool, *portcounters.Port) {
	p, err := portcounters.Read(sysRoot, device, port)
	if err != nil {
		return "unreadable: " + err.Error(), false, nil
	}
	return p.State, p.Active(), &p
}

func (v *verbsLeg) Counters(c *Counters) {
	s := v.stats.Snapshot()
	c.Verbs = &s
}

func (v *verbsLeg) Objects() (int, int) { return 0, 0 } // ibv.LiveObjects counts them all

func (v *verbsLeg) Health(time.Time, time.Duration) error { return nil }

func (v *verbsLeg) NICPort() (string, int, bool) { return v.gid.Device, v.gid.Port, true }

func (v *verbsLeg) JoinedLink() (string, string, netip.Addr, error) {
	if v.gid.Netdev == "" || v.gid.Type != ibv.GIDTypeRoCEv2 {
		return "", "", netip.Addr{}, fmt.Errorf("leg %q is on %s, an InfiniBand port: membership there is the subnet administrator's, not IGMP's; joined_on needs an Ethernet link on the members' side (a RoCE port or a userspace leg)", v.cfg.Name, v.gid.GIDEntry)
	}
	return v.gid.Netdev, "", v.cfg.IP, nil
}
