package leg

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rbridge/rbridge/bridge/pool"
	"github.com/rbridge/rbridge/bridge/session"

	"github.com/rbridge/rbridge/ibv"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/transport"
)

// VerbsEndpoint is an Endpoint on a libibverbs RC QP: an InfiniBand HCA, a
// RoCE HCA, rxe, or siw (iWARP: SEND, WRITE, READ and SEND_WITH_INV only;
// the rest is refused when posted).
//
// The HCA acknowledges a SEND as it lands in a posted receive, before the
// session relayed it: on this leg completion is not end to end. What holds
// instead: receives are posted only as the pool has buffers for them (a
// slow far side makes the sender see RNR, never loss), and when the far
// side fails a SEND the HCA already acknowledged, the session ends with an
// error on both connections and the loss is counted (Stats.LostAcked).
// The pool is registered for local access only, so a one-sided operation
// the peer aims at the gateway fails at the peer with a remote access
// error and never touches a buffer, unless it names staging the session
// exposed for the request it belongs to (Expose, on a route with a
// protocol: endpoint_verbs_expose.go).
type VerbsEndpoint struct {
	qp         *ibv.QP
	cq         *ibv.CQ
	mr         *ibv.MR
	pool       *pool.Pool
	recvSize   int
	disconnect func() error
	iwarp      bool
	maxSGE     int // SGEs per send work request (the QP's cap)
	// windows says exposures are type 2 windows bound on the QP
	// (endpoint_verbs_expose.go); windowSlots counts those bound, done
	// closes when the endpoint closed.
	windows     bool
	windowSlots chan struct{}
	mrs         *stagingMRs // the device's idle staging registrations; nil: one per exposure
	ownPD       *ibv.PD     // the QP's PD when it is the connection's own (VerbsOptions.OwnPD)
	done        chan struct{}
	// loop, when the leg busy-polls, calls pollCQ in place of
	// routineCompletions; pollWCs and pollStopped are the loop's alone.
	loop        *SpinLoop
	pollWCs     []ibv.WorkCompletion
	pollStopped bool

	h session.HandlerSlot

	mu       sync.Mutex // guards the fields below
	slots    opSlots    // send work requests by ID
	sges     []ibv.SGE  // maxSGE per send slot
	wrs      []ibv.SendWR
	recvBufs []*pool.Buf // by receive ID; nil when the slot is free
	recvFree []uint32
	recvSGEs []ibv.SGE
	rwrs     []ibv.RecvWR
	posted   int // receives posted
	closing  bool
	// handing counts received SENDs taken off the CQ (no longer posted)
	// and not yet handed to the session; peerGone says the peer
	// disconnected (PeerDisconnected): once neither a receive is posted
	// nor one is being handed, the endpoint is drained.
	handing  int
	peerGone bool
	// local are the window work requests posted and not completed, by
	// ID (localBit clear), with what takes their completion.
	local     map[uint64]func(ibv.WCStatus)
	localNext uint64
	early     error // a failure reported before Start
	// unwatch, if set, stops the device's events for the QP (Close).
	unwatch func()
	// unpoll, on a busy-polled leg, takes the endpoint off the loop.
	unpoll    func()
	drained   chan struct{} // closed once the receive queue flushed (drainOnce)
	drainOnce sync.Once
	stats     *VerbsStats
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// VerbsStats counts what a verbs endpoint could not relay.
type VerbsStats struct {
	// LostAcked counts SENDs the HCA acknowledged that the far side then
	// failed: the session ended for each.
	LostAcked atomic.Uint64
	// RecvStarved counts times a receive could not be posted for want of
	// a pool buffer (the peer sees RNR meanwhile).
	RecvStarved atomic.Uint64
	// Exposed and Revoked count staging registrations made for the peer
	// and ended (Expose): the difference is what it may reach now.
	Exposed, Revoked atomic.Uint64
	// Registered counts memory registrations made for staging: one per
	// exposure, less those that took an idle one again (stagingMRs).
	Registered atomic.Uint64
	// OwnPDs counts connections given a protection domain of their own
	// for staging (a device without memory windows: verbsLeg.scope).
	OwnPDs atomic.Uint64
	// QPErrors counts QPs the HCA moved to the error state and said why
	// (an asynchronous event: a peer's request failed at the gateway).
	QPErrors atomic.Uint64
}

// VerbsStatsSnapshot is VerbsStats read at one moment, as plain values.
type VerbsStatsSnapshot struct {
	LostAcked, RecvStarved uint64
	Exposed, Revoked       uint64
	Registered, OwnPDs     uint64
	QPErrors               uint64
}

// Snapshot reads every counter.
func (s *VerbsStats) Snapshot() VerbsStatsSnapshot {
	return VerbsStatsSnapshot{LostAcked: s.LostAcked.Load(), RecvStarved: s.RecvStarved.Load(), Exposed: s.Exposed.Load(), Revoked: s.Revoked.Load(), Registered: s.Registered.Load(), OwnPDs: s.OwnPDs.Load(), QPErrors: s.QPErrors.Load()}
}

var (
	_ session.Drainer       = (*VerbsEndpoint)(nil)
	_ session.StartNotifier = (*VerbsEndpoint)(nil)
)

// recvBit marks the work request IDs of receives.
const recvBit = 1 << 63

// The receives a verbs endpoint keeps posted, and their size, when its
// options do not say.
const (
	defaultEndpointReceives    = 16
	defaultEndpointReceiveSize = 64 << 10
)

// VerbsOptions configures NewVerbsEndpoint.
type VerbsOptions struct {
	// QP is a connected RC QP (in RTS) whose send and receive CQ is CQ.
	// The endpoint owns both from here: Close destroys them.
	QP *ibv.QP
	CQ *ibv.CQ
	// MR is the pool's arena registered in the QP's PD with local access
	// only (remote rights are refused: the peer never addresses it).
	MR   *ibv.MR
	Pool *pool.Pool
	// RecvSize is the largest SEND the peer may send (default 64 KiB; a
	// pool class must hold it). RecvDepth receives stay posted (default
	// 16, at most the QP's receive queue): the credit of the peer's SENDs.
	RecvSize  int
	RecvDepth int
	// Disconnect, if set, ends the connection first on Close (rdma_cm).
	Disconnect func() error
	// IWARP says the device is iWARP (siw): no immediate data, no atomics.
	IWARP bool
	// Stats, if set, is where the endpoint counts (a leg's, shared by its
	// endpoints); else it counts in its own.
	Stats *VerbsStats
	// Windows says the device has type 2 memory windows: staging is
	// exposed through windows bound on the QP, for its peer alone
	// (Expose). The QP keeps windowReserve send entries for them.
	Windows bool
	// StagingMRs, with Windows, keeps the registrations windows are bound
	// over for the next exposure of the same memory (the device's, shared
	// by its endpoints); nil registers one per exposure.
	StagingMRs *stagingMRs
	// OwnPD, if set, is the QP's protection domain, made for this
	// connection alone (verbsLeg.scope): Close frees it after the QP, and
	// with it MR and every exposure still registered in it.
	OwnPD *ibv.PD
	// Loop, when the leg busy-polls, polls CQ (made without a completion
	// channel: ibv.CQOptions.BusyPoll) and hands its completions to the
	// session on the loop's thread, instead of a goroutine of the
	// endpoint's that sleeps on the channel.
	Loop *SpinLoop
}

// NewVerbsEndpoint wraps a connected QP and posts its receives.
func NewVerbsEndpoint(o VerbsOptions) (*VerbsEndpoint, error) {
	switch {
	case o.QP == nil || o.CQ == nil || o.MR == nil || o.Pool == nil:
		return nil, errors.New("bridge: verbs endpoint: a QP, its CQ, the pool and its MR are required")
	case o.MR.Access()&^ibv.AccessLocalWrite != 0:
		return nil, fmt.Errorf("bridge: verbs endpoint: the pool's MR grants %v: it must be local write only, so peers cannot address gateway memory", o.MR.Access())
	}
	if o.RecvSize <= 0 {
		o.RecvSize = defaultEndpointReceiveSize
	}
	cp := o.QP.Cap()
	if o.RecvDepth <= 0 {
		o.RecvDepth = defaultEndpointReceives
	}
	o.RecvDepth = min(o.RecvDepth, int(cp.MaxRecvWR))
	if err := o.Pool.Holds(o.RecvSize); err != nil {
		return nil, fmt.Errorf("bridge: verbs endpoint: receive size: %w", err)
	}
	sendWRs := int(cp.MaxSendWR)
	if o.Windows {
		if sendWRs <= windowReserve {
			return nil, fmt.Errorf("bridge: verbs endpoint: a send queue of %d entries keeps none for windows (%d)", sendWRs, windowReserve)
		}
		sendWRs -= windowReserve
	}
	e := &VerbsEndpoint{drained: make(chan struct{}), qp: o.QP, cq: o.CQ, mr: o.MR, pool: o.Pool, recvSize: o.RecvSize, disconnect: o.Disconnect, iwarp: o.IWARP,
		windows: o.Windows, mrs: o.StagingMRs, ownPD: o.OwnPD, loop: o.Loop, windowSlots: make(chan struct{}, windowReserve), done: make(chan struct{}), local: map[uint64]func(ibv.WCStatus){},
		slots: newOpSlots(sendWRs), maxSGE: max(int(cp.MaxSendSGE), 1), sges: make([]ibv.SGE, int(cp.MaxSendWR)*max(int(cp.MaxSendSGE), 1)),
		recvBufs: make([]*pool.Buf, o.RecvDepth), recvFree: make([]uint32, o.RecvDepth), recvSGEs: make([]ibv.SGE, o.RecvDepth)}
	if e.stats = o.Stats; e.stats == nil {
		e.stats = &VerbsStats{}
	}
	for i := range e.recvFree {
		e.recvFree[i] = uint32(len(e.recvFree) - 1 - i)
	}
	e.mu.Lock()
	err := e.postRecvsLocked()
	e.mu.Unlock()
	if err != nil {
		e.releaseRecvs()
		return nil, fmt.Errorf("bridge: verbs endpoint: %w", err)
	}
	return e, nil
}

// Stats returns the counters the endpoint counts in (VerbsOptions.Stats).
func (e *VerbsEndpoint) Stats() *VerbsStats { return e.stats }

// Start implements Endpoint.
func (e *VerbsEndpoint) Start(h session.Handler) error {
	if !e.h.Set(h) {
		return errors.New("bridge: verbs endpoint started twice")
	}
	if e.loop != nil {
		e.mu.Lock()
		if !e.closing {
			e.pollWCs = make([]ibv.WorkCompletion, 64)
			e.unpoll = e.loop.Add(e.pollCQ) // does not wait for the loop
		}
		e.mu.Unlock()
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	e.wg.Add(1)
	go e.routineCompletions(ctx)
	return nil
}

// Started implements StartNotifier: the session, once both its endpoints
// started, learns of a failure reported before (a client that
// disconnected before its connection was handed over).
func (e *VerbsEndpoint) Started() {
	e.mu.Lock()
	early := e.early
	e.mu.Unlock()
	if h := e.h.Get(); h != nil && early != nil {
		h.Failed(early)
	}
}

// Limits implements Endpoint.
func (e *VerbsEndpoint) Limits() session.Limits {
	l := session.Limits{MaxSend: e.slots.size(), MaxRdAtomic: 1, MTU: 1024, MaxSGE: e.maxSGE, NoProbe: e.iwarp}
	if a, err := e.qp.Query(); err == nil {
		l.MaxRdAtomic = max(int(a.MaxRdAtomic), 1)
		if a.PathMTU.Valid() {
			l.MTU = a.PathMTU.Bytes()
		}
	}
	return l
}

// postRecvsLocked posts a receive into every free receive slot the pool
// has a buffer for.
func (e *VerbsEndpoint) postRecvsLocked() error {
	if e.closing {
		return nil
	}
	e.rwrs = e.rwrs[:0]
	for len(e.recvFree) > 0 {
		b, err := e.pool.Get(e.recvSize)
		if err != nil {
			if errors.Is(err, pool.ErrExhausted) {
				e.stats.RecvStarved.Add(1)
				break // posted again as buffers come back
			}
			return err
		}
		id := e.recvFree[len(e.recvFree)-1]
		e.recvFree = e.recvFree[:len(e.recvFree)-1]
		e.recvBufs[id] = b
		e.recvSGEs[id] = ibv.SGE{Addr: e.mr.Addr() + uint64(b.Offset()), Length: uint32(e.recvSize), LKey: e.mr.LKey()}
		e.rwrs = append(e.rwrs, ibv.RecvWR{ID: recvBit | uint64(id), SGEs: e.recvSGEs[id : id+1]})
	}
	if len(e.rwrs) == 0 {
		return nil
	}
	n, err := e.qp.PostRecv(e.rwrs)
	e.posted += n
	for _, w := range e.rwrs[n:] {
		id := uint32(w.ID &^ recvBit)
		e.recvBufs[id].Release()
		e.recvBufs[id] = nil
		e.recvFree = append(e.recvFree, id)
	}
	clear(e.rwrs)
	return err
}

// Post implements Endpoint.
func (e *VerbsEndpoint) Post(ops []*session.Op) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closing {
		return 0, fmt.Errorf("bridge: post on verbs QP %d: %w", e.qp.QPN(), session.ErrEndpointFailed)
	}
	if len(ops) > e.slots.available() {
		return 0, fmt.Errorf("bridge: post %d ops on verbs QP %d: %d slots free", len(ops), e.qp.QPN(), e.slots.available())
	}
	e.wrs = e.wrs[:0]
	var refused error
	for _, op := range ops {
		vop, ok := verbsOpcode(op.Opcode)
		if !ok || e.iwarp && op.Opcode != transport.OpSend && op.Opcode != transport.OpWrite && op.Opcode != transport.OpRead && op.Opcode != transport.OpSendWithInv {
			break // refused below, with the ops after it
		}
		if len(op.Frags) > e.maxSGE {
			refused = fmt.Errorf("bridge: verbs QP %d: %v gathered from %d pieces, the QP takes %d", e.qp.QPN(), op.Opcode, len(op.Frags), e.maxSGE)
			break
		}
		id := e.slots.Take(op)
		wr := ibv.SendWR{ID: uint64(id), Op: vop, Flags: ibv.SendSignaled, RemoteAddr: op.Remote, RKey: op.RKey, Imm: op.Imm}
		switch op.Opcode {
		case transport.OpSendWithInv:
			wr.Imm = op.InvRKey
		case transport.OpFetchAdd:
			wr.CompareAdd = op.SwapAdd
		case transport.OpCompareSwap:
			wr.CompareAdd, wr.Swap = op.Compare, op.SwapAdd
		}
		sges := e.sges[int(id)*e.maxSGE : (int(id)+1)*e.maxSGE]
		switch {
		case len(op.Frags) > 0:
			for i, f := range op.Frags {
				sges[i] = ibv.SGE{Addr: e.mr.Addr() + uint64(f.Buf.Offset()+f.Off), Length: uint32(f.Len), LKey: e.mr.LKey()}
			}
			wr.SGEs = sges[:len(op.Frags)]
		case op.Len > 0:
			sges[0] = ibv.SGE{Addr: e.mr.Addr() + uint64(op.Buf.Offset()+op.Off), Length: uint32(op.Len), LKey: e.mr.LKey()}
			wr.SGEs = sges[:1]
		}
		e.wrs = append(e.wrs, wr)
	}
	n, err := e.qp.PostSend(e.wrs)
	for _, w := range e.wrs[n:] {
		e.slots.done(w.ID)
	}
	clear(e.wrs)
	if err == nil && n < len(ops) {
		err = refused
		if err == nil {
			err = fmt.Errorf("bridge: verbs QP %d cannot post %v: %w", e.qp.QPN(), ops[n].Opcode, ErrNotSupported)
		}
	}
	return n, err
}

// ErrNotSupported matches an operation an endpoint's device cannot do:
// roce.ErrNotSupported, the project's one sentinel.
var ErrNotSupported = roce.ErrNotSupported

// Complete implements Endpoint: the session finished relaying a received
// SEND. Its receive buffer goes back and another receive is posted.
func (e *VerbsEndpoint) Complete(tok transport.Token, c transport.Completion) error {
	id := tok.ID()
	e.mu.Lock()
	if int(id) >= len(e.recvBufs) || e.recvBufs[id] == nil {
		e.mu.Unlock()
		return fmt.Errorf("bridge: verbs QP %d: receive %d: %w", e.qp.QPN(), id, transport.ErrStaleToken)
	}
	e.recvBufs[id].Release()
	e.recvBufs[id] = nil
	e.recvFree = append(e.recvFree, id)
	err := e.postRecvsLocked()
	e.mu.Unlock()
	if c.Status != transport.StatusSuccess {
		e.stats.LostAcked.Add(1)
		e.report(fmt.Errorf("a SEND the HCA acknowledged failed on the far side (%v): the sender was told it arrived, so the connection ends", c.Status))
		return nil
	}
	if err != nil {
		e.report(fmt.Errorf("post receives: %w", err))
	}
	return nil
}

// PeerDisconnected takes rdma_cm's DISCONNECTED for the endpoint's
// connection: the session learns that the peer left, and the QP moves to
// the error state, as the peer's did before its DREQ and as
// rdma_disconnect does. Nothing more can arrive, and the receives' flush
// comes after every SEND the HCA acknowledged: its completion tells the
// session all of them were handed over (Drained), so the session relays
// them and ends at once, rather than keep a connection whose peer is gone
// until its drain's timeout. With no receive posted it is drained at
// once, or once the one being handed over was (received). The DREP goes
// when the session closes the endpoint (its disconnect).
func (e *VerbsEndpoint) PeerDisconnected() {
	e.mu.Lock()
	e.peerGone = true
	none := e.posted == 0 && e.handing == 0
	e.mu.Unlock()
	if none {
		e.markDrained()
	}
	e.report(session.ErrPeerDisconnected)
	_ = e.qp.ToErr()
}

// Drained implements Drainer: it is closed once the QP's
// receive queue flushed (its connection ended), so every SEND the HCA
// acknowledged has been handed to the session, which relays them before
// it ends.
func (e *VerbsEndpoint) Drained() <-chan struct{} { return e.drained }

func (e *VerbsEndpoint) markDrained() { e.drainOnce.Do(func() { close(e.drained) }) }

func (e *VerbsEndpoint) report(err error) {
	err = fmt.Errorf("bridge: verbs QP %d: %w", e.qp.QPN(), err)
	if h := e.h.Get(); h != nil {
		h.Failed(err)
		return
	}
	e.mu.Lock()
	if e.early == nil {
		e.early = err // the session hears of it when it starts
	}
	e.mu.Unlock()
}

// asyncEvent takes the device's asynchronous event for the QP: one that
// moved the QP to the error state ends the session with its reason, which
// the work requests flushed after it do not carry.
func (e *VerbsEndpoint) asyncEvent(ev ibv.AsyncEvent) {
	e.mu.Lock()
	closing := e.closing
	e.mu.Unlock()
	if err := asyncFailure(ev.Type); err != nil && !closing {
		e.stats.QPErrors.Add(1)
		e.report(err)
	}
}

// routineCompletions hands received SENDs to the session and reports
// send completions, batch by batch.
func (e *VerbsEndpoint) routineCompletions(ctx context.Context) {
	defer e.wg.Done()
	wcs := make([]ibv.WorkCompletion, 64)
	h := e.h.Get()
	for {
		n, err := e.cq.Wait(ctx, wcs)
		if err != nil {
			if ctx.Err() == nil {
				e.report(fmt.Errorf("wait for completions: %w", err))
			}
			return
		}
		e.handle(h, wcs[:n])
		h.Flush()
	}
}

// pollCQ is routineCompletions' round on a busy-polled leg, on the loop's
// thread: the CQ polled without waiting, its completions to the session.
func (e *VerbsEndpoint) pollCQ() bool {
	if e.pollStopped {
		return false
	}
	n, err := e.cq.Poll(e.pollWCs)
	if err != nil {
		e.pollStopped = true
		e.report(fmt.Errorf("poll completions: %w", err))
		return false
	}
	if n == 0 {
		return false
	}
	h := e.h.Get()
	e.handle(h, e.pollWCs[:n])
	h.Flush()
	return true
}

func (e *VerbsEndpoint) handle(h session.Handler, wcs []ibv.WorkCompletion) {
	for i := range wcs {
		wc := &wcs[i]
		if wc.ID&recvBit != 0 {
			e.received(h, wc)
			continue
		}
		if wc.ID&localBit != 0 {
			e.localDone(wc)
			continue
		}
		e.mu.Lock()
		op := e.slots.done(wc.ID)
		e.mu.Unlock()
		if op == nil {
			continue
		}
		op.Status = transportStatus(wc.Status)
		if op.Status == transport.StatusSuccess && (op.Opcode == transport.OpCompareSwap || op.Opcode == transport.OpFetchAdd) {
			op.Orig = binary.LittleEndian.Uint64(op.Bytes()) // verbs leaves it in host order
		}
		h.Done(op)
	}
}

// received hands a received SEND to the session.
func (e *VerbsEndpoint) received(h session.Handler, wc *ibv.WorkCompletion) {
	id := uint32(wc.ID &^ recvBit)
	e.mu.Lock()
	e.posted--
	b := e.recvBufs[id]
	closing, peerGone := e.closing, e.peerGone
	if wc.Status != ibv.WCSuccess || closing {
		e.recvBufs[id] = nil
		e.recvFree = append(e.recvFree, id)
	} else {
		e.handing++
	}
	e.mu.Unlock()
	if wc.Status != ibv.WCSuccess || closing {
		b.Release()
		// The QP is in the error state: every receive that completed
		// before this one has been handed over.
		e.markDrained()
		switch {
		case closing:
		case peerGone && wc.Status == ibv.WCWRFlushErr:
			// PeerDisconnected moved the QP: the session was told why.
		case wc.Status == ibv.WCWRFlushErr:
			// The QP entered the error state with nothing of ours
			// failing first: a peer's disconnect (reported as such on
			// its own), a transport error, or the peer's one-sided
			// operation on the gateway's memory, which peers cannot
			// address (their RDMA READ, WRITE or atomic fails with a
			// remote access error and the QP leaves RTS).
			e.report(fmt.Errorf("the QP left RTS with receives posted (%v): the peer disconnected, a transport error, or the peer's one-sided operation on gateway memory, which it cannot address", wc.Status))
		default:
			e.report(fmt.Errorf("receive: %v", wc.Status))
		}
		return
	}
	r := transport.Request{Token: transport.ExternalToken(id), Op: transport.OpSend, First: true, Last: true,
		Payload: b.B()[:wc.ByteLen]}
	switch {
	case wc.Flags&ibv.WCFlagWithInv != 0:
		r.Op, r.InvRKey = transport.OpSendWithInv, wc.Imm
	case wc.Opcode == ibv.WCRecvRDMAWithImm:
		// A zero-length WRITE_WITH_IMM (one with data fails at the peer:
		// the pool grants no remote write): its immediate crosses.
		r.Op, r.Imm, r.Payload = transport.OpWriteWithImm, wc.Imm, nil
	case wc.Flags&ibv.WCFlagWithImm != 0:
		r.Op, r.Imm = transport.OpSendWithImm, wc.Imm
	}
	reply := h.Request(&r, b)
	e.mu.Lock()
	e.handing--
	drained := e.peerGone && e.posted == 0 && e.handing == 0
	e.mu.Unlock()
	if drained { // the connection ended with no receive left to flush
		e.markDrained()
	}
	switch reply.Result {
	case transport.Pending:
	case transport.Done:
		_ = e.Complete(r.Token, transport.Completion{})
	default:
		// The HCA acknowledged it; the session cannot take it.
		_ = e.Complete(r.Token, transport.Completion{Status: transport.StatusRemOpErr})
	}
}

// Close implements Endpoint: the QP is moved to the error state, every
// posted work request flushes through Done, then the QP and CQ are
// destroyed and the receive buffers return to the pool.
func (e *VerbsEndpoint) Close() error {
	e.closeOnce.Do(func() {
		e.mu.Lock()
		e.closing = true
		e.mu.Unlock()
		defer e.markDrained()
		if e.disconnect != nil {
			_ = e.disconnect()
		}
		err := e.qp.ToErr()
		if h := e.h.Get(); h != nil && err == nil {
			// The completion goroutine reports the flushed work.
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && e.outstanding() > 0; {
				time.Sleep(time.Millisecond)
			}
		}
		if e.cancel != nil {
			e.cancel()
			e.wg.Wait()
		}
		e.mu.Lock()
		unpoll := e.unpoll
		e.mu.Unlock()
		if unpoll != nil {
			unpoll() // the loop polls it no more: the CQ may go
		}
		// Whatever did not flush (no goroutine, or a device that stopped
		// answering) completes here.
		h := e.h.Get()
		e.mu.Lock()
		var lost []*session.Op
		for id := range e.slots.size() {
			if op := e.slots.done(uint64(id)); op != nil {
				op.Status = transport.StatusWRFlushErr
				lost = append(lost, op)
			}
		}
		e.mu.Unlock()
		for _, op := range lost {
			if h != nil {
				h.Done(op)
			}
		}
		e.mu.Lock()
		local := e.local
		e.local = map[uint64]func(ibv.WCStatus){}
		e.mu.Unlock()
		for _, done := range local {
			done(ibv.WCWRFlushErr)
		}
		close(e.done)
		if e.unwatch != nil {
			e.unwatch()
		}
		e.closeErr = errors.Join(e.qp.Close(), e.cq.Close(), e.ownPD.Close())
		e.releaseRecvs()
	})
	return e.closeErr
}

// outstanding counts posted work not completed.
func (e *VerbsEndpoint) outstanding() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.slots.size() - e.slots.available() + e.posted
}

// releaseRecvs returns every receive buffer to the pool.
func (e *VerbsEndpoint) releaseRecvs() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for id, b := range e.recvBufs {
		if b != nil {
			b.Release()
			e.recvBufs[id] = nil
		}
	}
	e.posted = 0
}
