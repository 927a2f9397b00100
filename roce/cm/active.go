package cm

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"

	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/transport"
)

// defaultDialMTU is a Dial's path MTU unless DialOptions.PathMTU says
// otherwise: the largest that fits a 1500-byte Ethernet link.
const defaultDialMTU = 1024

// PeerACKTimeout is the Local ACK Timeout a dial's REQ gives the peer,
// which a Linux passive side takes as its QP's retransmit timer (cm.c:
// cm_format_paths_from_req, cm_init_av_by_path): 19, 4.096 us x 2^19,
// about 2.1 s, what Linux's own rdma_cm asks on RoCE
// (CMA_IBOE_PACKET_LIFETIME 18, cm_ack_timeout with rxe's ACK delay of
// 15). A gateway acknowledges its peer's operations only once the far
// side completed them, so the peer's timer must cover the far side's
// round trip: at 14 (67 ms) a Linux target retransmitted READ responses
// and WRITEs the gateway had not acknowledged yet, tens of times a run
// in the guest. The dialing QP's own timer stays at 14: its peer answers
// at once.
const PeerACKTimeout = 19

// DialOptions describe a connection to make.
type DialOptions struct {
	// QP is an RC QP of the manager's device, in RESET or INIT.
	QP *transport.QP
	// PrivateData follows the RDMA IP CM header in the REQ (up to
	// REQIPCMPrivateDataLen bytes).
	PrivateData []byte
	// ResponderResources and InitiatorDepth offer the RDMA READs and
	// atomics this side accepts and issues at once (0: the manager's).
	ResponderResources, InitiatorDepth int
	// RetryCount and RNRRetry are the transport and RNR retry counts the
	// peer uses toward this QP (0: 7).
	RetryCount, RNRRetry uint8
	// SrcPort is the IP CM header's source port (0: a random one from the
	// ephemeral range, as rdma_cm binds).
	SrcPort uint16
	// PathMTU is the path MTU the REQ asks for (256, 512, 1024, 2048 or
	// 4096; 0: 1024, at most the manager's MaxPathMTU). An unmodified
	// rdma_cm listener takes the REQ's MTU as the connection's, and the
	// kernel sends RoCE packets with DF set: the MTU must fit the link
	// (1024 on a 1500-byte Ethernet link, what the kernel itself picks
	// there, iboe_get_mtu; 4096 needs jumbo frames). A REP that ends with
	// rbridge's MTU trailer (package ibv's cmmtu.go) lowers it further.
	PathMTU int
	// ECN makes the QP send ECN-capable and react to CNPs (DCQCN): the
	// QPAttr.ECN of its move to RTS.
	ECN bool
}

// dialState is what an active connection needs after the REP.
type dialState struct {
	psn, mtu    int // psn: the REQ's Starting PSN, the first this side receives
	resp, depth int
	retry, rnr  uint8
	ackTimeout  uint8 // the QP's own retransmit timer (PeerACKTimeout is the peer's)
	ecn         bool
}

// Dial connects opts.QP to the rdma_cm listener at to (an IP address and a
// port in the TCP port space): it sends a REQ with the RDMA IP CM header,
// and on the REP moves the QP through RTR and RTS and sends the RTU. On
// ctx's end it gives up with a REJ to the peer.
func (m *Manager) Dial(ctx context.Context, to netip.AddrPort, opts DialOptions) (*Conn, error) {
	qp := opts.QP
	if qp == nil {
		return nil, errors.New("cm: dial: nil QP")
	}
	if len(opts.PrivateData) > REQIPCMPrivateDataLen {
		return nil, fmt.Errorf("cm: dial %v: %d bytes of private data exceed %d", to, len(opts.PrivateData), REQIPCMPrivateDataLen)
	}
	if to.Addr().Is4() != m.opts.Addr.Is4() {
		return nil, fmt.Errorf("cm: dial %v from %v: address families differ", to, m.opts.Addr)
	}
	if qp.State() == transport.StateReset {
		if err := qp.Modify(transport.QPAttr{State: transport.StateInit}); err != nil {
			return nil, fmt.Errorf("cm: dial %v: %w", to, err)
		}
	}
	mtu := opts.PathMTU
	if mtu == 0 {
		mtu = min(defaultDialMTU, m.opts.MaxPathMTU)
	}
	if roce.MTUFromBytes(mtu).Bytes() != mtu || mtu > m.opts.MaxPathMTU {
		return nil, fmt.Errorf("cm: dial %v: path MTU %d is not 256, 512, 1024, 2048 or 4096 up to the manager's %d", to, mtu, m.opts.MaxPathMTU)
	}
	ds := &dialState{
		psn:   int(rand.Uint32() & roce.PSNMask),
		mtu:   mtu,
		resp:  orDefault(opts.ResponderResources, m.opts.ResponderResources),
		depth: orDefault(opts.InitiatorDepth, m.opts.InitiatorDepth),
		retry: opts.RetryCount, rnr: opts.RNRRetry, ackTimeout: 14, ecn: opts.ECN,
	}
	if ds.retry == 0 {
		ds.retry = 7
	}
	if ds.rnr == 0 {
		ds.rnr = 7
	}
	srcPort := opts.SrcPort
	if srcPort == 0 {
		srcPort = uint16(32768 + rand.IntN(28232))
	}
	ipVer := uint8(6)
	if to.Addr().Is4() {
		ipVer = 4
	}
	pd := make([]byte, IPCMHeaderLen+len(opts.PrivateData))
	IPCMHeader(pd).Encode(&IPCMHeaderFields{Version: IPCMVersion, IPVersion: ipVer, SrcPort: srcPort, Src: m.opts.Addr, Dst: to.Addr()})
	copy(pd[IPCMHeaderLen:], opts.PrivateData)

	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, fmt.Errorf("cm: dial %v: %w", to, ErrClosed)
	}
	c := m.newConnLocked(true, to.Addr(), m.newTIDLocked())
	c.qp = qp
	c.state = stateReqSent
	c.dial = ds
	c.peerTime = m.opts.ResponseTimeout
	c.remote = to
	h := CMHeader(AttrREQ, c.tid)
	mad := AppendCM(nil, &h, func(d []byte) {
		REQ(d).Encode(&REQFields{
			LocalCommID: c.localID, ServiceID: ServiceID(PortSpaceTCP, to.Port()), LocalCAGUID: m.opts.CAGUID,
			LocalQPN: qp.QPN(), ResponderResources: uint8(ds.resp), InitiatorDepth: uint8(ds.depth),
			RemoteCMResponseTimeout: m.opts.ResponseTimeout, TransportType: TransportRC,
			StartingPSN: uint32(ds.psn), LocalCMResponseTimeout: m.opts.ResponseTimeout, RetryCount: ds.retry,
			PKey: roce.DefaultPKey, PathMTU: roce.MTUFromBytes(ds.mtu), RNRRetryCount: ds.rnr,
			MaxCMRetries: uint8(m.opts.MaxRetries),
			Primary: PathFields{LocalLID: 0xffff, RemoteLID: 0xffff, LocalGID: GIDFromAddr(m.opts.Addr),
				RemoteGID: GIDFromAddr(to.Addr()), HopLimit: 64, PacketRate: 3, LocalACKTimeout: PeerACKTimeout},
			PrivateData: pd,
		})
	})
	m.send(c.peer, mad)
	c.armLocked(mad, m.retryTimeout(m.opts.ResponseTimeout))
	m.mu.Unlock()
	return c.wait(ctx)
}

func (m *Manager) onREPLocked(r REP, peer netip.Addr) {
	f := r.Fields()
	c := m.conns[f.RemoteCommID]
	if c == nil || !c.active {
		m.stats.RxUnknown.Add(1)
		return
	}
	if c.state == stateEstablished && c.remoteID == f.LocalCommID {
		// Our RTU was lost: the peer resends its REP.
		m.stats.Duplicates.Add(1)
		m.send(c.peer, c.mad)
		return
	}
	if c.state != stateReqSent {
		m.stats.RxUnknown.Add(1)
		return
	}
	c.stopTimerLocked()
	c.remoteID = f.LocalCommID
	c.remoteQPN = f.LocalQPN
	c.key = remoteKey{guid: f.LocalCAGUID, id: f.LocalCommID}
	m.remote[c.key] = c
	c.privateData = append([]byte(nil), f.PrivateData...)
	ds := c.dial
	if t := trailerMTU(f.PrivateData); t != 0 && t < ds.mtu {
		// An rbridge rdma_cm end applied a smaller MTU (its port's).
		ds.mtu = t
	}
	for _, a := range []transport.QPAttr{
		{State: transport.StateRTR, DestQPN: f.LocalQPN, Remote: netip.AddrPortFrom(c.peer, roce.Port),
			RQPSN: uint32(ds.psn), PathMTU: ds.mtu, MinRNRTimer: 12, MaxDestRdAtomic: min(ds.resp, int(f.InitiatorDepth))},
		{State: transport.StateRTS, SQPSN: f.StartingPSN, Timeout: ds.ackTimeout, RetryCnt: ds.retry,
			RNRRetry: f.RNRRetryCount, MaxRdAtomic: min(ds.depth, int(f.ResponderResources)), ECN: ds.ecn},
	} {
		if err := c.qp.Modify(a); err != nil {
			h := CMHeader(AttrREJ, c.tid)
			m.send(c.peer, AppendCM(nil, &h, func(d []byte) {
				REJ(d).Encode(&REJFields{LocalCommID: c.localID, RemoteCommID: c.remoteID, MessageRejected: MessageREP, Reason: RejectNoQP})
			}))
			c.qpErrorLocked()
			c.finishLocked(fmt.Errorf("cm: dial %v: %w", c.remote, err))
			return
		}
	}
	h := CMHeader(AttrRTU, c.tid)
	c.mad = AppendCM(nil, &h, func(d []byte) {
		RTU(d).Encode(&RTUFields{LocalCommID: c.localID, RemoteCommID: c.remoteID})
	})
	m.send(c.peer, c.mad)
	c.establishLocked()
}
