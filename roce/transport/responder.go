package transport

import (
	"fmt"
	"slices"

	"github.com/rbridge/rbridge/roce"
)

// responder is the receive side of an RC QP; its fields are guarded by
// QP.mu.
//
// Requests pass through two PSN marks. epsn is the next PSN expected: a
// packet at epsn is checked and handed to the Target. The frontier is the
// first PSN the Target has not completed: the first PSN of pending[0], or
// epsn when nothing is pending. Responses go out as the frontier moves, so
// every response acknowledges only completed PSNs:
//
//	      completed         pending (handed to the Target)       not yet received
//	... ───────────────┼──────────────────────────────────────┼─────────────────────
//	                frontier                                 epsn
//
// A packet before the frontier is a duplicate of completed work (ACK it
// again, serve a READ again, replay an atomic); one between frontier and
// epsn duplicates a pending request (dropped: the completion answers it);
// one past epsn is out of sequence (a NAK at epsn, sent once the frontier
// reaches epsn). An RNR NAK and the NAK of a malformed request wait for
// the frontier in the same way.
type responder struct {
	// req is the Request handed to the target, one packet's at a time:
	// passed through an interface it would escape, an allocation per
	// packet.
	req Request

	epsn roce.PSN // the PSN expected next
	msn  uint32   // messages completed, as far as the frontier (24 bits)
	gen  uint32   // incarnation: tokens of an earlier one are stale

	// The SEND or WRITE message in progress (msg is KindNone between
	// messages): how far into it epsn is, and a WRITE's RETH.
	msg    roce.Kind
	msgOff int
	wva    uint64
	wrkey  uint32
	wtotal uint32

	pending  units  // handed to the Target, not passed by the frontier; oldest first
	rdAtomic int    // READs and atomics among pending
	replays  []unit // duplicate READs the Target serves again

	// A NAK for epsn waiting for the frontier to reach epsn, and whether
	// the sequence-error NAK for epsn went out.
	wait    nakWait
	waitNAK uint8 // nakFatal's code
	nakSent bool
	// held says the request at epsn was held (the Target's Hold): no NAK
	// for it, or for anything after it, until Resume.
	held bool
	// errFront is the frontier when the QP entered the error state from
	// RTR or RTS (errSet): everything before it completed and was
	// acknowledged (ackInErrorLocked).
	errFront roce.PSN
	errSet   bool

	ackPending bool
	ackPSN     roce.PSN
	// acked is the last PSN an ACK (or READ response, atomic ACK) said
	// was done; ackedSet once one went out.
	acked    roce.PSN
	ackedSet bool

	// The PSNs of the last packets that arrived out of sequence (a ring),
	// and of the last duplicates: what a stalled requester resends.
	lateRing [8]uint32
	lateN    int

	reads   []*readResp // READ responses still to send, oldest first
	atomics [16]atomicResult
	atomicN int
}

// nakWait is a NAK held until the frontier reaches epsn.
type nakWait uint8

const (
	nakNone  nakWait = iota
	nakSeq           // a PSN sequence error
	nakRNR           // the Target had no credit
	nakFatal         // a malformed request: NAK waitNAK, then ERR
)

// unit is a request (or several packets of one message) handed to the
// Target and not yet passed by the frontier.
type unit struct {
	first, last roce.PSN
	kind        roce.Kind // KindSend, KindWrite, KindReadRequest, KindAtomic
	state       Result    // Pending, Done or Failed
	status      Status    // Failed
	ackReq      bool      // a packet in it asked for an ACK
	msgs        uint32    // messages that end in it (MSN increments)
	rr          *readResp // READ: its bytes as they complete, and its responses
	orig        uint64    // atomic: the value before
	readLen     uint32    // READ: bytes asked for
}

// units is a FIFO ring of units: the pending requests, in PSN order.
type units struct {
	buf     []unit // len is a power of two, or 0
	head, n int
}

func (q *units) at(i int) *unit { return &q.buf[(q.head+i)&(len(q.buf)-1)] }

func (q *units) push(u unit) {
	if q.n == len(q.buf) {
		grown := make([]unit, max(2*len(q.buf), 16))
		for i := range q.n {
			grown[i] = *q.at(i)
		}
		q.buf, q.head = grown, 0
	}
	q.buf[(q.head+q.n)&(len(q.buf)-1)] = u
	q.n++
}

func (q *units) pop() unit {
	p := q.at(0)
	u := *p
	*p = unit{}
	q.head = (q.head + 1) & (len(q.buf) - 1)
	q.n--
	return u
}

func (q *units) clear() {
	clear(q.buf)
	q.head, q.n = 0, 0
}

// readResp is a READ being answered. Its bytes come from the Target in
// parts (Completion.More), in order; its responses leave as far as the
// parts reach, once it is in reads (at the frontier, or served again):
//
//	bytes:  | sent | parts[0] ... parts[len-1] |  not completed yet  |
//	        0      off                         have                 total
//
// Every part but the last is a whole number of path MTUs, so a response
// packet never spans two parts.
type readResp struct {
	parts  []readPart // completed and not all sent, oldest first
	off    int        // where parts[0] starts in the READ
	have   int        // bytes completed
	total  int        // bytes asked for
	psn    roce.PSN   // PSN of the first response
	n      int        // responses in all
	k      int        // next response to send
	msn    uint32
	queued bool // in reads
}

// readPart is a span of a READ's bytes, held until Lease is released.
type readPart struct {
	data  []byte
	lease Lease
}

// add appends a completed part; it reports whether the part fits: more
// parts must leave room, be non-empty and be a whole number of mtu, the
// last one must end the READ.
func (r *readResp) add(data []byte, lease Lease, more bool, mtu int) bool {
	n := r.have + len(data)
	switch {
	case more && (len(data) == 0 || len(data)%mtu != 0 || n >= r.total),
		!more && n != r.total:
		return false
	}
	if len(data) > 0 || lease != nil {
		r.parts = append(r.parts, readPart{data: data, lease: lease})
	}
	r.have = n
	return true
}

// done says every byte has been completed.
func (r *readResp) done() bool { return r.have == r.total }

// releaseTo hands the parts' leases to the QP, which releases them once
// the packets queued so far, which may point into them, are sent.
func (r *readResp) releaseTo(qp *QP) {
	for i, p := range r.parts {
		if p.lease != nil {
			qp.txLeases = append(qp.txLeases, p.lease)
		}
		r.parts[i] = readPart{}
	}
	r.parts = r.parts[:0]
}

// newReadResp starts the answer of a READ of n bytes at psn.
func (qp *QP) newReadResp(psn roce.PSN, n uint32) *readResp {
	return &readResp{psn: psn, total: int(n), n: max((int(n)+qp.mtu-1)/qp.mtu, 1)}
}

type atomicResult struct {
	psn   roce.PSN
	orig  uint64
	valid bool
}

// ResponderState is a snapshot of a QP's responder, for status and for
// finding out why a connection stalls.
type ResponderState struct {
	EPSN, Frontier uint32   // the next PSN expected; the first not completed
	Pending        int      // requests at the target, not passed by the frontier
	RdAtomic       int      // READs and atomics among them
	WaitingNAK     string   // the NAK held for the frontier: "", "sequence", "rnr", "fatal"
	NAKSent        bool     // the sequence NAK for EPSN went out
	ReadsQueued    int      // READ responses still to send
	OutOfSequence  []uint32 // the PSNs of the last packets that came out of sequence, oldest first
}

// Responder returns a snapshot of the QP's responder.
func (qp *QP) Responder() ResponderState {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	s := &qp.resp
	return ResponderState{EPSN: uint32(s.epsn), Frontier: uint32(s.frontier()), Pending: s.pending.n, RdAtomic: s.rdAtomic,
		WaitingNAK: [...]string{"", "sequence", "rnr", "fatal"}[s.wait], NAKSent: s.nakSent, ReadsQueued: len(s.reads),
		OutOfSequence: s.lateLocked()}
}

func (s *responder) lateLocked() []uint32 {
	var out []uint32
	for i := max(s.lateN-len(s.lateRing), 0); i < s.lateN; i++ {
		out = append(out, s.lateRing[i%len(s.lateRing)])
	}
	return out
}

// maxBurst bounds the READ responses queued at once; the rest follow as the
// device sends them.
const maxBurst = 64

// defaultRdAtomic is the READs and atomics a responder takes at once when
// QPAttr.MaxDestRdAtomic is 0.
const defaultRdAtomic = 16

func (s *responder) init(psn roce.PSN) {
	gen := s.gen + 1
	reads, pending := s.reads[:0], s.pending
	pending.clear()
	*s = responder{epsn: psn, gen: gen, reads: reads, pending: pending}
}

// frontier returns the first PSN not completed.
func (s *responder) frontier() roce.PSN {
	if s.pending.n > 0 {
		return s.pending.at(0).first
	}
	return s.epsn
}

// handleRequestLocked processes a request packet (the responder).
func (qp *QP) handleRequestLocked(p *roce.Packet) {
	s := &qp.resp
	psn := roce.PSN(p.BTH.PSN())
	if s.wait == nakFatal {
		return // the QP enters ERR once the frontier reaches the bad request
	}
	switch d := psn.Sub(s.epsn); {
	case d < 0:
		qp.duplicateLocked(p, psn)
		return
	case d > 0:
		qp.dev.stats.RxOutOfSequence.Add(1)
		s.lateRing[s.lateN%len(s.lateRing)] = uint32(psn)
		s.lateN++
		if !s.nakSent && s.wait == nakNone && !s.held {
			s.wait = nakSeq
			qp.nakAtFrontierLocked()
		}
		return
	}
	if s.wait != nakNone {
		s.wait = nakNone // the packet awaited has come
	}
	op := p.Opcode()
	pos := op.Position()
	kind := op.Kind()
	continuing := pos == roce.PositionMiddle || pos == roce.PositionLast
	switch {
	case continuing && s.msg == roce.KindNone,
		!continuing && s.msg != roce.KindNone,
		s.msg != roce.KindNone && kind != s.msg:
		qp.malformedLocked(roce.NAKInvalidRequest)
		return
	}
	first := pos == roce.PositionFirst || pos == roce.PositionOnly
	last := pos == roce.PositionLast || pos == roce.PositionOnly
	r := &s.req
	*r = Request{Token: Token{psn: psn, gen: s.gen}, PSN: psn, First: first, Last: last}
	if m := qp.rxMsg; m != nil && m.Lent {
		r.Lent, r.Frame = true, m.Frame
	}
	npk := 1
	switch kind {
	case roce.KindSend, roce.KindWrite:
		if (pos == roce.PositionFirst || pos == roce.PositionMiddle) && len(p.Payload) != qp.mtu {
			qp.malformedLocked(roce.NAKInvalidRequest)
			return
		}
		r.Payload = p.Payload
		if first {
			r.Offset = 0
		} else {
			r.Offset = s.msgOff
		}
		r.Op = OpSend
		if kind == roce.KindWrite {
			r.Op = OpWrite
			va, rkey, total := s.wva, s.wrkey, s.wtotal
			if first {
				va, rkey, total = p.RETH.VA(), p.RETH.RKey(), p.RETH.DMALen()
			}
			n := uint64(len(p.Payload))
			if uint64(r.Offset)+n > uint64(total) || (last && uint64(r.Offset)+n != uint64(total)) {
				qp.malformedLocked(roce.NAKInvalidRequest)
				return
			}
			r.VA, r.RKey, r.Length = va+uint64(r.Offset), rkey, total
		}
		if last && p.ImmDt != nil {
			r.Imm = p.ImmDt.Imm()
			r.Op++ // OpSend -> OpSendWithImm, OpWrite -> OpWriteWithImm
		}
		if last && p.IETH != nil && kind == roce.KindSend {
			r.Op, r.InvRKey = OpSendWithInv, p.IETH.RKey()
		}
	case roce.KindReadRequest:
		r.Op, r.VA, r.RKey, r.Length = OpRead, p.RETH.VA(), p.RETH.RKey(), p.RETH.DMALen()
		npk = max((int(r.Length)+qp.mtu-1)/qp.mtu, 1)
	case roce.KindAtomic:
		a := p.AtomicETH
		r.Op, r.VA, r.RKey, r.Compare, r.SwapAdd = OpCompareSwap, a.VA(), a.RKey(), a.Compare(), a.SwapAdd()
		if op == roce.RCFetchAdd {
			r.Op = OpFetchAdd
		}
		if r.VA%8 != 0 {
			qp.malformedLocked(roce.NAKInvalidRequest)
			return
		}
	default:
		qp.malformedLocked(roce.NAKInvalidRequest)
		return
	}
	if (kind == roce.KindReadRequest || kind == roce.KindAtomic) && s.rdAtomic >= qp.maxDestRdAtomicLocked() {
		// The requester exceeded the responder resources it was given.
		qp.malformedLocked(roce.NAKInvalidRequest)
		return
	}
	reply := qp.target.Request(r)
	if qp.state != StateRTR && qp.state != StateRTS {
		return // the target moved the QP to ERR
	}
	if reply.Result == Hold {
		if reply.Lease != nil {
			reply.Lease.Release()
		}
		s.held = true
		return
	}
	if reply.Result == NoCredit {
		if reply.Lease != nil {
			reply.Lease.Release()
		}
		// An RNR NAK says "no receive WQE" and is defined for what
		// consumes one: a SEND's first packet, a WRITE_WITH_IMM's last.
		// Requesters resume other messages after one badly (rxe takes the
		// refused PSN as acknowledged), so for the rest the refusal is a
		// sequence NAK for the PSN: "send again from here", once the
		// frontier reaches it, when what was pending has freed its credit.
		if r.RNR() {
			s.wait = nakRNR
		} else if !s.nakSent {
			s.wait = nakSeq
		}
		qp.nakAtFrontierLocked()
		return
	}
	// The request is taken: move past it.
	switch kind {
	case roce.KindSend, roce.KindWrite:
		if first && kind == roce.KindWrite {
			s.wva, s.wrkey, s.wtotal = p.RETH.VA(), p.RETH.RKey(), p.RETH.DMALen()
		}
		s.msgOff = r.Offset + len(p.Payload)
		s.msg = kind
		if last {
			s.msg = roce.KindNone
		}
	}
	s.epsn = psn.Add(npk)
	s.nakSent, s.held = false, false
	u := unit{first: psn, last: psn.Add(npk - 1), kind: kind, state: reply.Result, status: reply.Status,
		ackReq: p.BTH.AckReq(), orig: reply.Orig, readLen: r.Length}
	if last {
		u.msgs = 1
	}
	switch {
	case kind == roce.KindReadRequest:
		u.rr = qp.newReadResp(psn, r.Length)
		if reply.Result == Done && !u.rr.add(reply.Data, reply.Lease, false, qp.mtu) {
			qp.dev.log.Error("responder: target's READ data has the wrong length", "qp", qp.qpn, "psn", uint32(psn), "len", len(reply.Data), "want", r.Length)
			u.state, u.status = Failed, StatusRemOpErr
			if reply.Lease != nil {
				reply.Lease.Release()
			}
		} else if reply.Result != Done && reply.Lease != nil {
			reply.Lease.Release()
		}
	case reply.Lease != nil:
		reply.Lease.Release()
	}
	qp.addUnitLocked(u, reply.Result == Pending && reply.Join)
	qp.advanceLocked()
}

// maxDestRdAtomicLocked is how many READs and atomics the responder takes at
// once: the responder resources the connection negotiated.
func (qp *QP) maxDestRdAtomicLocked() int {
	if qp.attr.MaxDestRdAtomic > 0 {
		return qp.attr.MaxDestRdAtomic
	}
	return defaultRdAtomic
}

// addUnitLocked appends u to the pending requests, joined to the last one
// when asked (or when both are completed SEND/WRITE packets).
func (qp *QP) addUnitLocked(u unit, join bool) {
	s := &qp.resp
	if n := s.pending.n; n > 0 {
		t := s.pending.at(n - 1)
		twoSided := func(k roce.Kind) bool { return k == roce.KindSend || k == roce.KindWrite }
		if twoSided(t.kind) && twoSided(u.kind) && t.last.Next() == u.first &&
			((join && t.state == Pending && t.kind == u.kind) || (u.state == Done && t.state == Done)) {
			t.last = u.last
			t.ackReq = t.ackReq || u.ackReq
			t.msgs += u.msgs
			return
		}
	}
	if u.kind == roce.KindReadRequest || u.kind == roce.KindAtomic {
		s.rdAtomic++
	}
	s.pending.push(u)
}

// completeLocked records the completion of a pending request, or of the
// next part of a READ's bytes (c.More).
func (qp *QP) completeLocked(tok Token, c Completion) error {
	s := &qp.resp
	if tok.ext || tok.gen != s.gen || (qp.state != StateRTR && qp.state != StateRTS) {
		return ErrStaleToken
	}
	if tok.dup {
		return qp.completeReplayLocked(tok, c)
	}
	for i := range s.pending.n {
		u := s.pending.at(i)
		if u.first != tok.psn {
			continue
		}
		if u.state != Pending {
			return ErrStaleToken
		}
		if c.More && (u.kind != roce.KindReadRequest || c.Status != StatusSuccess) {
			return fmt.Errorf("transport: QP %#x: a part of a %v completion for PSN %d: %w", qp.qpn, u.kind, uint32(u.first), ErrBadPart)
		}
		u.state, u.status = Done, c.Status
		if c.Status != StatusSuccess {
			u.state = Failed
		}
		switch u.kind {
		case roce.KindReadRequest:
			if u.state == Failed {
				qp.dropReadLocked(u.rr)
				if c.Lease != nil {
					c.Lease.Release()
				}
				break
			}
			if !u.rr.add(c.Data, c.Lease, c.More, qp.mtu) {
				qp.dev.log.Error("responder: completed READ has the wrong length", "qp", qp.qpn, "psn", uint32(u.first),
					"part", len(c.Data), "have", u.rr.have, "want", u.readLen, "more", c.More)
				u.state, u.status = Failed, StatusRemOpErr
				qp.dropReadLocked(u.rr)
				if c.Lease != nil {
					c.Lease.Release()
				}
				break
			}
			if c.More {
				u.state = Pending
				if u.rr.queued {
					qp.respondLocked()
				} else if i == 0 {
					qp.advanceLocked() // at the frontier: its responses start
				}
				return nil
			}
		case roce.KindAtomic:
			u.orig = c.Orig
		default:
			if c.Lease != nil {
				c.Lease.Release()
			}
		}
		qp.advanceLocked()
		return nil
	}
	return ErrStaleToken
}

// completeReplayLocked records the completion (or a part) of a READ served
// again. Its responses start with its first part.
func (qp *QP) completeReplayLocked(tok Token, c Completion) error {
	s := &qp.resp
	for i, u := range s.replays {
		if u.first != tok.psn {
			continue
		}
		if c.Status != StatusSuccess || !u.rr.add(c.Data, c.Lease, c.More, qp.mtu) {
			// A READ served again that fails now: what was sent of it
			// stands; the requester's timer asks again.
			s.replays = append(s.replays[:i], s.replays[i+1:]...)
			qp.dropReadLocked(u.rr)
			if c.Lease != nil {
				c.Lease.Release()
			}
			return nil
		}
		if c.More {
			if !u.rr.queued {
				u.rr.msn = s.msn
				qp.queueReadLocked(u.rr)
			} else {
				qp.respondLocked()
			}
			return nil
		}
		s.replays = append(s.replays[:i], s.replays[i+1:]...)
		if !u.rr.queued {
			u.rr.msn = s.msn
			qp.queueReadLocked(u.rr)
		} else {
			qp.respondLocked()
		}
		return nil
	}
	return ErrStaleToken
}

// dropReadLocked takes a READ's answer out of reads (if there) and hands
// its leases back.
func (qp *QP) dropReadLocked(r *readResp) {
	s := &qp.resp
	if r.queued {
		for i, x := range s.reads {
			if x == r {
				s.reads = slices.Delete(s.reads, i, i+1)
				break
			}
		}
		r.queued = false
	}
	r.releaseTo(qp)
}

// advanceLocked moves the frontier over completed requests, sending their
// responses, then the NAK that waited for the frontier, if any. A READ at
// the frontier whose bytes have begun to complete starts its responses
// before it is done.
func (qp *QP) advanceLocked() {
	s := &qp.resp
	for s.pending.n > 0 {
		h := s.pending.at(0)
		if h.state == Pending {
			if h.kind == roce.KindReadRequest && !h.rr.queued && h.rr.have > 0 {
				h.rr.msn = (s.msn + h.msgs) & roce.PSNMask
				qp.queueReadLocked(h.rr)
			}
			break
		}
		u := s.pending.pop()
		if u.kind == roce.KindReadRequest || u.kind == roce.KindAtomic {
			s.rdAtomic--
		}
		if u.state == Failed {
			if u.rr != nil {
				qp.dropReadLocked(u.rr)
			}
			qp.fatalNAKLocked(u.first, NAKCode(u.status))
			return
		}
		s.msn = (s.msn + u.msgs) & roce.PSNMask
		switch u.kind {
		case roce.KindReadRequest:
			if !u.rr.queued {
				u.rr.msn = s.msn
				qp.queueReadLocked(u.rr)
			}
		case roce.KindAtomic:
			s.atomics[s.atomicN%len(s.atomics)] = atomicResult{psn: u.first, orig: u.orig, valid: true}
			s.atomicN++
			qp.sendAtomicAckLocked(u.first, u.orig)
		default:
			if u.ackReq {
				s.ackPending, s.ackPSN = true, u.last
			}
		}
	}
	if s.pending.n == 0 {
		qp.nakAtFrontierLocked()
	}
}

// Resume says the Target takes requests now, after it held one (Hold):
// the requester is told, with a sequence NAK for the held PSN, to send
// from it again at once. Nothing was sent while the request was held, so
// this is the requester's first NAK for it, which a requester that goes
// back N once per NAK'd PSN until it sees progress (rxe) honours; a NAK
// sent at the first refusal would have spent that, and the requester
// would wait for its retransmit timer (2.1 s for a Linux peer on RoCE).
// Without a held request Resume does nothing.
func (qp *QP) Resume() {
	qp.mu.Lock()
	if s := &qp.resp; s.held {
		s.held, s.nakSent, s.wait = false, false, nakSeq
		qp.nakAtFrontierLocked()
	}
	qp.mu.Unlock()
	qp.send()
}

// nakAtFrontierLocked sends the NAK for epsn that waits, if the frontier
// has reached epsn.
func (qp *QP) nakAtFrontierLocked() {
	s := &qp.resp
	if s.pending.n > 0 {
		return
	}
	switch s.wait {
	case nakSeq:
		s.wait, s.nakSent = nakNone, true
		qp.flushAckLocked()
		// An ACK of everything before the NAK, if none said so yet: a
		// requester that already goes back N (rxe) takes a sequence NAK
		// only after an ACK of progress, and would otherwise wait out
		// its whole timeout, once per loss.
		if prev := s.epsn.Add(-1); s.ackedSet && s.acked != prev || !s.ackedSet && s.msn > 0 {
			qp.sendAckLocked(prev, roce.ACKSyndrome(roce.CreditsInvalid))
		}
		qp.sendAckLocked(s.epsn, roce.NAKSyndrome(roce.NAKPSNSequenceError))
	case nakRNR:
		s.wait = nakNone
		qp.rnrNAKLocked(s.epsn)
	case nakFatal:
		qp.fatalNAKLocked(s.epsn, s.waitNAK)
	}
}

// malformedLocked rejects the request at epsn with a NAK the connection
// does not survive, once everything before it completed.
func (qp *QP) malformedLocked(code uint8) {
	s := &qp.resp
	s.wait, s.waitNAK = nakFatal, code
	qp.nakAtFrontierLocked()
}

// duplicateLocked answers a request received before.
func (qp *QP) duplicateLocked(p *roce.Packet, psn roce.PSN) {
	s := &qp.resp
	qp.dev.stats.RxDuplicate.Add(1)
	front := s.frontier()
	if !psn.Before(front) {
		return // pending: its completion answers it
	}
	switch p.Opcode().Kind() {
	case roce.KindReadRequest:
		qp.serveReadAgainLocked(p, psn, front)
	case roce.KindAtomic:
		for _, a := range s.atomics {
			if a.valid && a.psn == psn {
				qp.sendAtomicAckLocked(psn, a.orig)
				return
			}
		}
	default:
		// Acknowledge again what has completed so far.
		s.ackPending, s.ackPSN = true, front.Add(-1)
	}
}

// serveReadAgainLocked hands a duplicate READ of completed work to the
// target again, answering only within what completed.
func (qp *QP) serveReadAgainLocked(p *roce.Packet, psn, front roce.PSN) {
	s := &qp.resp
	n := p.RETH.DMALen()
	npk := max((int(n)+qp.mtu-1)/qp.mtu, 1)
	if !psn.Add(npk - 1).Before(front) {
		return
	}
	for _, r := range s.reads {
		if r.psn == psn {
			return // still being answered
		}
	}
	for _, u := range s.replays {
		if u.first == psn {
			return
		}
	}
	if len(s.replays) >= qp.maxDestRdAtomicLocked() {
		return // the requester's timer asks again
	}
	r := &qp.resp.req
	*r = Request{Token: Token{psn: psn, gen: s.gen, dup: true}, Op: OpRead, PSN: psn, First: true, Last: true,
		VA: p.RETH.VA(), RKey: p.RETH.RKey(), Length: n, Dup: true}
	reply := qp.target.Request(r)
	switch {
	case qp.state != StateRTR && qp.state != StateRTS:
	case reply.Result == Done:
		rr := qp.newReadResp(psn, n)
		if rr.add(reply.Data, reply.Lease, false, qp.mtu) {
			rr.msn = s.msn
			qp.queueReadLocked(rr)
			return
		}
	case reply.Result == Pending:
		s.replays = append(s.replays, unit{first: psn, last: psn.Add(npk - 1), kind: roce.KindReadRequest, state: Pending, readLen: n,
			rr: qp.newReadResp(psn, n)})
		return
	}
	if reply.Lease != nil {
		reply.Lease.Release()
	}
}

// queueReadLocked puts a READ's answer in line; its responses leave as far
// as its bytes have completed.
func (qp *QP) queueReadLocked(r *readResp) {
	s := &qp.resp
	r.queued = true
	s.reads = append(s.reads, r)
	qp.respondLocked()
}

// respondLocked queues up to maxBurst READ responses, in order, as far as
// their bytes have completed; it returns how many it queued.
func (qp *QP) respondLocked() int {
	s := &qp.resp
	queued := 0
	for queued < maxBurst && len(s.reads) > 0 {
		r := s.reads[0]
		start := r.k * qp.mtu
		end := min(start+qp.mtu, r.total)
		if end > r.have {
			break // the rest has not completed yet
		}
		var payload []byte
		if end > start {
			p := r.parts[0].data
			payload = p[start-r.off : end-r.off]
		}
		first, last := r.k == 0, r.k == r.n-1
		var f roce.PacketFields
		f.BTH = roce.BTHFields{PKey: roce.DefaultPKey, DestQP: qp.attr.DestQPN, PSN: uint32(r.psn.Add(r.k)),
			Opcode: pick(first, last, roce.RCRDMAReadResponseFirst, roce.RCRDMAReadResponseMiddle,
				roce.RCRDMAReadResponseLast, roce.RCRDMAReadResponseOnly)}
		f.AETH = roce.AETHFields{Syndrome: roce.ACKSyndrome(roce.CreditsInvalid), MSN: r.msn}
		qp.queueLocked(qp.attr.Remote, &f, payload)
		queued++
		r.k++
		if len(r.parts) > 0 && (end == r.off+len(r.parts[0].data) || last) {
			// parts[0] is all queued: its lease goes once sent.
			if l := r.parts[0].lease; l != nil {
				qp.txLeases = append(qp.txLeases, l)
			}
			r.off += len(r.parts[0].data)
			r.parts[0] = readPart{}
			r.parts = r.parts[1:]
		}
		if last {
			if p := r.psn.Add(r.k - 1); !s.ackedSet || s.acked.Before(p) {
				s.acked, s.ackedSet = p, true
			}
			r.releaseTo(qp) // nothing is left, but be sure
			r.queued = false
			s.reads[0] = nil
			s.reads = s.reads[1:]
		}
	}
	return queued
}

// moreResponsesN queues READ responses that wait, up to a burst, and
// returns how many it queued.
func (qp *QP) moreResponsesN() int {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if len(qp.resp.reads) == 0 {
		return 0
	}
	return qp.respondLocked()
}

// responsesReady reports whether a READ response waits whose data has
// completed (what moreResponsesN would queue).
func (qp *QP) responsesReady() bool {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if len(qp.resp.reads) == 0 {
		return false
	}
	r := qp.resp.reads[0]
	return min((r.k+1)*qp.mtu, r.total) <= r.have
}

// abandonLocked drops every request pending at the target and every READ
// response not queued yet; the target is told. Leases go with the next
// send, after packets that may still point into them.
func (qp *QP) abandonLocked() {
	s := &qp.resp
	for i := range s.pending.n {
		if u := s.pending.at(i); u.rr != nil {
			u.rr.releaseTo(qp)
		}
	}
	for _, r := range s.reads {
		r.releaseTo(qp)
	}
	for _, u := range s.replays {
		u.rr.releaseTo(qp)
	}
	s.pending.clear()
	clear(s.reads)
	s.reads, s.replays = s.reads[:0], nil
	s.rdAtomic = 0
	s.gen++
	if qp.target != nil {
		qp.target.Abandon()
	}
}

func (qp *QP) sendAtomicAckLocked(psn roce.PSN, orig uint64) {
	if !qp.resp.ackedSet || qp.resp.acked.Before(psn) {
		qp.resp.acked, qp.resp.ackedSet = psn, true
	}
	var f roce.PacketFields
	f.BTH = roce.BTHFields{Opcode: roce.RCAtomicAcknowledge, PKey: roce.DefaultPKey, DestQP: qp.attr.DestQPN, PSN: uint32(psn)}
	f.AETH = roce.AETHFields{Syndrome: roce.ACKSyndrome(roce.CreditsInvalid), MSN: qp.resp.msn}
	f.AtomicAckETH.Orig = orig
	qp.queueLocked(qp.attr.Remote, &f, nil)
}

// sendAckLocked queues an ACK or NAK for psn.
func (qp *QP) sendAckLocked(psn roce.PSN, syn roce.Syndrome) {
	if syn.Type() != roce.AckTypeACK {
		qp.dev.stats.TxNAKs.Add(1)
		if syn.Type() == roce.AckTypeNAK && int(syn.Value()) < NAKCodes {
			qp.dev.stats.TxNAKCodes[syn.Value()].Add(1)
		}
	} else {
		qp.resp.acked, qp.resp.ackedSet = psn, true
	}
	var f roce.PacketFields
	f.BTH = roce.BTHFields{Opcode: roce.RCAcknowledge, PKey: roce.DefaultPKey, DestQP: qp.attr.DestQPN, PSN: uint32(psn)}
	f.AETH = roce.AETHFields{Syndrome: syn, MSN: qp.resp.msn}
	qp.queueLocked(qp.attr.Remote, &f, nil)
}

// flushAckLocked sends the ACK coalesced over the last batch.
func (qp *QP) flushAckLocked() {
	s := &qp.resp
	if !s.ackPending || (qp.state != StateRTR && qp.state != StateRTS) {
		return
	}
	s.ackPending = false
	qp.sendAckLocked(s.ackPSN, roce.ACKSyndrome(roce.CreditsInvalid))
}

// ackInErrorLocked answers a request that reaches the QP in the error
// state. A QP in ERR takes no request; but one that retransmits a SEND or
// WRITE the QP acknowledged before it entered ERR lost that ACK, and it
// gets the ACK again: its operation was carried out, and without the ACK
// it would retry until its retry count ran out and fail it, or, on a
// device that takes a retry count of 7 as unlimited (rxe), wait forever
// on a connection the QP's disconnect is ending, its application polling
// for that completion and never reading the DREQ. Whatever the QP had not
// acknowledged is dropped, as ERR does; a READ or atomic is dropped too,
// since its response would need the target, which is gone.
func (qp *QP) ackInErrorLocked(p *roce.Packet) {
	s := &qp.resp
	psn := roce.PSN(p.BTH.PSN())
	if !s.errSet || !psn.Before(s.errFront) {
		return
	}
	switch p.Opcode().Kind() {
	case roce.KindReadRequest, roce.KindAtomic:
		return
	}
	qp.dev.stats.RxDuplicate.Add(1)
	qp.sendAckLocked(s.errFront.Add(-1), roce.ACKSyndrome(roce.CreditsInvalid))
}

// rnrNAKLocked tells the requester no receive WQE is ready for psn.
func (qp *QP) rnrNAKLocked(psn roce.PSN) {
	qp.dev.stats.TxRNRNAKs.Add(1)
	qp.flushAckLocked()
	qp.sendAckLocked(psn, roce.RNRSyndrome(qp.attr.MinRNRTimer))
}

// fatalNAKLocked NAKs psn with an error the connection does not survive
// and moves the QP to the error state.
func (qp *QP) fatalNAKLocked(psn roce.PSN, code uint8) {
	qp.flushAckLocked()
	qp.sendAckLocked(psn, roce.NAKSyndrome(code))
	qp.dev.log.Warn("responder error", "qp", qp.qpn, "psn", uint32(psn), "nak", roce.NAKSyndrome(code).String())
	qp.toErrorLocked()
}
