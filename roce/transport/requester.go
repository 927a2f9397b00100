package transport

import (
	"encoding/binary"
	"time"

	"github.com/rbridge/rbridge/roce"
)

// sendWQE is a send work request on its way: its PSN range once started,
// and what came back for it.
type sendWQE struct {
	wr      SendWR
	data    []byte // the local bytes of wr.Local
	status  Status
	started bool
	first   roce.PSN // PSN of its first packet
	last    roce.PSN // PSN of its last packet (or last read response)
	npkts   int
	acked   bool     // SEND and WRITE: every packet acknowledged
	done    bool     // READ and atomics: the whole response arrived
	resp    roce.PSN // READ: next response PSN expected
}

func (w *sendWQE) isReadOrAtomic() bool {
	switch w.wr.Opcode {
	case OpRead, OpCompareSwap, OpFetchAdd:
		return true
	}
	return false
}

// contains reports whether psn lies in the WQE's PSN range.
func (w *sendWQE) contains(psn roce.PSN) bool {
	return w.started && !psn.Before(w.first) && !w.last.Before(psn)
}

// requester is the send side of an RC QP; its fields are guarded by QP.mu.
//
// PSN bookkeeping: a WQE takes its PSNs [first, last] when it starts
// (fresh is the PSN the next one takes); psn is the PSN of the next packet
// sent, which a go-back-N moves back (rewindLocked), and next and k say
// which WQE and which of its packets that is. What is acknowledged, what
// is outstanding and what may go is the recovery machine's (rec): the
// oldest unacknowledged PSN is rec.una.
type requester struct {
	sq    []*sendWQE
	sqArr []*sendWQE // the array sq lies in (roomFor)
	next  int        // index in sq of the WQE the next packet comes from
	k     int        // index of the next packet within it
	psn   roce.PSN   // PSN of the next packet to send
	fresh roce.PSN   // PSN the next WQE to start takes

	rec      recovery
	rdAtomic int // READs and atomics started and not done
	cnps     uint64
	free     []*sendWQE // recycled WQEs
}

// newWQE returns a WQE for wr, recycled when one is free.
func (r *requester) newWQE(wr SendWR, data []byte) *sendWQE {
	var w *sendWQE
	if n := len(r.free); n > 0 {
		w = r.free[n-1]
		r.free = r.free[:n-1]
		*w = sendWQE{}
	} else {
		w = new(sendWQE)
	}
	w.wr, w.data = wr, data
	return w
}

func (r *requester) init(psn roce.PSN, timeout time.Duration, retry, rnr uint8) {
	*r = requester{psn: psn, fresh: psn, sq: r.sq[:0], free: r.free}
	r.rec.init(psn, timeout, retry, rnr)
}

// npkts returns how many PSNs a WQE takes at path MTU mtu.
func npkts(w *sendWQE, mtu int) int {
	switch w.wr.Opcode {
	case OpCompareSwap, OpFetchAdd:
		return 1
	}
	n := (len(w.data) + mtu - 1) / mtu
	return max(n, 1)
}

// pumpLocked sends new and retransmitted packets while the recovery
// machine's window (and DCQCN's rate) allows.
func (qp *QP) pumpLocked(now time.Time) {
	r := &qp.req
	for qp.state == StateRTS && r.next < len(r.sq) {
		w := r.sq[r.next]
		if !w.started {
			if w.isReadOrAtomic() && r.rdAtomic >= qp.attr.MaxRdAtomic {
				break
			}
			if w.wr.Fence && r.rdAtomic > 0 {
				break
			}
			w.started = true
			w.npkts = npkts(w, qp.mtu)
			w.first, w.resp = r.fresh, r.fresh
			w.last = r.fresh.Add(w.npkts - 1)
			r.fresh = w.last.Next()
			if w.isReadOrAtomic() {
				r.rdAtomic++
			}
			r.k = 0
		}
		if r.k < 0 || r.k >= w.npkts {
			// A send pointer outside its WQE is a bug; resending the WQE
			// whole is always safe (the responder drops duplicates), a
			// panic in the gateway is not.
			qp.dev.log.Error("requester: packet index outside its WQE; resending it whole", "qp", qp.qpn, "wr", w.wr.ID, "k", r.k, "packets", w.npkts)
			r.k = 0
		}
		if w.isReadOrAtomic() && w.done {
			// Its response is in: a go-back-N passes over it.
			r.next++
			r.k = 0
			r.psn = w.last.Next()
			continue
		}
		r.psn = w.first.Add(r.k)
		if !r.rec.maySend(r.psn) || !qp.paceLocked(qp.packetLenLocked(w, r.k)) {
			break
		}
		qp.buildRequestLocked(now, w, r.k, false)
		if w.isReadOrAtomic() {
			r.psn = w.last.Next()
			r.next++
			r.k = 0
		} else {
			r.psn = r.psn.Next()
			r.k++
			if r.k == w.npkts {
				r.next++
				r.k = 0
			}
		}
	}
	qp.armTimerLocked(now)
}

// ackEvery is how many packets of a long message go between two ACK
// requests at most: rxe's RXE_MAX_PKT_PER_ACK. Fewer ACKs cost the
// responder and the requester less; the recovery machine asks more often
// when its window is small (recovery.ackInterval).
const ackEvery = 64

// buildRequestLocked queues packet k of w, asking for an ACK if it ends a
// message, if the recovery machine wants one, or if forceAck (a tail-loss
// probe), and tells the machine it went.
func (qp *QP) buildRequestLocked(now time.Time, w *sendWQE, k int, forceAck bool) {
	mtu := qp.mtu
	var f roce.PacketFields
	psn := w.first.Add(k)
	f.BTH = roce.BTHFields{PKey: roce.DefaultPKey, DestQP: qp.attr.DestQPN, PSN: uint32(psn)}
	lastPkt := k == w.npkts-1
	first := k == 0
	var payload []byte
	if len(w.data) > 0 && !w.isReadOrAtomic() {
		payload = w.data[k*mtu : min((k+1)*mtu, len(w.data))]
	}
	wr := &w.wr
	s := sent{first: psn, last: psn, plain: !w.isReadOrAtomic()}
	switch wr.Opcode {
	case OpSend, OpSendWithImm, OpSendWithInv:
		f.BTH.Opcode = pick(first, lastPkt, roce.RCSendFirst, roce.RCSendMiddle, roce.RCSendLast, roce.RCSendOnly)
		if lastPkt {
			switch wr.Opcode {
			case OpSendWithImm:
				f.BTH.Opcode += 1 // LAST -> LAST_WITH_IMMEDIATE, ONLY -> ONLY_WITH_IMMEDIATE
				f.ImmDt.Imm = wr.Imm
			case OpSendWithInv:
				f.BTH.Opcode = roce.RCSendLastWithInvalidate
				if first {
					f.BTH.Opcode = roce.RCSendOnlyWithInvalidate
				}
				f.IETH.RKey = wr.InvRKey
			}
			f.BTH.SE = wr.Signaled
		}
	case OpWrite, OpWriteWithImm:
		f.BTH.Opcode = pick(first, lastPkt, roce.RCRDMAWriteFirst, roce.RCRDMAWriteMiddle, roce.RCRDMAWriteLast, roce.RCRDMAWriteOnly)
		if lastPkt && wr.Opcode == OpWriteWithImm {
			f.BTH.Opcode += 1
			f.ImmDt.Imm = wr.Imm
		}
		if first {
			f.RETH = roce.RETHFields{VA: wr.Remote, RKey: wr.RKey, DMALen: uint32(len(w.data))}
		}
	case OpRead:
		// Resume where the responses stopped: the request takes the PSNs
		// of the responses still expected, w.resp to w.last.
		off := w.resp.Sub(w.first)
		f.BTH.Opcode = roce.RCRDMAReadRequest
		f.BTH.PSN = uint32(w.resp)
		rest := max(len(w.data)-int(off)*mtu, 0)
		f.RETH = roce.RETHFields{VA: wr.Remote + uint64(off)*uint64(mtu), RKey: wr.RKey, DMALen: uint32(rest)}
		s.first, s.last = w.resp, w.last
		lastPkt = true
	case OpCompareSwap, OpFetchAdd:
		f.BTH.Opcode = roce.RCCompareSwap
		if wr.Opcode == OpFetchAdd {
			f.BTH.Opcode = roce.RCFetchAdd
		}
		f.AtomicETH = roce.AtomicETHFields{VA: wr.Remote, RKey: wr.RKey, SwapAdd: wr.SwapAdd, Compare: wr.Compare}
		lastPkt = true
	}
	f.BTH.AckReq = lastPkt || forceAck || qp.req.rec.wantAck(psn)
	s.ackReq = f.BTH.AckReq
	qp.queueLocked(qp.attr.Remote, &f, payload)
	qp.req.rec.onSent(now, s)
}

func pick(first, last bool, fst, mid, lst, only roce.Opcode) roce.Opcode {
	switch {
	case first && last:
		return only
	case first:
		return fst
	case last:
		return lst
	}
	return mid
}

// handleResponseLocked processes an ACK, NAK, read response or atomic ACK.
func (qp *QP) handleResponseLocked(p *roce.Packet) {
	r := &qp.req
	psn := roce.PSN(p.BTH.PSN())
	// A response for a PSN never sent is bogus: ignore it.
	if !psn.Before(r.fresh) {
		return
	}
	now := time.Now()
	switch op := p.Opcode(); op.Kind() {
	case roce.KindAck:
		syn := p.AETH.Syndrome()
		switch syn.Type() {
		case roce.AckTypeACK:
			qp.ackUpToLocked(now, psn)
		case roce.AckTypeRNRNAK:
			qp.ackUpToLocked(now, psn.Add(-1))
			qp.applyLocked(r.rec.onRNR(now, psn, syn.Value()))
		case roce.AckTypeNAK:
			if int(syn.Value()) < NAKCodes {
				qp.dev.stats.RxNAKCodes[syn.Value()].Add(1)
			}
			qp.ackUpToLocked(now, psn.Add(-1))
			qp.applyLocked(r.rec.onNAK(psn, syn.Value()))
		}
	case roce.KindReadResponse:
		qp.onReadResponseLocked(now, p, psn)
	case roce.KindAtomicAck:
		w := r.find(psn)
		if w == nil || w.done || (w.wr.Opcode != OpCompareSwap && w.wr.Opcode != OpFetchAdd) {
			return // a duplicate
		}
		binary.LittleEndian.PutUint64(w.data, p.AtomicAckETH.Orig())
		w.done = true
		r.rdAtomic--
		qp.ackUpToLocked(now, psn)
	}
	qp.completeHeadLocked()
	qp.pumpLocked(now)
}

// find returns the started WQE whose PSN range holds psn.
func (r *requester) find(psn roce.PSN) *sendWQE {
	for _, w := range r.sq {
		if !w.started {
			return nil
		}
		if w.contains(psn) {
			return w
		}
	}
	return nil
}

// ackUpToLocked takes an acknowledgement of every PSN up to psn. SENDs and
// WRITEs wholly below it are acknowledged. A READ or atomic is
// acknowledged by its own response only: one done extends the
// acknowledgement over its PSNs; at one not done the acknowledgement stops
// before its first missing response, and if the responder is past that
// (psn reaches it) the response went missing and the READ is asked again.
// The recovery machine learns how far the acknowledgement reaches.
func (qp *QP) ackUpToLocked(now time.Time, psn roce.PSN) {
	r := &qp.req
	upTo := psn // the last PSN acknowledged
	for _, w := range r.sq {
		if !w.started || upTo.Before(w.first) {
			break
		}
		if w.isReadOrAtomic() {
			if w.done {
				if upTo.Before(w.last) {
					upTo = w.last
				}
				continue
			}
			if !upTo.Before(w.resp) {
				qp.applyLocked(r.rec.readGap(w.resp))
				upTo = w.resp.Add(-1)
			}
			break
		}
		if upTo.Before(w.last) {
			break
		}
		w.acked = true
	}
	qp.applyLocked(r.rec.onAck(now, upTo))
}

// onReadResponseLocked places a READ response in order: one past the next
// expected means responses went missing (asked again), one before it is a
// duplicate.
func (qp *QP) onReadResponseLocked(now time.Time, p *roce.Packet, psn roce.PSN) {
	r := &qp.req
	w := r.find(psn)
	if w == nil || w.wr.Opcode != OpRead || w.done {
		return // a duplicate or stale response
	}
	qp.ackUpToLocked(now, w.first.Add(-1)) // a response acknowledges what came before its READ
	switch {
	case psn.Before(w.resp):
		return // a duplicate
	case w.resp.Before(psn):
		qp.applyLocked(r.rec.readGap(w.resp))
		return
	}
	off := int(psn.Sub(w.first)) * qp.mtu
	pos := p.Opcode().Position()
	want := min(qp.mtu, len(w.data)-off)
	if (pos == roce.PositionFirst || pos == roce.PositionMiddle) && want != qp.mtu ||
		len(p.Payload) != want || (pos == roce.PositionLast || pos == roce.PositionOnly) != (psn == w.last) {
		w.status = StatusBadRespErr
		qp.failLocked(w)
		return
	}
	copy(w.data[off:], p.Payload)
	w.resp = psn.Next()
	if psn == w.last {
		w.done = true
		r.rdAtomic--
	}
	qp.ackUpToLocked(now, psn)
}

// applyLocked does what the recovery machine answered, and counts it.
func (qp *QP) applyLocked(out recOutcome) {
	st := &qp.dev.stats
	switch out.act {
	case actNone:
		return
	case actFail:
		qp.failAtLocked(out.psn, out.status)
		return
	case actTailProbe:
		st.TailProbes.Add(1)
		if w := qp.req.find(out.psn); w != nil && !w.isReadOrAtomic() {
			qp.buildRequestLocked(time.Now(), w, int(out.psn.Sub(w.first)), true)
		}
		return
	}
	switch out.cause {
	case causeNAK:
		st.Retransmit.Add(1)
	case causeTimeout:
		st.Timeouts.Add(1)
		st.Retransmit.Add(1)
	case causeTailProbe:
		st.TailProbes.Add(1)
	}
	qp.rewindLocked(out.psn)
}

// failAtLocked completes the WQE holding psn with status and enters ERR.
func (qp *QP) failAtLocked(psn roce.PSN, status Status) {
	w := qp.req.find(psn)
	if w == nil && len(qp.req.sq) > 0 {
		w = qp.req.sq[0]
	}
	if w != nil {
		w.status = status
		qp.failLocked(w)
		return
	}
	qp.toErrorLocked()
}

// failLocked completes everything before w as acknowledged, w with its
// error, and flushes the rest.
func (qp *QP) failLocked(w *sendWQE) {
	r := &qp.req
	for len(r.sq) > 0 && r.sq[0] != w {
		head := r.sq[0]
		if head.status == StatusSuccess && !head.acked && !head.done {
			head.status = StatusWRFlushErr
		}
		qp.completeSendLocked(head)
		r.sq = r.sq[1:]
	}
	if len(r.sq) > 0 {
		qp.completeSendLocked(w)
		r.sq = r.sq[1:]
	}
	qp.dev.log.Warn("QP enters the error state", "qp", qp.qpn, "wr", w.wr.ID, "status", w.status.String())
	qp.toErrorLocked()
}

// rewindLocked makes psn the next PSN sent (go-back-N): the WQE holding it
// and the packet within it, a READ from its first response not received.
// A PSN before the head WQE means the head (everything before it
// completed); one past every started WQE means the first unstarted one.
func (qp *QP) rewindLocked(psn roce.PSN) {
	r := &qp.req
	if len(r.sq) > 0 && r.sq[0].started && psn.Before(r.sq[0].first) {
		psn = r.sq[0].first
	}
	for i, w := range r.sq {
		if !w.started {
			break
		}
		if w.contains(psn) {
			r.next = i
			switch {
			case w.wr.Opcode == OpRead:
				r.k, r.psn = 0, w.resp
			case w.isReadOrAtomic():
				r.k, r.psn = 0, w.first
			default:
				r.k, r.psn = int(psn.Sub(w.first)), psn
			}
			return
		}
	}
	r.next = len(r.sq)
	for i, w := range r.sq {
		if !w.started {
			r.next = i
			break
		}
	}
	r.k, r.psn = 0, r.fresh
}

// completeHeadLocked completes finished WQEs in order.
func (qp *QP) completeHeadLocked() {
	r := &qp.req
	for len(r.sq) > 0 {
		w := r.sq[0]
		if !w.started || (w.isReadOrAtomic() && !w.done) || (!w.isReadOrAtomic() && !w.acked) {
			break
		}
		qp.completeSendLocked(w)
		r.sq[0] = nil
		r.sq = r.sq[1:]
		if r.next == 0 {
			// A go-back-N was resending this WQE when the acknowledgement
			// of its original packets came: resume with the next one.
			r.k = 0
		} else {
			r.next--
		}
		r.free = append(r.free, w)
	}
}

// timers ---------------------------------------------------------------

// ackTimeout returns the local ACK timeout: 4.096 us * 2^code.
func ackTimeout(code uint8) time.Duration {
	if code == 0 {
		return 0
	}
	return time.Duration(4096<<code) * time.Nanosecond
}

// rnrDelay returns the RNR NAK timer value for a code (IBTA table 45).
func rnrDelay(code uint8) time.Duration {
	us := [32]float64{655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
		2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880, 163840,
		245760, 327680, 491520}
	return time.Duration(us[code&31] * float64(time.Microsecond))
}

// armTimerLocked points the QP's one timer at the recovery machine's next
// deadline. A deadline that moved later is left to the timer's next
// firing (onTimer arms it again), so that progress does not reset the
// timer on every ACK.
func (qp *QP) armTimerLocked(now time.Time) {
	d := qp.req.rec.deadline()
	if d.IsZero() || (!qp.timerAt.IsZero() && !d.Before(qp.timerAt)) {
		return
	}
	qp.timerAt = d
	if qp.timer == nil {
		qp.timer = time.AfterFunc(d.Sub(now), qp.onTimer)
		return
	}
	qp.timer.Reset(d.Sub(now))
}

// onTimer runs when a deadline may have passed: it hands the time to the
// recovery machine (an ACK timeout, a tail-loss probe, the end of an RNR
// wait) and sends what that asks for. Progress moves the deadlines later
// without resetting the timer (armTimerLocked), so it often finds nothing
// due yet: then it only points the timer at the deadline as it now is.
func (qp *QP) onTimer() {
	qp.mu.Lock()
	qp.timerAt = time.Time{}
	if qp.state != StateRTS {
		qp.mu.Unlock()
		return
	}
	now := time.Now()
	if d := qp.req.rec.deadline(); d.IsZero() || now.Before(d) {
		qp.armTimerLocked(now)
		qp.mu.Unlock()
		return
	}
	qp.applyLocked(qp.req.rec.onTimer(now))
	qp.pumpLocked(now)
	send := len(qp.tx) > 0 || len(qp.txLeases) > 0
	qp.mu.Unlock()
	if send {
		qp.send()
	}
}

// onCNPLocked cuts the QP's rate for a congestion notification (DCQCN's
// reaction point); without ECN it is only counted.
func (qp *QP) onCNPLocked() {
	qp.req.cnps++
	if qp.cc != nil && qp.cc.onCNP(time.Now()) {
		qp.dev.stats.RateCuts.Add(1)
	}
}

// packetLenLocked estimates the wire size of packet k of w, for pacing.
func (qp *QP) packetLenLocked(w *sendWQE, k int) int {
	const headers = 14 + 20 + 8 + roce.BTHLen + roce.RETHLen + roce.ICRCLen
	if w.isReadOrAtomic() {
		return headers + roce.AtomicETHLen
	}
	return headers + min(qp.mtu, len(w.data)-k*qp.mtu)
}
