package cm

import (
	"context"
	"errors"
	"net/netip"
	"time"

	"github.com/rbridge/rbridge/roce/transport"
)

// connState is where a connection is in the CM's state machine (a subset
// of IBA 12.9.6's; see the package documentation for the diagram).
type connState uint8

const (
	stateReqRcvd     connState = iota // passive: REQ received, the application has not answered
	stateRepSent                      // passive: REP sent, waiting for RTU
	stateReqSent                      // active: REQ sent, waiting for REP
	stateEstablished                  // RTU received (passive) or sent (active)
	stateDreqSent                     // DREQ sent, waiting for DREP
	stateClosed                       // released, rejected or failed
)

var stateNames = [...]string{"REQ_RCVD", "REP_SENT", "REQ_SENT", "ESTABLISHED", "DREQ_SENT", "CLOSED"}

func (s connState) String() string { return stateNames[s] }

// errDisconnected is a handshake's error when the peer released the
// connection before it was established.
var errDisconnected = errors.New("cm: peer disconnected before the connection was established")

// Conn is a connection the CM manages: an RC QP of the transport device
// connected to a peer's QP.
type Conn struct {
	m        *Manager
	active   bool
	localID  uint32
	tid      uint64
	peer     netip.Addr     // the peer's IP: its CM and its QP
	remote   netip.AddrPort // the peer's rdma_cm address, when the IP CM header named it
	peerTime uint8          // the peer's CM response timeout code

	// Guarded by m.mu.
	state       connState
	remoteID    uint32
	key         remoteKey
	remoteQPN   uint32
	qp          *transport.QP
	privateData []byte
	err         error
	mad         []byte // the message resent on timeout, or the RTU resent on a duplicate REP
	retriesLeft int
	timeout     time.Duration
	timer       *time.Timer
	timerGen    uint64
	established chan struct{} // closed when the handshake ends, well (err nil) or not
	done        chan struct{} // closed when the connection is released
	dial        *dialState
	// lingering says Disconnect stopped waiting: the DREQ is resent in
	// the background, and the connection is its caller's no longer.
	lingering bool
}

func (m *Manager) newConnLocked(active bool, peer netip.Addr, tid uint64) *Conn {
	c := &Conn{m: m, active: active, localID: m.newIDLocked(), tid: tid, peer: peer,
		established: make(chan struct{}), done: make(chan struct{})}
	m.conns[c.localID] = c
	return c
}

// QP returns the connection's queue pair.
func (c *Conn) QP() *transport.QP { return c.qp }

// PrivateData returns the private data the peer sent with its REQ (after
// the IP CM header) or its REP.
func (c *Conn) PrivateData() []byte { return c.privateData }

// RemoteAddr returns the peer's IP address and, when its REQ carried the
// RDMA IP CM header, its rdma_cm port.
func (c *Conn) RemoteAddr() netip.AddrPort {
	if c.remote.IsValid() {
		return c.remote
	}
	return netip.AddrPortFrom(c.peer, 0)
}

// RemoteQPN returns the peer's QP number.
func (c *Conn) RemoteQPN() uint32 {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	return c.remoteQPN
}

// Done is closed when the connection is released: by Disconnect, by the
// peer's DREQ or REJ, or by the manager's Close. On the peer's DREQ or REJ
// it is closed before the QP moves to the error state, so a work request
// flushed by the release finds Done closed.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Disconnect releases an established connection: it moves the QP to the
// error state, sends a DREQ and waits for the DREP (or for every retry to
// go unanswered, or for ctx). The QP stays the caller's to close. When ctx
// ends first, the DREQ goes on being resent in the background until its
// DREP or its last retry (MaxRetries): a peer that cannot hear it now (its
// link down for a while) hears it when it can, instead of waiting on a
// connection that is gone.
func (c *Conn) Disconnect(ctx context.Context) error {
	m := c.m
	m.mu.Lock()
	switch c.state {
	case stateClosed, stateDreqSent:
		m.mu.Unlock()
		<-c.done
		return nil
	case stateEstablished:
	default:
		m.mu.Unlock()
		return errors.New("cm: disconnect: connection not established")
	}
	_ = c.qp.Modify(transport.QPAttr{State: transport.StateError})
	h := CMHeader(AttrDREQ, c.tid)
	mad := AppendCM(nil, &h, func(d []byte) {
		DREQ(d).Encode(&DREQFields{LocalCommID: c.localID, RemoteCommID: c.remoteID, RemoteQPN: c.remoteQPN})
	})
	c.state = stateDreqSent
	// After the ACKs the QP sent: a peer whose rdma_cm saw the DREQ
	// first would flush a SEND this side had acknowledged.
	m.sendAfter(c.peer, mad, c.qp)
	c.armLocked(mad, m.retryTimeout(c.peerTime))
	m.mu.Unlock()
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		m.mu.Lock()
		c.lingering = true
		m.mu.Unlock()
		return ctx.Err()
	}
}

// armLocked sends nothing; it starts the retransmission of mad (already
// sent once) every timeout, MaxRetries times.
func (c *Conn) armLocked(mad []byte, timeout time.Duration) {
	c.mad = mad
	c.retriesLeft = c.m.opts.MaxRetries
	c.timeout = timeout
	c.resetTimerLocked(timeout)
}

func (c *Conn) resetTimerLocked(d time.Duration) {
	c.stopTimerLocked()
	gen := c.timerGen
	c.timer = time.AfterFunc(d, func() {
		c.m.mu.Lock()
		defer c.m.mu.Unlock()
		if c.timerGen != gen || c.m.closed {
			return
		}
		c.onTimeoutLocked()
	})
}

func (c *Conn) stopTimerLocked() {
	c.timerGen++
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
}

// onTimeoutLocked resends the pending message, or gives up.
func (c *Conn) onTimeoutLocked() {
	m := c.m
	if c.retriesLeft > 0 {
		c.retriesLeft--
		m.stats.Retransmits.Add(1)
		m.send(c.peer, c.mad)
		c.resetTimerLocked(c.timeout)
		return
	}
	m.stats.Timeouts.Add(1)
	switch c.state {
	case stateReqSent, stateRepSent:
		c.rejectTimeoutLocked()
		if c.active {
			c.finishLocked(&dialError{to: c.remote, err: ErrTimeout})
		} else {
			c.finishLocked(ErrTimeout)
		}
	default:
		c.finishLocked(nil)
	}
}

// rejectTimeoutLocked gives up a handshake that is waiting for the peer
// (REQ or REP sent): it tells the peer with a REJ (timeout) and moves the
// QP to ERR. The caller finishes the connection with its own error.
func (c *Conn) rejectTimeoutLocked() {
	msg := MessageREQ
	if c.state == stateRepSent {
		msg = MessageREP
	}
	h := CMHeader(AttrREJ, c.tid)
	c.m.send(c.peer, AppendCM(nil, &h, func(d []byte) {
		REJ(d).Encode(&REJFields{LocalCommID: c.localID, RemoteCommID: c.remoteID, MessageRejected: msg, Reason: RejectTimeout})
	}))
	c.qpErrorLocked()
}

func (c *Conn) qpErrorLocked() {
	if c.qp != nil {
		_ = c.qp.Modify(transport.QPAttr{State: transport.StateError})
	}
}

// finishLocked releases the connection; err is the handshake's outcome if
// it had not ended yet.
func (c *Conn) finishLocked(err error) {
	if c.state == stateClosed {
		return
	}
	c.stopTimerLocked()
	select {
	case <-c.established:
	default:
		if err == nil {
			err = errDisconnected
		}
		c.err = err
		close(c.established)
	}
	c.state = stateClosed
	close(c.done)
	m := c.m
	if m.conns[c.localID] == c {
		delete(m.conns, c.localID)
	}
	if m.remote[c.key] == c {
		delete(m.remote, c.key)
	}
}

// establishLocked ends the handshake well.
func (c *Conn) establishLocked() {
	c.state = stateEstablished
	close(c.established)
}

// wait waits for the handshake to end, or for ctx: then the connection is
// abandoned with a REJ to the peer.
func (c *Conn) wait(ctx context.Context) (*Conn, error) {
	select {
	case <-c.established:
	case <-ctx.Done():
		m := c.m
		m.mu.Lock()
		if c.state == stateReqSent || c.state == stateRepSent {
			c.rejectTimeoutLocked()
			c.finishLocked(ctx.Err())
		}
		m.mu.Unlock()
	}
	<-c.established
	if c.err != nil {
		return nil, c.err
	}
	return c, nil
}

// Handlers of the messages that concern an existing connection. Each finds
// the connection by the message's Remote Communication ID (ours).

func (m *Manager) onRTULocked(r RTU) {
	f := r.Fields()
	c := m.conns[f.RemoteCommID]
	if c == nil || c.remoteID != f.LocalCommID || c.state != stateRepSent {
		m.stats.RxUnknown.Add(1)
		return
	}
	c.stopTimerLocked()
	c.establishLocked()
}

func (m *Manager) onMRALocked(r MRA) {
	f := r.Fields()
	c := m.conns[f.RemoteCommID]
	if c == nil {
		m.stats.RxUnknown.Add(1)
		return
	}
	if (c.state == stateRepSent && f.MessageMRAed == MessageREP) || (c.state == stateReqSent && f.MessageMRAed == MessageREQ) {
		// The peer needs ServiceTimeout more: wait that long before the
		// next retry (IBA 12.6.6).
		c.resetTimerLocked(cmTimeout(f.ServiceTimeout) + c.timeout)
	}
}

func (m *Manager) onREJLocked(r REJ) {
	f := r.Fields()
	c := m.conns[f.RemoteCommID]
	if c == nil || (c.remoteID != 0 && c.remoteID != f.LocalCommID) {
		m.stats.RxUnknown.Add(1)
		return
	}
	var err error = &RejectError{Reason: f.Reason, PrivateData: append([]byte(nil), f.PrivateData...)}
	if c.active {
		err = &dialError{to: c.remote, err: err}
	}
	// The QP goes to ERR before Dial (or Accept) returns the REJ, so their
	// caller never sees it in the state the handshake left it.
	c.qpErrorLocked()
	c.finishLocked(err)
}

func (m *Manager) onDREQLocked(tid uint64, r DREQ, peer netip.Addr) {
	f := r.Fields()
	c := m.conns[f.RemoteCommID]
	h := CMHeader(AttrDREP, tid)
	drep := AppendCM(nil, &h, func(d []byte) {
		DREP(d).Encode(&DREPFields{LocalCommID: f.RemoteCommID, RemoteCommID: f.LocalCommID})
	})
	if c == nil || c.remoteID != f.LocalCommID {
		// Already released (or never known): answer so the peer can
		// finish (IBA 12.9.7.5, and the kernel's cm_issue_drep).
		m.send(peer, drep)
		return
	}
	switch c.state {
	case stateEstablished, stateDreqSent, stateRepSent:
		if _, queues := m.dev.Queue(); queues > 1 {
			// The QP's packets are read by other receive loops, which
			// may not have handled yet the ACKs the peer sent before
			// this DREQ: the release comes after every loop read what
			// it held, so that it flushes only what the peer did not
			// acknowledge, as one loop would. It takes the manager's
			// lock on a goroutine of its own: the loops never wait on
			// it, and neither does a device that runs it at once.
			m.dev.AfterAllReceived(func() {
				go func() {
					m.mu.Lock()
					defer m.mu.Unlock()
					m.releaseLocked(c, drep)
				}()
			})
			return
		}
		m.releaseLocked(c, drep)
	}
}

// releaseLocked releases c on its peer's DREQ, flushes its QP's work and
// answers the DREP. Done closes before the QP's work is flushed, so a
// flushed completion always finds the connection released.
func (m *Manager) releaseLocked(c *Conn, drep []byte) {
	if m.closed {
		return
	}
	c.finishLocked(nil)
	c.qpErrorLocked()
	m.send(c.peer, drep)
}

func (m *Manager) onDREPLocked(r DREP) {
	f := r.Fields()
	c := m.conns[f.RemoteCommID]
	if c == nil || c.remoteID != f.LocalCommID || c.state != stateDreqSent {
		m.stats.RxUnknown.Add(1)
		return
	}
	c.finishLocked(nil)
}
