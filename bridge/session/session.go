package session

import (
	"context"
	"errors"
	"fmt"
	"github.com/rbridge/rbridge/bridge/pool"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rbridge/rbridge/roce/transport"
)

// A Session pairs two endpoints, one on each leg, and relays between them
// in both directions: every request that arrives on one endpoint (SEND,
// SEND_WITH_IMM, SEND_WITH_INV, RDMA WRITE with or without immediate, RDMA
// READ, COMPARE_SWAP, FETCH_ADD) is re-issued on the other, in arrival
// order, with the same remote address, rkey, immediate and invalidated
// rkey, and completed back only once the other side completed it. A
// failure on the far side reaches the requester as the matching NAK (a bad
// rkey or bounds as a remote access error, otherwise a remote operational
// error), and ends the session.
//
// An endpoint that acknowledges what it receives before the session relays
// it (a verbs QP: the HCA ACKs a SEND as it lands) is drained when its
// connection ends, by a disconnect or an error: what it received before
// goes on to the other side before the session ends (bounded by
// drainTimeout), so a peer that sends and then disconnects loses nothing.
//
//	endpoint A                        session                         endpoint B
//	requests ──► relay ab: Request ─► queue ─► Flush/pump ─► Post ──► B's peer
//	Complete ◄────────────────────── Done ◄─────────────────────────── completion
//	B's peer's requests travel relay ba the other way.
//
// Messages, not packets, are relayed: each endpoint keeps its own path MTU.
// A READ no longer than a part (MaxChunk, the pool's largest buffer, in
// whole path MTUs of the requester's leg) is one READ on the far endpoint;
// a longer one, of any length the IBTA allows, is posted there a part at a
// time as the far endpoint's outstanding-READ limit and the pool allow,
// each part into a buffer of its own taken as it is posted, and completed
// back a part at a time (transport.Completion.More), so its responses
// leave as its parts arrive and its memory is a few parts, not its length.
// A SEND is assembled in one pool buffer (grown as packets arrive) and
// posted when its last packet came; a WRITE is posted in chunks as its
// packets arrive (a chunk closes when its buffer is full and at the end of
// each batch of packets), so a WRITE longer than the requester's window
// flows. Outstanding READs and atomics beyond what the far endpoint allows
// wait in the queue, in order. A request that finds the pool empty is
// refused for lack of credit where it consumes a receive (the requester
// sees an RNR NAK and retries), and otherwise held until a buffer frees,
// then asked for again (Resumer), or, where its endpoint cannot hold,
// refused with a sequence NAK: backpressure, never a drop.
//
// Concurrency: a relay's mu guards its queue and counters; it is a leaf
// lock, taken under an endpoint's lock (Request) and never held while an
// endpoint is called. postMu serializes posting, so ops leave in queue
// order whichever goroutine (a Flush, a Done) pumps.
type Session struct {
	log  *slog.Logger
	pool *pool.Pool
	a, b Endpoint
	ab   relay // requests arriving on a, re-issued on b
	ba   relay // requests arriving on b, re-issued on a

	maxChunk int
	proto    Protocol // nil: messages relayed as they are
	stage    stager   // the staging of a Stager's messages (stage.go)

	stats Stats
	// activity counts requests and completions (liveness: an idle
	// period is one in which it did not move).
	activity atomic.Uint64

	failing atomic.Bool
	ctx     context.Context // canceled at teardown: ends waits for the pool
	cancel  context.CancelFunc
	done    chan struct{}
	err     error // why the session ended; set before done closes

	drainMu  sync.Mutex // guards gone, goneErr
	gone     Endpoint   // the drained endpoint whose connection ended
	goneErr  error      // why, the peer's disconnect preferred
	draining bool
	// otherFailed says the other side's failure during a drain was
	// logged (once: each of its flushed ops fails again).
	otherFailed bool
}

// drainTimeout bounds how long a session whose endpoint's connection
// ended keeps relaying what that endpoint had received.
const drainTimeout = 5 * time.Second

// Options configures New.
type Options struct {
	A, B Endpoint
	// Pool holds every payload in flight; both endpoints must reach its
	// arena (a userspace endpoint registers it, a verbs endpoint's PD has
	// it as an MR).
	Pool *pool.Pool
	// MaxChunk bounds a WRITE chunk (default 64 KiB, the pool's class).
	MaxChunk int
	// Logger receives the session's events (default slog.Default()).
	Logger *slog.Logger
	// Protocol, when not nil, is the upper-layer protocol the session
	// carries: it sees every SEND-family message before it is posted on
	// the far endpoint, and may rewrite or refuse it.
	Protocol Protocol
	// Liveness, above 0, is how long the session may be idle (no request
	// and no completion on either endpoint) before it probes both its
	// connections with a zero-length RDMA WRITE each, which every RC
	// responder executes without a key. A peer that does not answer
	// within its transport's retries fails its probe, and the session
	// ends, the other connection with it.
	Liveness time.Duration
}

// NumOpcodes is how many send opcodes a session relays, each counted
// apart: transport's OpSend to OpFetchAdd, numbered from 0.
const NumOpcodes = int(transport.OpFetchAdd) + 1

// Stats counts a session's work; every field is updated atomically.
// Operations are counted as messages: once each, when the last packet of
// a SEND or WRITE arrived (a WRITE posted in chunks as it arrives counts
// once, all its bytes at its end), a READ or atomic as it arrives.
type Stats struct {
	// Indexed by direction: 0 is A to B, 1 is B to A; Ops and Bytes then
	// by opcode (transport.Opcode).
	Ops, Bytes [2][NumOpcodes]atomic.Uint64
	// Bytes are the payload: a SEND's or WRITE's, the length a READ
	// reads, an atomic's 8.
	Copied   [2]atomic.Uint64
	Failed   [2]atomic.Uint64 // ops the far side failed
	NoCredit [2]atomic.Uint64 // requests refused (RNR or sequence NAK) or held for an empty pool
	// TooLong counts SENDs refused for a length the far leg cannot take
	// (more pieces than it gathers): an invalid request NAK.
	TooLong [2]atomic.Uint64
	// PoolWaits counts parts of a long READ that waited for a pool
	// buffer before they could be posted (backpressure, not a refusal).
	PoolWaits [2]atomic.Uint64
	// Staging (stage.go), by the direction of the staged messages:
	// Staged counts them and StagedBytes their regions' bytes; Pulled
	// and Pushed count the bytes moved from and to the originator;
	// StageWaits counts regions that waited for the pool, StageFailed
	// messages answered in place because they could not be staged.
	Staged, StagedBytes, Pulled, Pushed [2]atomic.Uint64
	StageWaits, StageFailed             [2]atomic.Uint64
	// StagingInUse is the bytes of pool buffers staging holds now.
	StagingInUse atomic.Int64
	// Probes counts the liveness probes (zero-length RDMA WRITEs) the
	// session posted on the far endpoint of a direction, idle.
	Probes [2]atomic.Uint64
}

// StatsSnapshot is Stats read at one moment, as plain
// values, indexed like Stats.
type StatsSnapshot struct {
	Ops, Bytes                          [2][NumOpcodes]uint64
	Copied, Failed, NoCredit, TooLong   [2]uint64
	PoolWaits                           [2]uint64
	Staged, StagedBytes, Pulled, Pushed [2]uint64
	StageWaits, StageFailed             [2]uint64
	StagingInUse                        int64
	Probes                              [2]uint64
}

// Snapshot reads every counter.
func (s *Stats) Snapshot() StatsSnapshot {
	var out StatsSnapshot
	for d := range 2 {
		for o := range NumOpcodes {
			out.Ops[d][o], out.Bytes[d][o] = s.Ops[d][o].Load(), s.Bytes[d][o].Load()
		}
		out.Copied[d], out.Failed[d], out.NoCredit[d] = s.Copied[d].Load(), s.Failed[d].Load(), s.NoCredit[d].Load()
		out.TooLong[d], out.PoolWaits[d] = s.TooLong[d].Load(), s.PoolWaits[d].Load()
		out.Staged[d], out.StagedBytes[d] = s.Staged[d].Load(), s.StagedBytes[d].Load()
		out.Pulled[d], out.Pushed[d] = s.Pulled[d].Load(), s.Pushed[d].Load()
		out.StageWaits[d], out.StageFailed[d] = s.StageWaits[d].Load(), s.StageFailed[d].Load()
		out.Probes[d] = s.Probes[d].Load()
	}
	out.StagingInUse = s.StagingInUse.Load()
	return out
}

// TotalOps and TotalBytes sum direction d's operations and bytes over
// every opcode.
func (s StatsSnapshot) TotalOps(d int) uint64   { return sum(&s.Ops[d]) }
func (s StatsSnapshot) TotalBytes(d int) uint64 { return sum(&s.Bytes[d]) }

func sum(v *[NumOpcodes]uint64) uint64 {
	var n uint64
	for _, x := range v {
		n += x
	}
	return n
}

// Add adds o's counts to s.
func (s *StatsSnapshot) Add(o StatsSnapshot) {
	for d := range 2 {
		for k := range NumOpcodes {
			s.Ops[d][k] += o.Ops[d][k]
			s.Bytes[d][k] += o.Bytes[d][k]
		}
		s.Copied[d] += o.Copied[d]
		s.Failed[d] += o.Failed[d]
		s.NoCredit[d] += o.NoCredit[d]
		s.TooLong[d] += o.TooLong[d]
		s.PoolWaits[d] += o.PoolWaits[d]
		s.Staged[d] += o.Staged[d]
		s.StagedBytes[d] += o.StagedBytes[d]
		s.Pulled[d] += o.Pulled[d]
		s.Pushed[d] += o.Pushed[d]
		s.StageWaits[d] += o.StageWaits[d]
		s.StageFailed[d] += o.StageFailed[d]
		s.Probes[d] += o.Probes[d]
	}
	s.StagingInUse += o.StagingInUse
}

// relay moves the requests arriving on from to to.
type relay struct {
	s        *Session
	dir      int
	from, to Endpoint
	lim      Limits // to's
	fromMTU  int    // the size of a packet arriving on from
	part     int    // the largest READ posted on to whole; longer ones go in parts of this
	// stager is the session's Protocol when it stages (nil otherwise);
	// exposes says to's peer executes one-sided operations against the
	// gateway's memory (an Exposer): its descriptors are staged.
	stager  Stager
	exposes bool

	mu       sync.Mutex // guards the fields below
	queue    []*Op      // waiting to be posted on to, in order, from qhead
	qhead    int
	posted   int // ops posted on to and not done
	rdAtomic int // READs and atomics among them
	// completing are ops done on to whose completion back on from is
	// under way: the relay is not idle until from has been told, or an
	// end after it (waitIdle) would close from before its requester
	// learns the outcome.
	completing int
	msg        *Op // the SEND being assembled, or the WRITE chunk open
	// kept is the open WRITE chunk (msg) when it outlived a batch's flush
	// because ops posted before it were in flight (flush): the last of
	// them to complete queues it (keepLocked), unless its message's next
	// packets closed it first.
	kept *Op
	// msgBytes are the bytes of the message being relayed that were
	// queued already (a WRITE's chunks): counted at the message's end.
	msgBytes uint64
	free     *Op
	dead     bool
	probing  bool // a liveness probe is posted on to
	// partAt is where the next part of the READ whose parts are being
	// completed lies in it: parts complete in order (Endpoint.Post); -1
	// once a part of it failed.
	partAt int
	// bufWait says a goroutine waits for a pool buffer for the next part
	// (nothing posted would pump on its completion); spare is what it got.
	bufWait bool
	spare   *pool.Buf
	// creditWait says a goroutine waits for a pool buffer of wantBuf
	// bytes for a request of r.from's it held (holdLocked), to keep it as
	// spare and resume r.from. wantBuf is the size the pool last could
	// not give.
	creditWait bool
	wantBuf    int
	// seq counts the SEND-family messages handed to the protocol; m and
	// pieces are the view it is handed, reused. refusal is why it refused
	// one: nothing more is taken from r.from.
	seq     uint64
	m       Message
	pieces  Pieces
	refusal error

	postMu  sync.Mutex // serializes pump: ops leave in queue order
	refused []*Op      // what r.to refused to take, failed back at the teardown (under postMu)
	batch   [32]*Op    // used under postMu
}

// New joins two endpoints and starts relaying. The endpoints'
// connections must be established (the QPs in RTS).
func New(o Options) (*Session, error) {
	if o.A == nil || o.B == nil || o.Pool == nil {
		return nil, errors.New("bridge: new session: two endpoints and a pool are required")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxChunk <= 0 {
		o.MaxChunk = 64 << 10
	}
	o.MaxChunk = min(o.MaxChunk, o.Pool.Largest())
	s := &Session{log: o.Logger, pool: o.Pool, a: o.A, b: o.B, maxChunk: o.MaxChunk, proto: o.Protocol, done: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	la, lb := o.A.Limits(), o.B.Limits()
	s.ab = relay{s: s, dir: 0, from: o.A, to: o.B, lim: lb, fromMTU: la.MTU}
	s.ba = relay{s: s, dir: 1, from: o.B, to: o.A, lim: la, fromMTU: lb.MTU}
	s.stage.s = s
	stg, _ := o.Protocol.(Stager)
	for _, r := range []*relay{&s.ab, &s.ba} {
		_, r.exposes = r.to.(Exposer)
		r.stager = stg
		if r.lim.MaxSend <= 0 || r.lim.MaxRdAtomic <= 0 {
			s.cancel()
			return nil, fmt.Errorf("bridge: new session: endpoint limits %+v allow nothing outstanding", r.lim)
		}
		r.part = o.MaxChunk
		if r.fromMTU > 0 && r.fromMTU <= o.MaxChunk {
			r.part -= o.MaxChunk % r.fromMTU
		}
	}
	if err := o.A.Start(side{s: s, in: &s.ab}); err != nil {
		s.cancel()
		return nil, fmt.Errorf("bridge: new session: start A: %w", err)
	}
	if err := o.B.Start(side{s: s, in: &s.ba}); err != nil {
		s.fail(nil, fmt.Errorf("start B: %w", err))
		return nil, fmt.Errorf("bridge: new session: start B: %w", err)
	}
	for _, ep := range []Endpoint{o.A, o.B} {
		if e, ok := ep.(StartNotifier); ok {
			e.Started()
		}
	}
	if o.Liveness > 0 {
		go s.routineLiveness(o.Liveness)
	}
	return s, nil
}

// routineLiveness probes both connections once the session was idle for
// a whole period, and again each period it stays idle; a probe's answer
// is not activity. Activity is sampled livenessSamples times a period, so
// a probe follows the last request or completion by at most a period and
// one sample: sampling once a period let an idle stretch that began just
// after a sample wait almost two periods, which left a client whose
// server died unseen (its DREQ lost) waiting a minute on a 30 s liveness.
func (s *Session) routineLiveness(every time.Duration) {
	t := time.NewTicker(max(every/livenessSamples, time.Millisecond))
	defer t.Stop()
	// Idle samples are counted, not timed: a ticker's times drift by
	// microseconds, which put a period's last sample just short of it.
	last, idle := s.activity.Load(), 0
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		if a := s.activity.Load(); a != last {
			last, idle = a, 0
			continue
		}
		if idle++; idle < livenessSamples {
			continue
		}
		idle = 0
		for _, r := range []*relay{&s.ab, &s.ba} {
			r.probe()
		}
	}
}

// livenessSamples is how many times a liveness period looks at the
// session's activity.
const livenessSamples = 8

// probe posts a zero-length RDMA WRITE on r.to, unless one is
// outstanding or r.to's peer takes none (Limits.NoProbe).
func (r *relay) probe() {
	if r.lim.NoProbe {
		return
	}
	r.mu.Lock()
	if r.dead || r.probing {
		r.mu.Unlock()
		return
	}
	op := r.newOpLocked()
	op.Opcode, op.probe = transport.OpWrite, true
	r.probing = true
	r.queue = append(r.queue, op)
	r.mu.Unlock()
	r.s.stats.Probes[r.dir].Add(1)
	r.pump()
}

// Stats returns the session's counters.
func (s *Session) Stats() *Stats { return &s.stats }

// Done is closed when the session has ended; Err says why.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err returns why the session ended (nil while it runs, ErrClosed
// after Close).
func (s *Session) Err() error {
	select {
	case <-s.done:
		return s.err
	default:
		return nil
	}
}

// RelayState is a snapshot of one direction of a session.
type RelayState struct {
	Queued, Posted, RdAtomic int  // ops waiting, posted on the far endpoint, READs/atomics among them
	Assembling               bool // a SEND or WRITE chunk is open
}

// State returns a snapshot of both directions (0: A to B, 1: B to A).
func (s *Session) State() [2]RelayState {
	var out [2]RelayState
	for i, r := range []*relay{&s.ab, &s.ba} {
		out[i] = r.state()
	}
	return out
}

// ErrClosed is the end of a session that Close ended.
var ErrClosed = errors.New("session closed")

// Close ends the session and waits until it has: both endpoints are
// closed, ops in flight completed with errors and every buffer is back in
// the pool.
func (s *Session) Close() error {
	s.Cut()
	<-s.done
	return nil
}

// Cut ends the session without waiting for its teardown, which runs on a
// goroutine of its own (Close waits for it); Done says when it ended.
func (s *Session) Cut() {
	s.fail(nil, ErrClosed)
}

// End ends the session because of err, a cause outside its endpoints (a
// leg whose link went down): as Cut, without waiting, and with err as
// the reason its log and Err give. What is in flight fails back to its
// requesters.
func (s *Session) End(err error) {
	if err == nil {
		err = ErrClosed
	}
	s.fail(nil, err)
}

// fail ends the session because of ep (nil: the session itself, or
// both); callers after the first return at once (an endpoint's Close
// reports its flushed ops, which fail again). When ep is a Drainer, the
// session first relays what ep received (drain), and only a failure of
// the other side cuts that short. The teardown runs on a goroutine of its
// own: fail is called from endpoints' goroutines that closing an endpoint
// waits for.
func (s *Session) fail(ep Endpoint, err error) {
	s.drainMu.Lock()
	switch {
	case s.draining && ep == s.gone:
		if errors.Is(err, ErrPeerDisconnected) {
			s.goneErr = err // the disconnect is why: its flushed ops follow it, or came first
		}
		s.drainMu.Unlock()
		return
	case s.draining:
		// The other side ended too: nothing more can be relayed. Both
		// peers disconnecting is how a session normally ends.
		first, logged := s.goneErr, s.otherFailed
		s.otherFailed = true
		s.drainMu.Unlock()
		if !errors.Is(err, ErrPeerDisconnected) && !logged {
			s.log.Warn("the other side failed while relaying what the side that ended first had sent", "err", err, "first", first)
		}
	default:
		if d, ok := ep.(Drainer); ok && !errors.Is(err, ErrClosed) && !s.failing.Load() {
			s.draining, s.gone, s.goneErr = true, ep, err
			s.drainMu.Unlock()
			go s.drain(d)
			return
		}
		s.drainMu.Unlock()
	}
	if s.failing.CompareAndSwap(false, true) {
		go s.teardown(ep, err)
	}
}

// farGone says ep's peer can no longer be reached through the session:
// the session ends, or ep's peer disconnected (its side drains, or ep
// says its peer left).
func (s *Session) farGone(ep Endpoint) bool {
	if s.failing.Load() || s.ctx.Err() != nil {
		return true
	}
	if l, ok := ep.(PeerLeaver); ok && l.PeerLeft() {
		return true
	}
	s.drainMu.Lock()
	defer s.drainMu.Unlock()
	return s.draining && s.gone == ep
}

// drain waits until the ended endpoint handed over all it received and
// the relay from it is idle (everything posted on the other side and
// completed there), at most drainTimeout, then tears the session down.
func (s *Session) drain(d Drainer) {
	r := &s.ab
	if s.gone == s.b {
		r = &s.ba
	}
	deadline := time.NewTimer(drainTimeout)
	defer deadline.Stop()
	select {
	case <-d.Drained():
	case <-deadline.C:
	}
	r.flush() // an open WRITE chunk goes too
	if !r.waitIdle(deadline.C, nil) {
		s.log.Warn("what a disconnected peer had sent was not all relayed in time: the rest fails", "timeout", drainTimeout, "state", r.state())
	}
	s.drainMu.Lock()
	err := s.goneErr
	s.drainMu.Unlock()
	if s.failing.CompareAndSwap(false, true) {
		s.teardown(s.gone, err)
	}
}

// waitIdle waits until the relay holds nothing (idle), or deadline fires,
// or stop closes; it reports whether it went idle.
func (r *relay) waitIdle(deadline <-chan time.Time, stop <-chan struct{}) bool {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if r.idle() {
			return true
		}
		select {
		case <-tick.C:
		case <-deadline:
			return false
		case <-stop:
			return false
		}
	}
}

// idle reports whether r holds nothing: no op queued, assembling, posted
// or being completed back on r.from.
func (r *relay) idle() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.queue) == r.qhead && r.posted == 0 && r.msg == nil && r.completing == 0
}

func (r *relay) state() RelayState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return RelayState{Queued: len(r.queue) - r.qhead, Posted: r.posted, RdAtomic: r.rdAtomic, Assembling: r.msg != nil}
}

// teardown ends the session because of ep (nil: the session itself).
// ep is closed first: what it still held completes back through the other
// endpoint, which is still open, so each of those requesters learns its
// operation failed, with the status it failed with, before its own
// connection goes. Only then is the other endpoint closed.
func (s *Session) teardown(ep Endpoint, err error) {
	err = s.causeOf(err)
	switch {
	case errors.Is(err, ErrClosed):
	case errors.Is(err, ErrPeerDisconnected):
		s.log.Info("a peer disconnected: the other connection is disconnected too", "why", err)
	default:
		s.log.Warn("session failed: both connections are torn down", "err", err)
	}
	for _, r := range []*relay{&s.ab, &s.ba} {
		r.mu.Lock()
		r.dead = true
		r.mu.Unlock()
	}
	s.cancel()
	// Staging first: no far peer reaches it from here (a window is
	// invalidated while its QP still completes work). Its buffers stay
	// referenced by the pulls and pushes in flight until those complete,
	// flushed, as the endpoints close.
	s.stage.close()
	first, second := s.a, s.b
	if ep == s.b {
		first, second = s.b, s.a
	}
	for _, e := range []Endpoint{first, second} {
		_ = e.Close()
		for _, r := range []*relay{&s.ab, &s.ba} {
			if r.to == e {
				r.failRefused()
			}
		}
	}
	for _, r := range []*relay{&s.ab, &s.ba} {
		// A pump under way posts nothing more (dead); what it took
		// completes through the closed endpoint or fails back.
		r.mu.Lock()
		for _, op := range r.queue[r.qhead:] {
			r.releaseLocked(op)
		}
		clear(r.queue)
		r.queue, r.qhead = r.queue[:0], 0
		if r.msg != nil {
			r.releaseLocked(r.msg)
			r.msg = nil
		}
		if r.spare != nil {
			r.spare.Release()
			r.spare = nil
		}
		r.mu.Unlock()
	}
	s.stage.close() // what staging ended meanwhile
	s.err = err
	close(s.done)
}

// side is the Handler of one endpoint: requests arriving there go into
// relay in; ops it completes belong to the relay that posted them.
type side struct {
	s  *Session
	in *relay
}

func (h side) Request(r *transport.Request, buf *pool.Buf) transport.Reply {
	h.s.activity.Add(1)
	return h.in.request(r, buf)
}
func (h side) Flush()      { h.in.flush() }
func (h side) Done(op *Op) { op.relay.done(op) }

// BeginDone holds both endpoints' sends (SendHolder) while a batch of
// completions is relayed: each completes a request on one side and may
// post a queued op on the other.
func (h side) BeginDone() {
	for _, e := range []Endpoint{h.s.a, h.s.b} {
		if sh, ok := e.(SendHolder); ok {
			sh.HoldSends()
		}
	}
}

// EndDone releases what BeginDone held.
func (h side) EndDone() {
	for _, e := range []Endpoint{h.s.a, h.s.b} {
		if sh, ok := e.(SendHolder); ok {
			sh.ReleaseSends()
		}
	}
}
func (h side) Failed(err error) { h.s.fail(h.in.from, err) }

// request takes a request arriving on r.from. It runs under r.from's lock.
func (r *relay) request(q *transport.Request, buf *pool.Buf) transport.Reply {
	r.mu.Lock()
	defer r.mu.Unlock()
	reply := r.requestLocked(q, buf)
	if reply.Result == transport.NoCredit && !q.RNR() {
		return r.holdLocked()
	}
	return reply
}

// holdLocked answers a request the pool had no buffer for, which an RNR
// NAK does not refuse (a WRITE's, a READ's, an atomic's, a SEND's packet
// after its first): where r.from can resume, the request is held and a
// goroutine waits for a buffer, keeps it as spare for the request's
// return and resumes r.from (waitCredit); elsewhere it is refused for
// lack of credit (a sequence NAK, once nothing before it is pending).
func (r *relay) holdLocked() transport.Reply {
	res, ok := r.from.(Resumer)
	if !ok {
		return transport.Reply{Result: transport.NoCredit}
	}
	if !r.creditWait {
		r.creditWait = true
		go r.waitCredit(res, r.wantBuf)
	}
	return transport.Reply{Result: transport.Hold}
}

// waitCredit waits for a pool buffer of n bytes, keeps it as spare and
// resumes res. It ends with the session.
func (r *relay) waitCredit(res Resumer, n int) {
	b, err := r.s.pool.GetWait(r.s.ctx, n)
	r.mu.Lock()
	r.creditWait = false
	dead := r.dead
	if err == nil {
		// The larger of it and a spare already kept (a READ part's,
		// perhaps too small for the held request) stays.
		if !dead && r.spare != nil && len(r.spare.B()) < len(b.B()) {
			r.spare, b = b, r.spare
		}
		if dead || r.spare != nil {
			b.Release()
		} else {
			r.spare = b
		}
	}
	r.mu.Unlock()
	if err == nil && !dead {
		res.Resume()
	}
}

func (r *relay) requestLocked(q *transport.Request, buf *pool.Buf) transport.Reply {
	if r.dead || r.refusal != nil {
		return transport.Reply{Result: transport.Failed, Status: transport.StatusRemOpErr}
	}
	switch q.Op {
	case transport.OpSend, transport.OpSendWithImm, transport.OpSendWithInv:
		if buf != nil && q.First && q.Last {
			if off, ok := buf.Within(q.Payload); ok {
				return r.lendLocked(q, buf, off)
			}
		}
		return r.sendLocked(q, buf)
	case transport.OpWrite, transport.OpWriteWithImm:
		return r.writeLocked(q, buf)
	case transport.OpRead:
		if int64(q.Length) > int64(r.part) {
			// Posted a part at a time, each into a buffer taken then.
			op := r.newOpLocked()
			op.Opcode, op.Remote, op.RKey, op.tok = q.Op, q.VA, q.RKey, q.Token
			op.Len, op.split = int(q.Length), true
			r.enqueueLocked(op)
			r.endReadLocked(q)
			return transport.Reply{Result: transport.Pending}
		}
		op, reply, ok := r.opLocked(q, int(q.Length))
		if !ok {
			return reply
		}
		op.Len = int(q.Length)
		r.enqueueLocked(op)
		r.endReadLocked(q)
		return transport.Reply{Result: transport.Pending}
	case transport.OpCompareSwap, transport.OpFetchAdd:
		op, reply, ok := r.opLocked(q, 8)
		if !ok {
			return reply
		}
		op.Len, op.Compare, op.SwapAdd = 8, q.Compare, q.SwapAdd
		r.enqueueLocked(op)
		r.endLocked(q.Op)
		return transport.Reply{Result: transport.Pending}
	}
	return transport.Reply{Result: transport.Failed, Status: transport.StatusRemInvReqErr}
}

// opLocked starts an op for q with a buffer of n bytes; when it cannot,
// the reply says why.
func (r *relay) opLocked(q *transport.Request, n int) (*Op, transport.Reply, bool) {
	op := r.newOpLocked()
	op.Opcode, op.Remote, op.RKey, op.Imm, op.InvRKey, op.tok = q.Op, q.VA, q.RKey, q.Imm, q.InvRKey, q.Token
	if n > 0 {
		b, reply, ok := r.getLocked(n)
		if !ok {
			r.freeLocked(op)
			return nil, reply, false
		}
		op.Buf = b
	}
	return op, transport.Reply{}, true
}

// getLocked takes a pool buffer of n bytes: an empty class is lack of
// credit (RNR), a size no class holds is the requester's error.
func (r *relay) getLocked(n int) (*pool.Buf, transport.Reply, bool) {
	if b := r.spare; b != nil && len(b.B()) >= n {
		r.spare = nil
		return b, transport.Reply{}, true
	}
	b, err := r.s.pool.Get(n)
	if err == nil {
		return b, transport.Reply{}, true
	}
	if errors.Is(err, pool.ErrExhausted) {
		r.wantBuf = n
		r.s.stats.NoCredit[r.dir].Add(1)
		return nil, transport.Reply{Result: transport.NoCredit}, false
	}
	r.s.log.Warn("request refused: larger than the pool's largest buffer", "bytes", n, "err", err)
	return nil, transport.Reply{Result: transport.Failed, Status: transport.StatusRemInvReqErr}, false
}

// lendLocked relays a whole message that lies in a pool buffer (a verbs
// receive, an AF_XDP frame) from where it lies: no copy.
func (r *relay) lendLocked(q *transport.Request, buf *pool.Buf, off int) transport.Reply {
	op := r.newOpLocked()
	op.Opcode, op.Imm, op.InvRKey, op.tok = q.Op, q.Imm, q.InvRKey, q.Token
	if len(q.Payload) > 0 {
		buf.Ref()
		op.Buf, op.Off, op.Len = buf, off, len(q.Payload)
	}
	if reply, ok := r.messageLocked(op); !ok {
		return reply
	}
	r.enqueueLocked(op)
	r.endLocked(q.Op)
	return transport.Reply{Result: transport.Pending}
}

// sendLocked assembles a SEND; it is posted when its last packet came.
// Packets lent from received frames are gathered where they lie while the
// far endpoint takes that many pieces; past that, the message is copied
// together.
func (r *relay) sendLocked(q *transport.Request, buf *pool.Buf) transport.Reply {
	foff, lend := r.lendable(q, buf)
	op := r.msg
	if q.First {
		if op != nil { // cannot happen: the responder checks message order
			r.releaseLocked(op)
			r.msg = nil
		}
		if lend && !q.Last {
			op = r.newOpLocked()
		} else {
			n := len(q.Payload)
			if !q.Last {
				n = max(16*n, 4096) // more packets follow: room to grow
			}
			var reply transport.Reply
			var ok bool
			if op, reply, ok = r.opLocked(q, n); !ok {
				return reply
			}
		}
		r.msg = op
	} else if op == nil {
		return transport.Reply{Result: transport.Failed, Status: transport.StatusRemInvReqErr}
	}
	switch {
	case lend && op.Buf == nil && !op.chain && len(op.Frags) < r.lim.MaxSGE:
		buf.Ref()
		op.Frags = append(op.Frags, Frag{Buf: buf, Off: foff, Len: len(q.Payload)})
		op.Len += len(q.Payload)
	case len(q.Payload) > 0:
		if reply, ok := r.appendLocked(op, q.Payload); !ok {
			return reply // the packet comes again; what is assembled stays
		}
	}
	if !q.Last {
		return transport.Reply{} // held here; the last packet's answer is the message's
	}
	op.Opcode, op.Imm, op.InvRKey, op.tok = q.Op, q.Imm, q.InvRKey, q.Token
	r.msg = nil
	if reply, ok := r.messageLocked(op); !ok {
		return reply
	}
	r.enqueueLocked(op)
	r.endLocked(q.Op)
	return transport.Reply{Result: transport.Pending}
}

// appendLocked copies p after op's bytes. They lie in op.Buf while one
// buffer holds them (grown by doubling), then in a chain of the pool's
// largest buffers (op.Frags, op.chain) that the far endpoint gathers, as
// many as its Limits.MaxSGE: a SEND longer than that is refused as the
// IBTA refuses a SEND longer than the receive it lands in (an invalid
// request NAK), counted as too long. Lent frames (op.Frags without chain)
// are copied over first. When the pool has no buffer, nothing changes
// and the reply says why.
func (r *relay) appendLocked(op *Op, p []byte) (transport.Reply, bool) {
	end := op.Len + len(p)
	largest := r.s.maxChunk
	switch {
	case op.chain:
	case op.Buf != nil && end <= len(op.Buf.B())-op.Off:
		copy(op.Buf.B()[op.Off+op.Len:], p)
		op.Len = end
		r.s.stats.Copied[r.dir].Add(uint64(len(p)))
		return transport.Reply{}, true
	case end <= largest:
		b, reply, ok := r.getLocked(min(max(2*end, 4096), largest))
		if !ok {
			return reply, false
		}
		r.gatherLocked(op, b)
		copy(op.Buf.B()[op.Len:], p)
		op.Len = end
		r.s.stats.Copied[r.dir].Add(uint64(len(p)))
		return transport.Reply{}, true
	}
	// A chain: buffers enough for what is assembled and p, taken first so
	// that a pool without them changes nothing.
	need := (end + largest - 1) / largest
	have := 0
	if op.chain {
		have = len(op.Frags)
	}
	if need > max(r.lim.MaxSGE, 1) {
		r.s.stats.TooLong[r.dir].Add(1)
		r.s.log.Warn("request refused: a SEND longer than the far leg gathers", "bytes_so_far", end, "largest", largest, "max_sge", r.lim.MaxSGE)
		return transport.Reply{Result: transport.Failed, Status: transport.StatusRemInvReqErr}, false
	}
	var fresh [64]*pool.Buf
	bufs := fresh[:0]
	for range need - have {
		b, reply, ok := r.getLocked(largest)
		if !ok {
			for _, x := range bufs {
				x.Release()
			}
			return reply, false
		}
		bufs = append(bufs, b)
	}
	if !op.chain {
		// Move what is assembled (one buffer, or lent frames) to the chain.
		old, oldFrags := op.Buf, op.Frags
		var tmp [1]Frag
		if old != nil {
			tmp[0] = Frag{Buf: old, Off: op.Off, Len: op.Len}
			oldFrags = tmp[:]
		}
		chain := make([]Frag, 0, need)
		for _, b := range bufs {
			chain = append(chain, Frag{Buf: b})
		}
		bufs = bufs[:0]
		op.Buf, op.Off, op.Len, op.chain = nil, 0, 0, true
		for _, f := range oldFrags {
			r.chainCopyLocked(op, f.Buf.B()[f.Off:f.Off+f.Len], chain)
			f.Buf.Release()
		}
		clear(oldFrags)
		r.chainCopyLocked(op, p, chain)
		op.Frags = chain[:(op.Len+largest-1)/largest]
		return transport.Reply{}, true
	}
	for _, b := range bufs {
		op.Frags = append(op.Frags, Frag{Buf: b})
	}
	r.chainCopyLocked(op, p, op.Frags)
	op.Frags = op.Frags[:(op.Len+largest-1)/largest]
	return transport.Reply{}, true
}

// chainCopyLocked copies p after op's bytes into chain, whose buffers
// (the pool's largest) have room for it.
func (r *relay) chainCopyLocked(op *Op, p []byte, chain []Frag) {
	largest := r.s.maxChunk
	r.s.stats.Copied[r.dir].Add(uint64(len(p)))
	for len(p) > 0 {
		i, off := op.Len/largest, op.Len%largest
		f := &chain[i]
		n := copy(f.Buf.B()[off:largest], p)
		f.Len = off + n
		op.Len += n
		p = p[n:]
	}
}

// gatherLocked moves op's bytes (in its buffer or its frags) into b, which
// becomes its buffer.
func (r *relay) gatherLocked(op *Op, b *pool.Buf) {
	if op.Buf != nil {
		copy(b.B(), op.Bytes())
		op.Buf.Release()
	} else {
		n := 0
		for i, f := range op.Frags {
			n += copy(b.B()[n:], f.Buf.B()[f.Off:f.Off+f.Len])
			f.Buf.Release()
			op.Frags[i] = Frag{}
		}
		op.Frags = op.Frags[:0]
	}
	r.s.stats.Copied[r.dir].Add(uint64(op.Len))
	op.Buf, op.Off = b, 0
}

// lendable says whether q's payload can be relayed from where it was
// received: it lies in buf (a lent frame) and the far endpoint gathers.
func (r *relay) lendable(q *transport.Request, buf *pool.Buf) (int, bool) {
	if buf == nil || r.lim.MaxSGE < 2 || len(q.Payload) == 0 {
		return 0, false
	}
	return buf.Within(q.Payload)
}

// writeLocked adds a WRITE packet to the open chunk, or opens one. A
// chunk is gathered from the frames the packets were received in when
// they are lent (up to the far endpoint's MaxSGE pieces), else copied into
// a pool buffer.
func (r *relay) writeLocked(q *transport.Request, buf *pool.Buf) transport.Reply {
	foff, lend := r.lendable(q, buf)
	op := r.msg
	if op != nil && !q.First && (op.Buf == nil) != lend && op.Len > 0 {
		r.msg = nil // a chunk is one kind of memory: the packet opens another
		r.enqueueLocked(op)
		op = nil
	}
	join := op != nil && !q.First
	if !join {
		if op != nil {
			r.enqueueLocked(op) // cannot happen: a message ends with its last packet
		}
		if lend {
			op = r.newOpLocked()
			op.Remote, op.RKey, op.tok = q.VA, q.RKey, q.Token
		} else {
			n := min(int(q.Length)-q.Offset, r.s.maxChunk)
			var reply transport.Reply
			var ok bool
			if op, reply, ok = r.opLocked(q, n); !ok {
				r.msg = nil
				return reply
			}
		}
		op.Opcode = transport.OpWrite
		r.msg = op
	}
	if !lend && len(q.Payload) > 0 && (op.Buf == nil || len(q.Payload) > len(op.Buf.B())-op.Off-op.Len) {
		// More than the chunk holds: a packet is at most the requester's
		// MTU, so only a leg that delivers a WRITE whole (a peer gateway's
		// Op frame) can ask it, and only past the pool's largest buffer.
		// Refused: never posted with a length past its buffer (the bytes
		// there are other buffers').
		r.msg = nil
		r.releaseLocked(op)
		r.s.stats.TooLong[r.dir].Add(1)
		r.s.log.Warn("request refused: a WRITE request longer than a chunk", "bytes", len(q.Payload), "largest", r.s.maxChunk)
		return transport.Reply{Result: transport.Failed, Status: transport.StatusRemInvReqErr}
	}
	switch {
	case lend:
		buf.Ref()
		op.Frags = append(op.Frags, Frag{Buf: buf, Off: foff, Len: len(q.Payload)})
		op.Len += len(q.Payload)
	case len(q.Payload) > 0:
		copy(op.Buf.B()[op.Off+op.Len:], q.Payload)
		op.Len += len(q.Payload)
		r.s.stats.Copied[r.dir].Add(uint64(len(q.Payload)))
	}
	switch {
	case q.Last:
		op.Opcode, op.Imm = q.Op, q.Imm
		r.msg = nil
		r.enqueueLocked(op)
		r.endLocked(q.Op)
	case lend && (len(op.Frags) >= r.lim.MaxSGE || op.Len+r.fromMTU > r.s.maxChunk),
		!lend && (op.Buf == nil || op.Len+r.fromMTU > len(op.Buf.B())):
		r.msg = nil // full: the next packet opens a chunk
		r.enqueueLocked(op)
	}
	return transport.Reply{Result: transport.Pending, Join: join}
}

// enqueueLocked queues op to be posted on r.to.
func (r *relay) enqueueLocked(op *Op) {
	r.queue = append(r.queue, op)
	r.msgBytes += uint64(op.Len)
}

// endLocked counts the message whose last op was queued: one operation of
// opcode o, with every byte its ops queued.
func (r *relay) endLocked(o transport.Opcode) {
	if int(o) < NumOpcodes {
		r.s.stats.Ops[r.dir][o].Add(1)
		r.s.stats.Bytes[r.dir][o].Add(r.msgBytes)
	}
	r.msgBytes = 0
}

// endReadLocked counts a READ, once: one asked for again (its responses
// were lost) is read again from the far side, and not counted again.
func (r *relay) endReadLocked(q *transport.Request) {
	if q.Dup {
		r.msgBytes = 0
		return
	}
	r.endLocked(q.Op)
}

// flush posts what a batch of requests queued. An open WRITE chunk (a
// message whose next packets a later batch brings) is posted too when
// nothing posted on r.to is in flight; when something is, the chunk is
// kept open to gather those packets, and the last of the ops in flight to
// complete posts it (keepLocked): so a WRITE whose packets straddle two
// reads goes on as one, not cut in two at the reads' border, and nothing
// waits for packets that may not come longer than r.to takes to finish
// what it has.
func (r *relay) flush() {
	r.mu.Lock()
	if op := r.msg; op != nil && op.Opcode == transport.OpWrite && op.Len > 0 {
		if r.posted > 0 {
			r.kept = op
		} else {
			r.msg = nil
			r.enqueueLocked(op)
		}
	}
	r.mu.Unlock()
	r.pump()
}

// keepLocked queues the open WRITE chunk a flush kept once nothing posted
// is in flight: the completion that emptied r.to pumps it.
func (r *relay) keepLocked() {
	if r.kept == nil || r.posted > 0 {
		return
	}
	if op := r.msg; op == r.kept {
		r.msg = nil
		r.enqueueLocked(op)
	}
	r.kept = nil
}

// pump posts queued ops on r.to as its limits allow. When r.to refuses a
// batch, the session ends; what r.to did not take fails back to its
// requesters at the teardown, once r.to is closed: after every op posted
// before it completed, as a failed QP completes its work in order.
func (r *relay) pump() {
	r.postMu.Lock()
	failed, err := r.postLocked()
	r.refused = append(r.refused, failed...)
	r.postMu.Unlock()
	if err != nil {
		r.s.fail(r.to, fmt.Errorf("post on the far endpoint: %w", err))
	}
}

// failRefused fails back what r.to refused; the teardown calls it once
// r.to is closed (a pump under way finishes first: postMu).
func (r *relay) failRefused() {
	r.postMu.Lock()
	refused := r.refused
	r.refused = nil
	r.postMu.Unlock()
	for _, op := range refused {
		op.Status = transport.StatusRemOpErr
		r.complete(op)
	}
}

// postLocked posts under postMu; it returns the ops of a batch the
// endpoint refused, and why.
func (r *relay) postLocked() ([]*Op, error) {
	for {
		r.mu.Lock()
		n := 0
		var voids []*Op
		for r.qhead < len(r.queue) && n < len(r.batch) && r.posted < r.lim.MaxSend && !r.dead {
			op := r.queue[r.qhead]
			if op.held {
				break // its staging lets it go (stage.go)
			}
			if op.void {
				// Answered in place: completed to its sender, never posted.
				r.queue[r.qhead] = nil
				r.qhead++
				voids = append(voids, op)
				continue
			}
			ra := isReadOrAtomic(op.Opcode)
			if ra && r.rdAtomic >= r.lim.MaxRdAtomic {
				break
			}
			if op.split {
				part := r.cutLocked(op)
				if part == nil {
					break // no buffer yet: a completion or bufWait pumps again
				}
				if op.cut == op.Len {
					r.queue[r.qhead] = nil
					r.qhead++
					r.freeLocked(op)
				}
				op = part
			} else {
				r.queue[r.qhead] = nil
				r.qhead++
			}
			if ra {
				r.rdAtomic++
			}
			r.posted++
			r.batch[n] = op
			n++
		}
		if r.qhead == len(r.queue) {
			r.queue, r.qhead = r.queue[:0], 0 // reuse the array from its start
		}
		r.mu.Unlock()
		for _, op := range voids {
			if err := r.from.Complete(op.tok, transport.Completion{}); err != nil && !errors.Is(err, transport.ErrStaleToken) {
				r.s.fail(r.from, fmt.Errorf("complete a message answered in place: %w", err))
			}
			r.mu.Lock()
			r.releaseLocked(op)
			r.mu.Unlock()
		}
		if n == 0 {
			if len(voids) > 0 {
				continue
			}
			return nil, nil
		}
		k, err := r.to.Post(r.batch[:n])
		if err != nil {
			failed := append([]*Op(nil), r.batch[k:n]...)
			clear(r.batch[:n])
			return failed, err
		}
		clear(r.batch[:n])
	}
}

// cutLocked cuts the next part of a split READ, into a pool buffer; nil
// when the pool has none now: then, unless a posted op's completion will
// pump again, a goroutine waits for one (bufWait) and pumps.
func (r *relay) cutLocked(op *Op) *Op {
	n := min(r.part, op.Len-op.cut)
	b := r.spare
	if b != nil && len(b.B()) >= n {
		r.spare = nil
	} else {
		var err error
		if b, err = r.s.pool.Get(n); err != nil {
			r.s.stats.PoolWaits[r.dir].Add(1)
			if r.posted == 0 && !r.bufWait {
				r.bufWait = true
				go r.waitBuf(n)
			}
			return nil
		}
	}
	part := r.newOpLocked()
	part.Opcode, part.Remote, part.RKey, part.tok = transport.OpRead, op.Remote+uint64(op.cut), op.RKey, op.tok
	part.Buf, part.Len, part.partOff = b, n, op.cut
	op.cut += n
	part.more = op.cut < op.Len
	return part
}

// waitBuf waits for a pool buffer of n bytes for the next READ part, then
// pumps. It ends with the session.
func (r *relay) waitBuf(n int) {
	b, err := r.s.pool.GetWait(r.s.ctx, n)
	r.mu.Lock()
	r.bufWait = false
	if err == nil {
		if r.dead || r.spare != nil {
			b.Release()
		} else {
			r.spare = b
		}
	}
	r.mu.Unlock()
	if err == nil {
		r.pump()
	}
}

// done completes an op back on r.from, then ends the session if the op
// failed, or posts what its completion made room for.
func (r *relay) done(op *Op) {
	if op.probe {
		status := op.Status
		r.complete(op)
		if status != transport.StatusSuccess {
			r.s.fail(r.to, fmt.Errorf("the far side (%s) did not answer a liveness probe: %v", [2]string{"B, the target's", "A, the client's"}[r.dir], status))
			return
		}
		r.pump()
		return
	}
	r.s.activity.Add(1)
	if status := op.Status; status != transport.StatusSuccess {
		// The far side's failure is why the session ends: said before
		// the requester's side hears of it (completing a SEND its HCA
		// acknowledged with an error ends that side too). An op flushed
		// because the far peer disconnected is that disconnect.
		err := fmt.Errorf("the far side (%s) failed a relayed %v: %v", [2]string{"B, the target's", "A, the client's"}[r.dir], op.Opcode, status)
		if l, ok := r.to.(PeerLeaver); ok && status == transport.StatusWRFlushErr && l.PeerLeft() {
			err = fmt.Errorf("%w (a relayed %v flushed)", ErrPeerDisconnected, op.Opcode)
		}
		r.s.fail(r.to, err)
		r.complete(op)
		return
	}
	r.complete(op)
	r.pump()
}

// complete completes op back on r.from and releases it; it returns the
// op's status and opcode.
func (r *relay) complete(op *Op) (transport.Status, transport.Opcode) {
	r.mu.Lock()
	r.posted--
	if isReadOrAtomic(op.Opcode) {
		r.rdAtomic--
	}
	r.keepLocked()
	if op.probe {
		status, opcode := op.Status, op.Opcode
		r.probing = false
		r.releaseLocked(op)
		r.mu.Unlock()
		return status, opcode
	}
	r.completing++
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.completing--
		r.mu.Unlock()
	}()
	if op.own != nil {
		status, opcode := op.Status, op.Opcode
		if status != transport.StatusSuccess {
			r.s.stats.Failed[r.dir].Add(1)
		}
		r.ownDone(op)
		return status, opcode
	}
	c := transport.Completion{}
	if op.Status != transport.StatusSuccess {
		// The one table: the far status as the requester will see it.
		c.Status = transport.NAKStatus(transport.NAKCode(op.Status))
		r.s.stats.Failed[r.dir].Add(1)
	}
	switch op.Opcode {
	case transport.OpRead:
		if op.partOff > 0 || op.more {
			// A part of a split READ: parts complete in order.
			r.mu.Lock()
			at := r.partAt
			switch {
			case !op.more:
				r.partAt = 0
			case c.Status == transport.StatusSuccess:
				r.partAt = op.partOff + op.Len
			default:
				r.partAt = -1 // failed: its later parts fail back too, stale
			}
			r.mu.Unlock()
			// Ops flushed at the end complete in any order (a quic
			// endpoint's from a map): only a success is checked.
			if at != op.partOff && at != -1 && op.Status == transport.StatusSuccess {
				r.s.log.Error("a READ's parts completed out of order", "at", op.partOff, "want", at)
				c.Status = transport.StatusRemOpErr
				op.Status = transport.StatusRemOpErr
			}
			c.More = op.more && c.Status == transport.StatusSuccess
		}
		if c.Status == transport.StatusSuccess && op.Len > 0 {
			c.Data, c.Lease = op.Bytes(), op.Buf // released by r.from once sent
			op.Buf = nil
		}
	case transport.OpCompareSwap, transport.OpFetchAdd:
		c.Orig = op.Orig
	}
	if op.ulp {
		r.s.proto.Sent(r.dir, op.ulpTag, op.Status)
	}
	if err := r.from.Complete(op.tok, c); err != nil && !errors.Is(err, transport.ErrStaleToken) {
		r.s.fail(r.from, fmt.Errorf("complete a relayed %v: %w", op.Opcode, err))
	}
	status, opcode := op.Status, op.Opcode
	r.mu.Lock()
	r.releaseLocked(op) // op is another's from here
	r.mu.Unlock()
	return status, opcode
}

func isReadOrAtomic(o transport.Opcode) bool {
	return o == transport.OpRead || o == transport.OpCompareSwap || o == transport.OpFetchAdd
}

func (r *relay) newOpLocked() *Op {
	op := r.free
	if op == nil {
		return &Op{relay: r}
	}
	r.free = op.next
	*op = Op{relay: r, Frags: op.Frags[:0]}
	return op
}

// releaseLocked returns op's buffers to the pool and op to the free list.
func (r *relay) releaseLocked(op *Op) {
	if op.Buf != nil {
		op.Buf.Release()
		op.Buf = nil
	}
	for i, f := range op.Frags {
		f.Buf.Release()
		op.Frags[i] = Frag{}
	}
	r.freeLocked(op)
}

// freeLocked puts op on the free list, keeping its Frags' array.
func (r *relay) freeLocked(op *Op) {
	if op == r.kept {
		r.kept = nil
	}
	*op = Op{relay: r, next: r.free, Frags: op.Frags[:0]}
	r.free = op
}
