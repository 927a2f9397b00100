package transport_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/simnet"
	"github.com/rbridge/rbridge/roce/transport"
)

// TestECNMarkingSlowsTheSender marks every ECN-capable packet: the
// responder answers with CNPs (at most one per 50 us), the requester cuts
// its rate, and every message is still delivered.
func TestECNMarkingSlowsTheSender(t *testing.T) {
	a, b := ecnPair(t, false)
	start := time.Now()
	const msgs, size = 64, 64 << 10
	for i := range msgs {
		if err := a.qp.PostSend(transport.SendWR{ID: uint64(i), Opcode: transport.OpWrite, Signaled: true,
			Local: sge(a, 0, size), Remote: addr(b, 0), RKey: b.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
	}
	for i, wc := range wait(t, a.scq, msgs, 30*time.Second) {
		checkWC(t, wc, uint64(i), transport.OpWrite)
	}
	el := time.Since(start)
	st := a.qp.Stats()
	cnpsSent := b.dev.Stats().TxCNPs.Load()
	t.Logf("%d x %d KiB in %v: %d CNPs sent, %d received, %d rate cuts, rate now %.3g b/s", msgs, size>>10, el, cnpsSent, st.CNPs, st.Cuts, st.Rate)
	if st.CNPs == 0 || st.Cuts == 0 || st.Rate >= 25e9 {
		t.Errorf("marked traffic: %d CNPs, %d cuts, rate %g; want the rate cut", st.CNPs, st.Cuts, st.Rate)
	}
	// The device counts the cuts over its QPs, and the QP as held below
	// line rate.
	if cuts := a.dev.Stats().RateCuts.Load(); cuts != st.Cuts {
		t.Errorf("device counted %d rate cuts, the QP %d", cuts, st.Cuts)
	}
	if !st.Limited || a.dev.RateLimitedQPs() != 1 {
		t.Errorf("after the cuts: QP limited %v, device's rate-limited QPs %d; want the QP", st.Limited, a.dev.RateLimitedQPs())
	}
	// The notification point sends at most one CNP per QP per 50 us.
	if limit := uint64(el/(50*time.Microsecond)) + 1; cnpsSent > limit {
		t.Errorf("%d CNPs in %v: more than one per 50 us (%d)", cnpsSent, el, limit)
	}
}

// TestNoCNP: a device told that its packet I/O answers ECN-CE itself sends
// no CNPs of its own.
func TestNoCNP(t *testing.T) {
	a, b := ecnPair(t, true)
	if err := a.qp.PostSend(transport.SendWR{ID: 1, Opcode: transport.OpWrite, Signaled: true, Local: sge(a, 0, 64<<10), Remote: addr(b, 0), RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	wait(t, a.scq, 1, 5*time.Second)
	if got, marked := b.dev.Stats().TxCNPs.Load(), b.dev.Stats().RxECNCE.Load(); got != 0 || marked == 0 {
		t.Errorf("NoCNP: %d CNPs sent for %d marked packets; want none for some", got, marked)
	}
}

// ecnPair connects two ECN-capable RC QPs over a network that marks every
// ECN-capable packet; the responder's device has NoCNP as given.
func ecnPair(t *testing.T, noCNP bool) (*end, *end) {
	n := simnet.New(simnet.Options{MarkECN: 1})
	a := newEnd(t, n, "10.0.0.1:4791")
	b := newEndOpts(t, n, "10.0.0.2:4791", transport.DeviceOptions{NoCNP: noCNP})
	for _, e := range []*end{a, b} {
		qp, err := e.dev.CreateQP(e.pd, transport.QPInitAttr{SendCQ: e.scq, RecvCQ: e.rcq})
		if err != nil {
			t.Fatal(err)
		}
		e.qp = qp
	}
	for _, p := range [][2]*end{{a, b}, {b, a}} {
		for _, attr := range []transport.QPAttr{
			{State: transport.StateInit},
			{State: transport.StateRTR, DestQPN: p[1].qp.QPN(), Remote: p[1].addr, RQPSN: 1, PathMTU: 4096},
			{State: transport.StateRTS, SQPSN: 1, Timeout: 14, RetryCnt: 7, RNRRetry: 7, ECN: true},
		} {
			if err := p[0].qp.Modify(attr); err != nil {
				t.Fatal(err)
			}
		}
	}
	return a, b
}

// TestSourcePort: an RC QP's packets leave from the UDP source port the
// kernel would choose for the QP pair (rdma_get_udp_sport), and the CNPs
// that answer them still reach the peer.
func TestSourcePort(t *testing.T) {
	ports := make(chan uint16, 1024)
	n := simnet.New(simnet.Options{Filter: func(from, _ netip.AddrPort, _ []byte) bool {
		select {
		case ports <- from.Port():
		default:
		}
		return true
	}})
	a, b := newEnd(t, n, "10.0.3.1:4791"), newEnd(t, n, "10.0.3.2:4791")
	connect(t, a, b, connOpts{retry: 7, rnrRetry: 7})
	if err := a.qp.PostSend(transport.SendWR{ID: 1, Opcode: transport.OpWrite, Signaled: true, Local: sge(a, 0, 100), Remote: addr(b, 0), RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	wait(t, a.scq, 1, 5*time.Second)
	want := map[uint16]bool{roce.SourcePort(0, a.qp.QPN(), b.qp.QPN()): true, roce.SourcePort(0, b.qp.QPN(), a.qp.QPN()): true}
	close(ports)
	for p := range ports {
		if !want[p] {
			t.Errorf("a packet left from port %#x; want one of %v", p, want)
		}
	}
}
