package transport

import (
	"testing"
	"time"

	"github.com/rbridge/rbridge/roce"
)

// The recovery machine alone: events in, outcomes out, the time passed in.
// No goroutines, no network, no sleeping.

var t0 = time.Unix(1_000_000, 0)

const (
	recTimeout = 16 * time.Millisecond // the ACK timeout of the tests
	wrapPSN    = roce.PSN(0xfffffe)    // the first PSN: sending crosses the 24-bit wrap at once
)

// step is one event given to the machine; it returns the machine's answer.
type step func(m *recovery) recOutcome

func at(d time.Duration) time.Time { return t0.Add(d) }

// send sends n SEND/WRITE packets from first at d, the last asking for an ACK.
func send(d time.Duration, first roce.PSN, n int) step {
	return func(m *recovery) recOutcome {
		for i := range n {
			p := first.Add(i)
			m.onSent(at(d), sent{first: p, last: p, ackReq: i == n-1, plain: true})
		}
		return recOutcome{}
	}
}

// read sends a READ request at d whose responses take PSNs first to last.
func read(d time.Duration, first, last roce.PSN) step {
	return func(m *recovery) recOutcome {
		m.onSent(at(d), sent{first: first, last: last, ackReq: true})
		return recOutcome{}
	}
}

func ack(d time.Duration, psn roce.PSN) step {
	return func(m *recovery) recOutcome { return m.onAck(at(d), psn) }
}

// nak is a NAK as the requester hands it over: what it acknowledges first.
func nak(d time.Duration, psn roce.PSN, code uint8) step {
	return func(m *recovery) recOutcome {
		m.onAck(at(d), psn.Add(-1))
		return m.onNAK(psn, code)
	}
}

func rnr(d time.Duration, psn roce.PSN, timer uint8) step {
	return func(m *recovery) recOutcome {
		m.onAck(at(d), psn.Add(-1))
		return m.onRNR(at(d), psn, timer)
	}
}

func gap(psn roce.PSN) step { return func(m *recovery) recOutcome { return m.readGap(psn) } }

func tick(d time.Duration) step { return func(m *recovery) recOutcome { return m.onTimer(at(d)) } }

// repeat runs s n times, returning the last answer.
func repeat(n int, s step) step {
	return func(m *recovery) (out recOutcome) {
		for range n {
			out = s(m)
		}
		return out
	}
}

// withRTT measures a 50 us round trip: the probe time is then
// minProbeTimeout, the floor over twice the round trip and over the round
// trip and four times its deviation (25 us after one sample).
func withRTT() []step {
	return []step{send(0, wrapPSN, 1), ack(50*time.Microsecond, wrapPSN)}
}

const p0 = wrapPSN + 1 // the first PSN after withRTT: 0xffffff

func resend(psn roce.PSN, cause recCause) recOutcome {
	return recOutcome{act: actResend, psn: psn, cause: cause}
}

func fail(psn roce.PSN, s Status, cause recCause) recOutcome {
	return recOutcome{act: actFail, psn: psn, status: s, cause: cause}
}

// TestRecoveryTransitions has one row per transition of the diagram in
// recovery.go (and per special case: stale and bogus PSNs, stragglers,
// READs and atomics, the counters), each from a fresh machine whose first
// PSN is two before the 24-bit wrap, so every row's PSNs cross it.
func TestRecoveryTransitions(t *testing.T) {
	ms := time.Millisecond
	pto := minProbeTimeout // the probe time after withRTT
	tests := []struct {
		name          string
		retry, rnr    uint8
		steps         []step
		want          recOutcome // the last step's answer
		state         recState
		una, nxt      roce.PSN
		retries, rnrs int // retry_cnt and rnr_retry left
	}{
		{name: "normal: an ACK of progress", retry: 7, rnr: 7,
			steps: []step{send(0, wrapPSN, 4), ack(ms, wrapPSN.Add(1))},
			state: recNormal, una: wrapPSN.Add(2), nxt: wrapPSN.Add(4), retries: 7, rnrs: 7},
		{name: "normal: an ACK older than una changes nothing", retry: 7, rnr: 7,
			steps: []step{send(0, wrapPSN, 4), ack(ms, wrapPSN.Add(2)), ack(ms, wrapPSN)},
			state: recNormal, una: wrapPSN.Add(3), nxt: wrapPSN.Add(4), retries: 7, rnrs: 7},
		{name: "normal: an ACK for a PSN never sent is ignored", retry: 7, rnr: 7,
			steps: []step{send(0, wrapPSN, 4), ack(ms, wrapPSN.Add(4))},
			state: recNormal, una: wrapPSN, nxt: wrapPSN.Add(4), retries: 7, rnrs: 7},
		{name: "normal -> goBackN: a sequence NAK resends from its PSN", retry: 7, rnr: 7,
			steps: []step{send(0, wrapPSN, 8), nak(ms, wrapPSN.Add(3), roce.NAKPSNSequenceError)},
			want:  resend(wrapPSN.Add(3), causeNAK), state: recGoBackN, una: wrapPSN.Add(3), nxt: wrapPSN.Add(8), retries: 6, rnrs: 7},
		{name: "goBackN: a straggler NAK for una is ignored", retry: 7, rnr: 7,
			steps: []step{send(0, wrapPSN, 8), nak(ms, wrapPSN.Add(3), roce.NAKPSNSequenceError),
				nak(ms, wrapPSN.Add(3), roce.NAKPSNSequenceError)},
			state: recGoBackN, una: wrapPSN.Add(3), nxt: wrapPSN.Add(8), retries: 6, rnrs: 7},
		{name: "goBackN -> normal: progress; a later loss is a new go-back-N, retries restored first", retry: 7, rnr: 7,
			steps: []step{send(0, wrapPSN, 8), nak(ms, wrapPSN.Add(3), roce.NAKPSNSequenceError),
				nak(2*ms, wrapPSN.Add(5), roce.NAKPSNSequenceError)},
			want: resend(wrapPSN.Add(5), causeNAK), state: recGoBackN, una: wrapPSN.Add(5), nxt: wrapPSN.Add(8), retries: 6, rnrs: 7},
		{name: "goBackN -> normal on an ACK", retry: 7, rnr: 7,
			steps: []step{send(0, wrapPSN, 8), nak(ms, wrapPSN.Add(3), roce.NAKPSNSequenceError), ack(2*ms, wrapPSN.Add(7))},
			state: recNormal, una: wrapPSN.Add(8), nxt: wrapPSN.Add(8), retries: 7, rnrs: 7},
		{name: "a sequence NAK older than an ACK taken is ignored", retry: 7, rnr: 7,
			steps: []step{send(0, wrapPSN, 8), ack(ms, wrapPSN.Add(4)), nak(ms, wrapPSN.Add(2), roce.NAKPSNSequenceError)},
			state: recNormal, una: wrapPSN.Add(5), nxt: wrapPSN.Add(8), retries: 7, rnrs: 7},
		{name: "sequence NAK with retry_cnt 0 fails", retry: 0, rnr: 7,
			steps: []step{send(0, wrapPSN, 4), nak(ms, wrapPSN.Add(1), roce.NAKPSNSequenceError)},
			want:  fail(wrapPSN.Add(1), StatusRetryExcErr, causeNAK), state: recNormal, una: wrapPSN.Add(1), nxt: wrapPSN.Add(4), retries: 0, rnrs: 7},
		{name: "retry_cnt is one count for NAKs and timeouts without progress", retry: 3, rnr: 7,
			steps: []step{send(0, wrapPSN, 4), nak(ms, wrapPSN, roce.NAKPSNSequenceError), tick(recTimeout)},
			want:  resend(wrapPSN, causeTimeout), state: recProbe, una: wrapPSN, nxt: wrapPSN.Add(4), retries: 1, rnrs: 7},
		{name: "NAK invalid request fails with RemInvReqErr", retry: 7, rnr: 7,
			steps: []step{send(0, wrapPSN, 4), nak(ms, wrapPSN.Add(2), roce.NAKInvalidRequest)},
			want:  fail(wrapPSN.Add(2), StatusRemInvReqErr, causeFatal), state: recNormal, una: wrapPSN.Add(2), nxt: wrapPSN.Add(4), retries: 7, rnrs: 7},
		{name: "NAK remote access fails with RemAccessErr", retry: 7, rnr: 7,
			steps: []step{send(0, wrapPSN, 4), nak(ms, wrapPSN, roce.NAKRemoteAccessError)},
			want:  fail(wrapPSN, StatusRemAccessErr, causeFatal), state: recNormal, una: wrapPSN, nxt: wrapPSN.Add(4), retries: 7, rnrs: 7},
		{name: "NAK remote operational error fails with RemOpErr", retry: 7, rnr: 7,
			steps: []step{send(0, wrapPSN, 4), nak(ms, wrapPSN, roce.NAKRemoteOperationalError)},
			want:  fail(wrapPSN, StatusRemOpErr, causeFatal), state: recNormal, una: wrapPSN, nxt: wrapPSN.Add(4), retries: 7, rnrs: 7},
		{name: "a NAK for a PSN never sent is ignored", retry: 7, rnr: 7,
			steps: []step{send(0, wrapPSN, 4), nak(ms, wrapPSN.Add(5), roce.NAKRemoteAccessError)},
			state: recNormal, una: wrapPSN, nxt: wrapPSN.Add(4), retries: 7, rnrs: 7},
		{name: "normal -> rnrWait: an RNR NAK", retry: 7, rnr: 3,
			steps: []step{send(0, wrapPSN, 4), rnr(ms, wrapPSN.Add(2), 13)},
			state: recRNRWait, una: wrapPSN.Add(2), nxt: wrapPSN.Add(4), retries: 7, rnrs: 2},
		{name: "rnrWait: before its timer, nothing", retry: 7, rnr: 3,
			steps: []step{send(0, wrapPSN, 4), rnr(ms, wrapPSN.Add(2), 13), tick(ms + 959*time.Microsecond)},
			state: recRNRWait, una: wrapPSN.Add(2), nxt: wrapPSN.Add(4), retries: 7, rnrs: 2},
		{name: "rnrWait -> normal: the timer (code 13: 960 us) resends from the NAK's PSN", retry: 7, rnr: 3,
			steps: []step{send(0, wrapPSN, 4), rnr(ms, wrapPSN.Add(2), 13), tick(ms + 960*time.Microsecond)},
			want:  resend(wrapPSN.Add(2), causeRNR), state: recNormal, una: wrapPSN.Add(2), nxt: wrapPSN.Add(4), retries: 7, rnrs: 2},
		{name: "rnrWait: an ACK timeout does not fire", retry: 7, rnr: 3,
			steps: []step{send(0, wrapPSN, 4), rnr(ms, wrapPSN.Add(2), 31), tick(ms + recTimeout)},
			state: recRNRWait, una: wrapPSN.Add(2), nxt: wrapPSN.Add(4), retries: 7, rnrs: 2},
		{name: "rnr_retry 0: the first RNR NAK fails", retry: 7, rnr: 0,
			steps: []step{send(0, wrapPSN, 4), rnr(ms, wrapPSN.Add(1), 1)},
			want:  fail(wrapPSN.Add(1), StatusRNRRetryExcErr, causeRNR), state: recNormal, una: wrapPSN.Add(1), nxt: wrapPSN.Add(4), retries: 7, rnrs: 0},
		{name: "rnr_retry 2: the third RNR NAK without progress fails", retry: 7, rnr: 2,
			steps: []step{send(0, wrapPSN, 4), repeat(3, func(m *recovery) recOutcome {
				out := rnr(ms, wrapPSN, 1)(m)
				if out.act == actNone {
					out = tick(2 * ms)(m)
				}
				return out
			})},
			want: fail(wrapPSN, StatusRNRRetryExcErr, causeRNR), state: recNormal, una: wrapPSN, nxt: wrapPSN.Add(4), retries: 7, rnrs: 0},
		{name: "rnr_retry 7 is infinite", retry: 7, rnr: 7,
			steps: []step{send(0, wrapPSN, 4), repeat(1000, func(m *recovery) recOutcome {
				rnr(ms, wrapPSN, 1)(m)
				return tick(2 * ms)(m)
			})},
			want: resend(wrapPSN, causeRNR), state: recNormal, una: wrapPSN, nxt: wrapPSN.Add(4), retries: 7, rnrs: 7},
		{name: "progress restores rnr_retry", retry: 7, rnr: 2,
			steps: []step{send(0, wrapPSN, 4), rnr(ms, wrapPSN, 1), tick(2 * ms), rnr(3*ms, wrapPSN.Add(1), 1)},
			state: recRNRWait, una: wrapPSN.Add(1), nxt: wrapPSN.Add(4), retries: 7, rnrs: 1},
		{name: "normal -> probe: the ACK timeout resends only una", retry: 7, rnr: 7,
			steps: []step{send(0, wrapPSN, 4), ack(ms, wrapPSN), tick(ms + recTimeout)},
			want:  resend(wrapPSN.Add(1), causeTimeout), state: recProbe, una: wrapPSN.Add(1), nxt: wrapPSN.Add(4), retries: 6, rnrs: 7},
		{name: "before the ACK timeout, nothing", retry: 7, rnr: 7,
			steps: []step{send(0, wrapPSN, 4), ack(ms, wrapPSN), tick(ms + recTimeout - 1)},
			state: recNormal, una: wrapPSN.Add(1), nxt: wrapPSN.Add(4), retries: 7, rnrs: 7},
		{name: "probe -> normal: the responder was stuck at the PSN probed: go back N from after it", retry: 7, rnr: 7,
			steps: []step{send(0, wrapPSN, 8), tick(recTimeout), send(recTimeout, wrapPSN, 1), ack(recTimeout+ms, wrapPSN)},
			want:  resend(wrapPSN.Add(1), causeProbeReply), state: recNormal, una: wrapPSN.Add(1), nxt: wrapPSN.Add(8), retries: 7, rnrs: 7},
		{name: "probe -> normal: the responder was further (the ACKs were late): resume after the newest packet", retry: 7, rnr: 7,
			steps: []step{send(0, wrapPSN, 8), tick(recTimeout), send(recTimeout, wrapPSN, 1), ack(recTimeout+ms, wrapPSN.Add(4))},
			want:  resend(wrapPSN.Add(8), causeProbeReply), state: recNormal, una: wrapPSN.Add(5), nxt: wrapPSN.Add(8), retries: 7, rnrs: 7},
		{name: "probe: the ACK timeout again spends another retry", retry: 7, rnr: 7,
			steps: []step{send(0, wrapPSN, 4), tick(recTimeout), send(recTimeout, wrapPSN, 1), tick(2 * recTimeout)},
			want:  resend(wrapPSN, causeTimeout), state: recProbe, una: wrapPSN, nxt: wrapPSN.Add(4), retries: 5, rnrs: 7},
		{name: "probe: a sequence NAK without progress waits for the probe's answer", retry: 7, rnr: 7,
			steps: []step{send(0, wrapPSN, 4), tick(recTimeout), nak(recTimeout+ms, wrapPSN, roce.NAKPSNSequenceError)},
			state: recProbe, una: wrapPSN, nxt: wrapPSN.Add(4), retries: 6, rnrs: 7},
		{name: "ACK timeout with retry_cnt 0 fails at una", retry: 0, rnr: 7,
			steps: []step{send(0, wrapPSN, 4), ack(ms, wrapPSN.Add(1)), tick(ms + recTimeout)},
			want:  fail(wrapPSN.Add(2), StatusRetryExcErr, causeTimeout), state: recNormal, una: wrapPSN.Add(2), nxt: wrapPSN.Add(4), retries: 0, rnrs: 7},
		{name: "retry_cnt 7: the eighth ACK timeout in a row fails", retry: 7, rnr: 7,
			steps: []step{send(0, wrapPSN, 4), repeat(8, func(m *recovery) recOutcome {
				now := m.deadline()
				out := m.onTimer(now)
				if out.act == actResend {
					m.onSent(now, sent{first: out.psn, last: out.psn, ackReq: true, plain: true}) // the probe
				}
				return out
			})},
			want: fail(wrapPSN, StatusRetryExcErr, causeTimeout), state: recProbe, una: wrapPSN, nxt: wrapPSN.Add(4), retries: 0, rnrs: 7},
		{name: "nothing outstanding: the timer does nothing", retry: 7, rnr: 7,
			steps: []step{send(0, wrapPSN, 4), ack(ms, wrapPSN.Add(3)), tick(ms + recTimeout)},
			state: recNormal, una: wrapPSN.Add(4), nxt: wrapPSN.Add(4), retries: 7, rnrs: 7},
		{name: "normal -> tailProbe: the newest packet again after a probe time", retry: 7, rnr: 7,
			steps: append(withRTT(), send(ms, p0, 4), tick(ms+pto-1), tick(ms+pto)),
			want:  recOutcome{act: actTailProbe, psn: p0.Add(3), cause: causeTailProbe}, state: recTailProbe, una: p0, nxt: p0.Add(4), retries: 7, rnrs: 7},
		{name: "tailProbe -> probe: a probe time later still nothing, without a retry", retry: 7, rnr: 7,
			steps: append(withRTT(), send(ms, p0, 4), tick(ms+pto), tick(ms+2*pto)),
			want:  resend(p0, causeTailProbe), state: recProbe, una: p0, nxt: p0.Add(4), retries: 7, rnrs: 7},
		{name: "tailProbe -> normal: the answer", retry: 7, rnr: 7,
			steps: append(withRTT(), send(ms, p0, 4), tick(ms+pto), ack(ms+pto+50*time.Microsecond, p0.Add(3))),
			state: recNormal, una: p0.Add(4), nxt: p0.Add(4), retries: 7, rnrs: 7},
		{name: "tailProbe -> goBackN: the NAK the probe drew", retry: 7, rnr: 7,
			steps: append(withRTT(), send(ms, p0, 4), tick(ms+pto), nak(ms+pto+50*time.Microsecond, p0.Add(1), roce.NAKPSNSequenceError)),
			want:  resend(p0.Add(1), causeNAK), state: recGoBackN, una: p0.Add(1), nxt: p0.Add(4), retries: 6, rnrs: 7},
		{name: "goBackN -> probe: a stalled go-back-N probes una at once (the responder that NAKed is silent)", retry: 7, rnr: 7,
			steps: append(withRTT(), send(ms, p0, 4), nak(ms+100*time.Microsecond, p0.Add(1), roce.NAKPSNSequenceError),
				send(ms+100*time.Microsecond, p0.Add(1), 3), tick(ms+100*time.Microsecond+pto)),
			want: resend(p0.Add(1), causeTailProbe), state: recProbe, una: p0.Add(1), nxt: p0.Add(4), retries: 6, rnrs: 7},
		{name: "newest sent is a READ: the tail-loss probe goes straight to probe", retry: 7, rnr: 7,
			steps: append(withRTT(), read(ms, p0, p0.Add(3)), tick(ms+pto)),
			want:  resend(p0, causeTailProbe), state: recProbe, una: p0, nxt: p0.Add(4), retries: 7, rnrs: 7},
		{name: "probe: unanswered, it goes again a probe time later, then twice that, without a retry", retry: 7, rnr: 7,
			steps: append(withRTT(), send(ms, p0, 4), tick(ms+pto), tick(ms+2*pto),
				send(ms+2*pto, p0, 1), tick(ms+3*pto-1), tick(ms+3*pto),
				send(ms+3*pto, p0, 1), tick(ms+5*pto-1), tick(ms+5*pto)),
			want: resend(p0, causeTailProbe), state: recProbe, una: p0, nxt: p0.Add(4), retries: 7, rnrs: 7},
		{name: "no round trip measured: no tail-loss probe", retry: 7, rnr: 7,
			steps: []step{send(0, wrapPSN, 4), tick(recTimeout - 1)},
			state: recNormal, una: wrapPSN, nxt: wrapPSN.Add(4), retries: 7, rnrs: 7},
		{name: "READ: responses missing are asked again from the first missing", retry: 7, rnr: 7,
			steps: []step{read(0, wrapPSN, wrapPSN.Add(7)), ack(ms, wrapPSN.Add(1)), gap(wrapPSN.Add(2))},
			want:  resend(wrapPSN.Add(2), causeReadGap), state: recNormal, una: wrapPSN.Add(2), nxt: wrapPSN.Add(8), retries: 7, rnrs: 7},
		{name: "READ: asked once per PSN; the timer covers a lost re-request", retry: 7, rnr: 7,
			steps: []step{read(0, wrapPSN, wrapPSN.Add(7)), ack(ms, wrapPSN.Add(1)), gap(wrapPSN.Add(2)), gap(wrapPSN.Add(2))},
			state: recNormal, una: wrapPSN.Add(2), nxt: wrapPSN.Add(8), retries: 7, rnrs: 7},
		{name: "READ: a later gap is covered by the go-back-N already asked", retry: 7, rnr: 7,
			steps: []step{read(0, wrapPSN, wrapPSN.Add(7)), gap(wrapPSN), gap(wrapPSN.Add(5))},
			state: recNormal, una: wrapPSN, nxt: wrapPSN.Add(8), retries: 7, rnrs: 7},
		{name: "READ: after progress past it, a new gap is asked again", retry: 7, rnr: 7,
			steps: []step{read(0, wrapPSN, wrapPSN.Add(7)), gap(wrapPSN), ack(ms, wrapPSN.Add(2)), gap(wrapPSN.Add(5))},
			want:  resend(wrapPSN.Add(5), causeReadGap), state: recNormal, una: wrapPSN.Add(3), nxt: wrapPSN.Add(8), retries: 7, rnrs: 7},
		{name: "READ: its responses' PSNs count as sent; the last response acknowledges all", retry: 7, rnr: 7,
			steps: []step{read(0, wrapPSN, wrapPSN.Add(7)), ack(ms, wrapPSN.Add(7))},
			state: recNormal, una: wrapPSN.Add(8), nxt: wrapPSN.Add(8), retries: 7, rnrs: 7},
		{name: "READ re-request: from its first missing response, nxt unchanged", retry: 7, rnr: 7,
			steps: []step{read(0, wrapPSN, wrapPSN.Add(7)), ack(ms, wrapPSN.Add(2)), read(ms, wrapPSN.Add(3), wrapPSN.Add(7))},
			state: recNormal, una: wrapPSN.Add(3), nxt: wrapPSN.Add(8), retries: 7, rnrs: 7},
		{name: "atomic: its ACK is progress and restores retry_cnt", retry: 7, rnr: 7,
			steps: []step{send(0, wrapPSN, 2), nak(ms, wrapPSN, roce.NAKPSNSequenceError), send(ms, wrapPSN, 2),
				read(ms, wrapPSN.Add(2), wrapPSN.Add(2)), ack(2*ms, wrapPSN.Add(2))},
			state: recNormal, una: wrapPSN.Add(3), nxt: wrapPSN.Add(3), retries: 7, rnrs: 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m recovery
			m.init(wrapPSN, recTimeout, tt.retry, tt.rnr)
			var got recOutcome
			for _, s := range tt.steps {
				got = s(&m)
			}
			if got != tt.want {
				t.Errorf("outcome %+v, want %+v", got, tt.want)
			}
			if m.state != tt.state {
				t.Errorf("state %v, want %v", m.state, tt.state)
			}
			if m.una != tt.una || m.nxt != tt.nxt {
				t.Errorf("una %#x nxt %#x, want %#x %#x", m.una, m.nxt, tt.una, tt.nxt)
			}
			if int(m.retries) != tt.retries {
				t.Errorf("retries left %d, want %d", m.retries, tt.retries)
			}
			if int(m.rnrRetries) != tt.rnrs {
				t.Errorf("RNR retries left %d, want %d", m.rnrRetries, tt.rnrs)
			}
		})
	}
}

// TestRecoveryWindow checks the flow control: at most window packets
// unacknowledged, halved by a loss but not below the bandwidth-delay
// product, grown back by one packet per window acknowledged.
func TestRecoveryWindow(t *testing.T) {
	var m recovery
	m.init(wrapPSN, recTimeout, 7, 7)
	if m.window != defaultMaxWindow {
		t.Fatalf("initial window %d, want %d", m.window, defaultMaxWindow)
	}
	if !m.maySend(wrapPSN.Add(defaultMaxWindow-1)) || m.maySend(wrapPSN.Add(defaultMaxWindow)) {
		t.Errorf("maySend: the window of %d from una %#x is wrong", defaultMaxWindow, wrapPSN)
	}
	// A round trip of 100 us over which 100 packets were acknowledged: a
	// rate of 1e6 packets/s and a bandwidth-delay product of 100 packets.
	send(0, wrapPSN, 100)(&m)
	ack(100*time.Microsecond, wrapPSN.Add(99))(&m)
	if got := m.bdp(); got != 100 {
		t.Fatalf("bdp %d packets (rate %.0f/s, min RTT %v), want 100", got, m.rate, m.minRTT)
	}
	p := wrapPSN.Add(100)
	var want []int
	var got []int
	for range 4 {
		send(time.Millisecond, p, 10)(&m)
		nak(time.Millisecond, p, roce.NAKPSNSequenceError)(&m)
		got = append(got, m.window)
		ack(time.Millisecond, p.Add(9))(&m) // the go-back-N went through
		p = p.Add(10)
	}
	want = []int{256, 128, 100, 100}
	if !equalInts(got, want) {
		t.Errorf("window after each loss %v, want %v", got, want)
	}
	if !m.maySend(m.una.Add(99)) || m.maySend(m.una.Add(100)) {
		t.Errorf("maySend: the window of 100 from una %#x is wrong", m.una)
	}
	// A timeout is a loss too: the window stays at the floor.
	send(2*time.Millisecond, p, 1)(&m)
	m.onTimer(at(2*time.Millisecond + recTimeout))
	ack(3*time.Millisecond+recTimeout, p)(&m)
	p = p.Add(1)
	if m.window != 100 {
		t.Errorf("window after a timeout %d, want 100 (the bandwidth-delay product)", m.window)
	}
	// 100 packets acknowledged (at the same rate) open it by one.
	d := 4*time.Millisecond + recTimeout
	send(d, p, 100)(&m)
	ack(d+100*time.Microsecond, p.Add(99))(&m)
	if m.window != 101 {
		t.Errorf("window after 100 packets acknowledged %d, want 101 (bdp %d)", m.window, m.bdp())
	}
}

// TestRecoveryBDPFloor checks that the window never shrinks below
// minWindow, whatever was measured.
func TestRecoveryBDPFloor(t *testing.T) {
	var m recovery
	m.init(0, recTimeout, 7, 7)
	for i := range 20 {
		p := roce.PSN(i * 4)
		send(0, p, 4)(&m)
		nak(0, p.Add(1), roce.NAKPSNSequenceError)(&m)
		ack(0, p.Add(3))(&m)
	}
	if m.window != minWindow {
		t.Errorf("window after 20 losses %d, want minWindow %d", m.window, minWindow)
	}
}

// TestRecoveryAckRequests checks when packets ask for an ACK beyond the
// last of each message: every ackInterval packets, and in probe.
func TestRecoveryAckRequests(t *testing.T) {
	var m recovery
	m.init(wrapPSN, recTimeout, 7, 7)
	var asked []int
	for i := range 130 {
		p := wrapPSN.Add(i)
		req := m.wantAck(p)
		if req {
			asked = append(asked, i)
		}
		m.onSent(t0, sent{first: p, last: p, ackReq: req, plain: true})
	}
	if want := []int{63, 127}; !equalInts(asked, want) {
		t.Errorf("at window %d packets %v asked for an ACK, want %v", m.window, asked, want)
	}
	m.window = 32
	if got := m.ackInterval(); got != 8 {
		t.Errorf("ackInterval at window 32: %d, want 8", got)
	}
	m.onTimer(at(recTimeout))
	if m.state != recProbe || !m.wantAck(m.una) {
		t.Errorf("state %v: a probe asks for an ACK", m.state)
	}
}

// TestRecoveryRTT checks the round trip samples: one packet at a time,
// never a retransmitted one (Karn), folded with RFC 6298's gain.
func TestRecoveryRTT(t *testing.T) {
	var m recovery
	m.init(wrapPSN, recTimeout, 7, 7)
	us := time.Microsecond
	send(0, wrapPSN, 2)(&m)            // the sample: wrapPSN+1
	send(10*us, wrapPSN.Add(2), 2)(&m) // not one: a sample is pending
	ack(80*us, wrapPSN.Add(1))(&m)
	if m.srtt != 80*us || m.minRTT != 80*us {
		t.Fatalf("srtt %v min %v after one sample of 80us", m.srtt, m.minRTT)
	}
	// A go-back-N: the packets resent are no sample, and the one pending is
	// dropped, since an ACK could answer either copy.
	send(100*us, wrapPSN.Add(4), 2)(&m)
	nak(110*us, wrapPSN.Add(4), roce.NAKPSNSequenceError)(&m)
	send(120*us, wrapPSN.Add(4), 2)(&m)
	ack(5000*us, wrapPSN.Add(5))(&m)
	if m.srtt != 80*us {
		t.Errorf("srtt %v: sampled from a retransmission", m.srtt)
	}
	send(6000*us, wrapPSN.Add(6), 1)(&m)
	ack(6160*us, wrapPSN.Add(6))(&m)
	if want := 80*us + (160*us-80*us)/8; m.srtt != want || m.minRTT != 80*us {
		t.Errorf("srtt %v min %v, want %v and 80us", m.srtt, m.minRTT, want)
	}
	// The deviation: 40 us from the first sample, then 3/4 of it and 1/4
	// of the second's 80 us from the mean: 50 us. The probe time is the
	// round trip and four deviations (290 us), above twice the round trip
	// (180 us) and the floor (250 us).
	if m.rttvar != 50*us {
		t.Errorf("rttvar %v, want 50us", m.rttvar)
	}
	if got, want := m.probeTimeout(), 90*us+4*50*us; got != want {
		t.Errorf("probe timeout %v, want %v (the round trip and four deviations)", got, want)
	}
	// Steady round trips bring the deviation down, and twice the round
	// trip back (with the floor under it).
	for i := range 40 {
		t0 := time.Duration(7000+200*i) * us
		send(t0, wrapPSN.Add(7+i), 1)(&m)
		ack(t0+150*us, wrapPSN.Add(7+i))(&m)
	}
	if got := m.probeTimeout(); got < 2*m.srtt || got > 2*m.srtt+5*us || m.srtt < 145*us {
		t.Errorf("probe timeout %v after steady 150us round trips (srtt %v, rttvar %v), want twice the round trip", got, m.srtt, m.rttvar)
	}
	// One round trip ten times longer raises the probe time past twice the
	// round trip: the deviation answers what the mean barely moves for.
	send(20*time.Millisecond, wrapPSN.Add(50), 1)(&m)
	ack(20*time.Millisecond+1500*us, wrapPSN.Add(50))(&m)
	if got := m.probeTimeout(); got <= 2*m.srtt || got != m.srtt+4*m.rttvar {
		t.Errorf("probe timeout %v after one 1.5ms round trip (srtt %v, rttvar %v), want the round trip and four deviations", got, m.srtt, m.rttvar)
	}
}

// TestRecoveryDeadlines checks deadline: the earliest of the ACK timeout
// and the tail-loss probe, the RNR timer alone in rnrWait, none when
// nothing is outstanding or the timeout is 0.
func TestRecoveryDeadlines(t *testing.T) {
	var m recovery
	m.init(wrapPSN, recTimeout, 7, 7)
	if !m.deadline().IsZero() {
		t.Errorf("deadline %v with nothing sent", m.deadline())
	}
	send(0, wrapPSN, 1)(&m)
	if got := m.deadline(); !got.Equal(at(recTimeout)) {
		t.Errorf("deadline %v, want the ACK timeout at %v", got, at(recTimeout))
	}
	ack(50*time.Microsecond, wrapPSN)(&m)
	if !m.deadline().IsZero() {
		t.Errorf("deadline %v with nothing outstanding", m.deadline())
	}
	send(time.Millisecond, p0, 1)(&m)
	if got, want := m.deadline(), at(time.Millisecond+minProbeTimeout); !got.Equal(want) {
		t.Errorf("deadline %v, want the tail-loss probe at %v", got, want)
	}
	rnr(2*time.Millisecond, p0, 20)(&m)
	if got, want := m.deadline(), at(2*time.Millisecond+rnrDelay(20)); !got.Equal(want) {
		t.Errorf("deadline %v in rnrWait, want the RNR timer at %v", got, want)
	}
	if m.maySend(p0) {
		t.Errorf("maySend in rnrWait")
	}

	m.init(wrapPSN, 0, 7, 7)
	send(0, wrapPSN, 1)(&m)
	if !m.deadline().IsZero() {
		t.Errorf("deadline %v with timeout 0 (wait forever)", m.deadline())
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
