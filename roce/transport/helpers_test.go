package transport_test

import (
	"bytes"
	"context"

	"net/netip"
	"testing"
	"time"

	"github.com/rbridge/rbridge/internal/testlog"
	"github.com/rbridge/rbridge/roce/simnet"
	"github.com/rbridge/rbridge/roce/transport"
)

// end is one side of a connection: a device on the simulated network, a
// PD with one big MR, CQs and an RC QP.
type end struct {
	dev    *transport.Device
	pd     *transport.PD
	mr     *transport.MR
	mem    []byte
	scq    *transport.CQ
	rcq    *transport.CQ
	qp     *transport.QP
	addr   netip.AddrPort
	access transport.Access
}

const memSize = 8 << 20

func newEnd(t testing.TB, n *simnet.Net, addr string) *end {
	t.Helper()
	return newEndOpts(t, n, addr, transport.DeviceOptions{})
}

func newEndOpts(t testing.TB, n *simnet.Net, addr string, opts transport.DeviceOptions) *end {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testlog.New(t) // an error-level record fails the test
	}
	ap := netip.MustParseAddrPort(addr)
	conn, err := n.Listen(ap)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := transport.NewDevice(conn, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	e := &end{dev: dev, pd: transport.NewPD(), mem: make([]byte, memSize), addr: ap,
		scq: transport.NewCQ(8192), rcq: transport.NewCQ(8192)}
	e.access = transport.AccessLocalWrite | transport.AccessRemoteWrite | transport.AccessRemoteRead | transport.AccessRemoteAtomic
	if e.mr, err = e.pd.RegisterMR(e.mem, e.access); err != nil {
		t.Fatal(err)
	}
	return e
}

type connOpts struct {
	mtu              int
	timeout          uint8
	retry, rnrRetry  uint8
	minRNR           uint8
	maxSend, maxRecv int
}

// connect creates RC QPs on a and b and moves both to RTS, as an
// out-of-band exchange of QPN and PSN would.
func connect(t testing.TB, a, b *end, o connOpts) {
	t.Helper()
	if o.mtu == 0 {
		o.mtu = 1024
	}
	if o.timeout == 0 {
		o.timeout = 12 // 16.8 ms: generous, for loaded machines and the race detector
	}
	for _, e := range []*end{a, b} {
		qp, err := e.dev.CreateQP(e.pd, transport.QPInitAttr{Type: transport.RC, SendCQ: e.scq, RecvCQ: e.rcq, MaxSendWR: o.maxSend, MaxRecvWR: o.maxRecv})
		if err != nil {
			t.Fatal(err)
		}
		e.qp = qp
		if err := qp.Modify(transport.QPAttr{State: transport.StateInit}); err != nil {
			t.Fatal(err)
		}
	}
	psnA, psnB := uint32(0xfffff0), uint32(0x123) // a's PSNs cross the 24-bit wrap
	for _, p := range []struct {
		e, peer *end
		sq, rq  uint32
	}{{a, b, psnA, psnB}, {b, a, psnB, psnA}} {
		if err := p.e.qp.Modify(transport.QPAttr{State: transport.StateRTR, DestQPN: p.peer.qp.QPN(), Remote: p.peer.addr,
			RQPSN: p.rq, PathMTU: o.mtu, MinRNRTimer: o.minRNR, MaxDestRdAtomic: 16}); err != nil {
			t.Fatal(err)
		}
		if err := p.e.qp.Modify(transport.QPAttr{State: transport.StateRTS, SQPSN: p.sq, Timeout: o.timeout,
			RetryCnt: o.retry, RNRRetry: o.rnrRetry, MaxRdAtomic: 16}); err != nil {
			t.Fatal(err)
		}
	}
}

// wait collects n completions from cq within the deadline.
func wait(t testing.TB, cq *transport.CQ, n int, d time.Duration) []transport.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	out := make([]transport.WC, 0, n)
	buf := make([]transport.WC, 64)
	for len(out) < n {
		k, err := cq.PollWait(ctx, buf[:min(len(buf), n-len(out))])
		if err != nil {
			t.Fatalf("waited %v for %d completions, got %d: %+v", d, n, len(out), out)
		}
		out = append(out, buf[:k]...)
	}
	return out
}

// noMore checks that cq stays empty for a moment: nothing completes twice.
func noMore(t testing.TB, cq *transport.CQ, what string) {
	t.Helper()
	time.Sleep(20 * time.Millisecond)
	var wc [4]transport.WC
	if n := cq.Poll(wc[:]); n > 0 {
		t.Errorf("%s: unexpected completions %+v", what, wc[:n])
	}
}

func pattern(seed, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*131 + seed*7 + i>>8)
	}
	return b
}

func checkWC(t testing.TB, wc transport.WC, id uint64, op transport.Opcode) {
	t.Helper()
	if wc.ID != id || wc.Status != transport.StatusSuccess || wc.Opcode != op {
		t.Fatalf("completion %+v (%v), want id %d %v success", wc, wc.Status, id, op)
	}
}

func equal(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("%s: %d bytes differ from byte %d (len %d, want %d)", what, len(want), i, len(got), len(want))
	}
}

func sge(e *end, off, n int) transport.SGE { return transport.SGE{MR: e.mr, Offset: off, Length: n} }

func addr(e *end, off int) uint64 { return e.mr.Addr() + uint64(off) }
