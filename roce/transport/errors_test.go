package transport_test

import (
	"context"
	"errors"
	"math"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/simnet"
	"github.com/rbridge/rbridge/roce/transport"
)

func TestRNRWaitsForReceive(t *testing.T) {
	_, a, b := pair(t, simnet.Options{}, connOpts{retry: 7, rnrRetry: 7, minRNR: 1})
	copy(a.mem, "late receive")
	if err := a.qp.PostSend(transport.SendWR{ID: 1, Opcode: transport.OpSend, Local: sge(a, 0, 12), Signaled: true}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond) // RNR NAKs go back and forth
	if err := b.qp.PostRecv(transport.RecvWR{ID: 9, Local: sge(b, 0, 64)}); err != nil {
		t.Fatal(err)
	}
	checkWC(t, wait(t, a.scq, 1, 5*time.Second)[0], 1, transport.OpSend)
	wc := wait(t, b.rcq, 1, 5*time.Second)[0]
	if wc.ID != 9 || wc.ByteLen != 12 || string(b.mem[:12]) != "late receive" {
		t.Fatalf("receive %+v %q", wc, b.mem[:12])
	}
	if b.dev.Stats().TxRNRNAKs.Load() == 0 {
		t.Errorf("no RNR NAK was sent")
	}
}

func TestRNRRetryExceeded(t *testing.T) {
	_, a, b := pair(t, simnet.Options{}, connOpts{retry: 7, rnrRetry: 2, minRNR: 1})
	err := a.qp.PostSend(
		transport.SendWR{ID: 1, Opcode: transport.OpSend, Local: sge(a, 0, 8), Signaled: true},
		transport.SendWR{ID: 2, Opcode: transport.OpWrite, Local: sge(a, 0, 8), Remote: addr(b, 0), RKey: b.mr.RKey()})
	if err != nil {
		t.Fatal(err)
	}
	wcs := wait(t, a.scq, 2, 5*time.Second)
	if wcs[0].ID != 1 || wcs[0].Status != transport.StatusRNRRetryExcErr {
		t.Errorf("first completion %+v (%v), want RNR retry exceeded", wcs[0], wcs[0].Status)
	}
	if wcs[1].ID != 2 || wcs[1].Status != transport.StatusWRFlushErr {
		t.Errorf("second completion %+v (%v), want flushed (unsignaled WRs complete on error)", wcs[1], wcs[1].Status)
	}
	if a.qp.State() != transport.StateError {
		t.Errorf("requester in %v, want ERR", a.qp.State())
	}
	// Later posts complete as flushed.
	if err := a.qp.PostSend(transport.SendWR{ID: 3, Opcode: transport.OpSend}); err != nil {
		t.Fatal(err)
	}
	if wc := wait(t, a.scq, 1, time.Second)[0]; wc.ID != 3 || wc.Status != transport.StatusWRFlushErr {
		t.Errorf("post in ERR: %+v", wc)
	}
}

func TestRetryExceededWhenPeerIsGone(t *testing.T) {
	n, a, b := pair(t, simnet.Options{}, connOpts{retry: 3, rnrRetry: 7, timeout: 8})
	if err := b.qp.PostRecv(transport.RecvWR{ID: 1, Local: sge(b, 0, 64)}); err != nil {
		t.Fatal(err)
	}
	n.SetOptions(simnet.Options{Loss: 1})
	start := time.Now()
	if err := a.qp.PostSend(transport.SendWR{ID: 7, Opcode: transport.OpRead, Local: sge(a, 0, 64), Remote: addr(b, 0), RKey: b.mr.RKey(), Signaled: true}); err != nil {
		t.Fatal(err)
	}
	wc := wait(t, a.scq, 1, 5*time.Second)[0]
	if wc.ID != 7 || wc.Status != transport.StatusRetryExcErr {
		t.Fatalf("completion %+v (%v), want retry exceeded", wc, wc.Status)
	}
	// 1 + 3 retries of a 1 ms timeout.
	if el := time.Since(start); el < 4*time.Millisecond {
		t.Errorf("retry exceeded after %v, before four timeouts could pass", el)
	}
	if got := a.dev.Stats().Timeouts.Load(); got != 3 {
		t.Errorf("%d timeouts, want 3 (the retry count)", got)
	}
}

func TestRemoteAccessError(t *testing.T) {
	for _, tc := range []struct {
		name string
		wr   func(a, b *end) transport.SendWR
	}{
		{"bad rkey", func(a, b *end) transport.SendWR {
			return transport.SendWR{Opcode: transport.OpWrite, Local: sge(a, 0, 16), Remote: addr(b, 0), RKey: b.mr.RKey() + 1}
		}},
		{"out of bounds", func(a, b *end) transport.SendWR {
			return transport.SendWR{Opcode: transport.OpRead, Local: sge(a, 0, 16), Remote: addr(b, memSize-8), RKey: b.mr.RKey()}
		}},
		{"no atomic access", func(a, b *end) transport.SendWR {
			ro, err := b.pd.RegisterMR(make([]byte, 64), transport.AccessRemoteRead)
			if err != nil {
				panic(err)
			}
			return transport.SendWR{Opcode: transport.OpFetchAdd, Local: sge(a, 0, 8), Remote: ro.Addr(), RKey: ro.RKey(), SwapAdd: 1}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, a, b := pair(t, simnet.Options{}, connOpts{retry: 7, rnrRetry: 7})
			ok := transport.SendWR{ID: 1, Opcode: transport.OpWrite, Local: sge(a, 0, 16), Remote: addr(b, 0), RKey: b.mr.RKey(), Signaled: true}
			bad := tc.wr(a, b)
			bad.ID, bad.Signaled = 2, true
			after := transport.SendWR{ID: 3, Opcode: transport.OpSend, Local: sge(a, 0, 4), Signaled: true}
			if err := a.qp.PostSend(ok, bad, after); err != nil {
				t.Fatal(err)
			}
			wcs := wait(t, a.scq, 3, 5*time.Second)
			want := []transport.Status{transport.StatusSuccess, transport.StatusRemAccessErr, transport.StatusWRFlushErr}
			for i, wc := range wcs {
				if wc.ID != uint64(i+1) || wc.Status != want[i] {
					t.Errorf("completion %d: %+v (%v), want %v", i, wc, wc.Status, want[i])
				}
			}
			if b.qp.State() != transport.StateError || a.qp.State() != transport.StateError {
				t.Errorf("after a remote access error: requester %v, responder %v; want both ERR", a.qp.State(), b.qp.State())
			}
			// Counted by kind at both ends: the responder's one NAK, the
			// requester's one NAK received and its two failed completions.
			as, bs := a.dev.Stats().Snapshot(), b.dev.Stats().Snapshot()
			if bs.TxNAKCodes[roce.NAKRemoteAccessError] != 1 || as.RxNAKCodes[roce.NAKRemoteAccessError] != 1 {
				t.Errorf("remote access NAKs: %d sent, %d received; want 1 and 1", bs.TxNAKCodes[roce.NAKRemoteAccessError], as.RxNAKCodes[roce.NAKRemoteAccessError])
			}
			if as.ErrorCompletions[transport.StatusRemAccessErr] != 1 || as.ErrorCompletions[transport.StatusWRFlushErr] != 1 {
				t.Errorf("error completions %v: want one remote access error and one flushed", as.ErrorCompletions)
			}
		})
	}
}

func TestReceiveTooSmall(t *testing.T) {
	_, a, b := pair(t, simnet.Options{}, connOpts{retry: 7, rnrRetry: 7})
	if err := b.qp.PostRecv(transport.RecvWR{ID: 5, Local: sge(b, 0, 100)}, transport.RecvWR{ID: 6, Local: sge(b, 100, 100)}); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(transport.SendWR{ID: 1, Opcode: transport.OpSend, Local: sge(a, 0, 3000), Signaled: true}); err != nil {
		t.Fatal(err)
	}
	if wc := wait(t, a.scq, 1, 5*time.Second)[0]; wc.Status != transport.StatusRemInvReqErr {
		t.Errorf("requester: %+v (%v), want remote invalid request", wc, wc.Status)
	}
	rwcs := wait(t, b.rcq, 2, 5*time.Second)
	if rwcs[0].ID != 5 || rwcs[0].Status != transport.StatusLocLenErr || rwcs[1].ID != 6 || rwcs[1].Status != transport.StatusWRFlushErr {
		t.Errorf("responder completions %+v", rwcs)
	}
}

func TestPostChecks(t *testing.T) {
	_, a, b := pair(t, simnet.Options{}, connOpts{retry: 7, rnrRetry: 7, maxSend: 4})
	for _, tc := range []struct {
		name string
		wr   transport.SendWR
	}{
		{"SGE past the MR", transport.SendWR{Opcode: transport.OpSend, Local: sge(a, memSize-4, 8)}},
		{"unaligned atomic", transport.SendWR{Opcode: transport.OpFetchAdd, Local: sge(a, 0, 8), Remote: addr(b, 4), RKey: b.mr.RKey()}},
		{"atomic of 4 bytes", transport.SendWR{Opcode: transport.OpFetchAdd, Local: sge(a, 0, 4), Remote: addr(b, 0), RKey: b.mr.RKey()}},
		{"unknown opcode", transport.SendWR{Opcode: 99}},
	} {
		if err := a.qp.PostSend(tc.wr); err == nil {
			t.Errorf("%s: posted without error", tc.name)
		}
	}
	many := make([]transport.SendWR, 5)
	if err := a.qp.PostSend(many...); err == nil {
		t.Errorf("5 WRs on a send queue of 4: no error")
	}
	fresh, err := a.dev.CreateQP(a.pd, transport.QPInitAttr{SendCQ: a.scq, RecvCQ: a.rcq})
	if err != nil {
		t.Fatal(err)
	}
	if err := fresh.PostSend(transport.SendWR{Opcode: transport.OpSend}); err == nil {
		t.Errorf("post send in RESET: no error")
	}
	if err := fresh.Modify(transport.QPAttr{State: transport.StateRTS}); err == nil {
		t.Errorf("RESET -> RTS: no error")
	}
	if err := fresh.Modify(transport.QPAttr{State: transport.StateInit}); err != nil {
		t.Fatal(err)
	}
	if err := fresh.Modify(transport.QPAttr{State: transport.StateRTR, PathMTU: 1500, Remote: b.addr}); err == nil {
		t.Errorf("path MTU 1500: no error")
	}
}

func TestUD(t *testing.T) {
	n := simnet.New(simnet.Options{})
	a, b := newEnd(t, n, "10.0.0.1:4791"), newEnd(t, n, "10.0.0.2:4791")
	const qkey = 0x11111111
	for _, e := range []*end{a, b} {
		qp, err := e.dev.CreateQP(e.pd, transport.QPInitAttr{Type: transport.UD, SendCQ: e.scq, RecvCQ: e.rcq})
		if err != nil {
			t.Fatal(err)
		}
		e.qp = qp
		for _, st := range []transport.QPAttr{{State: transport.StateInit, QKey: qkey}, {State: transport.StateRTR, PathMTU: 1024}, {State: transport.StateRTS, SQPSN: 7}} {
			if err := qp.Modify(st); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := b.qp.PostRecv(transport.RecvWR{ID: 1, Local: sge(b, 0, 2048)}, transport.RecvWR{ID: 2, Local: sge(b, 2048, 2048)}); err != nil {
		t.Fatal(err)
	}
	copy(a.mem, "datagram")
	dest := &transport.UDDest{Addr: b.addr, QPN: b.qp.QPN(), QKey: qkey}
	wrong := &transport.UDDest{Addr: b.addr, QPN: b.qp.QPN(), QKey: qkey + 1}
	err := a.qp.PostSend(
		transport.SendWR{ID: 10, Opcode: transport.OpSend, Local: sge(a, 0, 8), UD: wrong, Signaled: true},
		transport.SendWR{ID: 11, Opcode: transport.OpSendWithImm, Imm: 42, Local: sge(a, 0, 8), UD: dest, Signaled: true})
	if err != nil {
		t.Fatal(err)
	}
	if wcs := wait(t, a.scq, 2, time.Second); wcs[0].Status != transport.StatusSuccess || wcs[1].Status != transport.StatusSuccess {
		t.Errorf("UD send completions %+v", wcs)
	}
	wc := wait(t, b.rcq, 1, time.Second)[0]
	if wc.ID != 1 || wc.ByteLen != 8 || !wc.HasImm || wc.Imm != 42 || wc.SrcQPN != a.qp.QPN() || wc.Src != a.addr || string(b.mem[:8]) != "datagram" {
		t.Errorf("UD receive %+v %q", wc, b.mem[:8])
	}
	noMore(t, b.rcq, "UD receive (the wrong Q_Key must be dropped)")
	if b.dev.Stats().UDDropped.Load() != 1 {
		t.Errorf("UD drops %d, want 1", b.dev.Stats().UDDropped.Load())
	}
	if n := b.qp.UDNoReceive(); n != 0 {
		t.Errorf("QP's no-receive drops %d, want 0 (the wrong Q_Key is another cause)", n)
	}
	if err := a.qp.PostSend(transport.SendWR{Opcode: transport.OpSend, Local: sge(a, 0, 2000), UD: dest}); err == nil {
		t.Errorf("UD message larger than the MTU: no error")
	}
	// One receive left: the second datagram finds none.
	if err := a.qp.PostSend(transport.SendWR{ID: 12, Opcode: transport.OpSend, Local: sge(a, 0, 8), UD: dest},
		transport.SendWR{ID: 13, Opcode: transport.OpSend, Local: sge(a, 0, 8), UD: dest}); err != nil {
		t.Fatal(err)
	}
	if wc := wait(t, b.rcq, 1, time.Second)[0]; wc.ID != 2 {
		t.Errorf("UD receive %+v, want the second receive", wc)
	}
	deadline := time.Now().Add(time.Second)
	for b.qp.UDNoReceive() != 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n, all := b.qp.UDNoReceive(), b.dev.Stats().UDDropped.Load(); n != 1 || all != 2 {
		t.Errorf("no-receive drops %d, device UD drops %d; want 1 and 2", n, all)
	}
}

// TestBadArguments: arguments the transport cannot act on are refused by
// the call that takes them, with an error, never a panic later: a peer of
// the other address family (the conn could not send to it), a UD path MTU
// that is no MTU, a receive batch too large to allocate, an SGE whose end
// overflows.
func TestBadArguments(t *testing.T) {
	n := simnet.New(simnet.Options{})
	a, b := newEnd(t, n, "10.0.0.1:4791"), newEnd(t, n, "10.0.0.2:4791")
	v6 := netip.MustParseAddrPort("[fd00::2]:4791")

	rc, err := a.dev.CreateQP(a.pd, transport.QPInitAttr{SendCQ: a.scq, RecvCQ: a.rcq})
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Modify(transport.QPAttr{State: transport.StateInit}); err != nil {
		t.Fatal(err)
	}
	err = rc.Modify(transport.QPAttr{State: transport.StateRTR, DestQPN: 0x11, Remote: v6, PathMTU: 1024})
	if !errors.Is(err, roce.ErrAddrFamily) || rc.State() != transport.StateInit {
		t.Errorf("RTR to %v from %v: %v, state %v; want ErrAddrFamily, INIT", v6, a.addr, err, rc.State())
	}

	ud, err := a.dev.CreateQP(a.pd, transport.QPInitAttr{Type: transport.UD, SendCQ: a.scq, RecvCQ: a.rcq})
	if err != nil {
		t.Fatal(err)
	}
	if err := ud.Modify(transport.QPAttr{State: transport.StateInit}); err != nil {
		t.Fatal(err)
	}
	for _, mtu := range []int{-1, 100, 1500, 8192} {
		if err := ud.Modify(transport.QPAttr{State: transport.StateRTR, PathMTU: mtu}); err == nil {
			t.Errorf("UD RTR with path MTU %d: no error", mtu)
		}
	}
	for _, st := range []transport.QPAttr{{State: transport.StateRTR}, {State: transport.StateRTS}} {
		if err := ud.Modify(st); err != nil {
			t.Fatal(err)
		}
	}
	err = ud.PostSend(transport.SendWR{Opcode: transport.OpSend, Local: sge(a, 0, 8), UD: &transport.UDDest{Addr: v6, QPN: 0x11}})
	if !errors.Is(err, roce.ErrAddrFamily) {
		t.Errorf("UD send to %v from %v: %v, want ErrAddrFamily", v6, a.addr, err)
	}

	c, err := n.Listen(netip.MustParseAddrPort("10.0.0.3:4791"))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := transport.NewDevice(c, transport.DeviceOptions{RxBatch: 1 << 40}); err == nil {
		d.Close()
		t.Errorf("a receive batch of 2^40 packets: no error")
	}
	c.Close()

	connect(t, a, b, connOpts{retry: 7, rnrRetry: 7})
	for _, l := range []transport.SGE{
		{MR: a.mr, Offset: 1, Length: math.MaxInt},
		{MR: a.mr, Offset: math.MaxInt, Length: 1},
		{MR: a.mr, Offset: memSize, Length: 1},
		{MR: a.mr, Offset: -1, Length: 1},
	} {
		if err := a.qp.PostSend(transport.SendWR{Opcode: transport.OpWrite, Local: l, Remote: addr(b, 0), RKey: b.mr.RKey()}); err == nil {
			t.Errorf("send from SGE %+v: no error", l)
		}
		if err := a.qp.PostRecv(transport.RecvWR{Local: l}); err == nil {
			t.Errorf("receive into SGE %+v: no error", l)
		}
	}
}

// TestNoGoroutineLeak runs a workload and closes everything: the goroutine
// count must come back.
func TestNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	func() {
		n := simnet.New(simnet.Options{Loss: 0.02, Seed: 9})
		a, b := newEnd(t, n, "10.0.1.1:4791"), newEnd(t, n, "10.0.1.2:4791")
		connect(t, a, b, connOpts{retry: 7, rnrRetry: 7})
		workload(t, a, b, 70, 3000, 8, 10*time.Second)
		a.dev.Close()
		b.dev.Close()
	}()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if after := runtime.NumGoroutine(); after > before {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines before, %d after:\n%s", before, after, buf[:runtime.Stack(buf, true)])
	}
}

// FuzzResponder feeds arbitrary packets to a connected QP next to another
// connected QP: no panic, and the other connection still works.
func FuzzResponder(f *testing.F) {
	for _, op := range []roce.Opcode{roce.RCSendOnly, roce.RCRDMAWriteFirst, roce.RCRDMAReadRequest, roce.RCFetchAdd, roce.RCAcknowledge, roce.RCRDMAReadResponseOnly} {
		fl := roce.PacketFields{BTH: roce.BTHFields{Opcode: op, DestQP: 0x11, PSN: 0x123}, RETH: roce.RETHFields{RKey: 0x100, DMALen: 8}}
		f.Add(roce.AppendPacket(nil, &fl, []byte("12345678")))
	}
	f.Fuzz(func(t *testing.T, pkt []byte) {
		n := simnet.New(simnet.Options{})
		a, b := newEnd(t, n, "10.0.0.1:4791"), newEnd(t, n, "10.0.0.2:4791")
		connect(t, a, b, connOpts{retry: 7, rnrRetry: 7})
		victim := a.qp.QPN()
		// A second, healthy connection between the same devices.
		a2, b2 := *a, *b
		a2.scq, a2.rcq, b2.scq, b2.rcq = transport.NewCQ(64), transport.NewCQ(64), transport.NewCQ(64), transport.NewCQ(64)
		connect(t, &a2, &b2, connOpts{retry: 7, rnrRetry: 7})
		evil, err := n.Listen(netip.MustParseAddrPort("10.0.0.9:4791"))
		if err != nil {
			t.Fatal(err)
		}
		if len(pkt) >= roce.BTHLen {
			roce.BTH(pkt).SetDestQP(victim)
		}
		if _, err := evil.WriteBatch([]roce.Message{{Buf: pkt, N: len(pkt), Addr: b.addr}, {Buf: pkt, N: len(pkt), Addr: a.addr}}); err != nil {
			t.Fatal(err)
		}
		copy(a2.mem, "still works")
		if err := b2.qp.PostRecv(transport.RecvWR{ID: 1, Local: sge(&b2, 100, 64)}); err != nil {
			t.Fatal(err)
		}
		if err := a2.qp.PostSend(transport.SendWR{ID: 1, Opcode: transport.OpSend, Local: sge(&a2, 0, 11), Signaled: true}); err != nil {
			t.Fatal(err)
		}
		checkWC(t, wait(t, a2.scq, 1, 5*time.Second)[0], 1, transport.OpSend)
		if wc := wait(t, b2.rcq, 1, 5*time.Second)[0]; wc.ByteLen != 11 || string(b.mem[100:111]) != "still works" {
			t.Fatalf("healthy connection: %+v", wc)
		}
	})
}

// A completion that finds its CQ full is not lost in silence: the CQ
// reports the overflow, the QP enters ERR, the device raises an async
// event, and the sender never sees the message acknowledged.
func TestCQOverflowIsAnError(t *testing.T) {
	n := simnet.New(simnet.Options{})
	a, b := newEnd(t, n, "10.0.0.1:4791"), newEnd(t, n, "10.0.0.2:4791")
	b.rcq = transport.NewCQ(1)
	connect(t, a, b, connOpts{retry: 1}) // the default timeout: the first ACK must come back before it, under -race too
	if err := b.qp.PostRecv(transport.RecvWR{ID: 1, Local: sge(b, 0, 64)}, transport.RecvWR{ID: 2, Local: sge(b, 64, 64)}); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(transport.SendWR{ID: 1, Opcode: transport.OpSend, Local: sge(a, 0, 8), Signaled: true},
		transport.SendWR{ID: 2, Opcode: transport.OpSend, Local: sge(a, 8, 8), Signaled: true}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ev, err := b.dev.AsyncEvent(ctx)
	if err != nil || ev.Type != transport.EventCQError || ev.QPN != b.qp.QPN() || !errors.Is(ev.Err, transport.ErrCQOverflow) {
		t.Fatalf("async event %+v, %v; want a CQ error for QP %#x", ev, err, b.qp.QPN())
	}
	wcs := make([]transport.WC, 4)
	if k, err := b.rcq.PollWait(ctx, wcs); err != nil || k != 1 || wcs[0].ID != 1 {
		t.Fatalf("first poll: %d %+v %v, want the first receive", k, wcs[:k], err)
	}
	if _, err := b.rcq.PollWait(ctx, wcs); !errors.Is(err, transport.ErrCQOverflow) {
		t.Fatalf("poll after the overflow: %v, want ErrCQOverflow", err)
	}
	if s := b.qp.State(); s != transport.StateError {
		t.Errorf("receiver QP in %v, want ERR", s)
	}
	got := wait(t, a.scq, 2, 5*time.Second)
	checkWC(t, got[0], 1, transport.OpSend)
	if got[1].ID != 2 || got[1].Status == transport.StatusSuccess {
		t.Errorf("the send whose completion was lost completed %+v (%v), want an error", got[1], got[1].Status)
	}
	if b.dev.Stats().CQOverflows.Load() == 0 {
		t.Errorf("no CQ overflow counted")
	}
}

func TestNewCQDepthBounds(t *testing.T) {
	for _, depth := range []int{-1, 0, 1 << 40} {
		cq := transport.NewCQ(depth) // must not panic (make of a huge ring)
		if cq == nil {
			t.Fatalf("NewCQ(%d) = nil", depth)
		}
	}
}
