//go:build linux

package xdp_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	rdma "github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/xdp"
)

// TestTransportOverAFXDP runs RC queue pairs of the userspace transport over
// AF_XDP Conns on a veth pair, with the classifier dropping 5% of the RoCEv2
// packets each way (at random: a fixed every-Nth drop can line up with
// go-back-N's rounds and hit the same PSN each time): the transport
// retransmits and every message arrives, whole and in order.
func TestTransportOverAFXDP(t *testing.T) {
	a, b := setup(t, "t", xdp.BindAuto, xdp.ModeNative)

	const msgs, size = 64, 3000 // 3 packets each at MTU 1024
	type end struct {
		dev      *rdma.Device
		mr       *rdma.MR
		scq, rcq *rdma.CQ
		qp       *rdma.QP
	}
	ends := map[*side]*end{}
	for _, s := range []*side{a, b} {
		dev, err := rdma.NewDevice(s.conn, rdma.DeviceOptions{Logger: testLogger(t), IdleWake: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dev.Close() })
		pd := rdma.NewPD()
		mr, err := pd.RegisterMR(make([]byte, msgs*size), rdma.AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		e := &end{dev: dev, mr: mr, scq: rdma.NewCQ(1024), rcq: rdma.NewCQ(1024)}
		if e.qp, err = dev.CreateQP(pd, rdma.QPInitAttr{Type: rdma.RC, SendCQ: e.scq, RecvCQ: e.rcq}); err != nil {
			t.Fatal(err)
		}
		if err := e.qp.Modify(rdma.QPAttr{State: rdma.StateInit}); err != nil {
			t.Fatal(err)
		}
		ends[s] = e
	}
	for _, p := range [][2]*side{{a, b}, {b, a}} {
		e, peer := ends[p[0]], ends[p[1]]
		if err := p[0].prog.AddQP(e.qp.QPN(), xdp.QP{RemoteQPN: peer.qp.QPN()}); err != nil {
			t.Fatal(err)
		}
		if err := e.qp.Modify(rdma.QPAttr{State: rdma.StateRTR, DestQPN: peer.qp.QPN(), Remote: p[1].addr,
			RQPSN: 100, PathMTU: 1024, MaxDestRdAtomic: 1}); err != nil {
			t.Fatal(err)
		}
		if err := e.qp.Modify(rdma.QPAttr{State: rdma.StateRTS, SQPSN: 100, Timeout: 12, RetryCnt: 7, MaxRdAtomic: 1}); err != nil {
			t.Fatal(err)
		}
		if err := p[0].prog.SetFault(xdp.Fault{Fraction: 0.05}); err != nil {
			t.Fatal(err)
		}
	}

	src, dst := ends[a], ends[b]
	for i := range msgs {
		copy(src.mr.Buf()[i*size:], bytes.Repeat([]byte{byte(i + 1)}, size))
		if err := dst.qp.PostRecv(rdma.RecvWR{ID: uint64(i), Local: rdma.SGE{MR: dst.mr, Offset: i * size, Length: size}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range msgs {
		if err := src.qp.PostSend(rdma.SendWR{ID: uint64(i), Opcode: rdma.OpSend, Signaled: true,
			Local: rdma.SGE{MR: src.mr, Offset: i * size, Length: size}}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, cq := range []*rdma.CQ{src.scq, dst.rcq} {
		wcs := make([]rdma.WC, msgs)
		for got := 0; got < msgs; {
			n, err := cq.PollWait(ctx, wcs[got:])
			if err != nil {
				t.Fatalf("%d of %d completions: %v", got, msgs, err)
			}
			for _, wc := range wcs[got : got+n] {
				if wc.Status != rdma.StatusSuccess || wc.ID != uint64(got) {
					t.Fatalf("completion %d: %+v (%v)", got, wc, wc.Status)
				}
				got++
			}
		}
	}
	if !bytes.Equal(dst.mr.Buf(), src.mr.Buf()) {
		t.Error("received data differs from what was sent")
	}
	var dropped uint64
	for _, s := range []*side{a, b} {
		c, err := s.prog.Counters()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d RoCEv2 packets dropped by fault injection, %d redirected", s.ifc, c.DropFault, c.Redirected)
		dropped += c.DropFault
	}
	if dropped == 0 {
		t.Error("no packet dropped by fault injection")
	}
	// Idle now: the conn's read deadline still wakes each device's receive
	// loop, so its heartbeat stays fresh.
	quiet := time.Now()
	time.Sleep(200 * time.Millisecond)
	for _, s := range []*side{a, b} {
		if last, wakes := ends[s].dev.ReceiveHeartbeat(); !wakes || !last.After(quiet.Add(100*time.Millisecond)) {
			t.Errorf("%s: heartbeat %v old after %v idle (wakes %v): the AF_XDP read deadline did not wake the loop",
				s.ifc, time.Since(last).Round(time.Millisecond), time.Since(quiet).Round(time.Millisecond), wakes)
		}
	}
}
