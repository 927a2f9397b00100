package leg

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/bridge/pool"

	"github.com/rbridge/rbridge/ibv"
	"github.com/rbridge/rbridge/roce/cm"
)

// UD routes on the verbs leg: rdma_cm ids in the UDP port space. A
// listening id's CONNECT_REQUEST is a client's SIDR_REQ, answered by
// rdma_accept on the id with its UD QP (librdmacm's SIDR_REP names the
// QP and rdma_cm's Q_Key) or rdma_reject (status 2: librdmacm rejects a
// SIDR_REQ with no other). rdma_connect on an id sends the gateway's own
// SIDR_REQ; ESTABLISHED brings the service's QPN, Q_Key and address
// vector, UNREACHABLE its refusal (the SIDR status) or a timeout.

var _ UDLeg = (*verbsLeg)(nil)

// grhLen is the Global Route Header a UD receive buffer starts with; on
// RoCEv2 over IPv4 its last 20 bytes are the IPv4 header.
const grhLen = 40

// sidrREQIPCMPrivateData is what rdma_connect on a UDP id carries: a
// SIDR_REQ's private data after the IP CM header.
const sidrREQIPCMPrivateData = cm.SIDRREQIPCMPrivateDataLen

func (v *verbsLeg) ListenUD(addr netip.AddrPort) (UDListener, error) {
	ch, err := ibv.NewEventChannel()
	if err != nil {
		return nil, err
	}
	id, err := ch.NewID(ibv.PortSpaceUDP)
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
	l := &verbsUDListener{v: v, ch: ch, reqs: make(chan ibv.CMEvent, 64), done: make(chan struct{})}
	go l.routineEvents()
	return l, nil
}

// verbsUDListener passes its channel's CONNECT_REQUESTs (SIDR_REQs) on;
// a UD id has no other event on the passive side.
type verbsUDListener struct {
	v    *verbsLeg
	ch   *ibv.EventChannel
	reqs chan ibv.CMEvent
	done chan struct{}
}

func (l *verbsUDListener) routineEvents() {
	defer close(l.done)
	for {
		ev, err := l.ch.Next(context.Background())
		if err != nil {
			return // the channel was closed
		}
		if ev.Type != ibv.CMConnectRequest {
			continue
		}
		select {
		case l.reqs <- ev:
		default:
			l.v.log.Warn("too many SIDR requests waiting: rejected", "from", ev.ID.RemoteAddr())
			_ = ev.ID.Reject(nil)
			ev.ID.Close()
		}
	}
}

func (l *verbsUDListener) Next(ctx context.Context) (UDIncoming, error) {
	select {
	case ev := <-l.reqs:
		return &verbsUDIncoming{v: l.v, id: ev.ID, pd: ev.Param.PrivateData}, nil
	case <-l.done:
		return nil, errors.New("rdma_cm UD listener closed")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// close closes the channel, the listening id, and every id of an
// incoming request with it (their ports are closed first by the gateway,
// or their Close finds them freed).
func (l *verbsUDListener) Close() error {
	err := l.ch.Close()
	<-l.done
	return err
}

type verbsUDIncoming struct {
	v  *verbsLeg
	id *ibv.CMID
	pd []byte
}

func (in *verbsUDIncoming) Remote() netip.AddrPort { return in.id.RemoteAddr() }
func (in *verbsUDIncoming) PrivateData() []byte    { return in.pd }

func (in *verbsUDIncoming) Accept(privateData []byte) (UDPort, error) {
	p, err := in.v.udPort(in.id, nil, Spin{CPU: -1}, false)
	if err != nil {
		_ = in.id.Reject(nil)
		in.id.Close()
		return nil, err
	}
	privateData = clip(privateData, cm.SIDRREPPrivateDataLen)
	if err := in.id.Accept(ibv.ConnParam{PrivateData: privateData, NoMTUTrailer: true}); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

func (in *verbsUDIncoming) Reject(_ cm.SIDRStatus, privateData []byte) error {
	defer in.id.Close()
	privateData = clip(privateData, cm.SIDRREPPrivateDataLen)
	return in.id.Reject(privateData)
}

func (in *verbsUDIncoming) Drop() { in.id.Close() }

func (v *verbsLeg) DialUD(ctx context.Context, to netip.AddrPort, privateData []byte) (UDPort, UDService, error) {
	ch, err := ibv.NewEventChannel()
	if err != nil {
		return nil, UDService{}, err
	}
	fail := func(err error) (UDPort, UDService, error) {
		ch.Close()
		return nil, UDService{}, err
	}
	id, err := v.resolve(ctx, ch, ibv.PortSpaceUDP, to)
	if err != nil {
		return fail(err)
	}
	p, err := v.udPort(id, ch, Spin{CPU: -1}, false)
	if err != nil {
		return fail(err)
	}
	if len(privateData) > sidrREQIPCMPrivateData {
		privateData = privateData[:sidrREQIPCMPrivateData]
	}
	if err := id.Connect(ibv.ConnParam{PrivateData: privateData, NoMTUTrailer: true}); err != nil {
		p.Close()
		return nil, UDService{}, err
	}
	ev, err := ch.Next(ctx)
	if err == nil && ev.Type != ibv.CMEstablished {
		switch {
		case ev.Type == ibv.CMUnreachable && ev.Status > 0:
			err = &UDRefused{Status: cm.SIDRStatus(ev.Status), PrivateData: ev.Param.PrivateData}
		default:
			err = fmt.Errorf("resolve UD service %v: %v (status %d)", to, ev.Type, ev.Status)
		}
	}
	if err != nil {
		p.Close()
		return nil, UDService{}, err
	}
	svc := UDService{Addr: to.Addr(), QPN: ev.QPN, QKey: ev.QKey, PrivateData: ev.Param.PrivateData}
	ah, err := p.vd.pd.NewAH(ev.AH)
	if err != nil {
		p.Close()
		return nil, UDService{}, fmt.Errorf("address handle to %v: %w", to, err)
	}
	p.mu.Lock()
	p.ahs[to.Addr()] = ah
	p.mu.Unlock()
	p.peerNote = fmt.Sprintf("%v QP %#x", to, svc.QPN)
	return p, svc, nil
}

// verbsUDPort is a UD QP on an rdma_cm id of the verbs leg (rdma_cm moved
// it to RTS with its Q_Key).
type verbsUDPort struct {
	v        *verbsLeg
	id       *ibv.CMID
	ch       *ibv.EventChannel // a dial's own channel; nil for an accepted id
	vd       *verbsDevice
	qp       *ibv.QP
	scq, rcq *ibv.CQ
	ring     *UDRing
	maxMsg   int
	port     int
	peerNote string
	spin     Spin // how recv waits (a group's busy_poll)
	busySend bool // send polls its CQ (a group's busy_poll), without a completion channel
	// group is the multicast group the id joined (mcast.go): left before
	// the QP is destroyed (the kernel refuses to destroy an attached QP).
	group netip.Addr

	sends *udSender

	wcs [UDRecvDepth]ibv.WorkCompletion // Recv's
	// the ring's receive work request, posted by Recv's goroutine (and by
	// udPort before it runs)
	rwr  [1]ibv.RecvWR
	rsge [1]ibv.SGE

	// Send's: a batch's work requests and their SGEs, and completions
	swrs  [UDSendWindow]ibv.SendWR
	ssges [UDSendWindow][1]ibv.SGE
	swcs  [UDSendWindow]ibv.WorkCompletion

	mu   sync.Mutex // guards ahs and avs
	ahs  map[netip.Addr]*ibv.AH
	avs  map[netip.Addr]ibv.AHAttr // address vectors of who sent, for a reply
	once sync.Once
}

var (
	_ UDPort      = (*verbsUDPort)(nil)
	_ udSendQueue = (*verbsUDPort)(nil)
)

// maxUDSources bounds the address vectors a port remembers.
const maxUDSources = 16

// sp is how recv waits; busySend makes send poll for its completion.
func (v *verbsLeg) udPort(id *ibv.CMID, ch *ibv.EventChannel, sp Spin, busySend bool) (*verbsUDPort, error) {
	dev, vd, err := v.device(id)
	if err != nil {
		return nil, MemlockHint(err, "registering the pool (ibv_reg_mr)", int64(len(v.pool.Arena())))
	}
	pi, err := dev.QueryPort(id.Port())
	if err != nil {
		return nil, err
	}
	p := &verbsUDPort{v: v, id: id, ch: ch, vd: vd, maxMsg: pi.ActiveMTU.Bytes(), port: id.Port(),
		ahs: map[netip.Addr]*ibv.AH{}, avs: map[netip.Addr]ibv.AHAttr{}, spin: sp, busySend: busySend}
	p.sends = newUDSender(p)
	// Busy-polled CQs have no completion channel: recv and send poll
	// them.
	if p.scq, err = dev.NewCQ(ibv.CQOptions{Entries: UDSendWindow, BusyPoll: busySend}); err != nil {
		return nil, err
	}
	if p.rcq, err = dev.NewCQ(ibv.CQOptions{Entries: UDRecvDepth + 16, BusyPoll: p.spin.On}); err != nil {
		p.scq.Close()
		return nil, err
	}
	p.qp, err = id.CreateQP(vd.pd, ibv.QPOptions{Type: ibv.QPTypeUD, SendCQ: p.scq, RecvCQ: p.rcq,
		Cap: ibv.QPCap{MaxSendWR: UDSendWindow, MaxRecvWR: UDRecvDepth + 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		p.rcq.Close()
		p.scq.Close()
		return nil, err
	}
	size := p.maxMsg + grhLen
	p.ring, err = NewUDRing(v.pool, size, func(id uint64, b *pool.Buf) error {
		sge, err := vd.mr.SGE(b.Offset(), size)
		if err != nil {
			return err
		}
		p.rsge[0] = sge
		p.rwr[0] = ibv.RecvWR{ID: id, SGEs: p.rsge[:]}
		_, err = p.qp.PostRecv(p.rwr[:])
		return err
	})
	if err != nil {
		p.qp.Close()
		p.rcq.Close()
		p.scq.Close()
		return nil, err
	}
	return p, nil
}

func (p *verbsUDPort) QPN() uint32 { return p.qp.QPN() }
func (p *verbsUDPort) MTU() int    { return p.maxMsg }

func (p *verbsUDPort) Recv(ctx context.Context, ds []Datagram, wait bool) (int, error) {
	wcs := p.wcs[:min(len(ds), len(p.wcs))]
	var n int
	var err error
	switch {
	case p.spin.On && wait:
		n, err = p.spin.Wait(ctx, func() (int, error) { return p.rcq.Poll(wcs) })
	case wait:
		n, err = p.rcq.Wait(ctx, wcs)
	default:
		n, err = p.rcq.Poll(wcs)
	}
	if err != nil {
		return 0, err
	}
	for i, wc := range wcs[:n] {
		if wc.Status != ibv.WCSuccess && wc.Status != ibv.WCLocLenErr {
			return i, fmt.Errorf("UD QP %d receive: %w", p.qp.QPN(), wc.Err())
		}
		b, empty, err := p.ring.Take(wc.ID)
		if err != nil {
			return i, fmt.Errorf("UD QP %d: %w", p.qp.QPN(), err)
		}
		d := &ds[i]
		*d = Datagram{Buf: b, Off: grhLen, N: max(int(wc.ByteLen)-grhLen, 0), SrcQPN: wc.SrcQP, PoolEmpty: empty,
			TooLongHere: wc.Status == ibv.WCLocLenErr, HasImm: wc.Flags&ibv.WCFlagWithImm != 0, Imm: wc.Imm}
		if b == nil || wc.Flags&ibv.WCFlagGRH == 0 {
			continue // dropped anyway, or no GRH: no address (an unknown peer)
		}
		d.Src = grhSource(b.B()[:grhLen])
		p.mu.Lock()
		if _, ok := p.avs[d.Src]; !ok && len(p.avs) < maxUDSources {
			p.avs[d.Src] = ibv.AHAttr{IsGlobal: true, Port: uint8(p.port), DLID: wc.SLID, SL: wc.SL,
				GRH: ibv.GRH{DGID: ibv.GID(d.Src.As16()), SGIDIndex: uint8(p.v.gid.Index), HopLimit: 64}}
		}
		p.mu.Unlock()
	}
	return n, nil
}

// grhSource is the source of a received datagram: a GRH (IB) or IPv6
// header (RoCEv2) starts with IP version 6 and holds the source GID at
// bytes 8-24 (an IPv4-mapped one is unmapped); on RoCEv2 over IPv4 the
// first 20 bytes are zero and the IPv4 header follows them (Linux union
// rdma_network_hdr).
func grhSource(grh []byte) netip.Addr {
	if grh[0]>>4 != 6 && grh[20]>>4 == 4 {
		return netip.AddrFrom4([4]byte(grh[32:36]))
	}
	return netip.AddrFrom16([16]byte(grh[8:24])).Unmap()
}

func (p *verbsUDPort) Send(ctx context.Context, ds []Datagram, dst UDDest, sent *UDSent) {
	p.sends.send(ctx, ds, dst, sent)
}

func (p *verbsUDPort) Flush(ctx context.Context, sent *UDSent) { p.sends.flush(ctx, sent) }

// ah returns the address handle to a, made from the address vector a's
// datagrams arrived with the first time.
func (p *verbsUDPort) ah(a netip.Addr) (*ibv.AH, error) {
	p.mu.Lock()
	ah := p.ahs[a]
	av, haveAV := p.avs[a]
	p.mu.Unlock()
	if ah != nil {
		return ah, nil
	}
	if !haveAV {
		return nil, fmt.Errorf("no address vector to %v", a)
	}
	ah, err := p.vd.pd.NewAH(av)
	if err != nil {
		return nil, fmt.Errorf("address handle to %v: %w", a, err)
	}
	p.mu.Lock()
	p.ahs[a] = ah
	p.mu.Unlock()
	return ah, nil
}

// postSends posts the batch with one ibv_post_send; each buffer is the
// HCA's until its send completes.
func (p *verbsUDPort) postSends(ds []Datagram, ids []uint64, dst UDDest) (int, error) {
	ah, err := p.ah(dst.Addr)
	if err != nil {
		return 0, err
	}
	wrs := p.swrs[:len(ds)]
	for i := range ds {
		sge, err := p.vd.mr.SGE(ds[i].Buf.Offset()+ds[i].Off, ds[i].N)
		if err != nil {
			n, perr := p.qp.PostSend(wrs[:i])
			if perr != nil {
				return n, perr
			}
			return i, err
		}
		op := ibv.OpSend
		if ds[i].HasImm {
			op = ibv.OpSendWithImm
		}
		p.ssges[i][0] = sge
		wrs[i] = ibv.SendWR{ID: ids[i], Op: op, Flags: ibv.SendSignaled, SGEs: p.ssges[i][:], Imm: ds[i].Imm,
			AH: ah, RemoteQPN: dst.QPN, RemoteQKey: dst.QKey}
	}
	return p.qp.PostSend(wrs)
}

// reapSends polls the send CQ; a wait sleeps on its completion channel,
// or spins without yielding when the group busy-polls (its sending loop
// may be a busy-poll one, locked to its thread: busypoll.go).
func (p *verbsUDPort) reapSends(ctx context.Context, cs []udSendCompletion, wait bool) (int, error) {
	wcs := p.swcs[:min(len(cs), len(p.swcs))]
	var n int
	var err error
	switch {
	case wait && p.busySend:
		n, err = Spin{On: true}.Wait(ctx, func() (int, error) { return p.scq.Poll(wcs) }) // never naps: a send completes soon
	case wait:
		n, err = p.scq.Wait(ctx, wcs)
	default:
		n, err = p.scq.Poll(wcs)
	}
	if err != nil {
		return 0, err
	}
	for i, wc := range wcs[:n] {
		cs[i] = udSendCompletion{ID: wc.ID}
		if err := wc.Err(); err != nil {
			cs[i].Err = fmt.Errorf("UD QP %d send: %w", p.qp.QPN(), err)
		}
	}
	return n, nil
}

// noReceive is 0: the HCA drops a datagram that finds no receive without
// telling the QP's owner (its port counters may).
func (p *verbsUDPort) NoReceive() uint64 { return 0 }

func (p *verbsUDPort) Describe() string {
	s := fmt.Sprintf("verbs UD QP %d on %s port %d, MTU %d%s", p.qp.QPN(), p.v.cfg.Name, p.port, p.maxMsg, p.spin)
	if p.peerNote != "" {
		s += " -> " + p.peerNote
	}
	return s
}

func (p *verbsUDPort) Close() error {
	var err error
	p.once.Do(func() {
		p.mu.Lock()
		for a, ah := range p.ahs {
			err = errors.Join(err, ah.Close())
			delete(p.ahs, a)
		}
		p.mu.Unlock()
		if p.group.IsValid() {
			err = errors.Join(err, p.id.LeaveMulticast(p.group))
		}
		err = errors.Join(err, p.qp.Close(), p.rcq.Close(), p.scq.Close(), p.id.Close())
		if p.ch != nil {
			err = errors.Join(err, p.ch.Close())
		}
		p.ring.Close()
		p.sends.close()
	})
	return err
}

// openGroupPort joins a group on the leg with an rdma_cm id of its own (send
// only when sendOnly) and makes the id's UD QP; it returns the group's
// Q_Key from the join.
func (v *verbsLeg) openGroupPort(ctx context.Context, group netip.Addr, sendOnly, ipoib bool, timeout time.Duration, sp Spin, busySend bool) (*verbsUDPort, uint32, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ch, err := ibv.NewEventChannel()
	if err != nil {
		return nil, 0, err
	}
	// IPoIB's port space makes the kernel join the IPoIB form of the
	// MGID with the Q_Key of the port's IPoIB broadcast group.
	ps := ibv.PortSpaceUDP
	if ipoib {
		ps = ibv.PortSpaceIPoIB
	}
	id, err := ch.NewID(ps)
	if err == nil {
		err = id.ResolveAddr(v.cfg.IP, netip.AddrPortFrom(group, 0), 5*time.Second)
	}
	if err == nil {
		_, err = ch.Expect(ctx, ibv.CMAddrResolved)
	}
	if err != nil {
		ch.Close()
		if ipoib && errors.Is(err, syscall.EINVAL) {
			return nil, 0, fmt.Errorf("resolve %v from %v in IPoIB's port space: %w (mgid ipoib needs an InfiniBand port: the kernel refuses that port space on RoCE, where a group's MGID is its IP mapping; use mgid: rdma_cm)", group, v.cfg.IP, err)
		}
		return nil, 0, fmt.Errorf("resolve %v from %v: %w", group, v.cfg.IP, err)
	}
	p, err := v.udPort(id, ch, sp, busySend)
	if err != nil {
		ch.Close()
		return nil, 0, err
	}
	if err := id.JoinMulticast(group, ibv.JoinOptions{SendOnly: sendOnly}); err != nil {
		p.Close()
		return nil, 0, err
	}
	p.group = group
	ev, err := ch.Next(ctx)
	if err == nil && ev.Type != ibv.CMMulticastJoin {
		err = fmt.Errorf("join %v: %v (status %d)", group, ev.Type, ev.Status)
	}
	if err != nil {
		p.Close()
		return nil, 0, err
	}
	if ipoib && ev.QKey != 0 {
		// librdmacm gave the QP rdma_cm's Q_Key; the members of an IPoIB
		// group send with the group's, which the QP must hold to take
		// their datagrams.
		if err := p.qp.Modify(&ibv.QPAttr{QKey: ev.QKey}, ibv.QPAttrQKey); err != nil {
			p.Close()
			return nil, 0, fmt.Errorf("set the QP's Q_Key to group %v's %#x: %w", group, ev.QKey, err)
		}
	}
	ah, err := p.vd.pd.NewAH(ev.AH)
	if err != nil {
		p.Close()
		return nil, 0, fmt.Errorf("address handle to group %v: %w", group, err)
	}
	p.mu.Lock()
	p.ahs[group] = ah
	p.mu.Unlock()
	p.peerNote = fmt.Sprintf("group %v MGID %v", group, netip.AddrFrom16(ev.AH.GRH.DGID))
	if sendOnly {
		p.peerNote += " (send only)"
	}
	return p, ev.QKey, nil
}

var _ GroupLeg = (*verbsLeg)(nil)

// groupPort joins on side 1 (IB) in IPoIB's form when the group asks for
// it (mgid: ipoib).
func (v *verbsLeg) GroupPort(ctx context.Context, gc *config.Group, side int, sendOnly bool, timeout time.Duration, sp Spin) (UDPort, netip.Addr, uint32, error) {
	p, qkey, err := v.openGroupPort(ctx, gc.Group, sendOnly, gc.MGID == config.MGIDIPoIB && side == 1, timeout, sp, gc.BusyPoll)
	if err != nil {
		return nil, v.srcAddr(), cm.RDMAUDPQKey, err // a nil *verbsUDPort would not be a nil udPort
	}
	return p, v.srcAddr(), qkey, nil
}

// srcAddr is the source the leg's own datagrams arrive with
// (Datagram.Src, grhSource): on RoCE its ip, which its GID is; on an
// InfiniBand port, found through IPoIB, its GID (the GRH's source GID,
// index 0 of the port), which holds no IP.
func (v *verbsLeg) srcAddr() netip.Addr {
	if v.gid.IPoIB != "" {
		return v.gid.GID.Addr()
	}
	return v.cfg.IP
}
