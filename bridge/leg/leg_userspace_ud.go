package leg

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/bridge/pool"
	"github.com/rbridge/rbridge/internal/netns"

	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/cm"
	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/roce/udpconn"
	"github.com/rbridge/rbridge/xdp"
)

// UD routes on the userspace leg: the IB CM answers and sends SIDR, and
// the gateway's UD QPs are the transport's.

var _ UDLeg = (*userspaceLeg)(nil)

func (u *userspaceLeg) ListenUD(addr netip.AddrPort) (UDListener, error) {
	l, err := u.CM.ListenUD(addr.Port(), 64)
	if err != nil {
		return nil, err
	}
	return &userspaceUDListener{u: u, l: l}, nil
}

type userspaceUDListener struct {
	u *userspaceLeg
	l *cm.UDListener
}

func (l *userspaceUDListener) Next(ctx context.Context) (UDIncoming, error) {
	r, err := l.l.Next(ctx)
	if err != nil {
		return nil, err
	}
	return &userspaceUDIncoming{u: l.u, r: r}, nil
}

func (l *userspaceUDListener) Close() error { return l.l.Close() }

type userspaceUDIncoming struct {
	u *userspaceLeg
	r *cm.SIDRRequest
}

func (in *userspaceUDIncoming) Remote() netip.AddrPort {
	if in.r.HasIPCM {
		return netip.AddrPortFrom(in.r.IPCM.Src, in.r.IPCM.SrcPort)
	}
	return netip.AddrPortFrom(in.r.Remote, 0)
}

func (in *userspaceUDIncoming) PrivateData() []byte { return in.r.PrivateData }

func (in *userspaceUDIncoming) Accept(privateData []byte) (UDPort, error) {
	p, err := in.u.udPort()
	if err != nil {
		_ = in.r.Reject(cm.SIDRNoQP, nil)
		return nil, err
	}
	privateData = clip(privateData, cm.SIDRREPPrivateDataLen)
	if err := in.r.Accept(cm.SIDRAcceptOptions{QP: p.qp, QKey: cm.RDMAUDPQKey, PrivateData: privateData}); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

func (in *userspaceUDIncoming) Reject(status cm.SIDRStatus, privateData []byte) error {
	privateData = clip(privateData, cm.SIDRREPPrivateDataLen)
	return in.r.Reject(status, privateData)
}

// drop leaves the request unanswered: the CM forgets it after its linger.
func (in *userspaceUDIncoming) Drop() {}

func (u *userspaceLeg) DialUD(ctx context.Context, to netip.AddrPort, privateData []byte) (UDPort, UDService, error) {
	p, err := u.udPort()
	if err != nil {
		return nil, UDService{}, err
	}
	if len(privateData) > cm.SIDRREQIPCMPrivateDataLen {
		privateData = privateData[:cm.SIDRREQIPCMPrivateDataLen]
	}
	svc, err := u.CM.ResolveUD(ctx, to, cm.ResolveOptions{PrivateData: privateData})
	if err != nil {
		p.Close()
		var se *cm.SIDRError
		if errors.As(err, &se) {
			return nil, UDService{}, &UDRefused{Status: se.Status, PrivateData: se.PrivateData}
		}
		return nil, UDService{}, err
	}
	p.peerNote = fmt.Sprintf("%v QP %#x", to, svc.QPN)
	return p, UDService{Addr: to.Addr(), QPN: svc.QPN, QKey: svc.QKey, PrivateData: svc.PrivateData}, nil
}

// userspaceUDPort is a UD QP of the leg's transport device.
type userspaceUDPort struct {
	u        *userspaceLeg
	qp       *transport.QP
	scq, rcq *transport.CQ
	ring     *UDRing
	sends    *udSender
	peerNote string // the target's, for describe
	spin     Spin   // how recv waits (a group's busy_poll)
	// poller reads a busy-polled group's socket (nil otherwise: the
	// device's goroutine does).
	poller *transport.GroupPoller

	wcs [UDRecvDepth]transport.WC // Recv's

	// Send's: a batch's work requests and their one destination (the
	// transport has sent them when PostSend returns), and completions.
	wrs  [UDSendWindow]transport.SendWR
	dest transport.UDDest
	swcs [UDSendWindow]transport.WC

	once sync.Once
}

var (
	_ UDPort      = (*userspaceUDPort)(nil)
	_ udSendQueue = (*userspaceUDPort)(nil)
)

// udPort makes a UD QP in RTS with rdma_cm's Q_Key and its receives
// posted, known to the AF_XDP classifier.
func (u *userspaceLeg) udPort() (*userspaceUDPort, error) {
	p := &userspaceUDPort{u: u, scq: transport.NewCQ(UDSendWindow), rcq: transport.NewCQ(UDRecvDepth + 16), spin: Spin{CPU: -1}}
	p.sends = newUDSender(p)
	var err error
	p.qp, err = u.dev.CreateQP(u.pd, transport.QPInitAttr{Type: transport.UD, SendCQ: p.scq, RecvCQ: p.rcq, MaxSendWR: UDSendWindow, MaxRecvWR: UDRecvDepth + 1})
	if err != nil {
		return nil, fmt.Errorf("UD QP: %w", err)
	}
	for _, a := range []transport.QPAttr{{State: transport.StateInit, QKey: cm.RDMAUDPQKey}, {State: transport.StateRTR, PathMTU: u.MTU}, {State: transport.StateRTS}} {
		if err := p.qp.Modify(a); err != nil {
			p.qp.Close()
			return nil, fmt.Errorf("UD QP %#x to %v: %w", p.qp.QPN(), a.State, err)
		}
	}
	p.ring, err = NewUDRing(u.pool, u.MTU, func(id uint64, b *pool.Buf) error {
		return p.qp.PostRecv(transport.RecvWR{ID: id, Local: transport.SGE{MR: u.mr, Offset: b.Offset(), Length: u.MTU}})
	})
	if err != nil {
		p.qp.Close()
		return nil, err
	}
	if u.Prog != nil {
		if err := u.Prog.AddQP(p.qp.QPN(), xdp.QP{}); err != nil {
			p.Close()
			return nil, err
		}
	}
	return p, nil
}

func (p *userspaceUDPort) QPN() uint32 { return p.qp.QPN() }
func (p *userspaceUDPort) MTU() int    { return p.u.MTU }

func (p *userspaceUDPort) Recv(ctx context.Context, ds []Datagram, wait bool) (int, error) {
	wcs := p.wcs[:min(len(ds), len(p.wcs))]
	var n int
	var err error
	switch {
	case p.spin.On && wait:
		n, err = p.spin.Wait(ctx, func() (int, error) { return p.pollOnce(wcs) })
	case p.spin.On:
		n, err = p.pollOnce(wcs)
	case wait:
		n, err = p.rcq.PollWait(ctx, wcs)
	default:
		n = p.rcq.Poll(wcs)
	}
	if err != nil {
		return 0, err
	}
	for i, wc := range wcs[:n] {
		if wc.Status != transport.StatusSuccess && wc.Status != transport.StatusLocLenErr {
			return i, fmt.Errorf("UD QP %#x receive: %v", p.qp.QPN(), wc.Status)
		}
		b, empty, err := p.ring.Take(wc.ID)
		if err != nil {
			return i, fmt.Errorf("UD QP %#x: %w", p.qp.QPN(), err)
		}
		ds[i] = Datagram{Buf: b, N: wc.ByteLen, Src: wc.Src.Addr().Unmap(), SrcQPN: wc.SrcQPN, Imm: wc.Imm, HasImm: wc.HasImm,
			PoolEmpty: empty, TooLongHere: wc.Status == transport.StatusLocLenErr}
	}
	return n, nil
}

func (p *userspaceUDPort) Send(ctx context.Context, ds []Datagram, dst UDDest, sent *UDSent) {
	p.sends.send(ctx, ds, dst, sent)
}

func (p *userspaceUDPort) Flush(ctx context.Context, sent *UDSent) { p.sends.flush(ctx, sent) }

// postSends posts the batch with one PostSend: the transport writes its
// datagrams out together (one sendmmsg) before it returns, and completes
// them. PostSend takes all or none: when it refuses a batch, its
// datagrams are posted one at a time, so that only what is refused fails.
func (p *userspaceUDPort) postSends(ds []Datagram, ids []uint64, dst UDDest) (int, error) {
	p.dest = transport.UDDest{Addr: netip.AddrPortFrom(dst.Addr, roce.Port), QPN: dst.QPN, QKey: dst.QKey}
	wrs := p.wrs[:len(ds)]
	for i := range ds {
		op := transport.OpSend
		if ds[i].HasImm {
			op = transport.OpSendWithImm
		}
		wrs[i] = transport.SendWR{ID: ids[i], Opcode: op, Imm: ds[i].Imm, Signaled: true,
			Local: transport.SGE{MR: p.u.mr, Offset: ds[i].Buf.Offset() + ds[i].Off, Length: ds[i].N}, UD: &p.dest}
	}
	err := p.qp.PostSend(wrs...)
	switch {
	case err == nil:
		return len(wrs), nil
	case len(wrs) == 1:
		return 0, err
	}
	for i := range wrs {
		if err := p.qp.PostSend(wrs[i]); err != nil {
			return i, err
		}
	}
	return len(wrs), nil
}

// reapSends polls the send CQ: a send's completion is there once
// PostSend returned, so a wait is short.
func (p *userspaceUDPort) reapSends(ctx context.Context, cs []udSendCompletion, wait bool) (int, error) {
	wcs := p.swcs[:min(len(cs), len(p.swcs))]
	var n int
	if wait {
		var err error
		if n, err = p.scq.PollWait(ctx, wcs); err != nil {
			return 0, err
		}
	} else {
		n = p.scq.Poll(wcs)
	}
	for i, wc := range wcs[:n] {
		cs[i] = udSendCompletion{ID: wc.ID}
		if wc.Status != transport.StatusSuccess {
			cs[i].Err = fmt.Errorf("UD QP %#x send: %v", p.qp.QPN(), wc.Status)
		}
	}
	return n, nil
}

func (p *userspaceUDPort) NoReceive() uint64 { return p.qp.UDNoReceive() }

// pollOnce is one round of a busy-polled receive: the CQ, else what the
// group's socket holds (handed to the QP, whose CQ gets it), and the CQ
// again.
func (p *userspaceUDPort) pollOnce(wcs []transport.WC) (int, error) {
	if n := p.rcq.Poll(wcs); n > 0 {
		return n, nil
	}
	if p.poller != nil {
		if k, err := p.poller.Poll(); err != nil {
			return 0, err
		} else if k > 0 {
			if n := p.rcq.Poll(wcs); n > 0 {
				return n, nil
			}
		}
	}
	if p.rcq.Overflowed() {
		return 0, transport.ErrCQOverflow
	}
	return 0, nil
}

func (p *userspaceUDPort) Describe() string {
	s := fmt.Sprintf("userspace UD QP %#x on %s, MTU %d%s", p.qp.QPN(), p.u.cfg.Name, p.u.MTU, p.spin)
	if p.peerNote != "" {
		s += " -> " + p.peerNote
	}
	return s
}

func (p *userspaceUDPort) Close() error {
	var err error
	p.once.Do(func() {
		if p.u.Prog != nil {
			_ = p.u.Prog.RemoveQP(p.qp.QPN())
		}
		err = p.qp.Close()
		p.ring.Close()
		p.sends.close()
	})
	return err
}

// A busy-polled group's conn is read without waiting, on either io.
var (
	_ transport.TryReader = (*udpconn.Conn)(nil)
	_ transport.TryReader = (*xdp.GroupConn)(nil)
)

// openGroupPort makes the leg's UD QP for a group; attached to it (receive)
// through a socket bound to the group and joined on the leg's interface
// (io: udp), or through the group's conn on the leg's AF_XDP socket, whose
// classifier steers the group's datagrams to it while a kernel socket
// holds the membership on the interface (io: afxdp). With sp on, the
// group's conn is read by the port's recv (polled): over UDP the group's
// socket, with SO_BUSY_POLL; over AF_XDP the GroupConn's queue, which the
// leg's receive goroutine fills from the AF_XDP socket as it reads it.
func (u *userspaceLeg) openGroupPort(group netip.Addr, receive bool, sp Spin) (*userspaceUDPort, error) {
	p, err := u.udPort()
	if err != nil {
		return nil, err
	}
	p.spin = sp
	p.peerNote = fmt.Sprintf("group %v", group)
	if !receive {
		p.peerNote += " (send only)"
		return p, nil
	}
	if _, ok := u.pconn.(*xdp.Conn); ok {
		p.peerNote += " (AF_XDP: the classifier redirects it)"
	}
	open := func() (roce.PacketConn, error) {
		var c roce.PacketConn
		err := netns.Do(u.cfg.Netns, func() error {
			if xc, ok := u.pconn.(*xdp.Conn); ok {
				// The classifier steers the group's datagrams to the
				// leg's AF_XDP socket; the kernel holds the membership.
				gc, err := xc.JoinGroup(group)
				if err != nil {
					return err
				}
				c = gc
				return nil
			}
			ifi, err := net.InterfaceByName(u.cfg.Interface)
			if err != nil {
				return err
			}
			uc, err := udpconn.Listen(udpconn.Options{Addr: netip.AddrPortFrom(group, roce.Port), Interface: ifi.Index, BusyPoll: sp.On, Logger: u.log})
			if err != nil {
				return err
			}
			if sp.On && !uc.SocketBusyPoll() {
				u.log.Info("group socket without SO_BUSY_POLL (needs CAP_NET_ADMIN): it is polled all the same", "group", group)
			}
			c = uc
			return nil
		})
		return c, err
	}
	if sp.On {
		if p.poller, err = u.dev.AttachMulticastPolled(p.qp, group, open); err != nil {
			p.Close()
			return nil, err
		}
		return p, nil
	}
	if err := u.dev.AttachMulticast(p.qp, group, open); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

var _ GroupLeg = (*userspaceLeg)(nil)

func (u *userspaceLeg) GroupPort(_ context.Context, gc *config.Group, _ int, sendOnly bool, _ time.Duration, sp Spin) (UDPort, netip.Addr, uint32, error) {
	p, err := u.openGroupPort(gc.Group, !sendOnly, sp)
	if err != nil {
		return nil, u.cfg.IP, cm.RDMAUDPQKey, err // a nil *userspaceUDPort would not be a nil udPort
	}
	return p, u.cfg.IP, cm.RDMAUDPQKey, nil
}
