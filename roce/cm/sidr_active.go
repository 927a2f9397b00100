package cm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/rbridge/rbridge/roce"
)

// ResolveOptions describe a service ID resolution.
type ResolveOptions struct {
	// PrivateData follows the RDMA IP CM header in the SIDR_REQ (up to
	// SIDRREQIPCMPrivateDataLen bytes).
	PrivateData []byte
	// SrcPort is the IP CM header's source port (0: a random one from the
	// ephemeral range, as rdma_cm binds).
	SrcPort uint16
	// PKey is the SIDR_REQ's partition key (0: roce.DefaultPKey, what a
	// RoCE port has).
	PKey uint16
}

// UDService is a resolved UD service: where to send datagrams and with
// which Q_Key.
type UDService struct {
	// Addr is the service's IP address and rdma_cm port; datagrams go to
	// its IP.
	Addr      netip.AddrPort
	ServiceID uint64
	QPN       uint32
	QKey      uint32
	// PrivateData is the SIDR_REP's private data region (a copy).
	PrivateData []byte
	// MAD is a copy of the whole SIDR_REP as received, header included.
	MAD []byte
}

// sidrOut is a SIDR_REQ this side sent and waits an answer for. Guarded
// by Manager.mu.
type sidrOut struct {
	to          netip.AddrPort
	serviceID   uint64
	mad         []byte
	retriesLeft int
	timeout     time.Duration
	timer       *time.Timer
	done        chan struct{} // closed with svc or err set
	svc         *UDService
	err         error
}

// ResolveUD resolves the UD service at to (an IP address and a port in
// rdma_cm's UDP port space), as rdma_connect does on a UDP-port-space ID:
// it sends a SIDR_REQ with the RDMA IP CM header, resent every retry
// timeout up to MaxRetries times, and returns the QPN and Q_Key of the
// SIDR_REP. A SIDR_REP with another status is a *SIDRError; no answer
// after every retry is ErrTimeout.
func (m *Manager) ResolveUD(ctx context.Context, to netip.AddrPort, opts ResolveOptions) (*UDService, error) {
	return m.ResolveService(ctx, to, ServiceID(PortSpaceUDP, to.Port()), opts)
}

// ResolveService resolves serviceID at to's IP address; to's port goes in
// the IP CM header only (ResolveUD derives the service ID from it).
func (m *Manager) ResolveService(ctx context.Context, to netip.AddrPort, serviceID uint64, opts ResolveOptions) (*UDService, error) {
	if len(opts.PrivateData) > SIDRREQIPCMPrivateDataLen {
		return nil, fmt.Errorf("cm: resolve %v: %d bytes of private data exceed %d", to, len(opts.PrivateData), SIDRREQIPCMPrivateDataLen)
	}
	if !to.Addr().IsValid() || to.Addr().Is4() != m.opts.Addr.Is4() {
		return nil, fmt.Errorf("cm: resolve %v from %v: address families differ", to, m.opts.Addr)
	}
	srcPort := opts.SrcPort
	if srcPort == 0 {
		srcPort = uint16(32768 + rand.IntN(28232))
	}
	pkey := opts.PKey
	if pkey == 0 {
		pkey = roce.DefaultPKey
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
		return nil, &resolveError{to: to, err: ErrClosed}
	}
	id := m.newIDLocked()
	h := CMHeader(AttrSIDRREQ, m.newTIDLocked())
	o := &sidrOut{to: to, serviceID: serviceID, retriesLeft: m.opts.MaxRetries,
		timeout: m.retryTimeout(m.opts.ResponseTimeout), done: make(chan struct{})}
	o.mad = AppendCM(nil, &h, func(d []byte) {
		SIDRREQ(d).Encode(&SIDRREQFields{RequestID: id, PKey: pkey, ServiceID: serviceID, PrivateData: pd})
	})
	m.sidrOut[id] = o
	m.send(to.Addr(), o.mad)
	m.armSIDRLocked(id, o)
	m.mu.Unlock()

	select {
	case <-o.done:
	case <-ctx.Done():
		m.mu.Lock()
		m.finishSIDRLocked(id, o, nil, &resolveError{to: to, err: ctx.Err()})
		m.mu.Unlock()
		<-o.done
	}
	return o.svc, o.err
}

func (m *Manager) armSIDRLocked(id uint32, o *sidrOut) {
	o.timer = time.AfterFunc(o.timeout, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.sidrOut[id] != o || m.closed {
			return
		}
		if o.retriesLeft > 0 {
			o.retriesLeft--
			m.stats.Retransmits.Add(1)
			m.send(o.to.Addr(), o.mad)
			m.armSIDRLocked(id, o)
			return
		}
		m.stats.Timeouts.Add(1)
		m.finishSIDRLocked(id, o, nil, &resolveError{to: o.to, err: ErrTimeout})
	})
}

// finishSIDRLocked ends a resolution with svc or err, once.
func (m *Manager) finishSIDRLocked(id uint32, o *sidrOut, svc *UDService, err error) {
	if m.sidrOut[id] != o {
		return
	}
	delete(m.sidrOut, id)
	if o.timer != nil {
		o.timer.Stop()
	}
	o.svc, o.err = svc, err
	close(o.done)
}

func (m *Manager) onSIDRREPLocked(mad []byte, r SIDRREP, peer netip.Addr) {
	f := r.Fields()
	o := m.sidrOut[f.RequestID]
	if o == nil || o.to.Addr() != peer {
		// Late (a duplicate's answer after the first), or not ours.
		m.stats.RxUnknown.Add(1)
		return
	}
	pd := bytes.Clone(f.PrivateData)
	if f.Status != SIDRSuccess {
		m.finishSIDRLocked(f.RequestID, o, nil, &resolveError{to: o.to, err: &SIDRError{Status: f.Status, PrivateData: pd}})
		return
	}
	m.finishSIDRLocked(f.RequestID, o, &UDService{Addr: o.to, ServiceID: o.serviceID, QPN: f.QPN, QKey: f.QKey, PrivateData: pd,
		MAD: bytes.Clone(mad)}, nil)
}

// SIDRError is returned when the service answered a resolution with a
// status other than SIDRSuccess.
type SIDRError struct {
	Status      SIDRStatus
	PrivateData []byte
}

func (e *SIDRError) Error() string { return fmt.Sprintf("cm: SIDR_REP status %v", e.Status) }

// Is matches another *SIDRError with the same status, so that
// errors.Is(err, &SIDRError{Status: SIDRUnsupported}) works.
func (e *SIDRError) Is(target error) bool {
	t, ok := target.(*SIDRError)
	return ok && t.Status == e.Status
}

// resolveError is a resolution's failure: it names the address resolved
// and wraps the cause (a *SIDRError, ErrTimeout, ErrClosed, a context's
// error).
type resolveError struct {
	to  netip.AddrPort
	err error
}

func (e *resolveError) Error() string {
	var se *SIDRError
	if errors.As(e.err, &se) {
		msg := fmt.Sprintf("cm: resolve UD service %v: %v", e.to, se.Status)
		if se.Status == SIDRUnsupported {
			msg += ": nothing listens on that port"
		}
		return msg
	}
	return fmt.Sprintf("cm: resolve UD service %v: %v", e.to, e.err)
}

func (e *resolveError) Unwrap() error { return e.err }
