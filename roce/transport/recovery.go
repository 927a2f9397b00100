package transport

import (
	"time"

	"github.com/rbridge/rbridge/roce"
)

// recovery is the requester's loss recovery and flow control, one state
// machine. It knows PSNs, deadlines and counters, not work requests: the
// requester (requester.go) feeds it events with the current time and does
// what it answers (send again from a PSN, resend the newest packet, fail
// the WQE holding a PSN); it reads nothing else, calls no clock and sends
// nothing, so it is tested alone (recovery_internal_test.go).
//
// The states, and what moves between them ("progress" is an ACK, NAK, READ
// response or atomic ACK that acknowledges a PSN not acknowledged before;
// "probe due" is the tail-loss probe's deadline):
//
//	          sequence NAK: retry_cnt--, resend from its PSN
//	┌────────┐ ────────────────────────────────────────────► ┌─────────┐
//	│        │ ◄─────────────────── progress ─────────────── │ goBackN │ (a NAK for una:
//	│        │                                               └─────────┘  a straggler, ignored)
//	│        │  probe due: the newest packet again, ACK asked     │
//	│        │ ────────────────────────────────────────────► ┌───────────┐
//	│        │ ◄─────────────────── progress ─────────────── │ tailProbe │
//	│        │                                               └───────────┘
//	│        │                                                    │ probe due (from either):
//	│ normal │  ACK timeout (from normal, goBackN, tailProbe):    │ no retry spent
//	│        │  retry_cnt--                                       ▼
//	│        │ ────────────────────────────────────────────► ┌───────┐ ◄─┐ ACK timeout: retry_cnt--;
//	│        │ ◄──── progress: where the answer says ─────── │ probe │ ──┘ probe due: again, the
//	│        │                                               └───────┘     probe time doubling
//	│        │  RNR NAK (from any state): rnr_retry--, unless 7
//	│        │ ────────────────────────────────────────────► ┌─────────┐
//	│        │ ◄────── RNR timer: resend from its PSN ────── │ rnrWait │
//	└────────┘                                               └─────────┘
//
// What goes in each: normal, goBackN and tailProbe send within the window
// (goBackN from the NAK's PSN on; tailProbe has resent the newest packet
// once and keeps sending); probe sends only the oldest unacknowledged
// packet, asking for an ACK, until an answer says where the responder
// stands (an answer for just the PSN probed: go back N from after it; one
// for more, so the ACKs were only late: resume after the newest packet
// sent); rnrWait sends nothing. A sequence NAK in tailProbe is the gap the
// probe drew out: it goes back N as from normal.
//
// The tail-loss probe exists because a lost last packet of a burst, a lost
// NAK or a lost retransmission leaves the responder silent (after a NAK it
// drops everything until the PSN it NAKed), which would otherwise wait out
// the whole ACK timeout. From goBackN it goes straight to probe, since a
// responder that NAKed answers nothing but the PSN it wants.
//
// Failures end the machine from any state: retry_cnt exhausted (a sequence
// NAK or an ACK timeout with no retry left) fails with StatusRetryExcErr at
// the oldest unacknowledged PSN, rnr_retry exhausted with
// StatusRNRRetryExcErr, and a NAK with a fatal code (invalid request,
// remote access, remote operational error) with its status. Progress
// restores both counters, as the IBTA says (the counts are per packet, not
// per connection).
//
// A READ whose responses stop short of what the responder moved past
// (readGap) is asked for again from its first missing response, once per
// PSN: the ACK timeout covers a lost re-request.
//
// Deadlines: the ACK timeout (ackDeadline) runs while packets are
// unacknowledged and restarts on progress; the tail-loss probe
// (tlpDeadline) is due a probe time (twice the smoothed round trip, or the
// smoothed round trip and four times its variation where that is longer,
// at least minProbeTimeout) after the last progress or probe, doubling for
// each probe unanswered in probe; rnrDeadline replaces both in rnrWait.
// deadline returns the earliest; the QP keeps one timer on it.
//
// Flow control (the flow-control half of IRN, SIGCOMM'18): at most window
// packets are unacknowledged. go-back-N resends everything after a loss
// that was in flight, so what a loss costs is bounded by the window. The
// window starts at maxWindow, halves on each loss (a sequence NAK or an
// ACK timeout: a tail-loss probe is no proof of one), never below the
// estimated bandwidth-delay product (the smoothed delivery rate times the
// least round trip, at least minWindow), and grows back by one packet per
// window of packets acknowledged. A packet asks for an ACK at least every
// quarter window, so that the acknowledgements keep the window open.
type recovery struct {
	state recState

	// una is the oldest PSN not acknowledged, nxt the PSN after the newest
	// ever sent: una == nxt when nothing is outstanding. PSNs are 24-bit
	// and wrap; every comparison is roce.PSN's.
	una, nxt roce.PSN
	// last is the PSN of the latest packet sent (a retransmission too),
	// lastPlain whether it may be resent alone (a SEND or WRITE packet).
	last      roce.PSN
	lastPlain bool
	// lastAckReq is the PSN of the latest packet that asked for an ACK.
	lastAckReq roce.PSN

	timeout             time.Duration // the local ACK timeout; 0 waits forever
	retryCnt, rnrRetry  uint8         // configured (rnrRetry 7: forever)
	retries, rnrRetries uint8         // left until the next progress

	ackDeadline, tlpDeadline, rnrDeadline time.Time
	rnrPSN                                roce.PSN // where to resume after rnrWait
	probeSent                             bool     // probe: the probe packet went
	probeAt                               roce.PSN // probe: the PSN probed (una when it began)
	probes                                uint8    // probe: probes resent without an answer

	rereadPSN roce.PSN // readGap: the PSN last asked for again
	rereadSet bool

	// Round trips, sampled from one ACK-requesting packet at a time that
	// was never sent before (Karn): rttPSN, sent at rttSent when una was
	// rttUna.
	srtt, minRTT time.Duration
	rttvar       time.Duration // the round trip's smoothed mean deviation
	rttPSN       roce.PSN
	rttUna       roce.PSN
	rttSent      time.Time
	rttPending   bool
	rate         float64 // the smoothed delivery rate, packets per second

	window, maxWindow int
	growth            int // packets acknowledged since the window last grew
}

// recState is the recovery machine's state.
type recState uint8

const (
	recNormal    recState = iota
	recGoBackN            // resending from a sequence NAK's PSN
	recTailProbe          // the newest packet was resent as a tail-loss probe
	recProbe              // only the oldest unacknowledged packet, until answered
	recRNRWait            // waiting out an RNR NAK's timer
)

var recStateNames = [...]string{"normal", "goBackN", "tailProbe", "probe", "rnrWait"}

func (s recState) String() string {
	if int(s) < len(recStateNames) {
		return recStateNames[s]
	}
	return "recState(?)"
}

// recAction is what the requester does for an event.
type recAction uint8

const (
	actNone      recAction = iota
	actResend              // go back N: send again from psn
	actTailProbe           // resend packet psn alone, asking for an ACK, and keep sending
	actFail                // complete the WQE holding psn with status, and enter ERR
)

// recCause says why an action was taken, for the device's counters.
type recCause uint8

const (
	causeNone       recCause = iota
	causeNAK                 // a sequence NAK
	causeTimeout             // the ACK timeout
	causeTailProbe           // a tail-loss probe
	causeProbeReply          // the answer to a probe
	causeRNR                 // the end of an RNR wait
	causeReadGap             // READ responses went missing
	causeFatal               // a NAK the connection does not survive
)

// recOutcome is the machine's answer to an event.
type recOutcome struct {
	act    recAction
	psn    roce.PSN
	status Status // actFail
	cause  recCause
}

// Window bounds, in packets. defaultMaxWindow is what the requester kept
// in flight before it had a window; minWindow is the least a loss leaves,
// whatever was measured: smaller windows cost more in round trips waited
// than they save in packets resent (docs/performance.md).
const (
	defaultMaxWindow = 512
	minWindow        = 32
)

// minProbeTimeout is the least time before a tail-loss probe: below it a
// Go scheduler's hiccup or a busy receiver would trigger probes for
// packets that were not lost.
const minProbeTimeout = 250 * time.Microsecond

// init readies the machine for a QP entering RTS with first PSN psn.
func (m *recovery) init(psn roce.PSN, timeout time.Duration, retry, rnr uint8) {
	*m = recovery{una: psn, nxt: psn, last: psn.Add(-1), lastAckReq: psn.Add(-1), timeout: timeout,
		retryCnt: retry, rnrRetry: rnr, retries: retry, rnrRetries: rnr,
		window: defaultMaxWindow, maxWindow: defaultMaxWindow}
}

// outstanding reports whether packets await acknowledgement.
func (m *recovery) outstanding() bool { return m.una != m.nxt }

// maySend reports whether a packet at psn may go now: within the window,
// one probe packet in probe, none in rnrWait.
func (m *recovery) maySend(psn roce.PSN) bool {
	switch m.state {
	case recRNRWait:
		return false
	case recProbe:
		return !m.probeSent
	}
	return int(psn.Sub(m.una)) < m.window
}

// ackInterval is how many packets go between two ACK requests of a long
// message: rxe's RXE_MAX_PKT_PER_ACK, fewer when the window is small so
// that an ACK always comes back before the window closes.
func (m *recovery) ackInterval() int { return max(1, min(ackEvery, m.window/4)) }

// wantAck reports whether a packet at psn asks for an ACK beyond the last
// packet of each message: always in probe, and every ackInterval packets.
func (m *recovery) wantAck(psn roce.PSN) bool {
	return m.state == recProbe || int(psn.Sub(m.lastAckReq)) >= m.ackInterval()
}

// sent is a packet that went.
type sent struct {
	first, last roce.PSN // a READ request takes its responses' PSNs
	ackReq      bool
	plain       bool // a SEND or WRITE packet (may be resent alone)
}

// onSent notes a packet sent at now.
func (m *recovery) onSent(now time.Time, p sent) {
	fresh := !p.first.Before(m.nxt)
	if n := p.last.Next(); m.nxt.Before(n) {
		m.nxt = n
	}
	m.last, m.lastPlain = p.first, p.plain
	if p.ackReq {
		m.lastAckReq = p.last
		if fresh && !m.rttPending && m.state == recNormal {
			m.rttPSN, m.rttUna, m.rttSent, m.rttPending = p.last, m.una, now, true
		}
	}
	if m.state == recProbe {
		m.probeSent = true
	}
	if m.ackDeadline.IsZero() && m.state != recRNRWait {
		m.restartDeadlines(now)
	}
}

// onAck takes an acknowledgement of every PSN up to psn (an ACK, what a
// NAK acknowledges, a READ response, an atomic ACK). Only progress moves
// the machine; an answer to a probe goes back N from where it says the
// responder stands.
func (m *recovery) onAck(now time.Time, psn roce.PSN) recOutcome {
	n := psn.Next()
	if !m.una.Before(n) || m.nxt.Before(n) {
		return recOutcome{} // no progress, or a PSN never sent
	}
	acked := int(n.Sub(m.una))
	m.una = n
	m.retries, m.rnrRetries = m.retryCnt, m.rnrRetry
	if m.rereadSet && m.rereadPSN.Before(n) {
		m.rereadSet = false
	}
	if m.rttPending && !psn.Before(m.rttPSN) {
		m.rttPending = false
		m.sampleRTT(now.Sub(m.rttSent), int(n.Sub(m.rttUna)))
	}
	m.grow(acked)
	var out recOutcome
	switch m.state {
	case recProbe:
		// The responder was stuck at the PSN probed (the answer
		// acknowledges just it): go back N from there. It was further:
		// the acknowledgements were only late, and so, likely, is what
		// followed; resume after the newest packet sent. If some of that
		// was lost too, the responder NAKs the next packet, or stays
		// silent and the tail-loss probe comes back to it.
		to := n
		if n != m.probeAt.Next() {
			to = m.nxt
		}
		out = recOutcome{act: actResend, psn: to, cause: causeProbeReply}
		m.state = recNormal
	case recGoBackN, recTailProbe:
		m.state = recNormal
	}
	if m.state != recRNRWait {
		m.restartDeadlines(now)
	}
	return out
}

// onNAK handles a NAK for psn, after onAck(psn-1) took what it
// acknowledges.
func (m *recovery) onNAK(psn roce.PSN, code uint8) recOutcome {
	if !psn.Before(m.nxt) {
		return recOutcome{} // for a PSN never sent
	}
	if code != roce.NAKPSNSequenceError {
		return recOutcome{act: actFail, psn: psn, status: NAKStatus(code), cause: causeFatal}
	}
	if psn.Before(m.una) {
		return recOutcome{} // older than an acknowledgement already taken
	}
	switch m.state {
	case recGoBackN, recProbe, recRNRWait:
		// One retry sequence at a time: a NAK without progress since the
		// last go-back-N is a straggler of the first loss (as rxe); a
		// probe waits for its own answer.
		return recOutcome{}
	}
	if m.retries == 0 {
		return recOutcome{act: actFail, psn: psn, status: StatusRetryExcErr, cause: causeNAK}
	}
	m.retries--
	m.state = recGoBackN
	m.rttPending = false // an ACK could now answer either copy (Karn)
	m.shrink()
	return recOutcome{act: actResend, psn: psn, cause: causeNAK}
}

// onRNR handles an RNR NAK for psn with timer code timer, after
// onAck(psn-1): nothing is sent until the RNR timer expires.
func (m *recovery) onRNR(now time.Time, psn roce.PSN, timer uint8) recOutcome {
	if !psn.Before(m.nxt) {
		return recOutcome{}
	}
	if m.rnrRetry != 7 {
		if m.rnrRetries == 0 {
			return recOutcome{act: actFail, psn: psn, status: StatusRNRRetryExcErr, cause: causeRNR}
		}
		m.rnrRetries--
	}
	m.state, m.rnrPSN = recRNRWait, psn
	m.rttPending = false
	m.ackDeadline, m.tlpDeadline = time.Time{}, time.Time{}
	m.rnrDeadline = now.Add(rnrDelay(timer))
	return recOutcome{}
}

// readGap handles READ responses that went missing: the responder is past
// psn, the READ's first response not received. It asks again from psn,
// unless it asked from psn or before since the last progress past it.
func (m *recovery) readGap(psn roce.PSN) recOutcome {
	if m.state == recRNRWait || m.state == recProbe || (m.rereadSet && !psn.Before(m.rereadPSN)) {
		return recOutcome{}
	}
	m.rereadPSN, m.rereadSet = psn, true
	m.rttPending = false
	return recOutcome{act: actResend, psn: psn, cause: causeReadGap}
}

// deadline returns when onTimer is next due; zero for never.
func (m *recovery) deadline() time.Time {
	if m.state == recRNRWait {
		return m.rnrDeadline
	}
	d := m.ackDeadline
	if !m.tlpDeadline.IsZero() && (d.IsZero() || m.tlpDeadline.Before(d)) {
		d = m.tlpDeadline
	}
	return d
}

// onTimer handles the deadlines that passed by now.
func (m *recovery) onTimer(now time.Time) recOutcome {
	switch {
	case m.state == recRNRWait:
		if now.Before(m.rnrDeadline) {
			return recOutcome{}
		}
		m.state, m.rnrDeadline = recNormal, time.Time{}
		return recOutcome{act: actResend, psn: m.rnrPSN, cause: causeRNR}
	case !m.outstanding():
		m.ackDeadline, m.tlpDeadline = time.Time{}, time.Time{}
		return recOutcome{}
	case !m.ackDeadline.IsZero() && !now.Before(m.ackDeadline):
		m.ackDeadline, m.tlpDeadline = time.Time{}, time.Time{}
		if m.retries == 0 {
			return recOutcome{act: actFail, psn: m.una, status: StatusRetryExcErr, cause: causeTimeout}
		}
		m.retries--
		m.shrink()
		m.startProbe(now)
		return recOutcome{act: actResend, psn: m.una, cause: causeTimeout}
	case !m.tlpDeadline.IsZero() && !now.Before(m.tlpDeadline):
		m.tlpDeadline = time.Time{}
		switch m.state {
		case recNormal:
			if m.lastPlain && !m.last.Before(m.una) && m.last.Before(m.nxt) {
				// Stage 1: the newest packet again, and keep sending.
				m.state = recTailProbe
				m.rttPending = false
				m.tlpDeadline = now.Add(m.probeTimeout())
				return recOutcome{act: actTailProbe, psn: m.last, cause: causeTailProbe}
			}
			fallthrough
		case recTailProbe, recGoBackN:
			// Stage 2: the timeout's recovery, early, without a retry. A
			// go-back-N that stalled starts here: the responder that NAKed
			// keeps silent until the PSN it NAKed arrives, so resending
			// the newest packet would draw nothing.
			m.startProbe(now)
			return recOutcome{act: actResend, psn: m.una, cause: causeTailProbe}
		case recProbe:
			// The probe or its answer was lost: probe again, backing off.
			m.probeSent = false
			m.probes++
			m.armReprobe(now)
			return recOutcome{act: actResend, psn: m.una, cause: causeTailProbe}
		}
	}
	return recOutcome{}
}

// startProbe enters probe: only the oldest unacknowledged packet goes,
// asking for an ACK, until an answer.
func (m *recovery) startProbe(now time.Time) {
	m.state, m.probeSent, m.probes, m.probeAt = recProbe, false, 0, m.una
	m.rttPending = false
	m.armReprobe(now)
}

// maxReprobes bounds the probes resent between two ACK timeouts.
const maxReprobes = 8

// armReprobe sets when an unanswered probe goes again: a probe time after
// it, doubling with each one unanswered, as long as that comes before the
// ACK timeout.
func (m *recovery) armReprobe(now time.Time) {
	m.tlpDeadline = time.Time{}
	pto := m.probeTimeout()
	if pto == 0 || m.probes >= maxReprobes {
		return
	}
	if t := now.Add(pto << m.probes); m.ackDeadline.IsZero() || t.Before(m.ackDeadline) {
		m.tlpDeadline = t
	}
}

// restartDeadlines moves the ACK timeout a timeout ahead of now, and the
// tail-loss probe a probe time ahead, while packets are outstanding.
func (m *recovery) restartDeadlines(now time.Time) {
	m.ackDeadline, m.tlpDeadline = time.Time{}, time.Time{}
	if m.timeout == 0 || !m.outstanding() {
		return
	}
	m.ackDeadline = now.Add(m.timeout)
	if m.state == recProbe {
		m.armReprobe(now)
		return
	}
	if pto := m.probeTimeout(); pto > 0 && pto < m.timeout/2 {
		m.tlpDeadline = now.Add(pto)
	}
}

// probeTimeout is how long after the last progress the tail-loss probe is
// due: twice the smoothed round trip (RFC 8985's), or the smoothed round
// trip and four times its mean deviation (RFC 6298's retransmission
// timeout, RFC 9002's probe timeout) where that is longer, at least
// minProbeTimeout; 0 before the first round trip was measured. Where round
// trips vary by more than half their mean (a receiver on a loaded CPU, a
// virtual machine's wake-ups), the deviation keeps the probe from going
// out while the ACK is on its way, each time the round trip runs long.
func (m *recovery) probeTimeout() time.Duration {
	if m.srtt == 0 {
		return 0
	}
	return max(2*m.srtt, m.srtt+4*m.rttvar, minProbeTimeout)
}

// sampleRTT folds a round trip d, over which delivered packets were
// acknowledged, into srtt and the delivery rate (both with RFC 6298's 1/8
// gain), rttvar (its 1/4) and minRTT. A smoothed rate, not the fastest sample: one burst of
// coalesced ACKs would otherwise inflate the bandwidth-delay product, and
// with it what every later loss costs.
func (m *recovery) sampleRTT(d time.Duration, delivered int) {
	if d <= 0 {
		d = time.Nanosecond
	}
	if m.srtt == 0 {
		m.srtt, m.rttvar, m.minRTT = d, d/2, d
	} else {
		dev := m.srtt - d
		if dev < 0 {
			dev = -dev
		}
		m.rttvar += (dev - m.rttvar) / 4
		m.srtt += (d - m.srtt) / 8
		m.minRTT = min(m.minRTT, d)
	}
	r := float64(delivered) / d.Seconds()
	if m.rate == 0 {
		m.rate = r
	} else {
		m.rate += (r - m.rate) / 8
	}
}

// bdp is the estimated bandwidth-delay product in packets: the delivery
// rate times the least round trip, within [minWindow, maxWindow].
func (m *recovery) bdp() int {
	b := int(m.rate * m.minRTT.Seconds())
	return max(minWindow, min(b, m.maxWindow))
}

// shrink halves the window for a loss, not below the bandwidth-delay
// product.
func (m *recovery) shrink() {
	m.window = max(m.window/2, m.bdp())
	m.growth = 0
}

// grow opens the window by one packet per window of packets acknowledged.
func (m *recovery) grow(acked int) {
	if m.window >= m.maxWindow {
		return
	}
	m.growth += acked
	for m.growth >= m.window && m.window < m.maxWindow {
		m.growth -= m.window
		m.window++
	}
}
