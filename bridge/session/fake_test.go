package session_test

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge/pool"
	"github.com/rbridge/rbridge/bridge/session"

	"github.com/rbridge/rbridge/roce/transport"
)

// fakeLeg is an in-memory far endpoint with the far application behind
// it, as a verbs leg to an HCA would be: ops posted on it execute in order
// against its memory and receive queue after a random delay, and fail at
// random if asked; after a failure, like an RC QP in ERR, everything later
// is flushed and the failure is reported. It also sends SENDs of its own
// toward the session, as a verbs peer would (acknowledged on arrival).
type fakeLeg struct {
	lim    session.Limits
	mem    []byte
	base   uint64
	rkey   uint32
	delay  time.Duration // at most, uniformly random
	failOn uint64        // fail the first op at this remote address; 0 never
	failAs transport.Status
	// slowFailure: the far QP is in error (Post refuses) this long before
	// the failed op's completion comes, as a CQ is polled after the QP's
	// state changed.
	slowFailure time.Duration
	queue       chan *session.Op
	// gate, when not nil, holds each op posted until a value is sent on
	// it: the test says when the far side executes.
	gate    chan struct{}
	stop    chan struct{}
	stopped chan struct{}

	mu      sync.Mutex // guards the fields below
	h       session.Handler
	rng     *rand.Rand
	log     []farExec // every op executed, in order
	failed  bool
	closed  bool
	inbound int // SENDs sent toward the session and not completed
	lent    map[uint32]*pool.Buf
	nextID  uint32
	inDone  []transport.Status
	// results are the far peer's own requests' outcomes (request), by
	// token id: a READ's data gathered over its parts.
	results  map[uint32]*farResult
	failures int
	gathered int // ops executed from gathered frags
	// left says the far peer released the connection (a DREQ): what is
	// posted after is flushed, and PeerLeft says so.
	left bool
}

// PeerLeft implements session.PeerLeaver.
func (f *fakeLeg) PeerLeft() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.left
}

// farExec is what the far side did with an op.
type farExec struct {
	op     transport.Opcode
	remote uint64
	data   []byte // SEND: what arrived; WRITE: what was written
	n      int    // READ: bytes read
	imm    uint32
	inv    uint32
	orig   uint64
	status transport.Status
}

func newFakeLeg(seed uint64, memSize int, delay time.Duration) *fakeLeg {
	f := &fakeLeg{lim: session.Limits{MaxSend: 64, MaxRdAtomic: 4, MTU: 4096}, mem: make([]byte, memSize), base: 0x7f0000000000, rkey: 0x1234,
		delay: delay, queue: make(chan *session.Op, 64), stop: make(chan struct{}), stopped: make(chan struct{}),
		rng: rand.New(rand.NewPCG(seed, 7))}
	go f.routineExecute()
	return f
}

var _ session.Endpoint = (*fakeLeg)(nil)

func (f *fakeLeg) Start(h session.Handler) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.h = h
	return nil
}

func (f *fakeLeg) Limits() session.Limits { return f.lim }

func (f *fakeLeg) Post(ops []*session.Op) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || f.failed {
		return 0, session.ErrEndpointFailed
	}
	if len(f.queue)+len(ops) > cap(f.queue) {
		return 0, errors.New("fake leg: posted beyond MaxSend")
	}
	for _, op := range ops {
		f.queue <- op
	}
	return len(ops), nil
}

func (f *fakeLeg) Complete(tok transport.Token, c transport.Completion) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if res := f.results[tok.ID()]; res != nil {
		res.data = append(res.data, c.Data...)
		if c.Lease != nil {
			c.Lease.Release()
		}
		if c.More {
			return nil // a READ's part: the rest follows
		}
		res.status, res.done = c.Status, true
	}
	f.inbound--
	f.inDone = append(f.inDone, c.Status)
	if b := f.lent[tok.ID()]; b != nil {
		b.Release()
		delete(f.lent, tok.ID())
	}
	return nil
}

func (f *fakeLeg) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	f.mu.Unlock()
	close(f.stop)
	<-f.stopped
	// Flush what was never executed.
	for {
		select {
		case op := <-f.queue:
			op.Status = transport.StatusWRFlushErr
			f.handler().Done(op)
		default:
			return nil
		}
	}
}

func (f *fakeLeg) handler() session.Handler {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.h
}

func (f *fakeLeg) routineExecute() {
	defer close(f.stopped)
	for {
		select {
		case <-f.stop:
			return
		case op := <-f.queue:
			if f.gate != nil {
				select {
				case <-f.gate:
				case <-f.stop:
					op.Status = transport.StatusWRFlushErr
					f.handler().Done(op)
					return
				}
			}
			f.mu.Lock()
			d := time.Duration(f.rng.Int64N(int64(f.delay) + 1))
			f.mu.Unlock()
			time.Sleep(d)
			failed := f.execute(op)
			if failed {
				time.Sleep(f.slowFailure)
			}
			f.handler().Done(op)
			if failed {
				f.handler().Failed(errors.New("fake leg: the far QP failed"))
			}
		}
	}
}

// execute runs op against the far memory; it reports whether the far QP
// failed now.
func (f *fakeLeg) execute(op *session.Op) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failed || f.left {
		op.Status = transport.StatusWRFlushErr
		return false
	}
	e := farExec{op: op.Opcode, remote: op.Remote, imm: op.Imm, inv: op.InvRKey}
	fail := func(s transport.Status) bool {
		op.Status, e.status = s, s
		f.log = append(f.log, e)
		f.failed = true
		f.failures++
		return true
	}
	if f.failOn != 0 && op.Remote == f.failOn {
		return fail(f.failAs)
	}
	local := op.Bytes()
	if len(op.Frags) > 0 {
		if len(op.Frags) > max(f.lim.MaxSGE, 1) {
			return fail(transport.StatusLocLenErr) // the session gathered more than the leg allows
		}
		f.gathered++
		local = nil
		for _, fr := range op.Frags {
			local = append(local, fr.Buf.B()[fr.Off:fr.Off+fr.Len]...)
		}
		if len(local) != op.Len {
			return fail(transport.StatusLocLenErr)
		}
	}
	span := func(n int) []byte {
		if n == 0 {
			return []byte{} // a zero-length READ or WRITE checks no key (IBTA C9-88)
		}
		if op.RKey != f.rkey || op.Remote < f.base || op.Remote-f.base+uint64(n) > uint64(len(f.mem)) {
			return nil
		}
		off := op.Remote - f.base
		return f.mem[off : off+uint64(n)]
	}
	switch op.Opcode {
	case transport.OpSend, transport.OpSendWithImm, transport.OpSendWithInv:
		e.data = append([]byte(nil), local...)
	case transport.OpWrite, transport.OpWriteWithImm:
		m := span(len(local))
		if m == nil {
			return fail(transport.StatusRemAccessErr)
		}
		copy(m, local)
		e.data = append([]byte(nil), local...)
	case transport.OpRead:
		m := span(len(local))
		if m == nil {
			return fail(transport.StatusRemAccessErr)
		}
		copy(local, m)
		e.n = len(local)
	case transport.OpCompareSwap, transport.OpFetchAdd:
		m := span(8)
		if m == nil {
			return fail(transport.StatusRemAccessErr)
		}
		old := binary.LittleEndian.Uint64(m)
		if op.Opcode == transport.OpFetchAdd {
			binary.LittleEndian.PutUint64(m, old+op.SwapAdd)
		} else if old == op.Compare {
			binary.LittleEndian.PutUint64(m, op.SwapAdd)
		}
		op.Orig, e.orig = old, old
	}
	op.Status = transport.StatusSuccess
	f.log = append(f.log, e)
	return false
}

// send delivers a SEND from the far peer to the session, as a verbs leg
// delivers a received message (the HCA acknowledged it already): in a
// pool buffer as a verbs receive lands, when pool is not nil.
func (f *fakeLeg) send(pl *pool.Pool, data []byte, imm uint32, withImm bool) transport.Reply {
	op := transport.OpSend
	if withImm {
		op = transport.OpSendWithImm
	}
	return f.sendOp(pl, data, op, imm)
}

// sendOp is send with the opcode given: OpSendWithImm carries arg as its
// immediate, OpSendWithInv as the rkey it invalidates.
func (f *fakeLeg) sendOp(pl *pool.Pool, data []byte, op transport.Opcode, arg uint32) transport.Reply {
	h := f.handler()
	r := transport.Request{Op: op, First: true, Last: true, Payload: data}
	switch op {
	case transport.OpSendWithImm:
		r.Imm = arg
	case transport.OpSendWithInv:
		r.InvRKey = arg
	}
	var b *pool.Buf
	f.mu.Lock()
	f.inbound++
	f.nextID++
	r.Token = transport.ExternalToken(f.nextID)
	if pl != nil {
		var err error
		if b, err = pl.Get(len(data)); err != nil {
			panic(err)
		}
		r.Payload = b.B()[:copy(b.B(), data)]
		if f.lent == nil {
			f.lent = map[uint32]*pool.Buf{}
		}
		f.lent[f.nextID] = b
	}
	f.mu.Unlock()
	reply := h.Request(&r, b)
	h.Flush()
	if reply.Result != transport.Pending {
		// As a verbs endpoint: the SEND was acknowledged on arrival, its
		// outcome is the receive's completion.
		c := transport.Completion{}
		if reply.Result != transport.Done {
			c.Status = transport.StatusRemOpErr
		}
		_ = f.Complete(r.Token, c)
	}
	return reply
}

// farResult is the outcome of a request of the far peer's own.
type farResult struct {
	done   bool
	status transport.Status
	data   []byte // a READ's
}

// request hands the session a request of the far peer's own toward the
// client (a one-sided READ or WRITE of its memory, as a peer behind a leg
// that delivers them: the quic leg's, or the userspace one's) and returns
// its token's id, for result.
func (f *fakeLeg) request(q transport.Request) (uint32, transport.Reply) {
	h := f.handler()
	f.mu.Lock()
	f.inbound++
	f.nextID++
	id := f.nextID
	if f.results == nil {
		f.results = map[uint32]*farResult{}
	}
	f.results[id] = &farResult{}
	f.mu.Unlock()
	q.Token, q.First, q.Last = transport.ExternalToken(id), true, true
	reply := h.Request(&q, nil)
	h.Flush()
	if reply.Result != transport.Pending {
		_ = f.Complete(q.Token, transport.Completion{Status: reply.Status, Data: reply.Data, Lease: reply.Lease})
	}
	return id, reply
}

// result returns the outcome of request id once it completed.
func (f *fakeLeg) result(id uint32) (farResult, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	res := f.results[id]
	if res == nil || !res.done {
		return farResult{}, false
	}
	return *res, true
}

// nthSend waits (5 s at most) for the n-th SEND (from 0) the far leg
// executed, and returns it.
func (f *fakeLeg) nthSend(t *testing.T, n int, what string) farExec {
	t.Helper()
	var e farExec
	waitUntil(t, what, func() bool {
		k := 0
		for _, x := range f.executed() {
			if x.op == transport.OpSend {
				if k == n {
					e = x
					return true
				}
				k++
			}
		}
		return false
	})
	return e
}

func (f *fakeLeg) executed() []farExec {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]farExec(nil), f.log...)
}

// exposingLeg is a fakeLeg whose peer executes one-sided operations
// against the gateway's memory, as a verbs leg's HCA does: what the
// session stages for it is exposed here, and the far peer reaches it
// with access, by address and key, as an HCA checks them.
type exposingLeg struct {
	*fakeLeg
	emu     sync.Mutex // guards the fields below
	exposed map[uint32]*exposure
	nextKey uint32
	revoked int
	// failExpose, when set, refuses exposures of this many bytes.
	failExpose int
}

var _ session.Exposer = (*exposingLeg)(nil)

type exposure struct {
	l       *exposingLeg
	b       []byte
	write   bool
	addr    uint64
	key     uint32
	revoked bool
}

func (e *exposure) Addr() uint64 { return e.addr }
func (e *exposure) RKey() uint32 { return e.key }
func (e *exposure) Revoke() error {
	e.l.emu.Lock()
	defer e.l.emu.Unlock()
	if e.revoked {
		return errors.New("exposure revoked twice")
	}
	e.revoked = true
	e.l.revoked++
	delete(e.l.exposed, e.key)
	return nil
}

func (l *exposingLeg) Expose(b []byte, write bool) (session.Exposure, error) {
	l.emu.Lock()
	defer l.emu.Unlock()
	if l.failExpose != 0 && len(b) == l.failExpose {
		return nil, errors.New("fake exposer: refused")
	}
	if l.exposed == nil {
		l.exposed = map[uint32]*exposure{}
	}
	l.nextKey += 0x101
	e := &exposure{l: l, b: b, write: write, addr: 0x5000_0000_0000 + uint64(l.nextKey)<<24, key: 0xe0000000 | l.nextKey}
	l.exposed[e.key] = e
	return e, nil
}

// access is the far peer's READ (data nil: it returns n bytes) or WRITE
// of data at addr with key: a remote access error unless an exposure
// live now allows it.
func (l *exposingLeg) access(addr uint64, key uint32, n int, data []byte) ([]byte, transport.Status) {
	l.emu.Lock()
	defer l.emu.Unlock()
	e := l.exposed[key]
	if e == nil || addr < e.addr || addr-e.addr+uint64(n) > uint64(len(e.b)) || (data != nil && !e.write) || (data == nil && e.write) {
		return nil, transport.StatusRemAccessErr
	}
	off := addr - e.addr
	if data != nil {
		copy(e.b[off:], data)
		return nil, transport.StatusSuccess
	}
	return append([]byte(nil), e.b[off:off+uint64(n)]...), transport.StatusSuccess
}

// live is how many exposures are not revoked.
func (l *exposingLeg) live() int {
	l.emu.Lock()
	defer l.emu.Unlock()
	return len(l.exposed)
}
