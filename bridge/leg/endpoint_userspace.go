package leg

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rbridge/rbridge/bridge/pool"
	"github.com/rbridge/rbridge/bridge/session"

	"github.com/rbridge/rbridge/roce/transport"
)

// UserspaceEndpoint is an Endpoint on rbridge's own RoCEv2 transport: an
// RC QP whose responder hands every request to the session (the QP's
// transport.Target) and acknowledges it only once the session completed
// it, which is what makes completion end to end on this leg.
//
// Create it, connect its QP (QP()) as any transport QP is connected (by
// roce/cm, or by hand), then give it to session.New.
type UserspaceEndpoint struct {
	qp     *transport.QP
	mr     *transport.MR // the pool's arena in the QP's PD
	frames *pool.Frames  // the pool's buffers the device's conn lends, or nil
	scq    *transport.CQ
	rcq    *transport.CQ

	h session.HandlerSlot

	mu     sync.Mutex // guards slots, wrs, closed
	slots  opSlots    // the ops posted, by work request ID
	wrs    []transport.SendWR
	closed bool

	disconnect func() error
	// loop, when the leg busy-polls, calls pollCompletions in place of
	// routineCompletions; unpoll (set under mu) takes it off.
	loop   *SpinLoop
	unpoll func()
	// The loop's alone: its completions' scratch, whether it reported
	// the QP's leaving RTS, whether it stopped (a CQ overflow).
	pollWCs               []transport.WC
	pollLeft, pollStopped bool

	released  <-chan struct{}    // closed once the connection is released (PeerLeft)
	abandon   context.CancelFunc // the QP left RTS (Abandon)
	abandoned context.Context
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
}

var (
	_ session.Endpoint  = (*UserspaceEndpoint)(nil)
	_ transport.Target  = (*UserspaceEndpoint)(nil)
	_ transport.Flusher = (*UserspaceEndpoint)(nil)
)

// UserspaceOptions configures NewUserspaceEndpoint.
type UserspaceOptions struct {
	Device *transport.Device
	PD     *transport.PD
	// MR is the pool's arena registered in PD (local write access is
	// enough: peers never address it).
	MR *transport.MR
	// Frames, when the device's conn lends the pool's buffers it receives
	// into (AF_XDP over the pool, a UDP socket's GRO reads), are those
	// buffers: a request's payload in one is lent to the session, which
	// relays it from there.
	Frames *pool.Frames
	// MaxSend is the send queue's depth (default 256).
	MaxSend int
	// Disconnect, if set, ends the connection first on Close (roce/cm's
	// DREQ).
	Disconnect func() error
	// Loop, when the leg busy-polls (its Device polled by the same
	// loop), takes the send CQ's completions to the session on the
	// loop's thread instead of a goroutine of the endpoint's.
	Loop *SpinLoop
}

// NewUserspaceEndpoint creates the endpoint's QP (in RESET).
func NewUserspaceEndpoint(o UserspaceOptions) (*UserspaceEndpoint, error) {
	if o.Device == nil || o.PD == nil || o.MR == nil {
		return nil, errors.New("bridge: userspace endpoint: a device, a PD and the pool's MR are required")
	}
	if o.MaxSend <= 0 {
		o.MaxSend = 256
	}
	e := &UserspaceEndpoint{mr: o.MR, frames: o.Frames, disconnect: o.Disconnect, scq: transport.NewCQ(o.MaxSend + 16), rcq: transport.NewCQ(16),
		slots: newOpSlots(o.MaxSend), loop: o.Loop}
	qp, err := o.Device.CreateQP(o.PD, transport.QPInitAttr{Type: transport.RC, SendCQ: e.scq, RecvCQ: e.rcq,
		MaxSendWR: o.MaxSend, MaxRecvWR: 1, Target: e})
	if err != nil {
		return nil, fmt.Errorf("bridge: userspace endpoint: %w", err)
	}
	e.qp = qp
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.abandoned, e.abandon = context.WithCancel(e.ctx)
	return e, nil
}

// QP returns the endpoint's queue pair, to connect.
func (e *UserspaceEndpoint) QP() *transport.QP { return e.qp }

// SetDisconnect sets what Close calls first to end the connection (for a
// connection made after the endpoint).
func (e *UserspaceEndpoint) SetDisconnect(f func() error) {
	e.mu.Lock()
	e.disconnect = f
	e.mu.Unlock()
}

// Start implements Endpoint. The completions of ops posted before it (a
// session posts on one endpoint as soon as the other started) wait in
// the send CQ until it: they reach h. h takes them even when Start
// fails, so that what was posted still completes through it.
func (e *UserspaceEndpoint) Start(h session.Handler) error {
	if !e.h.Set(h) {
		return errors.New("bridge: userspace endpoint started twice")
	}
	// A request that came before the session was held: its requester is
	// asked for it again now (a peer may WRITE as soon as it is
	// connected, before the gateway's other connection is: LIO's SRP
	// target does, to learn the channel is up).
	e.qp.Resume()
	e.mu.Lock()
	switch {
	case e.closed:
	case e.loop != nil:
		e.pollWCs = make([]transport.WC, 64)
		e.unpoll = e.loop.Add(e.pollCompletions) // does not wait for the loop
	default:
		e.wg.Add(1)
		go e.routineCompletions(e.ctx, e.abandoned)
	}
	e.mu.Unlock()
	if s := e.qp.State(); s != transport.StateRTS {
		return fmt.Errorf("bridge: userspace endpoint QP %#x is in %v, not RTS", e.qp.QPN(), s)
	}
	return nil
}

// Limits implements Endpoint.
func (e *UserspaceEndpoint) Limits() session.Limits {
	a := e.qp.Query()
	rd := a.MaxRdAtomic
	if rd <= 0 {
		rd = 16
	}
	return session.Limits{MaxSend: e.slots.size(), MaxRdAtomic: rd, MTU: a.PathMTU}
}

// Request implements transport.Target: the session's, once started.
func (e *UserspaceEndpoint) Request(r *transport.Request) transport.Reply {
	h := e.h.Get()
	if h == nil {
		// Not started: Start asks the requester for it again (Resume).
		return transport.Reply{Result: transport.Hold}
	}
	var buf *pool.Buf
	if r.Lent && e.frames != nil {
		buf, _ = e.frames.Buf(r.Frame)
	}
	return h.Request(r, buf)
}

// Flush implements transport.Flusher.
func (e *UserspaceEndpoint) Flush() {
	if h := e.h.Get(); h != nil {
		h.Flush()
	}
}

// Abandon implements transport.Target: the QP left RTS. It runs under the
// QP's lock; the completion goroutine tells the session.
func (e *UserspaceEndpoint) Abandon() {
	e.abandon()
}

// Complete implements Endpoint.
func (e *UserspaceEndpoint) Complete(tok transport.Token, c transport.Completion) error {
	return e.qp.Complete(tok, c)
}

// Post implements Endpoint.
func (e *UserspaceEndpoint) Post(ops []*session.Op) (int, error) {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return 0, fmt.Errorf("bridge: post on QP %#x: %w", e.qp.QPN(), session.ErrEndpointFailed)
	}
	if len(ops) > e.slots.available() {
		e.mu.Unlock()
		return 0, fmt.Errorf("bridge: post %d ops on QP %#x: %d slots free", len(ops), e.qp.QPN(), e.slots.available())
	}
	e.wrs = e.wrs[:0]
	for _, op := range ops {
		if len(op.Frags) > 0 { // Limits.MaxSGE is 1: the session never gathers for it
			e.mu.Unlock()
			return 0, fmt.Errorf("bridge: post on QP %#x: a %v gathered from %d pieces (the transport takes one)", e.qp.QPN(), op.Opcode, len(op.Frags))
		}
	}
	for _, op := range ops {
		id := e.slots.Take(op)
		wr := transport.SendWR{ID: uint64(id), Opcode: op.Opcode, Remote: op.Remote, RKey: op.RKey, Imm: op.Imm,
			InvRKey: op.InvRKey, Compare: op.Compare, SwapAdd: op.SwapAdd, Signaled: true}
		if op.Len > 0 {
			wr.Local = transport.SGE{MR: e.mr, Offset: op.Buf.Offset() + op.Off, Length: op.Len}
		}
		e.wrs = append(e.wrs, wr)
	}
	err := e.qp.PostSend(e.wrs...)
	if err != nil {
		for _, wr := range e.wrs {
			e.slots.done(wr.ID)
		}
	}
	clear(e.wrs)
	e.mu.Unlock()
	if err != nil {
		return 0, fmt.Errorf("bridge: %w", err) // the transport posts all or none
	}
	return len(ops), nil
}

// routineCompletions reports the send CQ's completions as Done, and the
// QP's failure (Abandon) as Failed.
func (e *UserspaceEndpoint) routineCompletions(ctx, abandoned context.Context) {
	defer e.wg.Done()
	wcs := make([]transport.WC, 64)
	waitCtx := abandoned
	for {
		n := e.scq.Poll(wcs)
		if n == 0 {
			if ctx.Err() != nil {
				return
			}
			if waitCtx == abandoned && abandoned.Err() != nil {
				if err := e.leftRTS(); err != nil {
					e.report(err)
				}
				waitCtx = ctx
				continue
			}
			if err := e.scq.Wait(waitCtx); errors.Is(err, transport.ErrCQOverflow) {
				e.report(err)
				return
			}
			continue
		}
		e.done(wcs[:n])
	}
}

// pollCompletions is routineCompletions' round on a busy-polled leg, on
// the loop's thread: the send CQ's completions to the session, then,
// once none is left, the QP's leaving RTS (reported on a goroutine:
// telling a disconnect from an error may wait), or a CQ overflow. It
// reports whether it handed on any completion.
func (e *UserspaceEndpoint) pollCompletions() bool {
	if e.pollStopped {
		return false
	}
	if n := e.scq.Poll(e.pollWCs); n > 0 {
		e.done(e.pollWCs[:n])
		return true
	}
	if e.scq.Overflowed() {
		e.pollStopped = true
		e.report(transport.ErrCQOverflow)
		return false
	}
	if !e.pollLeft {
		select {
		case <-e.abandoned.Done():
			if e.ctx.Err() == nil { // abandoned, not closed
				e.pollLeft = true
				e.wg.Add(1)
				go func() {
					defer e.wg.Done()
					if err := e.leftRTS(); err != nil {
						e.report(err)
					}
				}()
			}
		default:
		}
	}
	return false
}

// leftRTS says why the QP left RTS: nil when the endpoint's own Close
// moved it (its disconnect, which waits for the DREP after); the peer's
// disconnect when its connection is released within a moment (a DREQ
// releases it before the QP's error reaches the endpoint; a transport
// error leaves it established), else a QP error.
func (e *UserspaceEndpoint) leftRTS() error {
	e.mu.Lock()
	done, closed := e.released, e.closed
	e.mu.Unlock()
	if closed {
		return nil
	}
	if done != nil {
		select {
		case <-done:
			return session.ErrPeerDisconnected
		case <-time.After(100 * time.Millisecond):
		}
	}
	return errors.New("the userspace QP left RTS (a transport error)")
}

// SetReleased sets the channel closed once the endpoint's connection is
// released by its peer's DREQ (or by its own disconnect): PeerLeft, and
// what tells a peer's disconnect from a QP error when the QP leaves RTS.
func (e *UserspaceEndpoint) SetReleased(done <-chan struct{}) {
	e.mu.Lock()
	e.released = done
	e.mu.Unlock()
}

// PeerLeft implements session.PeerLeaver: the connection is released.
// The CM releases it before it flushes the QP's work, so an op flushed by
// a peer's DREQ always finds it so.
func (e *UserspaceEndpoint) PeerLeft() bool {
	e.mu.Lock()
	done := e.released
	e.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// HoldSends implements session.SendHolder.
func (e *UserspaceEndpoint) HoldSends() { e.qp.HoldSends() }

var _ session.Resumer = (*UserspaceEndpoint)(nil)

// Resume implements session.Resumer: the request held for a pool buffer
// is asked for again.
func (e *UserspaceEndpoint) Resume() { e.qp.Resume() }

// ReleaseSends implements session.SendHolder.
func (e *UserspaceEndpoint) ReleaseSends() { e.qp.ReleaseSends() }

// done hands completions to the session.
func (e *UserspaceEndpoint) done(wcs []transport.WC) {
	if b, ok := e.h.Get().(session.DoneBatcher); ok && len(wcs) > 1 {
		b.BeginDone()
		defer b.EndDone()
	}
	for _, wc := range wcs {
		e.mu.Lock()
		op := e.slots.done(wc.ID)
		e.mu.Unlock()
		if op == nil {
			continue
		}
		op.Status = wc.Status
		if (op.Opcode == transport.OpCompareSwap || op.Opcode == transport.OpFetchAdd) && wc.Status == transport.StatusSuccess {
			op.Orig = binary.LittleEndian.Uint64(op.Bytes())
		}
		if h := e.h.Get(); h != nil {
			h.Done(op)
		}
	}
}

func (e *UserspaceEndpoint) report(err error) {
	if h := e.h.Get(); h != nil {
		h.Failed(fmt.Errorf("bridge: QP %#x: %w", e.qp.QPN(), err))
	}
}

// Close implements Endpoint: the QP is closed, every op posted completes
// (flushed) through Done, and the completion goroutine ends.
func (e *UserspaceEndpoint) Close() error {
	e.closeOnce.Do(func() {
		e.mu.Lock()
		e.closed = true
		d := e.disconnect
		e.mu.Unlock()
		if d != nil {
			_ = d()
		}
		_ = e.qp.Close() // flushes every WQE into the CQ
		e.cancel()
		e.mu.Lock()
		unpoll := e.unpoll
		e.mu.Unlock()
		if unpoll != nil {
			unpoll() // the loop polls it no more
		}
		e.wg.Wait()
		// What the goroutine had not taken yet.
		wcs := make([]transport.WC, 64)
		for n := e.scq.Poll(wcs); n > 0; n = e.scq.Poll(wcs) {
			e.done(wcs[:n])
		}
	})
	return nil
}
