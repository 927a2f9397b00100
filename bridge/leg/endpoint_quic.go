package leg

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rbridge/rbridge/bridge/pool"
	"github.com/rbridge/rbridge/bridge/session"

	"github.com/quic-go/quic-go"

	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/tunnel"
)

// A QUICEndpoint is one end of a session carried to another rbridge
// gateway over a QUIC stream (package tunnel's framing): ops posted on it
// become Op frames, which the far gateway hands to its own session as
// requests and answers with a Completion once its far leg completed them;
// Op frames from the far gateway are requests handed to this endpoint's
// session, answered with a Completion when it completes them. So a
// requester on either side is acknowledged only after the operation was
// done on the far side: the end-to-end rule holds across the tunnel.
//
// Flow control: this endpoint posts at most the far side's window of ops
// (Limits.MaxSend: Accept's or Open's MaxOps) before their Completions;
// an Op whose payload finds the pool empty, or that the session refuses
// for lack of credit, waits, and the stream is not read meanwhile, so
// QUIC's flow control holds the far gateway back: backpressure, no drop.
//
// Concurrency: routineRead reads frames and calls the Handler (never with
// mu held); routineWrite writes what Post, Complete and Close queued. mu
// guards the fields under it.
type QUICEndpoint struct {
	str    *quic.Stream
	pool   *pool.Pool
	log    *slog.Logger
	window int // the far side's MaxOps
	name   string

	h       session.HandlerSlot
	started chan struct{} // closed by Start

	mu       sync.Mutex // guards the fields below
	nextID   uint32
	inflight map[uint32]*session.Op // posted, waiting for their Completion
	// doneNext is the id of the oldest op posted and not yet handed back
	// (Done); early holds ops completed ahead of it. The far session
	// completes out of order (it fails a request at once when it ends, while
	// an earlier one is still at its far leg): the session here sees them
	// in post order, as from an RC QP.
	doneNext uint32
	early    map[uint32]*session.Op
	pending  map[uint32]bool // requests handed to the session, waiting for Complete
	// parts are the completed parts of READs completed in parts
	// (Completion.More), held until the last: one Completion frame
	// carries them all.
	parts   map[uint32][]transport.Completion
	outq    []quicOut
	err     error // why the endpoint failed, once it did
	closing bool

	wake      chan struct{} // cap 1: the writer has work
	quit      chan struct{} // closed when the endpoint fails or closes
	quitOnce  sync.Once
	wg        sync.WaitGroup
	closeOnce sync.Once
	stats     *QUICStats
}

// QUICStats counts a QUIC endpoint's frames (or a quic leg's, over its
// sessions); updated atomically.
type QUICStats struct {
	OpsSent, OpsReceived         atomic.Uint64
	BytesSent, BytesReceived     atomic.Uint64 // payload and READ data
	CompletionsSent, Completions atomic.Uint64
	// Waits counts Ops that waited for pool buffers or session credit
	// (the stream was not read meanwhile).
	Waits atomic.Uint64
}

// QUICStatsSnapshot is QUICStats read at one moment.
type QUICStatsSnapshot struct {
	OpsSent, OpsReceived, BytesSent, BytesReceived, CompletionsSent, Completions, Waits uint64
}

// Snapshot reads every counter.
func (s *QUICStats) Snapshot() QUICStatsSnapshot {
	return QUICStatsSnapshot{OpsSent: s.OpsSent.Load(), OpsReceived: s.OpsReceived.Load(), BytesSent: s.BytesSent.Load(),
		BytesReceived: s.BytesReceived.Load(), CompletionsSent: s.CompletionsSent.Load(), Completions: s.Completions.Load(), Waits: s.Waits.Load()}
}

// quicOut is a frame queued for the writer: an op, a completion or the
// end of the session.
type quicOut struct {
	op    *session.Op
	id    uint32
	comp  *transport.Completion
	parts []transport.Completion // a READ's parts, before comp's data
	Close *tunnel.CloseFields
}

// quicWindow is how many Ops an endpoint takes before their Completions:
// its session queues what its far leg cannot take yet, so the bound is
// the pool, whose exhaustion holds the stream (backpressure).
const quicWindow = 256

// QUICOptions configures NewQUICEndpoint.
type QUICOptions struct {
	// Stream is the session's stream, its Open and Accept (or Reject)
	// done: the first byte read or written is the first Op's.
	Stream *quic.Stream
	// Window is the far side's MaxOps (its Open's or Accept's).
	Window int
	// Pool holds the payloads of the Ops that arrive.
	Pool *pool.Pool
	// Name names the endpoint in errors and logs (default "quic stream N").
	Name   string
	Logger *slog.Logger
	// Stats, when set, is where the endpoint counts (a leg's, shared by
	// its sessions); else the endpoint has its own.
	Stats *QUICStats
}

// NewQUICEndpoint makes the endpoint of a session carried on a QUIC
// stream (see QUICEndpoint).
func NewQUICEndpoint(o QUICOptions) (*QUICEndpoint, error) {
	if o.Stream == nil || o.Pool == nil {
		return nil, errors.New("bridge: new quic endpoint: a stream and a pool are required")
	}
	if o.Window <= 0 {
		return nil, fmt.Errorf("bridge: new quic endpoint: a window of %d operations", o.Window)
	}
	if o.Name == "" {
		o.Name = fmt.Sprintf("quic stream %d", o.Stream.StreamID())
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Stats == nil {
		o.Stats = &QUICStats{}
	}
	e := &QUICEndpoint{str: o.Stream, pool: o.Pool, log: o.Logger, window: o.Window, name: o.Name, stats: o.Stats,
		started: make(chan struct{}), inflight: map[uint32]*session.Op{}, early: map[uint32]*session.Op{}, pending: map[uint32]bool{}, parts: map[uint32][]transport.Completion{},
		wake: make(chan struct{}, 1), quit: make(chan struct{})}
	e.wg.Add(2)
	go e.routineRead()
	go e.routineWrite()
	return e, nil
}

var _ session.Endpoint = (*QUICEndpoint)(nil)

// Stats returns the endpoint's counters (QUICOptions.Stats when given).
func (e *QUICEndpoint) Stats() *QUICStats { return e.stats }

// Start implements Endpoint.
func (e *QUICEndpoint) Start(h session.Handler) error {
	if !e.h.Set(h) {
		return errors.New("bridge: quic endpoint started twice")
	}
	close(e.started)
	return nil
}

// Limits implements Endpoint: the far side's window; READs and atomics
// beyond what its target takes wait in the far session's queue. Payloads
// are written from where they lie, in as many pieces as they come.
func (e *QUICEndpoint) Limits() session.Limits {
	return session.Limits{MaxSend: e.window, MaxRdAtomic: e.window, MTU: 4096, MaxSGE: 16, NoProbe: true}
}

// Post implements Endpoint.
func (e *QUICEndpoint) Post(ops []*session.Op) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err != nil || e.closing {
		return 0, fmt.Errorf("bridge: post on %s: %w", e.name, session.ErrEndpointFailed)
	}
	if len(e.inflight)+len(ops) > e.window {
		return 0, fmt.Errorf("bridge: post %d ops on %s: %d of a window of %d in flight", len(ops), e.name, len(e.inflight), e.window)
	}
	for i, op := range ops {
		if op.Len > tunnel.MaxPayload {
			return i, fmt.Errorf("bridge: post a %v of %d bytes on %s: at most %d", op.Opcode, op.Len, e.name, tunnel.MaxPayload)
		}
		id := e.nextID
		e.nextID++
		e.inflight[id] = op
		e.outq = append(e.outq, quicOut{op: op, id: id})
	}
	e.signalLocked()
	return len(ops), nil
}

// Complete implements Endpoint: the session completed a request that came
// in an Op frame; its Completion goes back.
func (e *QUICEndpoint) Complete(tok transport.Token, c transport.Completion) error {
	id := tok.ID()
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.pending[id] || e.err != nil || e.closing {
		if c.Lease != nil {
			c.Lease.Release()
		}
		return fmt.Errorf("bridge: %s: op %d: %w", e.name, id, transport.ErrStaleToken)
	}
	if c.More {
		if c.Status != transport.StatusSuccess {
			if c.Lease != nil {
				c.Lease.Release()
			}
			return fmt.Errorf("bridge: %s: op %d: %w", e.name, id, transport.ErrBadPart)
		}
		e.parts[id] = append(e.parts[id], c)
		return nil
	}
	delete(e.pending, id)
	parts := e.parts[id]
	delete(e.parts, id)
	if c.Status != transport.StatusSuccess {
		releaseParts(parts)
		parts = nil
	}
	e.outq = append(e.outq, quicOut{id: id, comp: &c, parts: parts})
	e.signalLocked()
	return nil
}

// releaseParts releases the leases of a READ's parts.
func releaseParts(parts []transport.Completion) {
	for _, p := range parts {
		if p.Lease != nil {
			p.Lease.Release()
		}
	}
}

func (e *QUICEndpoint) signalLocked() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Close implements Endpoint: a Close frame tells the far gateway (which
// ends its side of the session), ops in flight complete with
// StatusWRFlushErr, and both goroutines end.
func (e *QUICEndpoint) Close() error {
	e.closeOnce.Do(func() {
		e.mu.Lock()
		if e.err == nil && !e.closing {
			e.outq = append(e.outq, quicOut{Close: &tunnel.CloseFields{Code: tunnel.CloseDisconnect}})
			e.signalLocked()
		}
		e.closing = true
		e.mu.Unlock()
		// The writer sends what is queued, the Close last, then ends the
		// stream's write side; give it a moment before cutting it.
		select {
		case <-e.quit:
		case <-time.After(time.Second):
		}
		e.stop(session.ErrClosed, false)
		e.wg.Wait()
		e.flushInflight()
	})
	return nil
}

// stop ends both goroutines: the stream's read side is cut, and its write
// side too unless the writer ended it after its last frame (cutting it
// would discard what was written and not yet delivered).
func (e *QUICEndpoint) stop(why error, writeEnded bool) {
	e.quitOnce.Do(func() {
		e.mu.Lock()
		if e.err == nil {
			e.err = why
		}
		e.mu.Unlock()
		close(e.quit)
		e.str.CancelRead(0)
		if !writeEnded {
			e.str.CancelWrite(0)
		}
	})
}

// fail ends the endpoint because its stream or its peer failed: the
// session is told, ops in flight complete with StatusWRFlushErr.
func (e *QUICEndpoint) fail(err error) {
	e.mu.Lock()
	first := e.err == nil && !e.closing
	e.mu.Unlock()
	if !first {
		return
	}
	err = fmt.Errorf("bridge: %s: %w", e.name, err)
	e.stop(err, false)
	if h := e.h.Get(); h != nil {
		h.Failed(err)
	}
	e.flushInflight()
}

// flushInflight completes every op in flight with StatusWRFlushErr, and
// hands back with them, in post order, those completed early.
func (e *QUICEndpoint) flushInflight() {
	e.mu.Lock()
	var lost []*session.Op
	ids := make([]uint32, 0, len(e.inflight)+len(e.early))
	for id := range e.early {
		ids = append(ids, id)
	}
	for id, op := range e.inflight {
		op.Status = transport.StatusWRFlushErr
		ids = append(ids, id)
		delete(e.inflight, id)
		e.early[id] = op
	}
	slices.SortFunc(ids, func(a, b uint32) int { return cmp.Compare(a-e.doneNext, b-e.doneNext) })
	for _, id := range ids {
		lost = append(lost, e.early[id])
	}
	clear(e.early)
	e.doneNext = e.nextID
	for _, o := range e.outq {
		if o.comp != nil && o.comp.Lease != nil {
			o.comp.Lease.Release()
		}
		releaseParts(o.parts)
	}
	e.outq = nil
	for _, p := range e.parts {
		releaseParts(p)
	}
	clear(e.parts)
	clear(e.pending)
	e.mu.Unlock()
	h := e.h.Get()
	for _, op := range lost {
		if h != nil {
			h.Done(op)
		}
	}
}

// routineWrite writes queued frames, flushing when the queue is empty.
func (e *QUICEndpoint) routineWrite() {
	defer e.wg.Done()
	w := bufio.NewWriterSize(e.str, 64<<10)
	var hdr []byte
	var batch []quicOut
	for {
		select {
		case <-e.wake:
		case <-e.quit:
			return
		}
		e.mu.Lock()
		batch = append(batch[:0], e.outq...)
		clear(e.outq)
		e.outq = e.outq[:0]
		e.mu.Unlock()
		closed := false
		for _, o := range batch {
			var err error
			switch {
			case o.op != nil:
				hdr, err = e.writeOp(w, hdr[:0], o.op, o.id)
			case o.comp != nil:
				hdr, err = e.writeCompletion(w, hdr[:0], o.id, o.comp, o.parts)
			case o.Close != nil:
				hdr = o.Close.Append(hdr[:0])
				_, err = w.Write(hdr)
				closed = true
			}
			if err != nil {
				e.writeFailed(err)
				return
			}
		}
		clear(batch)
		if err := w.Flush(); err != nil {
			e.writeFailed(err)
			return
		}
		if closed {
			_ = e.str.Close() // the write side ends after the Close frame
			e.stop(session.ErrClosed, true)
			return
		}
	}
}

// writeFailed ends the endpoint because the writer cannot write. A
// Close under way (fail does nothing then) is waiting for the writer to
// end the stream after its Close frame, which it now never will: the
// endpoint stops here, or Close would wait out its whole grace.
//
// Otherwise the far side may have stopped reading because it ended the
// session (its Close cuts its read side): what it sent before, the
// Completions of ops in flight and its Close frame, is still on the
// stream, and failing now would flush those ops as if their outcome were
// lost. So the write side is cut and the reader goes on, ending the
// endpoint at the far side's Close or the stream's end; if that does not
// come within quicDrainGrace, the endpoint fails.
func (e *QUICEndpoint) writeFailed(err error) {
	err = fmt.Errorf("write to the far gateway: %w", err)
	e.mu.Lock()
	closing := e.closing
	e.mu.Unlock()
	if closing {
		e.fail(err)
		e.stop(fmt.Errorf("bridge: %s: %w", e.name, err), false)
		return
	}
	e.str.CancelWrite(0)
	go func() {
		select {
		case <-e.quit:
		case <-time.After(quicDrainGrace):
			e.fail(err)
		}
	}()
}

// quicDrainGrace bounds how long an endpoint whose writes fail keeps
// reading what the far side sent before it fails.
const quicDrainGrace = time.Second

func (e *QUICEndpoint) writeOp(w *bufio.Writer, hdr []byte, op *session.Op, id uint32) ([]byte, error) {
	f := tunnel.OpFields{Opcode: op.Opcode, ID: id, Remote: op.Remote, RKey: op.RKey, Imm: op.Imm, InvRKey: op.InvRKey,
		Length: uint32(op.Len), Compare: op.Compare, SwapAdd: op.SwapAdd}
	hdr, err := f.Append(hdr)
	if err != nil {
		return hdr, err
	}
	if _, err := w.Write(hdr); err != nil {
		return hdr, err
	}
	if tunnel.HasPayload(op.Opcode) {
		if op.Buf != nil {
			_, err = w.Write(op.Bytes())
		}
		for _, fr := range op.Frags {
			if err != nil {
				break
			}
			_, err = w.Write(fr.Buf.B()[fr.Off : fr.Off+fr.Len])
		}
		e.stats.BytesSent.Add(uint64(op.Len))
	}
	e.stats.OpsSent.Add(1)
	return hdr, err
}

func (e *QUICEndpoint) writeCompletion(w *bufio.Writer, hdr []byte, id uint32, c *transport.Completion, parts []transport.Completion) ([]byte, error) {
	defer func() {
		if c.Lease != nil {
			c.Lease.Release()
		}
		releaseParts(parts)
	}()
	f := tunnel.CompletionFields{ID: id, Status: c.Status, Orig: c.Orig}
	if c.Status == transport.StatusSuccess {
		f.DataLen = len(c.Data)
		for _, p := range parts {
			f.DataLen += len(p.Data)
		}
	}
	hdr, err := f.Append(hdr)
	if err != nil {
		return hdr, err
	}
	if _, err := w.Write(hdr); err != nil {
		return hdr, err
	}
	if f.DataLen > 0 {
		for _, p := range parts {
			if _, err := w.Write(p.Data); err != nil {
				return hdr, err
			}
		}
		if _, err := w.Write(c.Data); err != nil {
			return hdr, err
		}
		e.stats.BytesSent.Add(uint64(f.DataLen))
	}
	e.stats.CompletionsSent.Add(1)
	return hdr, nil
}

// routineRead reads frames from the far gateway until the stream ends.
func (e *QUICEndpoint) routineRead() {
	defer e.wg.Done()
	r := bufio.NewReaderSize(e.str, 64<<10)
	buf := make([]byte, tunnel.HeaderLen+tunnel.MaxFixedLen)
	select {
	case <-e.started:
	case <-e.quit:
		return
	}
	for {
		t, fixed, rest, err := tunnel.ReadFrame(r, buf)
		if err != nil {
			if e.stopped() {
				return
			}
			if errors.Is(err, io.EOF) {
				err = errors.New("the far gateway ended the session's stream without a Close")
			}
			e.fail(fmt.Errorf("read from the far gateway: %w", err))
			return
		}
		switch t {
		case tunnel.TypeOp:
			err = e.readOp(r, fixed, len(fixed)+rest)
		case tunnel.TypeCompletion:
			err = e.readCompletion(r, fixed, len(fixed)+rest)
		case tunnel.TypeClose:
			err = e.readClose(r, fixed, rest)
			if err == nil {
				return
			}
		default:
			err = fmt.Errorf("%w: a %v frame in a running session", tunnel.ErrFrame, t)
		}
		if err != nil {
			if e.stopped() {
				return
			}
			e.fail(err)
			return
		}
	}
}

func (e *QUICEndpoint) stopped() bool {
	select {
	case <-e.quit:
		return true
	default:
		return false
	}
}

// readOp reads an Op frame and hands it to the session as a request
// (waiting while the pool or the session has no room for it).
func (e *QUICEndpoint) readOp(r io.Reader, fixed []byte, bodyLen int) error {
	f, err := tunnel.ParseOp(fixed, bodyLen)
	if err != nil {
		return err
	}
	q := transport.Request{Token: transport.ExternalToken(f.ID), Op: f.Opcode, First: true, Last: true,
		VA: f.Remote, RKey: f.RKey, Length: f.Length, Imm: f.Imm, InvRKey: f.InvRKey, Compare: f.Compare, SwapAdd: f.SwapAdd}
	var b *pool.Buf
	if n := f.PayloadLen(); n > 0 {
		if b, err = e.getBuf(n); err != nil {
			return err
		}
		defer b.Release()
		if _, err := io.ReadFull(r, b.B()[:n]); err != nil {
			return fmt.Errorf("read a %v's payload: %w", f.Opcode, err)
		}
		q.Payload = b.B()[:n]
		e.stats.BytesReceived.Add(uint64(n))
	}
	e.stats.OpsReceived.Add(1)
	e.mu.Lock()
	if e.pending[f.ID] {
		e.mu.Unlock()
		return fmt.Errorf("%w: op %d again while it is pending", tunnel.ErrFrame, f.ID)
	}
	e.pending[f.ID] = true
	e.mu.Unlock()
	h := e.h.Get()
	wait := 50 * time.Microsecond
	for {
		reply := h.Request(&q, b)
		h.Flush()
		switch reply.Result {
		case transport.Pending:
			return nil
		case transport.Done, transport.Failed:
			c := transport.Completion{Status: reply.Status, Data: reply.Data, Lease: reply.Lease, Orig: reply.Orig}
			if reply.Result == transport.Done {
				c.Status = transport.StatusSuccess
			}
			err := e.Complete(q.Token, c)
			if err != nil && !errors.Is(err, transport.ErrStaleToken) {
				return err
			}
			return nil
		}
		// NoCredit: the session's pool is empty; try again shortly,
		// holding the stream.
		e.stats.Waits.Add(1)
		select {
		case <-e.quit:
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, 10*time.Millisecond)
	}
}

// getBuf takes a pool buffer of n bytes, waiting while the pool is empty.
func (e *QUICEndpoint) getBuf(n int) (*pool.Buf, error) {
	b, err := e.pool.Get(n)
	if err == nil {
		return b, nil
	}
	if !errors.Is(err, pool.ErrExhausted) {
		return nil, fmt.Errorf("a payload of %d bytes: %w", n, err)
	}
	// The pool is empty: wait for a release, or for the endpoint's end.
	e.stats.Waits.Add(1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-e.quit:
			cancel()
		case <-ctx.Done():
		}
	}()
	b, err = e.pool.GetWait(ctx, n)
	switch {
	case err == nil:
		return b, nil
	case ctx.Err() != nil:
		return nil, session.ErrClosed
	}
	return nil, fmt.Errorf("a payload of %d bytes: %w", n, err)
}

// readCompletion completes the op a Completion frame names.
func (e *QUICEndpoint) readCompletion(r io.Reader, fixed []byte, bodyLen int) error {
	f, err := tunnel.ParseCompletion(fixed, bodyLen)
	if err != nil {
		return err
	}
	e.mu.Lock()
	op := e.inflight[f.ID]
	delete(e.inflight, f.ID)
	e.mu.Unlock()
	if op == nil {
		return fmt.Errorf("%w: a Completion for op %d, which is not in flight", tunnel.ErrFrame, f.ID)
	}
	op.Status, op.Orig = f.Status, f.Orig
	if f.DataLen > 0 {
		if op.Opcode != transport.OpRead || op.Buf == nil || f.DataLen != op.Len {
			op.Status = transport.StatusBadRespErr
			e.deliver(f.ID, op)
			return fmt.Errorf("%w: a Completion of %v op %d with %d bytes of data (want %d of a READ)", tunnel.ErrFrame, op.Opcode, f.ID, f.DataLen, op.Len)
		}
		if _, err := io.ReadFull(r, op.Bytes()); err != nil {
			op.Status = transport.StatusWRFlushErr
			e.deliver(f.ID, op)
			return fmt.Errorf("read a READ's data: %w", err)
		}
		e.stats.BytesReceived.Add(uint64(f.DataLen))
	} else if op.Opcode == transport.OpRead && op.Len > 0 && f.Status == transport.StatusSuccess {
		op.Status = transport.StatusBadRespErr
		e.deliver(f.ID, op)
		return fmt.Errorf("%w: a successful READ op %d without its %d bytes", tunnel.ErrFrame, f.ID, op.Len)
	}
	e.stats.Completions.Add(1)
	e.deliver(f.ID, op)
	return nil
}

// deliver hands op (completed, id) back to the session in post order:
// with every op completed early that it was holding back.
func (e *QUICEndpoint) deliver(id uint32, op *session.Op) {
	h := e.h.Get()
	e.mu.Lock()
	if id != e.doneNext {
		e.early[id] = op
		e.mu.Unlock()
		return
	}
	if len(e.early) == 0 { // in order, as nearly always
		e.doneNext++
		e.mu.Unlock()
		h.Done(op)
		return
	}
	ready := []*session.Op{op}
	for e.doneNext++; e.early[e.doneNext] != nil; e.doneNext++ {
		ready = append(ready, e.early[e.doneNext])
		delete(e.early, e.doneNext)
	}
	e.mu.Unlock()
	for _, op := range ready {
		h.Done(op)
	}
}

// readClose ends the session as the far gateway said: its peer
// disconnected, or its side failed.
func (e *QUICEndpoint) readClose(r io.Reader, fixed []byte, rest int) error {
	body := make([]byte, len(fixed)+rest)
	copy(body, fixed)
	if _, err := io.ReadFull(r, body[len(fixed):]); err != nil {
		return fmt.Errorf("read a Close: %w", err)
	}
	c, err := tunnel.ParseClose(body)
	if err != nil {
		return err
	}
	f := c.Fields()
	why := fmt.Errorf("the far gateway's side ended: %w", session.ErrPeerDisconnected)
	if f.Code == tunnel.CloseFailed {
		why = fmt.Errorf("the far gateway's side failed: %s", f.Reason)
	}
	e.fail(why)
	return nil
}
