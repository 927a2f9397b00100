package transport

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/rbridge/rbridge/roce"
)

// responder is the receive side of an RC QP; its fields are guarded by
// QP.mu.
type responder struct {
	epsn    roce.PSN // the PSN expected next
	msn     uint32   // messages completed (24 bits)
	nakSent bool     // a sequence-error NAK went out for epsn

	// A SEND in progress: the receive WQE it fills.
	cur    *RecvWR
	curOff int
	// An RDMA WRITE in progress.
	inWrite bool
	wmr     *MR
	wva     uint64
	wleft   uint32
	wtotal  uint32

	ackPending bool
	ackPSN     roce.PSN

	reads   []*readResp // READ responses still to send, oldest first
	atomics [16]atomicResult
	atomicN int
}

// readResp is a READ being answered.
type readResp struct {
	data []byte   // the bytes read
	psn  roce.PSN // PSN of the first response
	n    int      // responses in all
	k    int      // next response to send
	msn  uint32
}

type atomicResult struct {
	psn   roce.PSN
	orig  uint64
	valid bool
}

// maxBurst bounds the READ responses queued at once; the rest follow as the
// device sends them.
const maxBurst = 64

func (s *responder) init(psn roce.PSN) { *s = responder{epsn: psn} }

// handleRequestLocked processes a request packet (the responder).
func (qp *QP) handleRequestLocked(p *roce.Packet) {
	s := &qp.resp
	psn := roce.PSN(p.BTH.PSN())
	switch d := psn.Sub(s.epsn); {
	case d < 0:
		qp.duplicateLocked(p, psn)
		return
	case d > 0:
		qp.dev.stats.RxOutOfSequence.Add(1)
		if !s.nakSent {
			s.nakSent = true
			qp.sendAckLocked(s.epsn, roce.NAKSyndrome(roce.NAKPSNSequenceError))
		}
		return
	}
	op := p.Opcode()
	pos := op.Position()
	inMsg := s.cur != nil || s.inWrite
	continuing := pos == roce.PositionMiddle || pos == roce.PositionLast
	switch {
	case continuing && !inMsg,
		!continuing && inMsg,
		s.cur != nil && op.Kind() != roce.KindSend,
		s.inWrite && op.Kind() != roce.KindWrite:
		qp.fatalNAKLocked(psn, roce.NAKInvalidRequest)
		return
	}
	var ok bool
	switch op.Kind() {
	case roce.KindSend:
		ok = qp.recvSendLocked(p, psn)
	case roce.KindWrite:
		ok = qp.recvWriteLocked(p, psn)
	case roce.KindReadRequest:
		qp.recvReadLocked(p, psn, false)
		return
	case roce.KindAtomic:
		qp.recvAtomicLocked(p, psn)
		return
	}
	if !ok {
		return
	}
	s.epsn = psn.Next()
	s.nakSent = false
	if p.BTH.AckReq() {
		s.ackPending, s.ackPSN = true, psn
	}
}

// duplicateLocked answers a request the responder has already executed.
func (qp *QP) duplicateLocked(p *roce.Packet, psn roce.PSN) {
	s := &qp.resp
	qp.dev.stats.RxDuplicate.Add(1)
	switch p.Opcode().Kind() {
	case roce.KindReadRequest:
		qp.recvReadLocked(p, psn, true)
	case roce.KindAtomic:
		for _, a := range s.atomics {
			if a.valid && a.psn == psn {
				qp.sendAtomicAckLocked(psn, a.orig)
				return
			}
		}
	default:
		// Acknowledge again what has been received so far.
		s.ackPending, s.ackPSN = true, s.epsn.Add(-1)
	}
}

// recvSendLocked places a SEND packet; false means it was not accepted.
func (qp *QP) recvSendLocked(p *roce.Packet, psn roce.PSN) bool {
	s := &qp.resp
	op := p.Opcode()
	pos := op.Position()
	if pos == roce.PositionFirst || pos == roce.PositionOnly {
		if len(qp.rq) == 0 {
			qp.rnrNAKLocked(psn)
			return false
		}
		wr := qp.rq[0]
		qp.rq = qp.rq[1:]
		s.cur, s.curOff = &wr, 0
	}
	if (pos == roce.PositionFirst || pos == roce.PositionMiddle) && len(p.Payload) != qp.mtu {
		qp.fatalNAKLocked(psn, roce.NAKInvalidRequest)
		return false
	}
	buf, _ := s.cur.Local.bytes()
	if s.curOff+len(p.Payload) > len(buf) {
		qp.pushRecv(WC{ID: s.cur.ID, Status: StatusLocLenErr, Opcode: OpRecv, QPN: qp.qpn})
		s.cur = nil
		qp.fatalNAKLocked(psn, roce.NAKInvalidRequest)
		return false
	}
	s.curOff += copy(buf[s.curOff:], p.Payload)
	if pos == roce.PositionLast || pos == roce.PositionOnly {
		wc := WC{ID: s.cur.ID, Opcode: OpRecv, ByteLen: s.curOff, QPN: qp.qpn}
		if p.ImmDt != nil {
			wc.Imm, wc.HasImm = p.ImmDt.Imm(), true
		}
		if p.IETH != nil {
			wc.InvRKey, wc.HasInv = p.IETH.RKey(), true
		}
		qp.pushRecv(wc)
		s.cur = nil
		s.msn = (s.msn + 1) & roce.PSNMask
	}
	return true
}

// recvWriteLocked places an RDMA WRITE packet.
func (qp *QP) recvWriteLocked(p *roce.Packet, psn roce.PSN) bool {
	s := &qp.resp
	op := p.Opcode()
	pos := op.Position()
	last := pos == roce.PositionLast || pos == roce.PositionOnly
	// A write with immediate consumes a receive WQE: without one, RNR NAK
	// before anything is written, so the retry finds the same state.
	if last && p.ImmDt != nil && len(qp.rq) == 0 {
		qp.rnrNAKLocked(psn)
		return false
	}
	if pos == roce.PositionFirst || pos == roce.PositionOnly {
		va, rkey, n := p.RETH.VA(), p.RETH.RKey(), p.RETH.DMALen()
		s.wmr, s.wva, s.wleft, s.wtotal = nil, va, n, n
		if n > 0 {
			mr, ok := qp.pd.lookup(rkey, AccessRemoteWrite)
			if !ok {
				qp.fatalNAKLocked(psn, roce.NAKRemoteAccessError)
				return false
			}
			if _, ok := mr.slice(va, n); !ok {
				qp.fatalNAKLocked(psn, roce.NAKRemoteAccessError)
				return false
			}
			s.wmr = mr
		}
		s.inWrite = true
	}
	n := uint32(len(p.Payload))
	if (pos == roce.PositionFirst || pos == roce.PositionMiddle) && int(n) != qp.mtu || n > s.wleft || (last && n != s.wleft) {
		s.inWrite = false
		qp.fatalNAKLocked(psn, roce.NAKInvalidRequest)
		return false
	}
	if n > 0 {
		dst, _ := s.wmr.slice(s.wva, n)
		copy(dst, p.Payload)
		s.wva += uint64(n)
		s.wleft -= n
	}
	if last {
		s.inWrite = false
		if p.ImmDt != nil {
			wr := qp.rq[0]
			qp.rq = qp.rq[1:]
			qp.pushRecv(WC{ID: wr.ID, Opcode: OpRecvWriteWithImm, ByteLen: int(s.wtotal), Imm: p.ImmDt.Imm(), HasImm: true, QPN: qp.qpn})
		}
		s.msn = (s.msn + 1) & roce.PSNMask
	}
	return true
}

// recvReadLocked answers an RDMA READ request (again, for a duplicate).
func (qp *QP) recvReadLocked(p *roce.Packet, psn roce.PSN, dup bool) {
	s := &qp.resp
	va, rkey, n := p.RETH.VA(), p.RETH.RKey(), p.RETH.DMALen()
	var data []byte
	if n > 0 {
		mr, ok := qp.pd.lookup(rkey, AccessRemoteRead)
		if ok {
			data, ok = mr.slice(va, n)
		}
		if !ok {
			if !dup {
				qp.fatalNAKLocked(psn, roce.NAKRemoteAccessError)
			}
			return
		}
	}
	npk := max((int(n)+qp.mtu-1)/qp.mtu, 1)
	if dup {
		// Answer only within what the original request covered.
		if !psn.Add(npk - 1).Before(s.epsn) {
			return
		}
		for _, r := range s.reads {
			if r.psn == psn {
				return // still being answered
			}
		}
	} else {
		s.msn = (s.msn + 1) & roce.PSNMask
		s.epsn = psn.Add(npk)
		s.nakSent = false
	}
	s.reads = append(s.reads, &readResp{data: data, psn: psn, n: npk, msn: s.msn})
	qp.respondLocked()
}

// respondLocked queues up to maxBurst READ responses.
func (qp *QP) respondLocked() {
	s := &qp.resp
	for budget := maxBurst; budget > 0 && len(s.reads) > 0; budget-- {
		r := s.reads[0]
		first, last := r.k == 0, r.k == r.n-1
		var f roce.PacketFields
		f.BTH = roce.BTHFields{PKey: roce.DefaultPKey, DestQP: qp.attr.DestQPN, PSN: uint32(r.psn.Add(r.k)),
			Opcode: pick(first, last, roce.RCRDMAReadResponseFirst, roce.RCRDMAReadResponseMiddle,
				roce.RCRDMAReadResponseLast, roce.RCRDMAReadResponseOnly)}
		f.AETH = roce.AETHFields{Syndrome: roce.ACKSyndrome(roce.CreditsInvalid), MSN: r.msn}
		payload := r.data[min(r.k*qp.mtu, len(r.data)):min((r.k+1)*qp.mtu, len(r.data))]
		qp.queue(qp.attr.Remote, &f, payload)
		r.k++
		if last {
			s.reads[0] = nil
			s.reads = s.reads[1:]
		}
	}
}

// moreResponses reports whether READ responses wait to be queued.
func (qp *QP) moreResponses() bool {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if len(qp.resp.reads) == 0 {
		return false
	}
	qp.respondLocked()
	return true
}

// unalignedAtomics serializes atomics on memory that is not 8-byte aligned.
var unalignedAtomics sync.Mutex

// recvAtomicLocked executes COMPARE_SWAP or FETCH_ADD on local memory.
func (qp *QP) recvAtomicLocked(p *roce.Packet, psn roce.PSN) {
	s := &qp.resp
	a := p.AtomicETH
	va := a.VA()
	if va%8 != 0 {
		qp.fatalNAKLocked(psn, roce.NAKInvalidRequest)
		return
	}
	mr, ok := qp.pd.lookup(a.RKey(), AccessRemoteAtomic)
	var b []byte
	if ok {
		b, ok = mr.slice(va, 8)
	}
	if !ok {
		qp.fatalNAKLocked(psn, roce.NAKRemoteAccessError)
		return
	}
	orig := atomic64(b, p.Opcode() == roce.RCCompareSwap, a.Compare(), a.SwapAdd())
	s.atomics[s.atomicN%len(s.atomics)] = atomicResult{psn: psn, orig: orig, valid: true}
	s.atomicN++
	s.msn = (s.msn + 1) & roce.PSNMask
	s.epsn = psn.Next()
	s.nakSent = false
	qp.sendAtomicAckLocked(psn, orig)
}

// atomic64 runs an atomic on the 8 bytes of b (host byte order, little
// endian on the platforms rbridge runs on) and returns the value before.
func atomic64(b []byte, cas bool, compare, swapAdd uint64) uint64 {
	if uintptr(unsafe.Pointer(&b[0]))%8 == 0 {
		p := (*uint64)(unsafe.Pointer(&b[0]))
		if !cas {
			return atomic.AddUint64(p, swapAdd) - swapAdd
		}
		for {
			old := atomic.LoadUint64(p)
			if old != compare {
				return old
			}
			if atomic.CompareAndSwapUint64(p, old, swapAdd) {
				return old
			}
		}
	}
	unalignedAtomics.Lock()
	defer unalignedAtomics.Unlock()
	old := binary.LittleEndian.Uint64(b)
	switch {
	case !cas:
		binary.LittleEndian.PutUint64(b, old+swapAdd)
	case old == compare:
		binary.LittleEndian.PutUint64(b, swapAdd)
	}
	return old
}

func (qp *QP) sendAtomicAckLocked(psn roce.PSN, orig uint64) {
	var f roce.PacketFields
	f.BTH = roce.BTHFields{Opcode: roce.RCAtomicAcknowledge, PKey: roce.DefaultPKey, DestQP: qp.attr.DestQPN, PSN: uint32(psn)}
	f.AETH = roce.AETHFields{Syndrome: roce.ACKSyndrome(roce.CreditsInvalid), MSN: qp.resp.msn}
	f.AtomicAckETH.Orig = orig
	qp.queue(qp.attr.Remote, &f, nil)
}

// sendAckLocked queues an ACK or NAK for psn.
func (qp *QP) sendAckLocked(psn roce.PSN, syn roce.Syndrome) {
	if syn.Type() != roce.AckTypeACK {
		qp.dev.stats.TxNAKs.Add(1)
	}
	var f roce.PacketFields
	f.BTH = roce.BTHFields{Opcode: roce.RCAcknowledge, PKey: roce.DefaultPKey, DestQP: qp.attr.DestQPN, PSN: uint32(psn)}
	f.AETH = roce.AETHFields{Syndrome: syn, MSN: qp.resp.msn}
	qp.queue(qp.attr.Remote, &f, nil)
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

// UD ---------------------------------------------------------------------

// sendUDLocked sends every queued UD work request; UD sends complete as
// they leave.
func (qp *QP) sendUDLocked() {
	r := &qp.req
	for _, w := range r.sq {
		var f roce.PacketFields
		f.BTH = roce.BTHFields{Opcode: roce.UDSendOnly, PKey: roce.DefaultPKey, DestQP: w.wr.UD.QPN, PSN: uint32(r.fresh)}
		if w.wr.Opcode == OpSendWithImm {
			f.BTH.Opcode = roce.UDSendOnlyWithImmediate
			f.ImmDt.Imm = w.wr.Imm
		}
		f.BTH.SE = w.wr.Signaled
		f.DETH = roce.DETHFields{QKey: w.wr.UD.QKey, SrcQP: qp.qpn}
		qp.queue(w.wr.UD.Addr, &f, w.data)
		r.fresh = r.fresh.Next()
		qp.completeSendLocked(w)
	}
	clear(r.sq)
	r.sq = r.sq[:0]
}

// receiveUDLocked delivers a datagram to the next receive WQE.
func (qp *QP) receiveUDLocked(p *roce.Packet, m *roce.Message) {
	op := p.Opcode()
	if (qp.state != StateRTR && qp.state != StateRTS) || (op != roce.UDSendOnly && op != roce.UDSendOnlyWithImmediate) ||
		p.DETH.QKey() != qp.attr.QKey || len(qp.rq) == 0 {
		qp.dev.stats.UDDropped.Add(1)
		return
	}
	wr := qp.rq[0]
	qp.rq = qp.rq[1:]
	buf, _ := wr.Local.bytes()
	wc := WC{ID: wr.ID, Opcode: OpRecv, QPN: qp.qpn, SrcQPN: p.DETH.SrcQP(), Src: m.Addr, ByteLen: len(p.Payload)}
	if len(p.Payload) > len(buf) {
		wc.Status = StatusLocLenErr
	} else {
		copy(buf, p.Payload)
	}
	if p.ImmDt != nil {
		wc.Imm, wc.HasImm = p.ImmDt.Imm(), true
	}
	qp.pushRecv(wc)
}
