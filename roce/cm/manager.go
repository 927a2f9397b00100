package cm

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/transport"
)

// Options configures a Manager.
type Options struct {
	// Device is the transport device whose QP 1 the manager owns.
	Device *transport.Device
	// Addr is the device's IP address: the GID peers name in their REQ's
	// primary path, and the source of the manager's own REQs. Required.
	Addr netip.Addr
	// CAGUID identifies this channel adapter in REQ and REP (default:
	// derived from Addr).
	CAGUID uint64
	// MaxPathMTU caps the path MTU of connections: REQs that ask for more
	// are rejected, and Dial asks for at most this (default 4096; see
	// DialOptions.PathMTU for the MTU a Dial asks for).
	MaxPathMTU int
	// ResponderResources and InitiatorDepth cap the RDMA READ and atomic
	// requests accepted and issued at once (default 16 each).
	ResponderResources, InitiatorDepth int
	// ResponseTimeout is the CM response timeout code the manager
	// advertises (4.096 us * 2^t; default 20, rdma_cm's value).
	ResponseTimeout uint8
	// MaxRetries is how often a REQ, REP or DREQ is resent before giving up
	// (default 15, rdma_cm's value).
	MaxRetries int
	// RetryTimeout, when set, replaces the retransmission timeouts the
	// peers' response timeouts call for (tests over a fast simulated link).
	RetryTimeout time.Duration
	// RecvDepth is how many MADs can wait in QP 1's receive queue
	// (default 64).
	RecvDepth int
	// Logger receives the manager's events (default slog.Default()).
	Logger *slog.Logger
}

// Manager is the communication manager of one transport device: it owns
// QP 1, answers and sends CM MADs, and connects the device's RC QPs to
// peers that use the IB CM (rdma_cm applications on kernel RoCE devices,
// or another Manager).
type Manager struct {
	dev  *transport.Device
	opts Options
	log  *slog.Logger

	pd     *transport.PD
	qp1    *transport.QP
	sendCQ *transport.CQ
	recvCQ *transport.CQ
	recvMR *transport.MR

	sendMu sync.Mutex // guards sendMR's buffer
	sendMR *transport.MR

	mu        sync.Mutex // guards the fields below and every Conn's state
	closed    bool
	listeners map[uint64]*Listener // by service ID
	conns     map[uint32]*Conn     // by local communication ID
	remote    map[remoteKey]*Conn  // by the peer's CA GUID and communication ID
	nextID    uint32
	nextTID   uint64
	// SIDR (sidr_passive.go, sidr_active.go).
	udListeners map[uint64]*UDListener // by service ID
	sidrIn      map[sidrKey]*sidrIn    // SIDR_REQs received, by requester and request ID
	sidrOut     map[uint32]*sidrOut    // SIDR_REQs sent, by request ID

	stats Stats

	done chan struct{}
	wg   sync.WaitGroup
}

// Stats counts a manager's MADs; every field is updated atomically.
type Stats struct {
	RxMADs, TxMADs, RxMalformed, RxUnknown, Retransmits atomic.Uint64
	Duplicates, Rejects, Timeouts                       atomic.Uint64
}

// StatsSnapshot is Stats read at one moment, as plain values.
type StatsSnapshot struct {
	RxMADs, TxMADs, RxMalformed, RxUnknown, Retransmits uint64
	Duplicates, Rejects, Timeouts                       uint64
}

// Snapshot reads every counter.
func (s *Stats) Snapshot() StatsSnapshot {
	return StatsSnapshot{RxMADs: s.RxMADs.Load(), TxMADs: s.TxMADs.Load(), RxMalformed: s.RxMalformed.Load(),
		RxUnknown: s.RxUnknown.Load(), Retransmits: s.Retransmits.Load(), Duplicates: s.Duplicates.Load(),
		Rejects: s.Rejects.Load(), Timeouts: s.Timeouts.Load()}
}

type remoteKey struct {
	guid uint64
	id   uint32
}

// New starts a manager on opts.Device: it creates QP 1 and brings it to
// RTS. Close stops it.
func New(opts Options) (*Manager, error) {
	if opts.Device == nil {
		return nil, errors.New("cm: new manager: nil device")
	}
	if !opts.Addr.IsValid() {
		return nil, errors.New("cm: new manager: no IP address")
	}
	if opts.CAGUID == 0 {
		a := opts.Addr.As16()
		h := fnv.New64a()
		h.Write(a[:])
		opts.CAGUID = h.Sum64() | 1
	}
	if opts.MaxPathMTU == 0 {
		opts.MaxPathMTU = 4096
	}
	if roce.MTUFromBytes(opts.MaxPathMTU).Bytes() != opts.MaxPathMTU {
		return nil, fmt.Errorf("cm: new manager: path MTU %d is not 256, 512, 1024, 2048 or 4096", opts.MaxPathMTU)
	}
	if opts.ResponderResources <= 0 {
		opts.ResponderResources = 16
	}
	if opts.InitiatorDepth <= 0 {
		opts.InitiatorDepth = 16
	}
	if opts.ResponseTimeout == 0 {
		opts.ResponseTimeout = 20
	}
	if opts.ResponseTimeout > 31 {
		return nil, fmt.Errorf("cm: new manager: response timeout code %d exceeds 31", opts.ResponseTimeout)
	}
	if opts.MaxRetries <= 0 {
		opts.MaxRetries = 15
	}
	if opts.MaxRetries > 15 {
		return nil, fmt.Errorf("cm: new manager: %d retries exceed 15 (a 4-bit field)", opts.MaxRetries)
	}
	if opts.RecvDepth <= 0 {
		opts.RecvDepth = 64
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	m := &Manager{
		dev: opts.Device, opts: opts, log: opts.Logger.With("cm", opts.Addr.String()),
		pd:     transport.NewPD(),
		sendCQ: transport.NewCQ(opts.RecvDepth), recvCQ: transport.NewCQ(opts.RecvDepth),
		listeners: make(map[uint64]*Listener), conns: make(map[uint32]*Conn), remote: make(map[remoteKey]*Conn),
		udListeners: make(map[uint64]*UDListener), sidrIn: make(map[sidrKey]*sidrIn), sidrOut: make(map[uint32]*sidrOut),
		nextID: rand.Uint32() | 1, nextTID: rand.Uint64() >> 8,
		done: make(chan struct{}),
	}
	var err error
	if m.recvMR, err = m.pd.RegisterMR(make([]byte, opts.RecvDepth*MADLen), transport.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("cm: new manager: %w", err)
	}
	if m.sendMR, err = m.pd.RegisterMR(make([]byte, MADLen), 0); err != nil {
		return nil, fmt.Errorf("cm: new manager: %w", err)
	}
	m.qp1, err = m.dev.CreateGSIQP(m.pd, transport.QPInitAttr{Type: transport.UD, SendCQ: m.sendCQ, RecvCQ: m.recvCQ,
		MaxRecvWR: opts.RecvDepth, MaxSendWR: 64})
	if err != nil {
		return nil, fmt.Errorf("cm: new manager: %w", err)
	}
	for _, a := range []transport.QPAttr{{State: transport.StateInit, QKey: GSIQKey}, {State: transport.StateRTR}, {State: transport.StateRTS}} {
		if err := m.qp1.Modify(a); err != nil {
			m.qp1.Close()
			return nil, fmt.Errorf("cm: new manager: %w", err)
		}
	}
	for i := range opts.RecvDepth {
		if err := m.postRecv(i); err != nil {
			m.qp1.Close()
			return nil, fmt.Errorf("cm: new manager: %w", err)
		}
	}
	m.wg.Add(1)
	go m.routineReceive()
	return m, nil
}

// Stats returns the manager's counters.
func (m *Manager) Stats() *Stats { return &m.stats }

// NumConns returns how many connections the manager holds for their
// callers: being set up, established or being torn down. A DREQ still
// resent after its Disconnect stopped waiting is not one (NumLingering).
func (m *Manager) NumConns() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, c := range m.conns {
		if !c.lingering {
			n++
		}
	}
	return n
}

// NumLingering returns how many released connections still resend their
// DREQ, their Disconnect having stopped waiting for the DREP: each ends at
// its DREP or its last retry (Options.MaxRetries).
func (m *Manager) NumLingering() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, c := range m.conns {
		if c.lingering {
			n++
		}
	}
	return n
}

// Close stops the manager: pending handshakes fail, established
// connections' QPs are left as they are (their peers are not told), and
// QP 1 is closed. It is idempotent.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	for _, c := range m.conns {
		c.stopTimerLocked()
		c.finishLocked(ErrClosed)
	}
	for _, l := range m.listeners {
		l.closeLocked()
	}
	for _, l := range m.udListeners {
		l.closeLocked()
	}
	for id, o := range m.sidrOut {
		m.finishSIDRLocked(id, o, nil, &resolveError{to: o.to, err: ErrClosed})
	}
	for _, in := range m.sidrIn {
		in.timer.Stop()
	}
	clear(m.sidrIn)
	m.mu.Unlock()
	close(m.done)
	err := m.qp1.Close()
	m.wg.Wait()
	return err
}

func (m *Manager) postRecv(slot int) error {
	return m.qp1.PostRecv(transport.RecvWR{ID: uint64(slot), Local: transport.SGE{MR: m.recvMR, Offset: slot * MADLen, Length: MADLen}})
}

// routineReceive takes MADs off QP 1's receive queue and hands them to the
// state machine.
func (m *Manager) routineReceive() {
	defer m.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-m.done
		cancel()
	}()
	wcs := make([]transport.WC, 16)
	buf := m.recvMR.Buf()
	for {
		n, err := m.recvCQ.PollWait(ctx, wcs)
		if err != nil {
			return
		}
		for _, wc := range wcs[:n] {
			if wc.Status == transport.StatusWRFlushErr {
				continue
			}
			slot := int(wc.ID)
			if wc.Status == transport.StatusSuccess {
				m.handle(buf[slot*MADLen:slot*MADLen+wc.ByteLen], wc.Src)
			}
			if err := m.postRecv(slot); err != nil {
				select {
				case <-m.done:
					return
				default:
				}
				m.log.Error("repost QP 1 receive", "err", err)
			}
		}
	}
}

// send sends one MAD to the CM at peer (its IP; the port is always 4791).
func (m *Manager) send(peer netip.Addr, mad []byte) { m.sendAfter(peer, mad, nil) }

// sendAfter sends one MAD to the CM at peer; with a connection's QP,
// through that QP's device after what the QP queued
// (transport.QP.PostSendAfter), so that the peer cannot take the MAD
// before an ACK the QP sent.
func (m *Manager) sendAfter(peer netip.Addr, mad []byte, qp *transport.QP) {
	m.sendMu.Lock()
	defer m.sendMu.Unlock()
	copy(m.sendMR.Buf(), mad)
	wr := transport.SendWR{Opcode: transport.OpSend,
		Local: transport.SGE{MR: m.sendMR, Length: MADLen},
		UD:    &transport.UDDest{Addr: netip.AddrPortFrom(peer, roce.Port), QPN: GSIQPN, QKey: GSIQKey}}
	var err error
	if qp != nil {
		err = m.qp1.PostSendAfter(qp, wr)
	} else {
		err = m.qp1.PostSend(wr)
	}
	if err != nil {
		m.log.Warn("send MAD", "to", peer, "err", err)
		return
	}
	m.stats.TxMADs.Add(1) // callers hold m.mu
	// UD sends complete at once; errors (a flushed send at Close) are
	// dropped here so the queue never fills.
	var wcs [8]transport.WC
	for m.sendCQ.Poll(wcs[:]) > 0 {
	}
}

// newTIDLocked returns a fresh transaction ID for a connection this side
// starts.
func (m *Manager) newTIDLocked() uint64 {
	m.nextTID++
	return m.nextTID
}

// newIDLocked returns an unused local communication ID (never 0), which
// is also a SIDR_REQ's request ID.
func (m *Manager) newIDLocked() uint32 {
	for {
		id := m.nextID
		m.nextID++
		if id == 0 {
			continue
		}
		_, conn := m.conns[id]
		_, sidr := m.sidrOut[id]
		if !conn && !sidr {
			return id
		}
	}
}

// cmTimeout converts a CM timeout code to a duration: 4.096 us * 2^t,
// rounded as the kernel does (2^(t-8) ms, at least 1 ms).
func cmTimeout(t uint8) time.Duration {
	if t < 8 {
		t = 8
	}
	if t > 31 {
		t = 31
	}
	return time.Millisecond << (t - 8)
}

// retryTimeout is how long to wait for an answer from a peer whose
// response timeout code is t.
func (m *Manager) retryTimeout(t uint8) time.Duration {
	if m.opts.RetryTimeout > 0 {
		return m.opts.RetryTimeout
	}
	return cmTimeout(t) + cmTimeout(m.opts.ResponseTimeout)/8
}

// handle dispatches one received MAD. src is its sender's address.
func (m *Manager) handle(mad []byte, src netip.AddrPort) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stats.RxMADs.Add(1)
	if m.closed {
		return
	}
	h, data, err := ParseCM(mad)
	if err != nil {
		m.stats.RxMalformed.Add(1)
		m.log.Debug("drop MAD", "from", src, "err", err)
		return
	}
	peer := src.Addr()
	tid := h.TID()
	switch h.AttrID() {
	case AttrREQ:
		m.onREQLocked(tid, mad, REQ(data), peer)
	case AttrREP:
		m.onREPLocked(REP(data), peer)
	case AttrRTU:
		m.onRTULocked(RTU(data))
	case AttrREJ:
		m.onREJLocked(REJ(data))
	case AttrMRA:
		m.onMRALocked(MRA(data))
	case AttrDREQ:
		m.onDREQLocked(tid, DREQ(data), peer)
	case AttrDREP:
		m.onDREPLocked(DREP(data))
	case AttrSIDRREQ:
		m.onSIDRREQLocked(tid, mad, SIDRREQ(data), peer)
	case AttrSIDRREP:
		m.onSIDRREPLocked(mad, SIDRREP(data), peer)
	default:
		m.stats.RxUnknown.Add(1)
		m.log.Debug("ignore CM MAD", "attr", h.AttrID(), "from", src)
	}
}

// rejectLocked sends a REJ for a message of a connection this side has no
// state for.
func (m *Manager) rejectLocked(peer netip.Addr, tid uint64, remoteID uint32, msg Message, reason RejectReason) {
	m.stats.Rejects.Add(1)
	h := CMHeader(AttrREJ, tid)
	mad := AppendCM(nil, &h, func(d []byte) {
		REJ(d).Encode(&REJFields{RemoteCommID: remoteID, MessageRejected: msg, Reason: reason})
	})
	m.send(peer, mad)
}
