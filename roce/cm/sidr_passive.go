package cm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/rbridge/rbridge/roce/transport"
)

// RDMAUDPQKey is the Q_Key rdma_cm gives a UD QP in the UDP port space
// (Linux include/rdma/rdma_cm_ib.h RDMA_UDP_QKEY; cma_set_default_qkey).
// A kernel rdma_cm client has already set it on its QP when the SIDR_REP
// arrives and fails the resolution (RDMA_CM_EVENT_ADDR_ERROR) on any other
// (cma_set_qkey), so a service for rdma_cm clients uses this one.
const RDMAUDPQKey = 0x01234567

// maxSIDRIn bounds the SIDR_REQs the manager remembers (waiting for the
// application, or answered and kept to answer duplicates).
const maxSIDRIn = 1024

// UDListener receives the service ID resolution requests (SIDR_REQs) for
// one service ID: UD clients asking which QP and Q_Key serve it.
type UDListener struct {
	m         *Manager
	serviceID uint64
	ch        chan *SIDRRequest
	closed    chan struct{}
}

// ListenUD listens on port in rdma_cm's UDP port space (service ID
// 0x0000000001110000 | port), where rdma_cm clients of RDMA_PS_UDP (udaddy,
// mckey's unicast mode) resolve a service with rdma_resolve_addr and
// rdma_connect. backlog bounds the requests waiting for Next (default 16);
// beyond it a SIDR_REP with status SIDRNoQP answers.
func (m *Manager) ListenUD(port uint16, backlog int) (*UDListener, error) {
	return m.ListenUDService(ServiceID(PortSpaceUDP, port), backlog)
}

// ListenUDService listens for SIDR_REQs to serviceID.
func (m *Manager) ListenUDService(serviceID uint64, backlog int) (*UDListener, error) {
	if backlog <= 0 {
		backlog = 16
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, fmt.Errorf("cm: listen for SIDR on service %#x: %w", serviceID, ErrClosed)
	}
	if _, used := m.udListeners[serviceID]; used {
		return nil, fmt.Errorf("cm: listen for SIDR on service %#x: already listening", serviceID)
	}
	if _, used := m.listeners[serviceID]; used {
		return nil, fmt.Errorf("cm: listen for SIDR on service %#x: an RC listener has it", serviceID)
	}
	l := &UDListener{m: m, serviceID: serviceID, ch: make(chan *SIDRRequest, backlog), closed: make(chan struct{})}
	m.udListeners[serviceID] = l
	return l, nil
}

// ServiceID returns the service ID the listener answers.
func (l *UDListener) ServiceID() uint64 { return l.serviceID }

// Next returns the next resolution request. The caller answers it with
// Accept or Reject.
func (l *UDListener) Next(ctx context.Context) (*SIDRRequest, error) {
	select {
	case r := <-l.ch:
		return r, nil
	case <-l.closed:
		return nil, fmt.Errorf("cm: UD listener %#x: %w", l.serviceID, ErrClosed)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close stops listening; waiting requests are answered SIDRUnsupported.
// It is idempotent.
func (l *UDListener) Close() error {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	l.closeLocked()
	return nil
}

func (l *UDListener) closeLocked() {
	select {
	case <-l.closed:
		return
	default:
	}
	close(l.closed)
	if l.m.udListeners[l.serviceID] == l {
		delete(l.m.udListeners, l.serviceID)
	}
	for {
		select {
		case r := <-l.ch:
			r.answerLocked(&SIDRREPFields{Status: SIDRUnsupported})
		default:
			return
		}
	}
}

// sidrKey names a SIDR_REQ: the requester's address and its request ID.
type sidrKey struct {
	peer netip.Addr
	id   uint32
}

// sidrIn is a SIDR_REQ this side received: waiting for the application's
// answer (rep nil), or answered and remembered so that a retransmitted
// SIDR_REQ gets the same SIDR_REP (IBA 12.11: the requester resends until
// it has one; the kernel's CM forgets at once and hands the duplicate to
// its listener as a new request). Guarded by Manager.mu.
type sidrIn struct {
	tid       uint64
	serviceID uint64
	rep       []byte // the SIDR_REP MAD once answered
	timer     *time.Timer
}

// SIDRRequest is a service ID resolution request (a SIDR_REQ) waiting for
// the application's answer.
type SIDRRequest struct {
	m   *Manager
	key sidrKey
	in  *sidrIn
	// SIDRREQ holds the request's fields; its PrivateData is a copy of
	// the whole private data region.
	SIDRREQ SIDRREQFields
	// IPCM holds the RDMA IP CM header when the service ID is in an
	// rdma_cm IP port space and the private data starts with a valid one.
	IPCM    IPCMHeaderFields
	HasIPCM bool
	// PrivateData is the application's private data: what follows the IP
	// CM header, or the whole region without one.
	PrivateData []byte
	// Remote is the requester's IP address, where the SIDR_REP goes and
	// its datagrams come from.
	Remote netip.Addr
	// MAD is a copy of the whole SIDR_REQ as received, header included.
	MAD []byte
}

// sidrLinger is how long an answered SIDR_REQ is remembered, and how long
// one waits for the application: a requester with this manager's response
// timeout gives up after that long (the kernel's after 16 tries of 4.1 s).
func (m *Manager) sidrLinger() time.Duration {
	return m.retryTimeout(m.opts.ResponseTimeout) * time.Duration(m.opts.MaxRetries+1)
}

func (m *Manager) onSIDRREQLocked(tid uint64, mad []byte, r SIDRREQ, peer netip.Addr) {
	f := r.Fields()
	key := sidrKey{peer: peer, id: f.RequestID}
	if in := m.sidrIn[key]; in != nil {
		// A retransmitted SIDR_REQ: answer it as before, or let the
		// application finish.
		m.stats.Duplicates.Add(1)
		if in.rep != nil {
			m.send(peer, in.rep)
		}
		return
	}
	in := &sidrIn{tid: tid, serviceID: f.ServiceID}
	req := &SIDRRequest{m: m, key: key, in: in, Remote: peer, MAD: bytes.Clone(mad)}
	if len(m.sidrIn) >= maxSIDRIn {
		// Too many at once: answer without remembering.
		req.answerLocked(&SIDRREPFields{Status: SIDRNoQP})
		return
	}
	m.sidrIn[key] = in
	in.timer = time.AfterFunc(m.sidrLinger(), func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.sidrIn[key] == in {
			delete(m.sidrIn, key)
		}
	})
	l := m.udListeners[f.ServiceID]
	if l == nil {
		req.answerLocked(&SIDRREPFields{Status: SIDRUnsupported})
		return
	}
	f.PrivateData = bytes.Clone(f.PrivateData)
	req.SIDRREQ, req.PrivateData = f, f.PrivateData
	if ps, _, ok := ParseServiceID(f.ServiceID); ok && (ps == PortSpaceTCP || ps == PortSpaceUDP) {
		if h, n, err := ParseIPCMHeader(f.PrivateData); err == nil {
			req.IPCM, req.HasIPCM, req.PrivateData = h.Fields(), true, f.PrivateData[n:]
		}
	}
	select {
	case l.ch <- req:
	default:
		req.answerLocked(&SIDRREPFields{Status: SIDRNoQP})
	}
}

// SIDRAcceptOptions describe the service that answers a request.
type SIDRAcceptOptions struct {
	// QP is the UD QP of the manager's device that serves the request, in
	// INIT or later (it has its Q_Key).
	QP *transport.QP
	// QKey is the Q_Key the requester's datagrams must carry: the QP's
	// (0: the QP's; RDMAUDPQKey for an rdma_cm client).
	QKey uint32
	// PrivateData goes back in the SIDR_REP (up to SIDRREPPrivateDataLen
	// bytes).
	PrivateData []byte
}

// Accept answers the request with a SIDR_REP of status SIDRSuccess naming
// opts.QP and its Q_Key. A duplicate of the request gets the same answer.
func (r *SIDRRequest) Accept(opts SIDRAcceptOptions) error {
	qp := opts.QP
	switch {
	case qp == nil:
		return errors.New("cm: accept SIDR request: nil QP")
	case qp.Type() != transport.UD:
		return fmt.Errorf("cm: accept SIDR request: QP %#x is %v, not UD", qp.QPN(), qp.Type())
	case qp.Device() != r.m.dev:
		return fmt.Errorf("cm: accept SIDR request: QP %#x is not on the manager's device", qp.QPN())
	case len(opts.PrivateData) > SIDRREPPrivateDataLen:
		return fmt.Errorf("cm: accept SIDR request: %d bytes of private data exceed %d", len(opts.PrivateData), SIDRREPPrivateDataLen)
	}
	a := qp.Query()
	if a.State == transport.StateReset || a.State == transport.StateError {
		return fmt.Errorf("cm: accept SIDR request: QP %#x is in %v, not INIT, RTR or RTS", qp.QPN(), a.State)
	}
	qkey := opts.QKey
	if qkey == 0 {
		qkey = a.QKey
	}
	if qkey != a.QKey {
		return fmt.Errorf("cm: accept SIDR request: Q_Key %#x is not QP %#x's (%#x): its datagrams would be dropped", qkey, qp.QPN(), a.QKey)
	}
	return r.answer(&SIDRREPFields{Status: SIDRSuccess, QPN: qp.QPN(), QKey: qkey, PrivateData: opts.PrivateData})
}

// Reject answers the request with a SIDR_REP of status (SIDRReject when
// 0, as rdma_reject sends for a UD ID) carrying privateData (up to
// SIDRREPPrivateDataLen bytes).
func (r *SIDRRequest) Reject(status SIDRStatus, privateData []byte) error {
	if status == SIDRSuccess {
		status = SIDRReject
	}
	if len(privateData) > SIDRREPPrivateDataLen {
		return fmt.Errorf("cm: reject SIDR request: %d bytes of private data exceed %d", len(privateData), SIDRREPPrivateDataLen)
	}
	return r.answer(&SIDRREPFields{Status: status, PrivateData: privateData})
}

func (r *SIDRRequest) answer(f *SIDRREPFields) error {
	m := r.m
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.closed:
		return fmt.Errorf("cm: answer SIDR request %#x from %v: %w", r.key.id, r.key.peer, ErrClosed)
	case r.in.rep != nil:
		return fmt.Errorf("cm: answer SIDR request %#x from %v: already answered", r.key.id, r.key.peer)
	case m.sidrIn[r.key] != r.in:
		return fmt.Errorf("cm: answer SIDR request %#x from %v: the requester gave up (%v unanswered)", r.key.id, r.key.peer, m.sidrLinger())
	}
	r.answerLocked(f)
	return nil
}

// answerLocked sends the SIDR_REP and keeps it for duplicates.
func (r *SIDRRequest) answerLocked(f *SIDRREPFields) {
	m := r.m
	if f.Status != SIDRSuccess {
		m.stats.Rejects.Add(1)
	}
	f.RequestID, f.ServiceID = r.key.id, r.in.serviceID
	h := CMHeader(AttrSIDRREP, r.in.tid)
	r.in.rep = AppendCM(nil, &h, func(d []byte) { SIDRREP(d).Encode(f) })
	m.send(r.key.peer, r.in.rep)
}
