package transport

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rbridge/rbridge/roce"
)

// QPType is the transport service of a queue pair.
type QPType uint8

// Queue pair types.
const (
	RC QPType = iota
	UD
)

func (t QPType) String() string {
	if t == UD {
		return "UD"
	}
	return "RC"
}

// QPState is a queue pair's state.
//
//	        Modify(Init)        Modify(RTR)        Modify(RTS)
//	RESET ──────────────► INIT ─────────────► RTR ─────────────► RTS
//	  ▲                                                            │
//	  │ Modify(Reset)      any state ── Modify(Error), a fatal ──► ERR
//	  └──────────────────────────────── error or Close ────────────┘
//
// In ERR every posted and outstanding work request completes with
// StatusWRFlushErr, and later posts do too.
type QPState uint8

// Queue pair states.
const (
	StateReset QPState = iota
	StateInit
	StateRTR
	StateRTS
	StateError
)

var stateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "ERR"}

func (s QPState) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("QPState(%d)", s)
}

// QPInitAttr describes a queue pair to create.
type QPInitAttr struct {
	Type      QPType
	SendCQ    *CQ
	RecvCQ    *CQ
	MaxSendWR int // default 256
	MaxRecvWR int // default 256
	// Target (RC) executes the requests that arrive, in place of the
	// receive queue and the PD's memory regions (see Target); nil means
	// the QP executes them itself.
	Target Target
}

// QPAttr holds the attributes Modify applies on the way to State.
type QPAttr struct {
	State QPState

	// INIT (UD): the Q_Key of datagrams this QP accepts.
	QKey uint32

	// RTR (RC): the remote QP, where it is, the first PSN expected from it,
	// the path MTU (256, 512, 1024, 2048 or 4096), the RNR timer code sent
	// in RNR NAKs (IBTA table 45), and the READ/atomic requests the
	// responder accepts at once.
	DestQPN         uint32
	Remote          netip.AddrPort
	RQPSN           uint32
	PathMTU         int
	MinRNRTimer     uint8
	MaxDestRdAtomic int

	// RTS: the first PSN sent, the local ACK timeout code (4.096 us *
	// 2^Timeout; 0 waits forever), the retry counts (RNRRetry 7 means
	// forever) and the READ/atomic requests kept outstanding at once.
	SQPSN       uint32
	Timeout     uint8
	RetryCnt    uint8
	RNRRetry    uint8
	MaxRdAtomic int

	// ECN marks outgoing packets ECN-capable (ECT(0)), for DCQCN.
	ECN bool
}

// QP is a queue pair.
type QP struct {
	// holds counts HoldSends not yet released; sendHeld is a send asked
	// for meanwhile (move.go).
	holds    atomic.Int32
	sendHeld atomic.Bool
	dev      *Device // its home: the device that numbered it (move.go)
	pd       *PD
	typ      QPType
	qpn      uint32
	sendCQ   *CQ
	recvCQ   *CQ
	maxSQ    int
	maxRQ    int

	udNoReceive atomic.Uint64 // UD datagrams dropped for want of a receive

	// txDev is the device that serves the QP: its loop handles the QP's
	// packets and its conn sends them (move.go); dev until the QP moves.
	// moveMu serializes moves; strays counts packets in a row that
	// another device's loop handled, movedAt is when it last moved
	// (UnixNano), gone that it was closed.
	txDev   atomic.Pointer[Device]
	moveMu  sync.Mutex
	strays  atomic.Uint32
	movedAt atomic.Int64
	gone    atomic.Bool

	// mu guards everything below; functions named ...Locked must be
	// called with it held. Lock order: Device.txMu before mu (Device.send
	// takes a QP's packets under mu while it holds txMu), so nothing under
	// mu calls Device.send: it queues packets in tx and sends after Unlock.
	mu      sync.Mutex
	state   QPState
	attr    QPAttr
	mtu     int
	req     requester
	resp    responder
	rq      []RecvWR
	rqArr   []RecvWR       // the array rq lies in (roomFor)
	timer   *time.Timer    // the recovery machine's deadlines (armTimerLocked)
	timerAt time.Time      // when timer fires; zero when it is not armed
	tx      []roce.Message // packets built under mu, sent by Device.send
	spare   []roce.Message
	txBuf   [][]byte // free packet buffers
	target  Target   // executes arriving requests (the responder's hook)
	// Leases of READ data whose responses are queued in tx (txLeases) or
	// being written by Device.send (sentLeases): released once sent.
	txLeases, sentLeases []Lease
	cqLost               bool // a completion found its CQ full (cqOverflowLocked)
	lastCNP              time.Time
	sport                uint16 // UDP source port of this QP's flow (roce.SourcePort)
	// inRx is set while the device's receive goroutine handles a packet
	// for this QP: completions pushed then wake the CQ's waiter once, after
	// the batch (Device.routineReceive), not one wake per completion.
	inRx, cqPending bool
	rxMsg           *roce.Message // the message being handled (inRx): its frame
	cc              *dcqcn        // DCQCN reaction point, when ECN is on
	pacer           *time.Timer   // wakes the pump when the rate allows the next packet
}

// CreateQP creates a queue pair in the RESET state.
func (d *Device) CreateQP(pd *PD, attr QPInitAttr) (*QP, error) {
	if pd == nil || attr.SendCQ == nil || attr.RecvCQ == nil {
		return nil, fmt.Errorf("transport: create QP: PD, send CQ and receive CQ are required")
	}
	if attr.Type != RC && attr.Type != UD {
		return nil, fmt.Errorf("transport: create QP: type %v: %w", attr.Type, ErrNotSupported)
	}
	if attr.MaxSendWR <= 0 {
		attr.MaxSendWR = 256
	}
	if attr.MaxRecvWR <= 0 {
		attr.MaxRecvWR = 256
	}
	qp := &QP{dev: d, pd: pd, typ: attr.Type, sendCQ: attr.SendCQ, recvCQ: attr.RecvCQ,
		maxSQ: attr.MaxSendWR, maxRQ: attr.MaxRecvWR}
	qp.txDev.Store(d)
	qp.target = attr.Target
	if qp.target == nil {
		qp.target = &localTarget{qp: qp}
	} else if attr.Type != RC {
		return nil, fmt.Errorf("transport: create QP: a target serves RC QPs only")
	}
	if err := d.register(qp); err != nil {
		return nil, err
	}
	return qp, nil
}

// QPN returns the queue pair number.
func (qp *QP) QPN() uint32 { return qp.qpn }

// State returns the current state.
func (qp *QP) State() QPState {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.state
}

// Query returns the QP's state and the attributes it was given, with
// PathMTU as in force.
func (qp *QP) Query() QPAttr {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	a := qp.attr
	a.State, a.PathMTU = qp.state, qp.mtu
	return a
}

// Modify moves the QP to attr.State, applying the attributes that
// transition needs. Allowed: RESET->INIT->RTR->RTS, any state to ERR or
// RESET.
func (qp *QP) Modify(attr QPAttr) error {
	qp.mu.Lock()
	err := qp.modifyLocked(attr)
	qp.mu.Unlock()
	qp.send()
	return err
}

func (qp *QP) modifyLocked(a QPAttr) error {
	from := qp.state
	bad := func(why string) error {
		return fmt.Errorf("transport: modify QP %#x %v->%v: %s", qp.qpn, from, a.State, why)
	}
	switch a.State {
	case StateReset:
		if from == StateRTR || from == StateRTS {
			qp.abandonLocked()
		}
		qp.flushLocked()
		qp.state = StateReset
		qp.req = requester{}
		qp.resp.init(0)
		qp.cqLost = false
		qp.rq = qp.rq[:0]
		return nil
	case StateError:
		qp.toErrorLocked()
		return nil
	case StateInit:
		if from != StateReset && from != StateInit {
			return bad("INIT follows RESET")
		}
		qp.attr.QKey = a.QKey
		qp.state = StateInit
		return nil
	case StateRTR:
		if from != StateInit {
			return bad("RTR follows INIT")
		}
		if qp.typ == RC {
			switch a.PathMTU {
			case 256, 512, 1024, 2048, 4096:
			default:
				return bad(fmt.Sprintf("path MTU %d is not 256, 512, 1024, 2048 or 4096", a.PathMTU))
			}
			if !a.Remote.IsValid() {
				return bad("no remote address")
			}
			if err := qp.dev.reachable(a.Remote); err != nil {
				return fmt.Errorf("transport: modify QP %#x %v->%v: %w", qp.qpn, from, a.State, err)
			}
			if a.DestQPN > roce.PSNMask || a.RQPSN > roce.PSNMask {
				return bad("destination QPN and PSN are 24-bit")
			}
			qp.mtu = a.PathMTU
			qp.attr.DestQPN, qp.attr.Remote, qp.attr.RQPSN = a.DestQPN, a.Remote, a.RQPSN
			qp.sport = roce.SourcePort(0, qp.qpn, a.DestQPN)
			qp.attr.MinRNRTimer, qp.attr.MaxDestRdAtomic = a.MinRNRTimer&0x1f, a.MaxDestRdAtomic
			qp.resp.init(roce.PSN(a.RQPSN))
		} else {
			switch a.PathMTU {
			case 0, 256, 512, 1024, 2048, 4096:
			default:
				return bad(fmt.Sprintf("path MTU %d is not 256, 512, 1024, 2048 or 4096 (0 for 4096)", a.PathMTU))
			}
			qp.mtu = a.PathMTU
			if qp.mtu == 0 {
				qp.mtu = 4096
			}
		}
		qp.state = StateRTR
		return nil
	case StateRTS:
		if from != StateRTR {
			return bad("RTS follows RTR")
		}
		if a.SQPSN > roce.PSNMask {
			return bad("send PSN is 24-bit")
		}
		if a.RetryCnt > 7 || a.RNRRetry > 7 {
			return bad("retry counts are 3-bit")
		}
		qp.attr.SQPSN, qp.attr.Timeout, qp.attr.RetryCnt, qp.attr.RNRRetry = a.SQPSN, a.Timeout&0x1f, a.RetryCnt, a.RNRRetry
		qp.attr.MaxRdAtomic, qp.attr.ECN = a.MaxRdAtomic, a.ECN
		if qp.attr.MaxRdAtomic <= 0 {
			qp.attr.MaxRdAtomic = 16
		}
		qp.req.init(roce.PSN(a.SQPSN), ackTimeout(qp.attr.Timeout), qp.attr.RetryCnt, qp.attr.RNRRetry)
		qp.cc = nil
		if a.ECN && qp.typ == RC {
			qp.cc = newDCQCN(qp.dev.opts.DCQCN, time.Now())
		}
		qp.state = StateRTS
		return nil
	}
	return bad("unknown state")
}

// Close moves the QP to the error state, flushing its work, and removes it
// from the device. It is idempotent.
func (qp *QP) Close() error {
	qp.mu.Lock()
	if qp.state != StateError {
		qp.toErrorLocked()
	}
	qp.mu.Unlock()
	qp.sendNow() // the last ACKs and NAKs, and the leases held until sent, held or not
	qp.leave()
	qp.dev.unregister(qp)
	return nil
}

// toErrorLocked enters the error state and flushes every work request.
func (qp *QP) toErrorLocked() {
	if qp.state == StateRTR || qp.state == StateRTS {
		qp.flushAckLocked() // what completed is acknowledged still
		qp.resp.errFront, qp.resp.errSet = qp.resp.frontier(), true
		qp.abandonLocked()
	}
	qp.state = StateError
	if qp.timer != nil {
		qp.timer.Stop()
		qp.timerAt = time.Time{}
	}
	if qp.pacer != nil {
		qp.pacer.Stop()
	}
	qp.flushLocked()
}

// flushLocked completes all outstanding work with StatusWRFlushErr.
func (qp *QP) flushLocked() {
	for _, w := range qp.req.sq {
		if w.status == StatusSuccess {
			w.status = StatusWRFlushErr
		}
		qp.completeSendLocked(w)
	}
	qp.req.sq = qp.req.sq[:0]
	for _, r := range qp.rq {
		qp.pushRecvLocked(WC{ID: r.ID, Status: StatusWRFlushErr, Opcode: OpRecv, QPN: qp.qpn})
	}
	qp.rq = qp.rq[:0]
}

func (qp *QP) pushRecvLocked(wc WC) {
	if !qp.pushLocked(qp.recvCQ, wc) {
		qp.cqOverflowLocked("receive", wc)
	}
}

// cqOverflowLocked handles a completion that found its CQ full, as verbs
// does: the CQ reports ErrCQOverflow, the QP enters the error state and
// the device reports EventCQError; it is counted, never only logged.
func (qp *QP) cqOverflowLocked(which string, wc WC) {
	qp.dev.stats.CQOverflows.Add(1)
	if qp.cqLost {
		return // the flush that follows finds the CQ full too
	}
	qp.cqLost = true
	qp.dev.log.Warn(which+" CQ overflow: the QP enters the error state", "qp", qp.qpn, "wr", wc.ID)
	qp.dev.event(AsyncEvent{Type: EventCQError, QPN: qp.qpn, Err: ErrCQOverflow})
	qp.toErrorLocked()
}

// PostRecv queues receive work requests.
func (qp *QP) PostRecv(wrs ...RecvWR) error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.state == StateReset {
		return fmt.Errorf("transport: post recv on QP %#x in RESET", qp.qpn)
	}
	for _, wr := range wrs {
		if _, err := wr.Local.bytes(); err != nil {
			return fmt.Errorf("transport: post recv %d on QP %#x: %w", wr.ID, qp.qpn, err)
		}
		if wr.Local.Length > 0 && wr.Local.MR.access&AccessLocalWrite == 0 {
			return fmt.Errorf("transport: post recv %d on QP %#x: MR lacks local write access", wr.ID, qp.qpn)
		}
	}
	if len(qp.rq)+len(wrs) > qp.maxRQ {
		return fmt.Errorf("transport: post recv on QP %#x: receive queue full (%d)", qp.qpn, qp.maxRQ)
	}
	if qp.state == StateError {
		for _, wr := range wrs {
			qp.pushRecvLocked(WC{ID: wr.ID, Status: StatusWRFlushErr, Opcode: OpRecv, QPN: qp.qpn})
		}
		return nil
	}
	qp.rq = roomFor(qp.rq, &qp.rqArr, len(wrs))
	qp.rq = append(qp.rq, wrs...)
	return nil
}

// PostSend queues send work requests and starts sending them.
func (qp *QP) PostSend(wrs ...SendWR) error {
	qp.mu.Lock()
	err := qp.postSendLocked(wrs)
	qp.mu.Unlock()
	qp.send()
	return err
}

func (qp *QP) postSendLocked(wrs []SendWR) error {
	switch qp.state {
	case StateRTS:
	case StateError:
		for _, wr := range wrs {
			qp.completeSendLocked(&sendWQE{wr: wr, status: StatusWRFlushErr})
		}
		return nil
	default:
		return fmt.Errorf("transport: post send on QP %#x in %v", qp.qpn, qp.state)
	}
	if len(qp.req.sq)+len(wrs) > qp.maxSQ {
		return fmt.Errorf("transport: post send on QP %#x: send queue full (%d)", qp.qpn, qp.maxSQ)
	}
	for i := range wrs {
		if err := qp.checkSendWRLocked(&wrs[i]); err != nil {
			return fmt.Errorf("transport: post send %d on QP %#x: %w", wrs[i].ID, qp.qpn, err)
		}
	}
	qp.req.sq = roomFor(qp.req.sq, &qp.req.sqArr, len(wrs))
	for _, wr := range wrs {
		data, _ := wr.Local.bytes()
		qp.req.sq = append(qp.req.sq, qp.req.newWQE(wr, data))
	}
	if qp.typ == UD {
		qp.sendUDLocked()
		return nil
	}
	qp.pumpLocked(time.Now())
	return nil
}

func (qp *QP) checkSendWRLocked(wr *SendWR) error {
	if _, err := wr.Local.bytes(); err != nil {
		return err
	}
	if qp.typ == UD {
		switch {
		case wr.Opcode != OpSend && wr.Opcode != OpSendWithImm:
			return fmt.Errorf("UD QPs send only SEND and SEND_WITH_IMM, not %v", wr.Opcode)
		case wr.UD == nil || !wr.UD.Addr.IsValid():
			return fmt.Errorf("UD send without a destination")
		case wr.Local.Length > qp.mtu:
			return fmt.Errorf("UD message of %d bytes exceeds the MTU %d", wr.Local.Length, qp.mtu)
		}
		if err := qp.dev.reachable(wr.UD.Addr); err != nil {
			return fmt.Errorf("UD send: %w", err)
		}
		return nil
	}
	switch wr.Opcode {
	case OpSend, OpSendWithImm, OpSendWithInv, OpWrite, OpWriteWithImm:
	case OpRead:
		if wr.Local.Length > 0 && wr.Local.MR.access&AccessLocalWrite == 0 {
			return fmt.Errorf("RDMA READ into an MR without local write access")
		}
	case OpCompareSwap, OpFetchAdd:
		if wr.Local.Length != 8 || wr.Local.MR.access&AccessLocalWrite == 0 {
			return fmt.Errorf("atomic needs an 8-byte local buffer with local write access")
		}
		if wr.Remote%8 != 0 {
			return fmt.Errorf("atomic remote address %#x is not 8-byte aligned", wr.Remote)
		}
	default:
		return fmt.Errorf("opcode %v: %w", wr.Opcode, ErrNotSupported)
	}
	if wr.Local.Length > 1<<31 {
		return fmt.Errorf("message of %d bytes exceeds 2 GiB", wr.Local.Length)
	}
	return nil
}

// completeSendLocked reports a finished send WQE on the send CQ: always
// for an error, and for success when the WR asked for it.
func (qp *QP) completeSendLocked(w *sendWQE) {
	if w.status == StatusSuccess && !w.wr.Signaled {
		return
	}
	wc := WC{ID: w.wr.ID, Status: w.status, Opcode: w.wr.Opcode, QPN: qp.qpn}
	switch w.wr.Opcode {
	case OpRead, OpCompareSwap, OpFetchAdd:
		wc.ByteLen = len(w.data)
	}
	if !qp.pushLocked(qp.sendCQ, wc) {
		qp.cqOverflowLocked("send", wc)
	}
}

// packet buffers -------------------------------------------------------

// newPacketLocked returns a message with a free buffer, addressed to the peer.
func (qp *QP) newPacketLocked(to netip.AddrPort) *roce.Message {
	var buf []byte
	if n := len(qp.txBuf); n > 0 {
		buf = qp.txBuf[n-1][:0]
		qp.txBuf = qp.txBuf[:n-1]
	} else {
		buf = make([]byte, 0, roce.MaxPacket)
	}
	var ecn uint8
	if qp.attr.ECN {
		ecn = 2 // ECT(0)
	}
	qp.tx = append(qp.tx, roce.Message{Buf: buf, Addr: to, ECN: ecn, SrcPort: qp.sport})
	return &qp.tx[len(qp.tx)-1]
}

// gatherMin is the least payload sent from where it lies (the MR) rather
// than copied into the packet buffer: the conn copies it once (AF_XDP's
// UMEM, the kernel's socket buffer) instead of twice. Below it, a copy is
// cheaper than a gather.
const gatherMin = 256

// queueLocked builds a transport packet into a new message for the peer.
func (qp *QP) queueLocked(to netip.AddrPort, f *roce.PacketFields, payload []byte) {
	m := qp.newPacketLocked(to)
	if len(payload) >= gatherMin && f.BTH.Opcode.HasPayload() {
		m.Buf, m.Hdr = roce.AppendPacketGather(m.Buf, f, len(payload))
		m.Payload = payload
	} else {
		m.Buf = roce.AppendPacket(m.Buf, f, payload)
	}
	m.N = len(m.Buf)
}

// takeTx hands the queued packets to Device.send, which holds txMu until
// it calls releaseTx.
func (qp *QP) takeTx() []roce.Message {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if len(qp.tx) == 0 {
		releaseLeases(&qp.txLeases) // nothing queued points into them
		return nil
	}
	out := qp.tx
	qp.tx, qp.spare = qp.spare[:0], out
	qp.txLeases, qp.sentLeases = qp.sentLeases, qp.txLeases
	return out
}

// dropTx drops what qp queued for a device that sends no more, and
// releases the leases of the READ data it pointed into.
func (qp *QP) dropTx() {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	clear(qp.tx)
	qp.tx = qp.tx[:0]
	releaseLeases(&qp.txLeases)
	releaseLeases(&qp.sentLeases)
}

// releaseTx takes back the buffers of the packets just sent.
func (qp *QP) releaseTx() {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	for i := range qp.spare {
		qp.txBuf = append(qp.txBuf, qp.spare[i].Buf)
		qp.spare[i] = roce.Message{}
	}
	qp.spare = qp.spare[:0]
	releaseLeases(&qp.sentLeases)
}

func releaseLeases(ls *[]Lease) {
	for i, l := range *ls {
		l.Release()
		(*ls)[i] = nil
	}
	*ls = (*ls)[:0]
}

// pushLocked adds a completion to cq: quietly while the receive goroutine
// handles a packet (signalCQs wakes the waiter after the batch), else
// waking the waiter now.
func (qp *QP) pushLocked(cq *CQ, wc WC) bool {
	if wc.Status != StatusSuccess && int(wc.Status) < NumStatuses {
		qp.dev.stats.ErrorCompletions[wc.Status].Add(1)
	}
	if qp.inRx {
		qp.cqPending = true
		return cq.pushQuiet(wc)
	}
	return cq.push(wc)
}

// signalCQs wakes the waiters of the QP's CQs if the last batch of packets
// completed work.
func (qp *QP) signalCQs() {
	qp.mu.Lock()
	pending := qp.cqPending
	qp.cqPending = false
	qp.mu.Unlock()
	if pending {
		qp.sendCQ.signal()
		qp.recvCQ.signal()
	}
}

// receive dispatches a packet for this QP. Called by routineReceive, which
// calls signalCQs after the batch.
func (qp *QP) receive(p *roce.Packet, m *roce.Message) {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	qp.inRx, qp.rxMsg = true, m
	defer func() { qp.inRx, qp.rxMsg = false, nil }()
	op := p.Opcode()
	if op == roce.CNP {
		qp.onCNPLocked()
		return
	}
	if m.ECN == roce.ECNCE && !qp.dev.opts.NoCNP {
		// To the peer's RoCE address: the packet's source port is its
		// flow's, not where the peer listens.
		to := qp.attr.Remote
		if !to.IsValid() {
			to = netip.AddrPortFrom(m.Addr.Addr(), roce.Port)
		}
		qp.sendCNPLocked(to)
	}
	switch qp.typ {
	case UD:
		qp.receiveUDLocked(p, m)
	case RC:
		if qp.state == StateError && op.IsRequest() && op.Service() == 0x00 {
			qp.ackInErrorLocked(p)
			return
		}
		if qp.state != StateRTR && qp.state != StateRTS {
			return
		}
		if op.Service() != 0x00 {
			qp.dev.stats.RxMalformed.Add(1)
			return
		}
		if op.IsRequest() {
			qp.handleRequestLocked(p)
		} else if qp.state == StateRTS {
			qp.handleResponseLocked(p)
		}
	}
}

// sendCNPLocked answers an ECN-CE marked packet with a CNP to its sender's
// QP, at most once per CNPInterval.
func (qp *QP) sendCNPLocked(to netip.AddrPort) {
	now := time.Now()
	if now.Sub(qp.lastCNP) < qp.dev.opts.CNPInterval {
		return
	}
	qp.lastCNP = now
	dest := qp.attr.DestQPN
	m := qp.newPacketLocked(to)
	m.Buf = m.Buf[:roce.CNPLen]
	_ = roce.EncodeCNP(m.Buf, dest) // the buffer holds MaxPacket bytes
	m.N = len(m.Buf)
	qp.dev.stats.TxCNPs.Add(1)
}

// flushAcks queues the coalesced ACK of the packets received in a batch.
func (qp *QP) flushAcks() {
	qp.mu.Lock()
	qp.flushAckLocked()
	qp.mu.Unlock()
}

// QPStats describes a QP's congestion control.
type QPStats struct {
	Rate float64 // DCQCN's current rate in bits/s; 0 without DCQCN
	CNPs uint64  // congestion notifications received
	Cuts uint64  // rate cuts they caused
	// Limited says DCQCN holds the QP below its line rate now (by more
	// than one additive-increase step).
	Limited bool
}

// Stats returns the QP's congestion-control state now (the rate with the
// recovery due by now).
func (qp *QP) Stats() QPStats {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	s := QPStats{CNPs: qp.req.cnps}
	if qp.cc != nil {
		s.Rate, s.Cuts = qp.cc.rateAt(time.Now()), qp.cc.cuts
		s.Limited = qp.cc.limited(s.Rate)
	}
	return s
}

// paceLocked reports whether DCQCN lets a packet of n bytes go now; if not
// it arms the pacer to resume the pump when it may.
func (qp *QP) paceLocked(n int) bool {
	if qp.cc == nil {
		return true
	}
	wait := qp.cc.take(n, time.Now())
	if wait == 0 {
		return true
	}
	if qp.pacer == nil {
		qp.pacer = time.AfterFunc(wait, qp.onPace)
	} else {
		qp.pacer.Reset(wait)
	}
	return false
}

func (qp *QP) onPace() {
	qp.mu.Lock()
	qp.pumpLocked(time.Now())
	qp.mu.Unlock()
	qp.send()
}
