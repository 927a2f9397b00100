package leg

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/rbridge/rbridge/bridge/pool"
	"github.com/rbridge/rbridge/bridge/session"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/ibv"
	"github.com/rbridge/rbridge/internal/netns"
	"github.com/rbridge/rbridge/internal/portcounters"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/cm"
	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/roce/udpconn"
	"github.com/rbridge/rbridge/xdp"
)

// userspaceLeg is a leg on rbridge's own RoCEv2 transport: a device on the
// interface's UDP socket or AF_XDP queue, and the IB CM on its QP 1, so
// that unmodified rdma_cm applications connect to it and it to them.
type userspaceLeg struct {
	// linkDown is what the gateway's link watcher last saw (NoteLink).
	linkDown atomic.Bool

	cfg  *config.Leg
	log  *slog.Logger
	pool *pool.Pool
	// dev is the device of queue 0, which holds the CM's QP 1 and the
	// UD QPs; devs are every queue's (io: udp with queues: a receive
	// loop, a socket and a device each, steered by destination QP), dev
	// first.
	dev  *transport.Device
	devs []*transport.Device
	// queuesWhy says how the number of queues was chosen, for the logs.
	queuesWhy string
	// steer is the sockets' steering (io: udp), for its counters.
	steer *udpconn.Queues
	CM    *cm.Manager
	pd    *transport.PD
	mr    *transport.MR
	Prog  *xdp.Program // AF_XDP: the classifier, which must know the leg's QPs
	// neigh resolves the peers' Ethernet addresses (AF_XDP), in the leg's
	// namespace.
	Neigh *xdp.Resolver
	// frames are the pool's buffers the AF_XDP socket, or the UDP sockets'
	// GRO reads, receive into (nil where the pool has no buffers of their
	// size).
	frames *pool.Frames
	// mtu is the largest path MTU the leg carries, and why (the
	// interface's MTU, the AF_XDP frame): what its Dials ask for, and the
	// most its listeners accept.
	MTU    int
	mtuWhy string
	// pconn is the device's packet I/O (a *udpconn.Conn or *xdp.Conn),
	// for its counters; pconns every queue's, pconn first.
	pconn  roce.PacketConn
	pconns []roce.PacketConn
	// loop, when the leg busy-polls, reads the device (polled: no
	// receive goroutine) and its endpoints' send CQs; nil otherwise.
	loop *SpinLoop
	// link is the interface's link, read in the namespace the leg opened
	// in; ifindex the interface's index then.
	link    *Link
	ifindex int
	// netnsMoved is the last thing Link.NetnsMoved said, logged when it changes.
	netnsMoved atomic.Pointer[string]
}

// frameSize is the AF_XDP frame: a pool class of the page size.
const frameSize = 4096

// InNetns says where an interface is, for a message: "vgw0 in network
// namespace user0", or for ns "" (a leg without netns) "lo in the
// gateway's own network namespace".
func InNetns(ifname, ns string) string {
	if ns == "" {
		return ifname + " in the gateway's own network namespace"
	}
	return fmt.Sprintf("%s in network namespace %s", ifname, ns)
}

func OpenUserspace(l *config.Leg, pl *pool.Pool, log *slog.Logger) (Leg, error) {
	sp, err := LegSpin(l)
	if err != nil {
		return nil, err
	}
	u := &userspaceLeg{cfg: l, log: log.With("leg", l.Name), pool: pl, pd: transport.NewPD()}
	queues := 1
	if l.IO == config.IOUDP {
		queues, u.queuesWhy = Queues(l)
	}
	// Its link is read where its sockets are made.
	if u.link, err = OpenLink(l.Netns, l.Interface); err != nil {
		return nil, fmt.Errorf("%s: %w", InNetns(l.Interface, l.Netns), err)
	}
	var conns []roce.PacketConn
	err = netns.Do(l.Netns, func() error {
		ifi, err := net.InterfaceByName(l.Interface)
		if err != nil {
			return fmt.Errorf("interface %s: %w", l.Interface, err)
		}
		// A freebind leg's address may be on another gateway now: it
		// binds it all the same, and receives once it arrives.
		if err := HasAddr(ifi, l.IP); err != nil && !l.FreeBind {
			return err
		} else if l.FreeBind {
			log.Info("userspace leg on a floating address: bound free, it takes traffic while the interface holds it",
				"leg", l.Name, "ip", l.IP, "held", err == nil)
		}
		u.ifindex = ifi.Index
		u.MTU, u.mtuWhy = legMTU(ifi, l.IO)
		if l.MTU > 0 && l.MTU < u.MTU {
			u.MTU, u.mtuWhy = l.MTU, fmt.Sprintf("the leg's mtu %d (%s)", l.MTU, u.mtuWhy)
		}
		local := netip.AddrPortFrom(l.IP, roce.Port)
		switch l.IO {
		case config.IOUDP:
			// Its multicast (groups) leaves on the leg's interface.
			o := udpconn.Options{Addr: local, Interface: ifi.Index, Logger: log,
				NoGSO: l.NoUDPOffload(), NoGRO: l.NoUDPOffload(), FreeBind: l.FreeBind}
			// GRO reads land in the pool's 64 KiB buffers, lent to the
			// sessions as AF_XDP's frames are: a payload relayed to a
			// verbs leg is gathered from where it landed, not copied.
			// Half the class stays for the rest: a frame may hold one
			// short packet that a session keeps until its far side
			// completes it.
			if fr, ferr := pl.LendFrames(udpconn.FrameLen, 0.5); ferr == nil {
				u.frames, o.Frames, o.Arena = fr, fr, pl.Arena()
			} else {
				log.Info("userspace leg: received payloads are copied, not lent", "leg", l.Name, "why", ferr)
			}
			u.steer, err = udpconn.ListenQueues(o, queues)
			if err != nil && l.Queues == 0 && queues > 1 {
				// The default's loops need the steering program (CAP_BPF):
				// without it, one loop, as a leg had before queues.
				log.Warn("userspace leg: one receive loop, not the default's several: their steering could not be set up (queues: 1 says so and keeps this quiet)",
					"leg", l.Name, "queues", queues, "err", err)
				u.queuesWhy = fmt.Sprintf("%s; one, as the steering failed: %v", u.queuesWhy, err)
				u.steer, err = udpconn.ListenQueues(o, 1)
			}
			if err != nil {
				return err
			}
			for _, c := range u.steer.Conns {
				conns = append(conns, c)
			}
			return nil
		case config.IOAFXDP:
			if u.Prog, err = xdp.Load(xdp.Options{Logger: log}); err != nil {
				return err
			}
			if _, err := u.Prog.Attach(ifi.Index); err != nil {
				return err
			}
			// This namespace's neighbours, resolved by its kernel when
			// unknown.
			if u.Neigh, err = xdp.NewResolver(xdp.ResolverOptions{Ifindex: ifi.Index, Src: l.IP, Logger: log}); err != nil {
				return err
			}
			// The pool is the UMEM: received frames are pool buffers that
			// a session relays from where they landed.
			if u.frames, err = pl.Frames(frameSize); err != nil {
				return err
			}
			// A socket on every receive queue the NIC's RSS spreads
			// packets over: a QP's packets arrive on whichever queue the
			// hash of its peer's UDP source port picks.
			nq, nqWhy, err := xdp.RxQueues(ifi.Index)
			if err != nil {
				return err
			}
			if queues, u.queuesWhy, err = xdpQueues(l, nq, nqWhy, log); err != nil {
				return err
			}
			ring, err := xdpRing(queues, u.frames.Len())
			if err != nil {
				return err
			}
			umem := pl.Arena()
			umem = umem[:len(umem)&^(frameSize-1)]
			xconns, err := xdp.OpenQueues(xdp.ConnOptions{Ifindex: ifi.Index, UMEM: umem, FrameSize: frameSize, Frames: u.frames,
				RingSize: ring, LocalAddr: local, Neighbors: u.Neigh, Program: u.Prog, Logger: log}, queues)
			if err != nil {
				return MemlockHint(err, "the AF_XDP UMEM (the pool)", int64(len(umem)))
			}
			for _, c := range xconns {
				conns = append(conns, c)
			}
			return u.Prog.AddQP(1, xdp.QP{}) // the CM's MADs
		}
		return fmt.Errorf("io %q", l.IO)
	})
	if err != nil {
		u.Close()
		return nil, fmt.Errorf("%s: %w", InNetns(l.Interface, l.Netns), err)
	}
	if u.devs, err = transport.NewDevices(conns, transport.DeviceOptions{Logger: log, Polled: sp.On}); err != nil {
		u.Close() // NewDevices closed conns
		return nil, err
	}
	u.dev, u.pconns = u.devs[0], conns
	log.Info("userspace leg receive loops", "leg", l.Name, "io", l.IO, "queues", len(u.devs), "why", u.queuesWhy)
	if sp.On {
		u.loop = NewSpinLoop(sp, u.log)
		u.loop.Add(u.pollDevice)
		log.Info("userspace leg busy-polled: its receive loop holds a CPU", "leg", l.Name, "loop", sp.String())
	}
	u.pconn = conns[0]
	if u.MTU == 0 {
		u.Close()
		return nil, fmt.Errorf("%s: %s: too small for RoCE", l.Interface, u.mtuWhy)
	}
	log.Info("userspace leg path MTU", "leg", l.Name, "mtu", u.MTU, "why", u.mtuWhy)
	if uc, ok := u.pconn.(*udpconn.Conn); ok {
		log.Info("userspace leg UDP offload", "leg", l.Name, "offload", uc.Offload(), "lends_pool_buffers", uc.LendsFrames())
	}
	if u.CM, err = cm.New(cm.Options{Device: u.dev, Addr: l.IP, Logger: log, MaxPathMTU: u.MTU}); err != nil {
		u.Close()
		return nil, err
	}
	if u.mr, err = u.pd.RegisterMR(pl.Arena(), transport.AccessLocalWrite); err != nil {
		u.Close()
		return nil, err
	}
	return u, nil
}

// xdpQueues is how many of the interface's nq receive queues (nqWhy
// says how they were counted) an io: afxdp leg binds a socket on, and
// why: all of them by default, or its queues key, at most nq. With fewer,
// packets RSS puts on the others reach no socket: the classifier passes
// them to the kernel, and the log says so.
func xdpQueues(l *config.Leg, nq int, nqWhy string, log *slog.Logger) (int, string, error) {
	switch {
	case l.Queues > nq:
		return 0, "", fmt.Errorf("queues %d: %s", l.Queues, nqWhy)
	case l.Queues > 0:
		if l.Queues < nq {
			log.Warn("userspace leg: AF_XDP sockets on fewer receive queues than the interface has: packets RSS puts on the others go to the kernel (rbridge_xdp_classifier_passed_no_socket_total) unless its indirection table spreads over these only (ethtool -X <interface> equal <queues>)",
				"leg", l.Name, "queues", l.Queues, "interface", nqWhy)
		}
		return l.Queues, fmt.Sprintf("queues: %d; %s", l.Queues, nqWhy), nil
	case nq > xdp.MaxQueues:
		return 0, "", fmt.Errorf("%s, more than the %d AF_XDP sockets a leg binds: set queues and spread RSS over as many (ethtool -X <interface> equal <queues>)", nqWhy, xdp.MaxQueues)
	}
	return nq, "default: every receive queue; " + nqWhy, nil
}

// xdpRing is the ring size of each of an io: afxdp leg's sockets: each
// holds a ring's worth of frames to receive into and as many to send
// from, all from the pool's 4 KiB class (frames of them), of which the
// sockets take at most half, the rest staying for the sessions. 512 when
// it fits, halved down to 32 as queues grow (a NIC of 64 queues fits the
// default pool).
func xdpRing(queues, frames int) (int, error) {
	const most, least = 512, 32
	for ring := most; ring >= least; ring /= 2 {
		if queues*2*ring <= frames/2 {
			return ring, nil
		}
	}
	return 0, fmt.Errorf("%d AF_XDP sockets need at least %d of the pool's %d %d-byte buffers for their rings (%d each), more than the half they may take: fewer queues (queues: N, and ethtool -X <interface> equal N)",
		queues, queues*2*least, frames, frameSize, 2*least)
}

// afxdpMaxMTU is the largest path MTU over AF_XDP: a packet and its
// Ethernet, IP and UDP headers fit a 4 KiB frame only up to 2048 (the
// kernel keeps 256 bytes of headroom in each).
const afxdpMaxMTU = 2048

// legMTU is the path MTU a userspace leg on ifi carries: the largest IB MTU
// whose packets fit the interface's MTU once RoCEv2's headers are taken off
// (as the kernel's rdma_cm computes it for a RoCE port, iboe_get_mtu), and
// over AF_XDP at most what a frame holds.
func legMTU(ifi *net.Interface, io string) (int, string) {
	mtu := ibv.MTUForNetdev(ifi.MTU).Bytes()
	why := fmt.Sprintf("interface %s MTU %d carries RoCE MTU %d", ifi.Name, ifi.MTU, mtu)
	if ifi.Flags&net.FlagLoopback != 0 {
		mtu, why = 4096, fmt.Sprintf("interface %s is loopback", ifi.Name)
	}
	if io == config.IOAFXDP && mtu > afxdpMaxMTU {
		mtu, why = afxdpMaxMTU, why+fmt.Sprintf(", AF_XDP's 4 KiB frames %d", afxdpMaxMTU)
	}
	return mtu, why
}

// HasAddr checks that the interface holds ip.
func HasAddr(ifi *net.Interface, ip netip.Addr) error {
	addrs, err := ifi.Addrs()
	if err != nil {
		return fmt.Errorf("interface %s: %w", ifi.Name, err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if got, ok := netip.AddrFromSlice(n.IP); ok && got.Unmap() == ip {
				return nil
			}
			if ifi.Flags&net.FlagLoopback != 0 && n.Contains(ip.AsSlice()) {
				return nil // every address of a loopback prefix is local (127.0.0.0/8)
			}
		}
	}
	return fmt.Errorf("interface %s does not hold %v (it has %v)", ifi.Name, ip, addrs)
}

func (u *userspaceLeg) Close() error {
	var errs []error
	if u.CM != nil {
		errs = append(errs, u.CM.Close())
	}
	for _, d := range u.devs {
		errs = append(errs, d.Close())
	}
	if u.steer != nil {
		errs = append(errs, u.steer.Close()) // the group keeps it until its sockets closed
	}
	if u.Prog != nil {
		errs = append(errs, u.Prog.Close())
	}
	if u.Neigh != nil {
		errs = append(errs, u.Neigh.Close()) // after the device, whose conn sends through it
	}
	if u.loop != nil {
		u.loop.Close() // after the device: its CM's last MADs were read
	}
	if u.link != nil {
		u.link.Close()
	}
	return errors.Join(errs...)
}

// pollDevice is the busy-polled leg's device round: what its socket holds,
// read without waiting and handed on (the sessions' relay runs in it).
func (u *userspaceLeg) pollDevice() bool {
	read := false
	for _, d := range u.devs { // an AF_XDP leg's queues; one device otherwise
		n, err := d.Poll()
		if err != nil && !errors.Is(err, roce.ErrConnClosed) {
			u.log.Warn("read packets", "err", err)
			time.Sleep(time.Millisecond) // as the receive goroutine does
		}
		read = read || n > 0
	}
	return read
}

// endpoint makes an endpoint whose QP the classifier sends to this leg.
func (u *userspaceLeg) Endpoint() (*UserspaceEndpoint, error) {
	ep, err := NewUserspaceEndpoint(UserspaceOptions{Device: u.queueDevice(), PD: u.pd, MR: u.mr, Frames: u.frames, Loop: u.loop})
	if err != nil {
		return nil, err
	}
	if u.Prog != nil {
		if err := u.Prog.AddQP(ep.QP().QPN(), xdp.QP{}); err != nil {
			ep.Close()
			return nil, err
		}
	}
	return ep, nil
}

// queueDevice is the device a new RC QP goes on: the queue whose loop
// serves the fewest QPs (the first of those), so the loops share the
// sessions.
func (u *userspaceLeg) queueDevice() *transport.Device {
	best, fewest := u.devs[0], u.devs[0].ServedQPs()
	for _, d := range u.devs[1:] {
		if n := d.ServedQPs(); n < fewest {
			best, fewest = d, n
		}
	}
	return best
}

func (u *userspaceLeg) forget(ep *UserspaceEndpoint) {
	if u.Prog != nil {
		_ = u.Prog.RemoveQP(ep.QP().QPN())
	}
}

func (u *userspaceLeg) Listen(addr netip.AddrPort) (Listener, error) {
	l, err := u.CM.Listen(addr.Port(), 64)
	if err != nil {
		return nil, err
	}
	return &userspaceListener{u: u, l: l}, nil
}

type userspaceListener struct {
	u *userspaceLeg
	l *cm.Listener
}

func (l *userspaceListener) Next(ctx context.Context) (Incoming, error) {
	r, err := l.l.Next(ctx)
	if err != nil {
		return nil, err
	}
	return &userspaceIncoming{u: l.u, r: r}, nil
}

func (l *userspaceListener) Close() error { return l.l.Close() }

type userspaceIncoming struct {
	u *userspaceLeg
	r *cm.Request
}

func (in *userspaceIncoming) Remote() netip.AddrPort {
	if in.r.HasIPCM {
		return netip.AddrPortFrom(in.r.IPCM.Src, in.r.IPCM.SrcPort)
	}
	return netip.AddrPortFrom(in.r.Remote, 0)
}

func (in *userspaceIncoming) Params() Params {
	return Params{PrivateData: in.r.PrivateData, RespRes: int(in.r.REQ.ResponderResources), InitDepth: int(in.r.REQ.InitiatorDepth)}
}

func (in *userspaceIncoming) Accept(ctx context.Context, p Params) (Conn, error) {
	ep, err := in.u.Endpoint()
	if err != nil {
		_ = in.r.RejectWith(cm.RejectNoResources, nil)
		return nil, err
	}
	c, err := in.r.Accept(ctx, cm.AcceptOptions{QP: ep.QP(), PrivateData: p.PrivateData, ResponderResources: p.RespRes, InitiatorDepth: p.InitDepth, ECN: in.u.cfg.ECN})
	if err != nil {
		in.u.forget(ep)
		ep.Close()
		return nil, err
	}
	uc := in.u.conn(ep, c)
	uc.mtuWhy = fmt.Sprintf("the client's REQ (the leg takes up to %d: %s)", in.u.MTU, in.u.mtuWhy)
	return uc, nil
}

func (in *userspaceIncoming) Reject(r *Rejected) error {
	pd := r.PrivateData
	if len(pd) > cm.REJPrivateDataLen {
		pd = pd[:cm.REJPrivateDataLen]
	}
	return in.r.RejectWith(r.Reason, pd)
}

func (u *userspaceLeg) Dial(ctx context.Context, to netip.AddrPort, p Params) (Conn, error) {
	ep, err := u.Endpoint()
	if err != nil {
		return nil, err
	}
	pd := p.PrivateData
	if len(pd) > cm.REQIPCMPrivateDataLen {
		pd = pd[:cm.REQIPCMPrivateDataLen] // the IP CM header takes its 36 bytes from the same 92
	}
	c, err := u.CM.Dial(ctx, to, cm.DialOptions{QP: ep.QP(), PrivateData: pd, ResponderResources: p.RespRes, InitiatorDepth: p.InitDepth, PathMTU: u.MTU, ECN: u.cfg.ECN})
	if err != nil {
		u.forget(ep)
		ep.Close()
		var rj *cm.RejectError
		if errors.As(err, &rj) {
			return nil, &Rejected{Reason: rj.Reason, PrivateData: rj.PrivateData}
		}
		return nil, err
	}
	uc := u.conn(ep, c)
	if got := ep.QP().Query().PathMTU; got < u.MTU {
		uc.mtuWhy = fmt.Sprintf("asked %d (%s); the target's REP lowered it to its port's", u.MTU, u.mtuWhy)
	} else {
		uc.mtuWhy = fmt.Sprintf("asked %d: %s", u.MTU, u.mtuWhy)
	}
	return uc, nil
}

// userspaceConn is an established connection of the userspace leg.
type userspaceConn struct {
	u      *userspaceLeg
	ep     *UserspaceEndpoint
	c      *cm.Conn
	mtuWhy string // how the path MTU was chosen, for the logs
}

// NoteLink implements LinkNoter.
func (u *userspaceLeg) NoteLink(up bool) { u.linkDown.Store(!up) }

func (u *userspaceLeg) conn(ep *UserspaceEndpoint, c *cm.Conn) *userspaceConn {
	ep.SetDisconnect(func() error {
		// With the link down the DREQ is not waited for: it goes on being
		// resent in the background (cm.Conn.Disconnect), and the peer
		// hears it once the link is back.
		wait := defaultDisconnectTimeout
		if u.linkDown.Load() {
			wait = 0
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if err := c.Disconnect(ctx); err != nil && !(wait == 0 && errors.Is(err, context.DeadlineExceeded)) {
			return err
		}
		return nil
	})
	ep.SetReleased(c.Done())
	return &userspaceConn{u: u, ep: ep, c: c}
}

func (c *userspaceConn) Endpoint() session.Endpoint { return c.ep }

func (c *userspaceConn) Params() Params {
	a := c.ep.QP().Query()
	return Params{PrivateData: c.c.PrivateData(), RespRes: a.MaxRdAtomic, InitDepth: a.MaxDestRdAtomic}
}

func (c *userspaceConn) Describe() string {
	a := c.ep.QP().Query()
	return fmt.Sprintf("userspace QP %#x <-> %v QP %#x, MTU %d: %s", c.ep.QP().QPN(), c.c.RemoteAddr(), c.c.RemoteQPN(), a.PathMTU, c.mtuWhy)
}

func (c *userspaceConn) Close() error {
	err := c.ep.Close() // disconnects first
	c.u.forget(c.ep)
	return err
}

func (u *userspaceLeg) Status(st *Status) {
	st.MTU, st.MTUWhy = u.MTU, u.mtuWhy
	st.NetnsMoved = u.noteNetnsMoved()
	if u.loop != nil {
		st.BusyPoll, st.BusyPollThread, st.BusyPollNaps = u.loop.Describe(), u.loop.Thread(), u.loop.Naps()
	}
	if st.FreeBind = u.cfg.FreeBind; st.FreeBind {
		if held, err := u.link.HoldsAddr(u.cfg.IP); err == nil {
			st.IPHeld = &held
		}
	}
	switch pc := u.pconn.(type) {
	case *udpconn.Conn:
		st.UDPOffload = pc.Offload().String()
		st.QueuesWhy = u.queuesWhy
		st.Queues = u.queueCounters()
	case *xdp.Conn:
		st.AFXDPWakeup = pc.Wakeup().String()
		st.QueuesWhy = u.queuesWhy
		st.Queues = u.queueCounters()
	}
	if u.Neigh != nil {
		for _, a := range u.Neigh.Unanswered() {
			st.NeighborsUnanswered = append(st.NeighborsUnanswered, a.String())
		}
		st.NeighborFailures = u.Neigh.Stats().Failed.Load()
	}
}

var _ LinkWatcher = (*userspaceLeg)(nil)

// WatchLink is the kernel's link and address updates of the leg's
// interface, in its network namespace.
func (u *userspaceLeg) WatchLink(ctx context.Context, changed func(), lost func(error)) error {
	return u.link.Watch(ctx, changed, lost)
}

// Link is the interface's operational state in the leg's namespace. An
// interface no longer there (deleted, or moved out) is down: the leg's
// address went with it. So is, for an io: afxdp leg, another interface
// made under its name: the leg's classifier and sockets were bound to
// the one it opened on, and went with it (an io: udp leg's socket is
// bound to its address, which serves wherever it is). Only an error
// reading it is "unreadable", which the link watch takes for no change.
func (u *userspaceLeg) Link(string, bool) (string, bool, *portcounters.Port) {
	u.noteNetnsMoved()
	s, index, err := u.link.OperState()
	switch {
	case errors.Is(err, ErrNoInterface):
		return "absent: " + err.Error(), false, nil
	case err != nil:
		return "unreadable: " + err.Error(), false, nil
	case index != u.ifindex && u.cfg.IO == config.IOAFXDP:
		return fmt.Sprintf("replaced: %s is another interface now (index %d; the leg's AF_XDP sockets were bound to index %d): restart the gateway to open it there",
			InNetns(u.cfg.Interface, u.cfg.Netns), index, u.ifindex), false, nil
	}
	return s, s == "up" || s == "unknown", nil
}

// noteNetnsMoved logs the leg's namespace name naming another namespace, or
// none, and its naming the leg's again, once each time it changes.
func (u *userspaceLeg) noteNetnsMoved() string {
	now := u.link.NetnsMoved()
	if prev := u.netnsMoved.Swap(&now); prev != nil && *prev == now || prev == nil && now == "" {
		return now
	}
	if now != "" {
		u.log.Warn("a userspace leg's network namespace name no longer names the namespace it opened in: the leg stays there, and its link is read there, until the gateway restarts",
			"netns", u.cfg.Netns, "why", now)
	} else {
		u.log.Info("a userspace leg's network namespace name names its namespace again", "netns", u.cfg.Netns)
	}
	return now
}

func (u *userspaceLeg) Counters(c *Counters) {
	c.MTU = u.MTU
	var t transport.StatsSnapshot
	for _, d := range u.devs {
		c.Limited += d.RateLimitedQPs()
		t.Add(d.Stats().Snapshot())
	}
	m := u.CM.Stats().Snapshot()
	c.Transport, c.CM = &t, &m
	switch u.pconn.(type) {
	case *udpconn.Conn:
		var s udpconn.StatsSnapshot
		for _, pc := range u.pconns {
			s.Add(pc.(*udpconn.Conn).Stats().Snapshot())
		}
		c.UDP = &s
		c.Queues = u.queueCounters()
		if len(u.devs) > 1 {
			if sc, err := u.steer.Counters(); err == nil {
				c.Steer = &sc
			}
		}
	case *xdp.Conn:
		// Without the kernel's ring counters the sockets' own still
		// count: the error only leaves RXRingDrops zero.
		var s xdp.ConnStats
		for _, pc := range u.pconns {
			qs, _ := pc.(*xdp.Conn).Stats()
			s.Add(qs)
		}
		c.XDP = &s
		c.Queues = u.queueCounters()
	}
	if u.Neigh != nil {
		s := u.Neigh.Stats().Snapshot()
		c.Neigh = &s
	}
	if u.Prog != nil {
		if p, err := u.Prog.Counters(); err == nil {
			c.Prog = &p
		}
	}
}

// queueCounters is each receive loop's share of the leg's work: an io:
// udp leg's sockets, an io: afxdp leg's AF_XDP sockets (one per receive
// queue).
func (u *userspaceLeg) queueCounters() []QueueCounters {
	out := make([]QueueCounters, len(u.devs))
	for i, d := range u.devs {
		q := QueueCounters{Queue: i, QPs: d.ServedQPs(), RxForeign: d.Stats().RxForeign.Load(), QPsMovedIn: d.Stats().QPsMovedIn.Load()}
		switch pc := u.pconns[i].(type) {
		case *udpconn.Conn:
			s := pc.Stats()
			q.RxPackets, q.TxPackets, q.RxBytes, q.TxBytes = s.RxPackets.Load(), s.TxPackets.Load(), s.RxBytes.Load(), s.TxBytes.Load()
		case *xdp.Conn:
			s, _ := pc.Stats()
			q.RxPackets, q.TxPackets, q.RxBytes, q.TxBytes = s.Received, s.Sent, s.RxBytes, s.TxBytes
		}
		out[i] = q
	}
	return out
}

// ReceiveFrames implements ReceiveHolder: the pool buffers the leg's UDP
// sockets hold for their next reads.
func (u *userspaceLeg) ReceiveFrames() int {
	n := 0
	for _, c := range u.pconns {
		if uc, ok := c.(*udpconn.Conn); ok {
			n += int(uc.Stats().RxFramesHeld.Load())
		}
	}
	return n
}

func (u *userspaceLeg) Objects() (int, int) {
	n := 0
	for _, d := range u.devs {
		n += d.NumQPs()
	}
	return n, u.CM.NumConns()
}

func (u *userspaceLeg) Health(now time.Time, stall time.Duration) error {
	for i, d := range u.devs {
		if last, wakes := d.ReceiveHeartbeat(); wakes && now.Sub(last) > stall {
			if len(u.devs) > 1 {
				return fmt.Errorf("receive loop %d of %d has not come round for %v: stuck", i, len(u.devs), now.Sub(last).Round(time.Millisecond))
			}
			return fmt.Errorf("the receive loop has not come round for %v: stuck", now.Sub(last).Round(time.Millisecond))
		}
	}
	return nil
}

func (u *userspaceLeg) NICPort() (string, int, bool) { return "", 0, false }

func (u *userspaceLeg) JoinedLink() (string, string, netip.Addr, error) {
	return u.cfg.Interface, u.cfg.Netns, u.cfg.IP, nil
}

// What the gateway shows of a connection or a group port on rbridge's own
// transport; false (or nil) for other legs.

// XDPCounters is the classifier's count of c's QP, when c is on an AF_XDP
// leg.
func XDPCounters(c Conn) (xdp.QPCounters, bool) {
	u, ok := c.(*userspaceConn)
	if !ok || u.u.Prog == nil {
		return xdp.QPCounters{}, false
	}
	q, err := u.u.Prog.QPCounters(u.ep.QP().QPN())
	if err != nil {
		return xdp.QPCounters{}, false // the QP left the classifier as the session ended
	}
	return q, true
}

// QPStats is c's QP's counters (its DCQCN among them), when c is on a
// userspace leg.
func QPStats(c Conn) (transport.QPStats, bool) {
	u, ok := c.(*userspaceConn)
	if !ok {
		return transport.QPStats{}, false
	}
	return u.ep.QP().Stats(), true
}

// StateAttrs are the log attributes of c's responder and device (side
// names them), when c is on a userspace leg.
func StateAttrs(c Conn, side string) []any {
	u, ok := c.(*userspaceConn)
	if !ok {
		return nil
	}
	return []any{side + "_responder", u.ep.QP().Responder(), side + "_device", u.ep.QP().Device().Stats().Snapshot()}
}

// GroupXDPCounters is the classifier's count of group on p, when p is a
// group port receiving on an AF_XDP leg.
func GroupXDPCounters(p UDPort, group netip.Addr) (xdp.GroupCounters, bool) {
	up, ok := p.(*userspaceUDPort)
	if !ok || up.u.Prog == nil {
		return xdp.GroupCounters{}, false
	}
	c, err := up.u.Prog.GroupCounters(group)
	if err != nil {
		return xdp.GroupCounters{}, false // a send-only side, or the group left as the gateway stops
	}
	return c, true
}
