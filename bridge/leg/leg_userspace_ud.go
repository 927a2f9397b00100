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
	peerNote string // the target's, for describe
	spin     Spin   // how recv waits (a group's busy_poll)
	// poller reads a busy-polled group's socket (nil otherwise: the
	// device's goroutine does).
	poller *transport.GroupPoller

	wcs     [16]transport.WC
	pending []transport.WC // polled, not yet returned by recv
	once    sync.Once
}

var _ UDPort = (*userspaceUDPort)(nil)

// udPort makes a UD QP in RTS with rdma_cm's Q_Key and its receives
// posted, known to the AF_XDP classifier.
func (u *userspaceLeg) udPort() (*userspaceUDPort, error) {
	p := &userspaceUDPort{u: u, scq: transport.NewCQ(16), rcq: transport.NewCQ(UDRecvDepth + 16), spin: Spin{CPU: -1}}
	var err error
	p.qp, err = u.dev.CreateQP(u.pd, transport.QPInitAttr{Type: transport.UD, SendCQ: p.scq, RecvCQ: p.rcq, MaxRecvWR: UDRecvDepth + 1})
	if err != nil {
		return nil, fmt.Errorf("UD QP: %w", err)
	}
	for _, a := range []transport.QPAttr{{State: transport.StateInit, QKey: cm.RDMAUDPQKey}, {State: transport.StateRTR, PathMTU: u.MTU}, {State: transport.StateRTS}} {
		if err := p.qp.Modify(a); err != nil {
			p.qp.Close()
			return nil, fmt.Errorf("UD QP %#x to %v: %w", p.qp.QPN(), a.State, err)
		}
	}
	p.ring, err = NewUDRing(u.pool, u.MTU, func(b *pool.Buf) error {
		return p.qp.PostRecv(transport.RecvWR{ID: uint64(b.Offset()), Local: transport.SGE{MR: u.mr, Offset: b.Offset(), Length: u.MTU}})
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

func (p *userspaceUDPort) Recv(ctx context.Context, d *Datagram) error {
	for len(p.pending) == 0 {
		var n int
		var err error
		if p.spin.On {
			n, err = SpinWait(ctx, p.pollOnce)
		} else {
			n, err = p.rcq.PollWait(ctx, p.wcs[:])
		}
		if err != nil {
			return err
		}
		p.pending = append(p.pending[:0], p.wcs[:n]...)
	}
	wc := p.pending[0]
	p.pending = p.pending[1:]
	if wc.Status != transport.StatusSuccess && wc.Status != transport.StatusLocLenErr {
		return fmt.Errorf("UD QP %#x receive: %v", p.qp.QPN(), wc.Status)
	}
	b, empty, err := p.ring.Take(wc.ID)
	if err != nil {
		return fmt.Errorf("UD QP %#x: %w", p.qp.QPN(), err)
	}
	*d = Datagram{Buf: b, N: wc.ByteLen, Src: wc.Src.Addr().Unmap(), SrcQPN: wc.SrcQPN, Imm: wc.Imm, HasImm: wc.HasImm,
		PoolEmpty: empty, TooLongHere: wc.Status == transport.StatusLocLenErr}
	return nil
}

func (p *userspaceUDPort) Send(_ context.Context, d *Datagram, dst UDDest, imm uint32, hasImm bool) error {
	op := transport.OpSend
	if hasImm {
		op = transport.OpSendWithImm
	}
	// The transport writes a UD datagram out before PostSend returns (one
	// goroutine sends on this QP): the buffer is free again then.
	return p.qp.PostSend(transport.SendWR{Opcode: op, Imm: imm, Local: transport.SGE{MR: p.u.mr, Offset: d.Buf.Offset() + d.Off, Length: d.N},
		UD: &transport.UDDest{Addr: netip.AddrPortFrom(dst.Addr, roce.Port), QPN: dst.QPN, QKey: dst.QKey}})
}

func (p *userspaceUDPort) NoReceive() uint64 { return p.qp.UDNoReceive() }

// pollOnce is one round of a busy-polled receive: the CQ, else what the
// group's socket holds (handed to the QP, whose CQ gets it), and the CQ
// again.
func (p *userspaceUDPort) pollOnce() (int, error) {
	if n := p.rcq.Poll(p.wcs[:]); n > 0 {
		return n, nil
	}
	if p.poller != nil {
		if k, err := p.poller.Poll(); err != nil {
			return 0, err
		} else if k > 0 {
			if n := p.rcq.Poll(p.wcs[:]); n > 0 {
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
