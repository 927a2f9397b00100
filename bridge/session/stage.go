package session

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/rbridge/rbridge/bridge/pool"
	"github.com/rbridge/rbridge/roce/transport"
)

// Staging: a message's memory descriptors, where the far endpoint's peer
// would execute their one-sided operations against the gateway's memory
// (a verbs leg: its HCA is that peer's RC peer), are rewritten to name
// staging buffers of the gateway's, exposed to that peer for that access
// only, and the session moves the data between staging and the
// originator's memory itself, with RDMA READ and WRITE on the
// originator's endpoint:
//
//	originator            session                              far peer
//	message ────────────► Message: Stage regions ─┐
//	                      (held; later messages wait behind it, in order)
//	                      routineStage: a buffer per region (waits for
//	                      the pool, in order), Expose on the far endpoint,
//	                      Restage rewrites the descriptors
//	READ regions ◄─────── pulls (READ on the originator's endpoint)
//	                      all pulled: the message goes on ─────────────►
//	                                             far READs/WRITEs staging
//	                      response: Message: Finish ◄──────────────────
//	WRITE ◄────────────── pushes (WRITE regions), queued before the response
//	                      routineRevoke: exposures revoked, buffers back;
//	response ◄─────────── then the response goes on (RC order: after the
//	                      pushes, so the data is there before it)
//
// A message that cannot be staged (its region is larger than the pool's
// largest buffer, or the far endpoint would not expose it) is answered
// in place: the Stager's Unstaged gives the reply (the protocol's error
// for that request, an NVMe data transfer error), which goes back to the
// sender, and the message is never relayed. A failed pull or push fails
// the originator's connection (an RC requester's QP leaves RTS on an
// error completion), which ends the session, as any far failure does.
//
// Nothing the far peer can reach outlives its request: an exposure is
// revoked before the response that ends its request is relayed, and all
// of them at the teardown, after the endpoints closed.

// An Exposer is an endpoint whose peer executes one-sided operations
// against the gateway's own memory (a verbs QP: its HCA answers them):
// descriptors that peer will use must name staging the endpoint exposed.
type Exposer interface {
	Endpoint
	// Expose lets the endpoint's peer READ b (WRITE it, when write) until
	// the Exposure is revoked. b lies in the session's pool.
	Expose(b []byte, write bool) (Exposure, error)
}

// An Exposure is staging memory a far peer may reach.
type Exposure interface {
	// Addr and RKey are what a descriptor names: the first byte's
	// address and the key.
	Addr() uint64
	RKey() uint32
	// Revoke ends the peer's access: once it returned, an operation with
	// the key fails at the peer with a remote access error.
	Revoke() error
}

// Region is a piece of the originator's memory that a message's
// descriptor names, as a Stager asks the session to stage it.
type Region struct {
	Remote uint64
	RKey   uint32
	Len    int
	// Write says the far peer WRITEs the region (the session pushes the
	// staging to Remote when the response comes); otherwise the far peer
	// READs it (the session pulls Remote into the staging first).
	Write bool
}

// A Stager is a Protocol that stages: it sets Message.Stage, Reply,
// Finish and Push, and the session calls these besides Message and Sent.
type Stager interface {
	Protocol
	// Restage rewrites, in b (the message's bytes), the descriptor of
	// region i of the message of direction dir tagged tag to name staging
	// at addr with rkey. It runs with the message held (nothing else
	// touches its bytes), under the relay's lock: it must not block.
	Restage(dir int, tag uint64, b Pieces, i int, addr uint64, rkey uint32) error
	// Unstaged says that the message of direction dir tagged tag could
	// not be staged, and why: it returns the reply that goes back to the
	// message's sender in its place (the protocol's error for that
	// request), or nil, and then the session ends.
	Unstaged(dir int, tag uint64, why error) []byte
}

// ErrTooLarge matches an Unstaged error for a region longer than the
// pool's largest buffer.
var ErrTooLarge = errors.New("larger than the largest staging buffer")

type stageKey struct {
	dir int
	tag uint64
}

// staged is one message's staging, from its Message to the revocation
// after its response (or to its reply in place).
type staged struct {
	key     stageKey
	r       *relay // the message's relay; op waits in its queue
	op      *Op    // the held message (r.mu guards its fields)
	regions []Region
	reply   []byte // Message's Reply: answered in place, nothing staged

	// Guarded by stager.mu.
	bufs    []*pool.Buf // a buffer per region, as taken
	exps    []Exposure  // an exposure per region, as made
	pulls   int         // pulls posted and not completed
	relayed bool        // staged and let go: its response may Finish it
	ended   bool        // exposures revoked, buffers back

	resp  *Op // the response, held until the exposures are revoked
	respR *relay
}

// stager is a session's staging: its records and the two goroutines
// that work them, started at the first staged message.
type stager struct {
	s *Session

	mu      sync.Mutex // guards the fields below and staged's
	recs    map[stageKey]*staged
	jobs    []*staged // for routineStage, in order
	revokes []*staged // for routineRevoke, in order
	started bool
	closed  bool
	wake    [2]chan struct{} // routineStage's, routineRevoke's
}

// addLocked records a message to stage and hands it to routineStage. It
// runs under the message relay's lock. A record for the same tag still
// live is the protocol's error.
func (st *stager) add(rec *staged) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return ErrClosed
	}
	if st.recs == nil {
		st.recs = map[stageKey]*staged{}
	}
	if rec.reply == nil {
		if _, dup := st.recs[rec.key]; dup {
			return fmt.Errorf("a message tagged %d is staged already", rec.key.tag)
		}
		st.recs[rec.key] = rec
	}
	st.jobs = append(st.jobs, rec)
	st.startLocked()
	notify(st.wake[0])
	return nil
}

func (st *stager) startLocked() {
	if st.started {
		return
	}
	st.started = true
	st.wake = [2]chan struct{}{make(chan struct{}, 1), make(chan struct{}, 1)}
	go st.routineStage()
	go st.routineRevoke()
}

func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// finishLocked takes the record of a staged message whose response
// arrived: it queues on r (the response's relay, whose lock the caller
// holds) the pushes of what the far peer wrote, when push, and holds the
// response until routineRevoke ended the staging. It reports whether
// there was a staging to finish: something of that tag staged and
// relayed.
func (st *stager) finishLocked(key stageKey, resp *Op, r *relay, push bool, pushed []int, patch func(int, []byte)) (bool, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	rec := st.recs[key]
	if rec == nil || !rec.relayed || rec.resp != nil || st.closed {
		return false, nil
	}
	if push && pushed != nil {
		for i, n := range pushed {
			if i >= len(rec.regions) || n < 0 || n > rec.regions[i].Len || (n > 0 && !rec.regions[i].Write) {
				return false, fmt.Errorf("the response says the far peer wrote %d bytes into region %d of %d, which it could not", n, i, len(rec.regions))
			}
		}
	}
	for i, g := range rec.regions {
		n := g.Len
		if push && pushed != nil {
			n = 0
			if i < len(pushed) {
				n = pushed[i]
			}
		}
		if !push || !g.Write || n == 0 {
			continue
		}
		if patch != nil {
			patch(i, rec.bufs[i].B()[:n])
		}
		r.queueMoveLocked(rec, i, transport.OpWrite, n)
	}
	resp.held = true
	rec.resp, rec.respR = resp, r
	if st.s.log.Enabled(st.s.ctx, slog.LevelDebug) {
		st.s.log.Debug("staged message's response", "dir", rec.key.dir, "tag", rec.key.tag, "push", push)
	}
	st.revokes = append(st.revokes, rec) // after the pushes took their references
	notify(st.wake[1])
	return true, nil
}

// next waits for the next record of queue q (0: jobs, 1: revokes); nil
// once the session ended.
func (st *stager) next(q int) *staged {
	for {
		st.mu.Lock()
		if st.closed {
			st.mu.Unlock()
			return nil
		}
		list := &st.jobs
		if q == 1 {
			list = &st.revokes
		}
		if len(*list) > 0 {
			rec := (*list)[0]
			(*list)[0] = nil
			*list = (*list)[1:]
			st.mu.Unlock()
			return rec
		}
		st.mu.Unlock()
		select {
		case <-st.wake[q]:
		case <-st.s.ctx.Done():
		}
	}
}

// routineStage stages messages in the order they came: a message that
// waits for the pool holds up those after it.
func (st *stager) routineStage() {
	for {
		rec := st.next(0)
		if rec == nil {
			return
		}
		if rec.reply != nil {
			st.answer(rec, rec.reply)
			continue
		}
		st.stage(rec)
	}
}

// routineRevoke ends the staging of requests whose response came, then
// lets the response go.
//
// Up to revokers end at once: ending is system calls that wait on the
// device (a window's deallocation, an MR's deregistration), and one at a
// time they queued a burst of completions behind each other (a median
// 36 ms from a completion's arrival to its relaying, 4 KiB reads at depth
// 32 in the guest). The responses still go in their relay's order: a
// held response holds those queued after it.
func (st *stager) routineRevoke() {
	sem := make(chan struct{}, revokers)
	for {
		rec := st.next(1)
		if rec == nil {
			return
		}
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			st.end(rec)
			if st.s.log.Enabled(st.s.ctx, slog.LevelDebug) {
				st.s.log.Debug("staging ended: the response goes on", "dir", rec.key.dir, "tag", rec.key.tag)
			}
			rec.respR.letGoOf(rec.resp)
		}()
	}
}

// revokers is how many stagings of a session end at once.
const revokers = 8

// stage takes a buffer per region, exposes each on the far endpoint,
// rewrites the descriptors and pulls what the far peer will READ.
func (st *stager) stage(rec *staged) {
	s := st.s
	far, _ := rec.r.to.(Exposer)
	for _, g := range rec.regions {
		if g.Len > s.pool.Largest() {
			st.fail(rec, fmt.Errorf("a region of %d bytes: %w (%d bytes)", g.Len, ErrTooLarge, s.pool.Largest()))
			return
		}
		// Staging may take the pool's reserve, which a message's own
		// buffer may not: a message queued behind this one holds its
		// buffer until this one is relayed.
		b, err := s.pool.GetReserve(max(g.Len, 1))
		if errors.Is(err, pool.ErrExhausted) {
			s.stats.StageWaits[rec.key.dir].Add(1)
			b, err = s.pool.GetWaitReserve(s.ctx, max(g.Len, 1))
		}
		if err != nil {
			return // the session ends: its teardown ends the record
		}
		if g.Write {
			clear(b.B()[:g.Len]) // the far peer may write less: no stale bytes go back
		}
		if !st.keep(rec, b, nil) {
			return
		}
		x, err := far.Expose(b.B()[:g.Len:g.Len], g.Write)
		if err != nil {
			st.fail(rec, fmt.Errorf("expose %d bytes of staging to the far peer: %w", g.Len, err))
			return
		}
		if !st.keep(rec, nil, x) {
			return
		}
		if s.log.Enabled(s.ctx, slog.LevelDebug) {
			s.log.Debug("staging exposed", "dir", rec.key.dir, "tag", rec.key.tag, "addr", fmt.Sprintf("%#x", x.Addr()), "rkey", fmt.Sprintf("%#x", x.RKey()), "bytes", g.Len, "far_writes", g.Write)
		}
	}
	r, stg := rec.r, s.proto.(Stager)
	r.mu.Lock()
	if r.dead {
		r.mu.Unlock()
		return
	}
	var err error
	p := opPieces(rec.op, nil)
	st.mu.Lock()
	exps := rec.exps
	st.mu.Unlock()
	for i, x := range exps {
		if err = stg.Restage(rec.key.dir, rec.key.tag, p, i, x.Addr(), x.RKey()); err != nil {
			break
		}
	}
	r.mu.Unlock()
	if err != nil {
		st.fail(rec, fmt.Errorf("rewrite its descriptors: %w", err))
		return
	}
	var staged uint64
	pulls := 0
	for _, g := range rec.regions {
		staged += uint64(g.Len)
		if !g.Write && g.Len > 0 {
			pulls++
		}
	}
	s.stats.Staged[rec.key.dir].Add(1)
	s.stats.StagedBytes[rec.key.dir].Add(staged)
	if s.log.Enabled(s.ctx, slog.LevelDebug) {
		s.log.Debug("staged", "dir", rec.key.dir, "tag", rec.key.tag, "regions", len(rec.regions), "bytes", staged, "pulls", pulls)
	}
	if pulls == 0 {
		st.letGo(rec)
		return
	}
	st.mu.Lock()
	rec.pulls = pulls
	st.mu.Unlock()
	back := s.other(r)
	back.mu.Lock()
	if back.dead {
		back.mu.Unlock()
		return
	}
	for i, g := range rec.regions {
		if g.Write || g.Len == 0 {
			continue
		}
		back.queueMoveLocked(rec, i, transport.OpRead, g.Len)
	}
	back.mu.Unlock()
	back.pump()
}

// keep adds a buffer or an exposure to rec; it reports false when the
// session ended meanwhile (then it let go of them itself).
func (st *stager) keep(rec *staged, b *pool.Buf, x Exposure) bool {
	st.mu.Lock()
	if st.closed || rec.ended {
		st.mu.Unlock()
		if b != nil {
			b.Release()
		}
		if x != nil {
			st.revoke(x)
		}
		return false
	}
	if b != nil {
		rec.bufs = append(rec.bufs, b)
		st.s.stats.StagingInUse.Add(int64(len(b.B())))
	}
	if x != nil {
		rec.exps = append(rec.exps, x)
	}
	st.mu.Unlock()
	return true
}

// letGo lets a staged message go on to the far endpoint.
func (st *stager) letGo(rec *staged) {
	if st.s.log.Enabled(st.s.ctx, slog.LevelDebug) {
		st.s.log.Debug("staged message goes on", "dir", rec.key.dir, "tag", rec.key.tag)
	}
	st.mu.Lock()
	rec.relayed = true
	st.mu.Unlock()
	rec.r.letGoOf(rec.op)
}

// letGoOf lets op, held in r's queue, be posted, and posts what it held
// up (nothing after the teardown: op is no longer r's then).
func (r *relay) letGoOf(op *Op) {
	r.mu.Lock()
	if !r.dead {
		op.held = false
	}
	r.mu.Unlock()
	r.pump()
}

// fail answers a message that could not be staged with the Stager's
// reply, or ends the session.
//
// A message whose far peer is gone (the session ends, or that peer
// disconnected) is not answered: it could never have reached that peer,
// and its sender learns so as a protocol's transport says it, by its own
// connection's end (an NFS client retransmits after it reconnects, an
// NVMe host fails the queue over). An answer in its place would say the
// far peer refused it, which an RPC client reports to its application.
func (st *stager) fail(rec *staged, why error) {
	s := st.s
	if s.farGone(rec.r.to) {
		if s.log.Enabled(s.ctx, slog.LevelDebug) {
			s.log.Debug("a message for a peer that left is not staged: its sender hears of it by the disconnect", "dir", rec.key.dir, "tag", rec.key.tag, "why", why)
		}
		st.end(rec)
		s.fail(rec.r.to, fmt.Errorf("%w (a message was being staged for it)", ErrPeerDisconnected))
		return
	}
	s.stats.StageFailed[rec.key.dir].Add(1)
	reply := s.proto.(Stager).Unstaged(rec.key.dir, rec.key.tag, why)
	st.end(rec)
	if reply == nil {
		s.fail(nil, fmt.Errorf("stage a message: %w", why))
		return
	}
	s.log.Warn("a message could not be staged: answered in its place", "dir", rec.key.dir, "tag", rec.key.tag, "why", why)
	st.answer(rec, reply)
}

// answer sends reply back to the sender of rec's message in its place:
// the message is completed to its sender and never relayed.
func (st *stager) answer(rec *staged, reply []byte) {
	s := st.s
	b, err := s.pool.GetWaitReserve(s.ctx, max(len(reply), 1))
	if err != nil {
		return // the session ends
	}
	copy(b.B(), reply)
	back := s.other(rec.r)
	back.mu.Lock()
	if back.dead {
		back.mu.Unlock()
		b.Release()
		return
	}
	op := back.newOpLocked()
	op.Opcode, op.Buf, op.Len, op.own = transport.OpSend, b, len(reply), rec
	back.queue = append(back.queue, op)
	back.mu.Unlock()
	r := rec.r
	r.mu.Lock()
	if !r.dead {
		rec.op.held, rec.op.void = false, true
	}
	r.mu.Unlock()
	r.pump()
	back.pump()
}

// end revokes rec's exposures and returns its buffers, once.
func (st *stager) end(rec *staged) {
	st.mu.Lock()
	if rec.ended {
		st.mu.Unlock()
		return
	}
	rec.ended = true
	if st.recs[rec.key] == rec {
		delete(st.recs, rec.key)
	}
	exps, bufs := rec.exps, rec.bufs
	rec.exps, rec.bufs = nil, nil
	st.mu.Unlock()
	for _, x := range exps {
		st.revoke(x)
	}
	for _, b := range bufs {
		st.s.stats.StagingInUse.Add(-int64(len(b.B())))
		b.Release()
	}
}

func (st *stager) revoke(x Exposure) {
	if err := x.Revoke(); err != nil {
		st.s.log.Error("revoke a far peer's access to staging", "rkey", fmt.Sprintf("%#x", x.RKey()), "err", err)
	}
}

// close ends every record, and every one made from here: the teardown
// calls it before it closes the endpoints (while a window's QP still
// completes its invalidation), and again after.
func (st *stager) close() {
	st.mu.Lock()
	st.closed = true
	recs := make([]*staged, 0, len(st.recs))
	for _, rec := range st.recs {
		recs = append(recs, rec)
	}
	for _, q := range [][]*staged{st.jobs, st.revokes} {
		recs = append(recs, q...)
	}
	st.jobs, st.revokes = nil, nil
	st.mu.Unlock()
	for _, rec := range recs {
		st.end(rec)
	}
}

// ownDone takes the completion of an op the session issued itself (a
// pull, a push, a reply in place): nothing is completed back.
func (r *relay) ownDone(op *Op) {
	st, rec := &r.s.stage, op.own
	if op.Status == transport.StatusSuccess {
		switch op.Opcode {
		case transport.OpRead:
			r.s.stats.Pulled[rec.key.dir].Add(uint64(op.Len))
			st.mu.Lock()
			rec.pulls--
			last := rec.pulls == 0 && !rec.ended
			st.mu.Unlock()
			if last {
				st.letGo(rec)
			}
		case transport.OpWrite:
			r.s.stats.Pushed[rec.key.dir].Add(uint64(op.Len))
		}
	}
	r.mu.Lock()
	r.releaseLocked(op)
	r.mu.Unlock()
}

// stageLocked takes what a Stager set on m: op is held for its staging,
// or answered in place; the response that finishes a staged message gets
// its pushes queued before it, and is held until that staging ended. It
// runs under r.mu, before op is queued.
func (r *relay) stageLocked(op *Op, m *Message) error {
	st := &r.s.stage
	if (len(m.Stage) > 0 || m.Reply != nil || m.Finishes) && r.stager == nil {
		return errors.New("the protocol staged a message, and it does not stage")
	}
	if len(m.Stage) > 0 && !m.Staging {
		return errors.New("the protocol staged a message whose far peer reaches no gateway memory")
	}
	if len(m.Stage) > 0 || m.Reply != nil {
		rec := &staged{key: stageKey{r.dir, m.Tag}, r: r, op: op, regions: slices.Clone(m.Stage)}
		if m.Reply != nil {
			rec.reply = slices.Clone(m.Reply)
		}
		if err := st.add(rec); err != nil {
			return err
		}
		op.held = true
		return nil
	}
	if !m.Finishes {
		return nil
	}
	_, err := st.finishLocked(stageKey{1 - r.dir, m.Finish}, op, r, m.Push, m.Pushed, m.Patch)
	return err
}

// queueMoveLocked queues on r the session's own move of rec's region i
// between its staging and the originator's memory: a pull (OpRead) or a
// push (OpWrite), holding a reference on the staging buffer until it
// completes (ownDone). The caller holds r.mu and rec's stager's mu or
// owns rec's buffers.
func (r *relay) queueMoveLocked(rec *staged, i int, opcode transport.Opcode, n int) {
	g := rec.regions[i]
	op := r.newOpLocked()
	op.Opcode, op.Remote, op.RKey, op.own = opcode, g.Remote, g.RKey, rec
	rec.bufs[i].Ref()
	op.Buf, op.Len = rec.bufs[i], n
	r.queue = append(r.queue, op)
}

// other is the relay that posts on the endpoint r takes requests from.
func (s *Session) other(r *relay) *relay {
	if r == &s.ab {
		return &s.ba
	}
	return &s.ab
}

// opPieces appends op's bytes, as they lie, to p.
func opPieces(op *Op, p Pieces) Pieces {
	if op.Buf != nil {
		return append(p, op.Bytes())
	}
	for _, f := range op.Frags {
		p = append(p, f.Buf.B()[f.Off:f.Off+f.Len])
	}
	return p
}
