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

// Listener receives the connection requests (REQs) for one service ID.
type Listener struct {
	m         *Manager
	serviceID uint64
	ch        chan *Request
	closed    chan struct{}
}

// Listen listens on port in rdma_cm's TCP port space (service ID
// 0x0000000001060000 | port), where rdma_cm clients connect with
// rdma_resolve_addr and rdma_connect. backlog bounds the requests waiting
// for Next (default 16); beyond it REQs are rejected.
func (m *Manager) Listen(port uint16, backlog int) (*Listener, error) {
	return m.ListenService(ServiceID(PortSpaceTCP, port), backlog)
}

// ListenService listens for REQs to serviceID.
func (m *Manager) ListenService(serviceID uint64, backlog int) (*Listener, error) {
	if backlog <= 0 {
		backlog = 16
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, fmt.Errorf("cm: listen on service %#x: %w", serviceID, ErrClosed)
	}
	if _, used := m.listeners[serviceID]; used {
		return nil, fmt.Errorf("cm: listen on service %#x: already listening", serviceID)
	}
	if _, used := m.udListeners[serviceID]; used {
		return nil, fmt.Errorf("cm: listen on service %#x: a UD listener has it", serviceID)
	}
	l := &Listener{m: m, serviceID: serviceID, ch: make(chan *Request, backlog), closed: make(chan struct{})}
	m.listeners[serviceID] = l
	return l, nil
}

// ServiceID returns the service ID the listener answers.
func (l *Listener) ServiceID() uint64 { return l.serviceID }

// Next returns the next connection request. The caller answers it with
// Accept or Reject.
func (l *Listener) Next(ctx context.Context) (*Request, error) {
	select {
	case r := <-l.ch:
		return r, nil
	case <-l.closed:
		return nil, fmt.Errorf("cm: listener %#x: %w", l.serviceID, ErrClosed)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close stops listening; waiting requests are rejected. It is idempotent.
func (l *Listener) Close() error {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	l.closeLocked()
	return nil
}

func (l *Listener) closeLocked() {
	select {
	case <-l.closed:
		return
	default:
	}
	close(l.closed)
	if l.m.listeners[l.serviceID] == l {
		delete(l.m.listeners, l.serviceID)
	}
	for {
		select {
		case r := <-l.ch:
			r.rejectLocked(RejectInvalidServiceID, nil)
		default:
			return
		}
	}
}

// Request is a connection request (a REQ) waiting for the application's
// answer.
type Request struct {
	c *Conn
	// REQ holds the request's fields; its PrivateData is a copy of the
	// whole private data region.
	REQ REQFields
	// IPCM holds the RDMA IP CM header when the service ID is in an
	// rdma_cm IP port space and the private data starts with a valid one.
	IPCM    IPCMHeaderFields
	HasIPCM bool
	// PrivateData is the application's private data: what follows the IP
	// CM header, or the whole region without one.
	PrivateData []byte
	// Remote is the requester's IP address (from the primary path's GID).
	Remote netip.Addr
	// MAD is a copy of the whole REQ as received, header included.
	MAD []byte
}

func (m *Manager) onREQLocked(tid uint64, mad []byte, r REQ, peer netip.Addr) {
	f := r.Fields()
	key := remoteKey{guid: f.LocalCAGUID, id: f.LocalCommID}
	if c := m.remote[key]; c != nil {
		// A retransmitted REQ: our answer was lost or is late.
		m.stats.Duplicates.Add(1)
		switch c.state {
		case stateReqRcvd:
			h := CMHeader(AttrMRA, c.tid)
			m.send(c.peer, AppendCM(nil, &h, func(d []byte) {
				MRA(d).Encode(&MRAFields{LocalCommID: c.localID, RemoteCommID: c.remoteID,
					MessageMRAed: MessageREQ, ServiceTimeout: m.opts.ResponseTimeout})
			}))
		case stateRepSent:
			if c.mad != nil {
				m.send(c.peer, c.mad)
			}
		}
		return
	}
	l := m.listeners[f.ServiceID]
	if l == nil {
		m.rejectLocked(peer, tid, f.LocalCommID, MessageREQ, RejectInvalidServiceID)
		return
	}
	if f.TransportType != TransportRC || f.ExtendedTransportType != 0 {
		m.rejectLocked(peer, tid, f.LocalCommID, MessageREQ, RejectInvalidTransportType)
		return
	}
	if f.PathMTU.Bytes() == 0 || f.PathMTU.Bytes() > m.opts.MaxPathMTU {
		// Both ends of an RC connection must use the REQ's MTU: the
		// transport checks that first and middle packets are exactly that
		// long.
		m.rejectLocked(peer, tid, f.LocalCommID, MessageREQ, RejectInvalidMTU)
		return
	}
	f.PrivateData = append([]byte(nil), f.PrivateData...)
	req := &Request{REQ: f, PrivateData: f.PrivateData, MAD: append([]byte(nil), mad[:MADLen]...)}
	if ps, _, ok := ParseServiceID(f.ServiceID); ok && (ps == PortSpaceTCP || ps == PortSpaceUDP) {
		if h, n, err := ParseIPCMHeader(f.PrivateData); err == nil {
			req.IPCM, req.HasIPCM, req.PrivateData = h.Fields(), true, f.PrivateData[n:]
		}
	}
	req.Remote = f.Primary.LocalGID.Addr()
	if !req.Remote.IsValid() || req.Remote.IsUnspecified() {
		req.Remote = peer
	}
	c := m.newConnLocked(false, req.Remote, tid)
	c.state = stateReqRcvd
	c.remoteID = f.LocalCommID
	c.key = key
	c.peerTime = f.LocalCMResponseTimeout
	c.privateData = req.PrivateData
	if req.HasIPCM {
		c.remote = netip.AddrPortFrom(req.IPCM.Src, req.IPCM.SrcPort)
	}
	m.remote[key] = c
	req.c = c
	select {
	case l.ch <- req:
	default:
		req.rejectLocked(RejectNoResources, nil)
	}
}

// AcceptOptions describe how to accept a request.
type AcceptOptions struct {
	// QP is an RC QP of the manager's device, in RESET or INIT (move it to
	// INIT and post receives first when the peer may send at once, as it
	// may as soon as it has the REP).
	QP *transport.QP
	// PrivateData goes back in the REP (up to REPPrivateDataLen bytes).
	PrivateData []byte
	// ResponderResources and InitiatorDepth cap the RDMA READs and atomics
	// this side accepts and issues at once (0: the manager's); the REP
	// carries them lowered to what the REQ offered.
	ResponderResources, InitiatorDepth int
	// RNRRetry is the RNR retry count the peer uses toward this QP (0: 7,
	// forever).
	RNRRetry uint8
	// MinRNRTimer is the RNR NAK timer code (0: 12, 0.64 ms).
	MinRNRTimer uint8
	// ECN makes the QP send ECN-capable and react to CNPs (DCQCN): the
	// QPAttr.ECN of its move to RTS.
	ECN bool
}

// Accept connects opts.QP to the requester: it moves the QP through INIT,
// RTR and RTS with the REQ's QPN, PSN (the first the QP sends) and path MTU, sends a REP (resent
// until the RTU comes) and returns the connection once the RTU arrived.
// On ctx's end it gives up with a REJ to the peer.
func (r *Request) Accept(ctx context.Context, opts AcceptOptions) (*Conn, error) {
	c := r.c
	m := c.m
	if opts.QP == nil {
		return nil, errors.New("cm: accept: nil QP")
	}
	if len(opts.PrivateData) > REPPrivateDataLen {
		return nil, fmt.Errorf("cm: accept: %d bytes of private data exceed %d", len(opts.PrivateData), REPPrivateDataLen)
	}
	f := &r.REQ
	resp := min(orDefault(opts.ResponderResources, m.opts.ResponderResources), int(f.InitiatorDepth))
	depth := min(orDefault(opts.InitiatorDepth, m.opts.InitiatorDepth), int(f.ResponderResources))
	rnr := opts.RNRRetry
	if rnr == 0 {
		rnr = 7
	}
	minRNR := opts.MinRNRTimer
	if minRNR == 0 {
		minRNR = 12
	}
	ackTimeout := f.Primary.LocalACKTimeout
	if ackTimeout == 0 {
		ackTimeout = 14
	}
	mtu := f.PathMTU.Bytes()
	// Each side's Starting PSN is the first PSN it expects to receive
	// (Linux cm.c: rq_psn from its own REQ or REP, sq_psn from the
	// peer's).
	psn := rand.Uint32() & roce.PSNMask

	m.mu.Lock()
	if c.state != stateReqRcvd {
		m.mu.Unlock()
		return nil, fmt.Errorf("cm: accept: request already answered or abandoned (%v)", c.state)
	}
	c.qp = opts.QP
	c.state = stateRepSent // claimed: a duplicate REQ meanwhile resends nothing yet
	c.mad = nil
	m.mu.Unlock()

	qp := opts.QP
	var attrs []transport.QPAttr
	if qp.State() == transport.StateReset {
		attrs = append(attrs, transport.QPAttr{State: transport.StateInit})
	}
	attrs = append(attrs,
		transport.QPAttr{State: transport.StateRTR, DestQPN: f.LocalQPN, Remote: netip.AddrPortFrom(c.peer, roce.Port),
			RQPSN: psn, PathMTU: mtu, MinRNRTimer: minRNR, MaxDestRdAtomic: resp},
		transport.QPAttr{State: transport.StateRTS, SQPSN: f.StartingPSN, Timeout: ackTimeout, RetryCnt: f.RetryCount,
			RNRRetry: f.RNRRetryCount, MaxRdAtomic: depth, ECN: opts.ECN})
	for _, a := range attrs {
		if err := qp.Modify(a); err != nil {
			m.mu.Lock()
			r.rejectLocked(RejectNoQP, nil)
			m.mu.Unlock()
			return nil, fmt.Errorf("cm: accept: %w", err)
		}
	}

	h := CMHeader(AttrREP, c.tid)
	mad := AppendCM(nil, &h, func(d []byte) {
		REP(d).Encode(&REPFields{LocalCommID: c.localID, RemoteCommID: c.remoteID, LocalQPN: qp.QPN(),
			StartingPSN: psn, ResponderResources: uint8(resp), InitiatorDepth: uint8(depth),
			TargetACKDelay: 15, RNRRetryCount: rnr, LocalCAGUID: m.opts.CAGUID, PrivateData: opts.PrivateData})
	})
	m.mu.Lock()
	if c.state != stateRepSent || m.closed {
		err := c.err
		m.mu.Unlock()
		if err == nil {
			err = ErrClosed
		}
		return nil, fmt.Errorf("cm: accept: %w", err)
	}
	c.remoteQPN = f.LocalQPN
	m.send(c.peer, mad)
	c.armLocked(mad, m.retryTimeout(f.LocalCMResponseTimeout))
	m.mu.Unlock()
	return c.wait(ctx)
}

// Reject refuses the request with a consumer-defined REJ carrying
// privateData (up to REJPrivateDataLen bytes).
func (r *Request) Reject(privateData []byte) error {
	return r.RejectWith(RejectConsumerDefined, privateData)
}

// RejectWith refuses the request with a reason of the caller's choice: a
// gateway passes on the reason its target gave (an application retrying
// on "connection refused" must see that), or RejectTimeout when the target
// did not answer.
func (r *Request) RejectWith(reason RejectReason, privateData []byte) error {
	if len(privateData) > REJPrivateDataLen {
		return fmt.Errorf("cm: reject: %d bytes of private data exceed %d", len(privateData), REJPrivateDataLen)
	}
	m := r.c.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if r.c.state != stateReqRcvd {
		return fmt.Errorf("cm: reject: request already answered or abandoned (%v)", r.c.state)
	}
	r.rejectLocked(reason, privateData)
	return nil
}

func (r *Request) rejectLocked(reason RejectReason, privateData []byte) {
	c := r.c
	m := c.m
	m.stats.Rejects.Add(1)
	h := CMHeader(AttrREJ, c.tid)
	m.send(c.peer, AppendCM(nil, &h, func(d []byte) {
		REJ(d).Encode(&REJFields{LocalCommID: c.localID, RemoteCommID: c.remoteID, MessageRejected: MessageREQ,
			Reason: reason, PrivateData: privateData})
	}))
	c.finishLocked(&RejectError{Reason: reason})
}

func orDefault(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}
