package bridge

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

var _ udLeg = (*userspaceLeg)(nil)

func (u *userspaceLeg) listenUD(addr netip.AddrPort) (udListener, error) {
	l, err := u.cm.ListenUD(addr.Port(), 64)
	if err != nil {
		return nil, err
	}
	return &userspaceUDListener{u: u, l: l}, nil
}

type userspaceUDListener struct {
	u *userspaceLeg
	l *cm.UDListener
}

func (l *userspaceUDListener) next(ctx context.Context) (udIncoming, error) {
	r, err := l.l.Next(ctx)
	if err != nil {
		return nil, err
	}
	return &userspaceUDIncoming{u: l.u, r: r}, nil
}

func (l *userspaceUDListener) close() error { return l.l.Close() }

type userspaceUDIncoming struct {
	u *userspaceLeg
	r *cm.SIDRRequest
}

func (in *userspaceUDIncoming) remote() netip.AddrPort {
	if in.r.HasIPCM {
		return netip.AddrPortFrom(in.r.IPCM.Src, in.r.IPCM.SrcPort)
	}
	return netip.AddrPortFrom(in.r.Remote, 0)
}

func (in *userspaceUDIncoming) privateData() []byte { return in.r.PrivateData }

func (in *userspaceUDIncoming) accept(privateData []byte) (udPort, error) {
	p, err := in.u.udPort()
	if err != nil {
		_ = in.r.Reject(cm.SIDRNoQP, nil)
		return nil, err
	}
	if len(privateData) > cm.SIDRREPPrivateDataLen {
		privateData = privateData[:cm.SIDRREPPrivateDataLen]
	}
	if err := in.r.Accept(cm.SIDRAcceptOptions{QP: p.qp, QKey: cm.RDMAUDPQKey, PrivateData: privateData}); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

func (in *userspaceUDIncoming) reject(status cm.SIDRStatus, privateData []byte) error {
	if len(privateData) > cm.SIDRREPPrivateDataLen {
		privateData = privateData[:cm.SIDRREPPrivateDataLen]
	}
	return in.r.Reject(status, privateData)
}

// drop leaves the request unanswered: the CM forgets it after its linger.
func (in *userspaceUDIncoming) drop() {}

func (u *userspaceLeg) dialUD(ctx context.Context, to netip.AddrPort, privateData []byte) (udPort, udService, error) {
	p, err := u.udPort()
	if err != nil {
		return nil, udService{}, err
	}
	if len(privateData) > cm.SIDRREQIPCMPrivateDataLen {
		privateData = privateData[:cm.SIDRREQIPCMPrivateDataLen]
	}
	svc, err := u.cm.ResolveUD(ctx, to, cm.ResolveOptions{PrivateData: privateData})
	if err != nil {
		p.close()
		var se *cm.SIDRError
		if errors.As(err, &se) {
			return nil, udService{}, &udRefused{status: se.Status, privateData: se.PrivateData}
		}
		return nil, udService{}, err
	}
	p.peerNote = fmt.Sprintf("%v QP %#x", to, svc.QPN)
	return p, udService{addr: to.Addr(), qpn: svc.QPN, qkey: svc.QKey, privateData: svc.PrivateData}, nil
}

// userspaceUDPort is a UD QP of the leg's transport device.
type userspaceUDPort struct {
	u        *userspaceLeg
	qp       *transport.QP
	scq, rcq *transport.CQ
	ring     *udRing
	peerNote string // the target's, for describe
	spin     spin   // how recv waits (a group's busy_poll)
	// poller reads a busy-polled group's socket (nil otherwise: the
	// device's goroutine does).
	poller *transport.GroupPoller

	wcs     [16]transport.WC
	pending []transport.WC // polled, not yet returned by recv
	once    sync.Once
}

var _ udPort = (*userspaceUDPort)(nil)

// udPort makes a UD QP in RTS with rdma_cm's Q_Key and its receives
// posted, known to the AF_XDP classifier.
func (u *userspaceLeg) udPort() (*userspaceUDPort, error) {
	p := &userspaceUDPort{u: u, scq: transport.NewCQ(16), rcq: transport.NewCQ(udRecvDepth + 16), spin: spin{cpu: -1}}
	var err error
	p.qp, err = u.dev.CreateQP(u.pd, transport.QPInitAttr{Type: transport.UD, SendCQ: p.scq, RecvCQ: p.rcq, MaxRecvWR: udRecvDepth + 1})
	if err != nil {
		return nil, fmt.Errorf("UD QP: %w", err)
	}
	for _, a := range []transport.QPAttr{{State: transport.StateInit, QKey: cm.RDMAUDPQKey}, {State: transport.StateRTR, PathMTU: u.mtu}, {State: transport.StateRTS}} {
		if err := p.qp.Modify(a); err != nil {
			p.qp.Close()
			return nil, fmt.Errorf("UD QP %#x to %v: %w", p.qp.QPN(), a.State, err)
		}
	}
	p.ring, err = newUDRing(u.pool, u.mtu, func(b *pool.Buf) error {
		return p.qp.PostRecv(transport.RecvWR{ID: uint64(b.Offset()), Local: transport.SGE{MR: u.mr, Offset: b.Offset(), Length: u.mtu}})
	})
	if err != nil {
		p.qp.Close()
		return nil, err
	}
	if u.prog != nil {
		if err := u.prog.AddQP(p.qp.QPN(), xdp.QP{}); err != nil {
			p.close()
			return nil, err
		}
	}
	return p, nil
}

func (p *userspaceUDPort) qpn() uint32 { return p.qp.QPN() }
func (p *userspaceUDPort) mtu() int    { return p.u.mtu }

func (p *userspaceUDPort) recv(ctx context.Context) (*udDatagram, error) {
	for len(p.pending) == 0 {
		var n int
		var err error
		if p.spin.on {
			n, err = spinWait(ctx, p.pollOnce)
		} else {
			n, err = p.rcq.PollWait(ctx, p.wcs[:])
		}
		if err != nil {
			return nil, err
		}
		p.pending = append(p.pending[:0], p.wcs[:n]...)
	}
	wc := p.pending[0]
	p.pending = p.pending[1:]
	if wc.Status != transport.StatusSuccess && wc.Status != transport.StatusLocLenErr {
		return nil, fmt.Errorf("UD QP %#x receive: %v", p.qp.QPN(), wc.Status)
	}
	b, empty, err := p.ring.take(wc.ID)
	if err != nil {
		return nil, fmt.Errorf("UD QP %#x: %w", p.qp.QPN(), err)
	}
	d := &udDatagram{buf: b, n: wc.ByteLen, src: wc.Src.Addr().Unmap(), srcQPN: wc.SrcQPN, imm: wc.Imm, hasImm: wc.HasImm,
		poolEmpty: empty, tooLongHere: wc.Status == transport.StatusLocLenErr}
	return d, nil
}

func (p *userspaceUDPort) send(_ context.Context, d *udDatagram, dst udDest, imm uint32, hasImm bool) error {
	op := transport.OpSend
	if hasImm {
		op = transport.OpSendWithImm
	}
	// The transport writes a UD datagram out before PostSend returns (one
	// goroutine sends on this QP): the buffer is free again then.
	return p.qp.PostSend(transport.SendWR{Opcode: op, Imm: imm, Local: transport.SGE{MR: p.u.mr, Offset: d.buf.Offset() + d.off, Length: d.n},
		UD: &transport.UDDest{Addr: netip.AddrPortFrom(dst.addr, roce.Port), QPN: dst.qpn, QKey: dst.qkey}})
}

func (p *userspaceUDPort) noReceive() uint64 { return p.qp.UDNoReceive() }

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

func (p *userspaceUDPort) describe() string {
	s := fmt.Sprintf("userspace UD QP %#x on %s, MTU %d%s", p.qp.QPN(), p.u.cfg.Name, p.u.mtu, p.spin)
	if p.peerNote != "" {
		s += " -> " + p.peerNote
	}
	return s
}

func (p *userspaceUDPort) close() error {
	var err error
	p.once.Do(func() {
		if p.u.prog != nil {
			_ = p.u.prog.RemoveQP(p.qp.QPN())
		}
		err = p.qp.Close()
		p.ring.close()
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
func (u *userspaceLeg) openGroupPort(group netip.Addr, receive bool, sp spin) (*userspaceUDPort, error) {
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
			uc, err := udpconn.Listen(udpconn.Options{Addr: netip.AddrPortFrom(group, roce.Port), Interface: ifi.Index, BusyPoll: sp.on})
			if err != nil {
				return err
			}
			if sp.on && !uc.SocketBusyPoll() {
				u.log.Info("group socket without SO_BUSY_POLL (needs CAP_NET_ADMIN): it is polled all the same", "group", group)
			}
			c = uc
			return nil
		})
		return c, err
	}
	if sp.on {
		if p.poller, err = u.dev.AttachMulticastPolled(p.qp, group, open); err != nil {
			p.close()
			return nil, err
		}
		return p, nil
	}
	if err := u.dev.AttachMulticast(p.qp, group, open); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

var _ groupLeg = (*userspaceLeg)(nil)

func (u *userspaceLeg) groupPort(_ context.Context, gc *config.Group, _ int, sendOnly bool, _ time.Duration, sp spin) (udPort, netip.Addr, uint32, error) {
	p, err := u.openGroupPort(gc.Group, !sendOnly, sp)
	if err != nil {
		return nil, u.cfg.IP, cm.RDMAUDPQKey, err // a nil *userspaceUDPort would not be a nil udPort
	}
	return p, u.cfg.IP, cm.RDMAUDPQKey, nil
}
