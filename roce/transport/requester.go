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
	resent  roce.PSN // READ: the response PSN a re-request last asked from
	resentK bool
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
type requester struct {
	sq    []*sendWQE
	next  int      // index in sq of the WQE the next packet comes from
	k     int      // index of the next packet within it
	psn   roce.PSN // PSN of the next packet to send
	fresh roce.PSN // PSN the next WQE to start takes
	// unacked is the oldest PSN not acknowledged; fresh when all are.
	unacked roce.PSN

	retries, rnrRetries uint8 // remaining
	retryCnt, rnrRetry  uint8 // configured
	rdAtomic            int   // READs and atomics started and not done
	deadline            time.Time
	retrying            bool // a go-back-N is under way: no new one until progress
	// probe is set by a timeout: send only the oldest unacknowledged packet,
	// asking for an ACK, until the peer answers; then go back N. It keeps a
	// timeout from resending a whole window into the same loss, round after
	// round.
	probe       bool
	probeSent   bool
	rnrWait     bool
	rnrPSN      roce.PSN
	maxInflight int // packets sent and not acknowledged, at most
	cnps        uint64
	free        []*sendWQE // recycled WQEs

	// The tail-loss probe. srtt is the smoothed round trip, sampled from
	// one ACK-requesting packet at a time (rttPSN, sent at rttSent; none
	// while a retransmission is under way). tlpDeadline is when the next
	// probe is due if no acknowledgement came; tlpStage says how far the
	// probing went since the last one (tailProbeLocked).
	srtt        time.Duration
	rttPSN      roce.PSN
	rttSent     time.Time
	rttPending  bool
	tlpDeadline time.Time
	tlpStage    uint8
	tlpResend   bool // set while the resent newest packet is built: it asks for an ACK
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

func (r *requester) init(psn roce.PSN, retry, rnr uint8) {
	*r = requester{psn: psn, fresh: psn, unacked: psn, retries: retry, rnrRetries: rnr,
		retryCnt: retry, rnrRetry: rnr, maxInflight: 512, sq: r.sq[:0], free: r.free}
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

// pumpLocked sends new and retransmitted packets while the window allows.
func (qp *QP) pumpLocked() {
	r := &qp.req
	for qp.state == StateRTS && !r.rnrWait && r.next < len(r.sq) {
		w := r.sq[r.next]
		if !w.started {
			if w.isReadOrAtomic() && r.rdAtomic >= qp.attr.MaxRdAtomic {
				return
			}
			if w.wr.Fence && r.rdAtomic > 0 {
				return
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
		if int(r.psn.Sub(r.unacked)) >= r.maxInflight {
			return
		}
		if r.probe && r.probeSent {
			return
		}
		if !qp.paceLocked(qp.packetLenLocked(w, r.k)) {
			return
		}
		if r.psn != w.first.Add(r.k) {
			r.psn = w.first.Add(r.k)
		}
		qp.buildRequestLocked(w, r.k)
		r.probeSent = r.probe
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
		qp.armTimerLocked()
	}
}

// ackEvery is how many packets of a long message go between two ACK
// requests: rxe's RXE_MAX_PKT_PER_ACK. Fewer ACKs cost the responder and the
// requester less; 64 is well inside the requester's window (maxInflight).
const ackEvery = 64

// buildRequestLocked queues packet k of w.
func (qp *QP) buildRequestLocked(w *sendWQE, k int) {
	mtu := qp.mtu
	var f roce.PacketFields
	f.BTH = roce.BTHFields{PKey: roce.DefaultPKey, DestQP: qp.attr.DestQPN, PSN: uint32(w.first.Add(k))}
	lastPkt := k == w.npkts-1
	first := k == 0
	var payload []byte
	if len(w.data) > 0 && !w.isReadOrAtomic() {
		payload = w.data[k*mtu : min((k+1)*mtu, len(w.data))]
	}
	wr := &w.wr
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
		off := w.resp.Sub(w.first) // resume where the responses stopped
		f.BTH.Opcode = roce.RCRDMAReadRequest
		f.BTH.PSN = uint32(w.resp)
		rest := max(len(w.data)-int(off)*mtu, 0)
		f.RETH = roce.RETHFields{VA: wr.Remote + uint64(off)*uint64(mtu), RKey: wr.RKey, DMALen: uint32(rest)}
		lastPkt = true
	case OpCompareSwap, OpFetchAdd:
		f.BTH.Opcode = roce.RCCompareSwap
		if wr.Opcode == OpFetchAdd {
			f.BTH.Opcode = roce.RCFetchAdd
		}
		f.AtomicETH = roce.AtomicETHFields{VA: wr.Remote, RKey: wr.RKey, SwapAdd: wr.SwapAdd, Compare: wr.Compare}
		lastPkt = true
	}
	// Ask for an ACK at the end of each message, every ackEvery packets
	// within one, and on a timeout's probe.
	f.BTH.AckReq = lastPkt || k%ackEvery == ackEvery-1 || qp.req.probe || qp.req.tlpResend
	if r := &qp.req; f.BTH.AckReq && !r.rttPending && !r.retrying && !r.tlpResend {
		r.rttPSN, r.rttSent, r.rttPending = roce.PSN(f.BTH.PSN), time.Now(), true
	}
	qp.queueLocked(qp.attr.Remote, &f, payload)
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
	switch op := p.Opcode(); op.Kind() {
	case roce.KindAck:
		syn := p.AETH.Syndrome()
		switch syn.Type() {
		case roce.AckTypeACK:
			qp.ackUpToLocked(psn)
		case roce.AckTypeRNRNAK:
			qp.ackUpToLocked(psn.Add(-1))
			qp.onRNRLocked(psn, syn.Value())
		case roce.AckTypeNAK:
			qp.ackUpToLocked(psn.Add(-1))
			qp.onNAKLocked(psn, syn.Value())
		}
	case roce.KindReadResponse:
		qp.onReadResponseLocked(p, psn)
	case roce.KindAtomicAck:
		w := r.find(psn)
		if w == nil || w.done || (w.wr.Opcode != OpCompareSwap && w.wr.Opcode != OpFetchAdd) {
			return // a duplicate
		}
		binary.LittleEndian.PutUint64(w.data, p.AtomicAckETH.Orig())
		w.done = true
		r.rdAtomic--
		qp.ackUpToLocked(psn)
	}
	qp.completeHeadLocked()
	qp.pumpLocked()
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

// ackUpToLocked takes an acknowledgement of every PSN up to psn.
func (qp *QP) ackUpToLocked(psn roce.PSN) {
	r := &qp.req
	if psn.Before(r.unacked.Add(-1)) {
		return // older than what is known to be acknowledged
	}
	for _, w := range r.sq {
		if !w.started || psn.Before(w.first) {
			break
		}
		if w.isReadOrAtomic() {
			if w.done {
				// Its response acknowledged its PSNs.
				if psn.Before(w.last) {
					psn = w.last
				}
				continue
			}
			// The responder is past this READ or atomic but its response
			// did not (all) arrive: ask again. What is acknowledged stops
			// where its responses stop.
			if !psn.Before(w.resp) {
				qp.rereadLocked(w)
				psn = w.resp.Add(-1)
			}
			break
		}
		if psn.Before(w.last) {
			break
		}
		w.acked = true
	}
	qp.progressLocked(psn)
}

// progressLocked notes that the peer acknowledged up to psn.
func (qp *QP) progressLocked(psn roce.PSN) {
	r := &qp.req
	if n := psn.Next(); r.unacked.Before(n) {
		r.unacked = n
		r.retries, r.rnrRetries = r.retryCnt, r.rnrRetry
		r.retrying = false
		r.tlpStage = 0
		if r.rttPending && !psn.Before(r.rttPSN) {
			r.rttPending = false
			r.sampleRTT(time.Since(r.rttSent))
		}
		if r.probe {
			// The probe's answer says where the responder stands: go back
			// to there, not past what it already has.
			r.probe = false
			qp.rewindLocked(n)
		}
		qp.restartTimerLocked()
	}
}

// rereadLocked re-requests the rest of a READ (or an atomic) whose response
// went missing, once per response PSN.
func (qp *QP) rereadLocked(w *sendWQE) {
	if w.resentK && w.resent == w.resp {
		return // asked already; the timer covers a lost re-request
	}
	w.resent, w.resentK = w.resp, true
	qp.rewindLocked(w.resp)
}

func (qp *QP) onReadResponseLocked(p *roce.Packet, psn roce.PSN) {
	r := &qp.req
	w := r.find(psn)
	if w == nil || w.wr.Opcode != OpRead || w.done {
		return // a duplicate or stale response
	}
	qp.ackUpToLocked(w.first.Add(-1))
	switch {
	case psn.Before(w.resp):
		return // a duplicate
	case w.resp.Before(psn):
		qp.rereadLocked(w) // responses went missing
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
	qp.ackUpToLocked(psn)
}

// onNAKLocked handles a NAK for psn.
func (qp *QP) onNAKLocked(psn roce.PSN, code uint8) {
	r := &qp.req
	if code == roce.NAKPSNSequenceError {
		// One retry sequence at a time: the NAKs that the retransmission's
		// stragglers provoke do not start another (as the kernel's rxe).
		if r.retrying {
			return
		}
		if r.retries == 0 {
			qp.failAtLocked(psn, StatusRetryExcErr)
			return
		}
		r.retries--
		r.retrying = true
		qp.dev.stats.Retransmit.Add(1)
		qp.rewindLocked(psn)
		return
	}
	status := StatusRemOpErr
	switch code {
	case roce.NAKInvalidRequest:
		status = StatusRemInvReqErr
	case roce.NAKRemoteAccessError:
		status = StatusRemAccessErr
	}
	qp.failAtLocked(psn, status)
}

// onRNRLocked waits out an RNR NAK's timer, then resends from psn.
func (qp *QP) onRNRLocked(psn roce.PSN, timer uint8) {
	r := &qp.req
	if r.rnrRetry != 7 {
		if r.rnrRetries == 0 {
			qp.failAtLocked(psn, StatusRNRRetryExcErr)
			return
		}
		r.rnrRetries--
	}
	r.rnrWait, r.rnrPSN = true, psn
	r.deadline = time.Now().Add(rnrDelay(timer))
	qp.startTimerLocked(time.Until(r.deadline))
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

// rewindLocked makes psn the next PSN sent (go-back-N).
func (qp *QP) rewindLocked(psn roce.PSN) {
	r := &qp.req
	r.rttPending = false // an ACK could now answer either copy (Karn)
	if len(r.sq) > 0 && r.sq[0].started && psn.Before(r.sq[0].first) {
		psn = r.sq[0].first // everything before the head has completed
	}
	for i, w := range r.sq {
		if !w.started {
			break
		}
		if w.contains(psn) {
			r.next = i
			if w.wr.Opcode == OpRead {
				psn = w.resp
			}
			r.k = int(psn.Sub(w.first))
			if w.isReadOrAtomic() {
				r.k = 0
			}
			r.psn = psn
			return
		}
	}
	// Nothing outstanding holds psn: resume with the first unstarted WQE.
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
	// Every PSN before the head WQE is acknowledged: its WQEs completed.
	if len(r.sq) == 0 {
		r.sq = r.sq[:0:cap(r.sq)] // reuse the backing array from its start
		r.unacked = r.fresh
		if !r.rnrWait {
			// Nothing outstanding: the next packet sent starts the
			// timers afresh (armTimerLocked), not from this ACK's time.
			r.deadline, r.tlpDeadline = time.Time{}, time.Time{}
		}
	} else if h := r.sq[0]; h.started && r.unacked.Before(h.first) {
		r.unacked = h.first
	}
}

// outstandingLocked reports whether packets await acknowledgement.
func (r *requester) outstanding() bool {
	return len(r.sq) > 0 && r.sq[0].started
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

// armTimerLocked starts the retransmission timer if it is not running.
func (qp *QP) armTimerLocked() {
	if qp.req.deadline.IsZero() {
		qp.restartTimerLocked()
	}
}

// restartTimerLocked moves the retransmission deadline a timeout ahead,
// and the tail-loss probe's deadline a probe time ahead.
func (qp *QP) restartTimerLocked() {
	r := &qp.req
	if r.rnrWait {
		return
	}
	t := ackTimeout(qp.attr.Timeout)
	if t == 0 || !r.outstanding() {
		r.deadline, r.tlpDeadline = time.Time{}, time.Time{}
		return
	}
	now := time.Now()
	r.deadline = now.Add(t)
	r.tlpDeadline = time.Time{}
	if pto := r.probeTimeout(); pto > 0 && pto < t/2 && r.tlpStage < 2 {
		r.tlpDeadline = now.Add(pto)
		t = pto
	}
	qp.startTimerLocked(t)
}

// minProbeTimeout is the least time before a tail-loss probe: below it a
// Go scheduler's hiccup or a busy receiver would trigger probes for
// packets that were not lost.
const minProbeTimeout = time.Millisecond

// probeTimeout is how long after the last acknowledgement the newest
// packet is resent as a tail-loss probe: twice the smoothed round trip, at
// least minProbeTimeout; 0 before the first round trip was measured.
func (r *requester) probeTimeout() time.Duration {
	if r.srtt == 0 {
		return 0
	}
	return max(2*r.srtt, minProbeTimeout)
}

// sampleRTT folds a measured round trip into srtt (RFC 6298's 1/8 gain).
func (r *requester) sampleRTT(d time.Duration) {
	if r.srtt == 0 {
		r.srtt = d
		return
	}
	r.srtt += (d - r.srtt) / 8
}

// tailProbeLocked probes for a lost tail when the acknowledgements stopped
// for a probe time: a lost last packet of a burst (or the NAK of a loss,
// after which the responder drops what follows in silence) otherwise waits
// out the whole local ACK timeout, since nothing makes the responder speak.
// In two stages, the cheap one first:
//  1. resend the newest packet sent, asking for an ACK, and keep sending:
//     if it was lost, this fills it; if an earlier one was, the responder
//     NAKs the gap; if nothing was (the ACKs were only slow), it answers
//     the duplicate with an ACK.
//  2. a probe time later, still nothing: the timeout's own recovery, early:
//     send only the oldest unacknowledged packet, asking for an ACK, and go
//     back N from where the answer says the responder stands (this also
//     gets past a lost NAK).
//
// The ACK timeout keeps running and retry_cnt is not spent. It reports
// whether it queued a packet.
func (qp *QP) tailProbeLocked() bool {
	r := &qp.req
	r.tlpDeadline = time.Time{}
	if r.probe || r.rnrWait || !r.outstanding() || r.tlpStage >= 2 {
		return false
	}
	if r.tlpStage == 0 {
		if last := r.psn.Add(-1); !last.Before(r.unacked) {
			if w := r.find(last); w != nil && !w.isReadOrAtomic() {
				r.tlpStage = 1
				r.tlpResend = true
				qp.buildRequestLocked(w, int(last.Sub(w.first)))
				r.tlpResend = false
				r.tlpDeadline = time.Now().Add(r.probeTimeout())
				qp.dev.stats.TailProbes.Add(1)
				return true
			}
		}
	}
	r.tlpStage = 2
	qp.dev.stats.TailProbes.Add(1)
	qp.probeLocked()
	qp.pumpLocked()
	return true
}

// probeLocked starts the recovery a timeout (or a tail-loss probe's second
// stage) begins with: resend only the oldest unacknowledged packet, asking
// for an ACK, until the peer answers (progressLocked then goes back N from
// where the answer says the responder stands).
func (qp *QP) probeLocked() {
	r := &qp.req
	r.retrying = true
	r.probe, r.probeSent = true, false
	qp.rewindLocked(r.unacked)
}

func (qp *QP) startTimerLocked(d time.Duration) {
	if qp.timer == nil {
		qp.timer = time.AfterFunc(d, qp.onTimer)
		return
	}
	qp.timer.Reset(d)
}

// onTimer runs when the deadline may have passed: it retransmits after a
// timeout or an RNR wait.
func (qp *QP) onTimer() {
	qp.mu.Lock()
	r := &qp.req
	if qp.state != StateRTS || r.deadline.IsZero() {
		qp.mu.Unlock()
		return
	}
	if left := time.Until(r.deadline); left > 0 {
		sent := false
		if !r.tlpDeadline.IsZero() && !time.Now().Before(r.tlpDeadline) {
			sent = qp.tailProbeLocked() // may set the next probe's deadline
		}
		if !r.tlpDeadline.IsZero() {
			left = min(left, time.Until(r.tlpDeadline))
		}
		qp.timer.Reset(left)
		qp.mu.Unlock()
		if sent {
			qp.dev.send(qp)
		}
		return
	}
	r.tlpDeadline = time.Time{}
	r.deadline = time.Time{}
	switch {
	case r.rnrWait:
		r.rnrWait = false
		qp.rewindLocked(r.rnrPSN)
	case r.outstanding():
		if r.retries == 0 {
			qp.failAtLocked(r.unacked, StatusRetryExcErr)
			qp.mu.Unlock()
			qp.dev.send(qp)
			return
		}
		r.retries--
		qp.dev.stats.Timeouts.Add(1)
		qp.dev.stats.Retransmit.Add(1)
		qp.probeLocked()
	}
	qp.pumpLocked()
	qp.armTimerLocked()
	qp.mu.Unlock()
	qp.dev.send(qp)
}

// onCNP cuts the QP's rate for a congestion notification (DCQCN's
// reaction point); without ECN it is only counted.
func (r *requester) onCNP(qp *QP) {
	r.cnps++
	if qp.cc != nil {
		qp.cc.onCNP(time.Now())
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
