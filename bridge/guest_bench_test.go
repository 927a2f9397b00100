package bridge_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rbridge/rbridge/ibv"
	"github.com/rbridge/rbridge/integration/guest"
)

// BenchmarkGuestGatewayWrite moves RDMA WRITEs of each size, 32
// outstanding, from a kernel rxe client on the RoCE side into the IB
// fabric's target through the gateway (the userspace leg over AF_XDP on
// the pool's frames, the session, the verbs leg on rxe2), and, in the same
// run, across the IB fabric's hop alone (rxe2 to rxe3, kernel to kernel).
// cpu-us/op is the guest's CPU time per WRITE, every end and the kernel's
// work included; roce/interop's BenchmarkGuestWrite gives the other hop
// alone (the transport over AF_XDP against rxe). The relay's cost is what
// through costs beyond the sum of its two hops. copied-B/B is payload
// bytes the session copied per byte relayed (0: relayed from the frames).
func BenchmarkGuestGatewayWrite(b *testing.B) {
	for _, size := range []int{4096, 65536} {
		b.Run(fmt.Sprintf("through-afxdp/%d", size), func(b *testing.B) {
			g := newGatewayOver(b, "afxdp")
			writeWindow(b, g.client, g.target, size)
			st := g.sess.Stats()
			b.ReportMetric(float64(st.Copied[0].Load())/float64(max(st.Bytes[0].Load(), 1)), "copied-B/B")
		})
		b.Run(fmt.Sprintf("rxe-to-rxe-ib/%d", size), func(b *testing.B) {
			guest.RequireKind(b, "rxe")
			ib := guest.IB(b)
			from, to := openApp(b, ib.GatewayDevice, ib.GatewayIP), openApp(b, ib.PeerDevice, ib.PeerIP)
			connectKernel(b, from.qp, from.gid, to.qp.QPN(), ib.PeerIP, 0x10, 0x20, 14, 7)
			connectKernel(b, to.qp, to.gid, from.qp.QPN(), ib.GatewayIP, 0x20, 0x10, 14, 7)
			writeWindow(b, from, to, size)
		})
	}
}

// writeWindow WRITEs b.N times size bytes from a's memory into t's, 32
// outstanding: when the window is full it waits for completions, then
// posts as many as the window allows in one call.
func writeWindow(b *testing.B, a, t *app, size int) {
	const window = 32
	if 8*size > len(t.arena.Bytes()) {
		b.Fatalf("%d-byte WRITEs do not fit the target's %d bytes eight times", size, len(t.arena.Bytes()))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	wrs := make([]ibv.SendWR, 0, window)
	wcs := make([]ibv.WorkCompletion, window)
	out := 0
	wait := func() {
		n, err := a.cq.Wait(ctx, wcs)
		check(b, err)
		for _, wc := range wcs[:n] {
			check(b, wc.Err())
		}
		out -= n
	}
	post := func() {
		if len(wrs) == 0 {
			return
		}
		n, err := a.qp.PostSend(wrs)
		check(b, err)
		if n != len(wrs) {
			b.Fatalf("posted %d of %d WRs", n, len(wrs))
		}
		out += n
		wrs = wrs[:0]
	}
	b.SetBytes(int64(size))
	cpu := guest.ReadCPUTimes(b)
	for i := 0; b.Loop(); i++ {
		off := (i % 8) * size
		wrs = append(wrs, ibv.SendWR{ID: uint64(i), Op: ibv.OpWrite, Flags: ibv.SendSignaled,
			SGEs: []ibv.SGE{a.mr.SGE(off, size)}, RemoteAddr: t.mr.Addr() + uint64(off), RKey: t.mr.RKey()})
		if out+len(wrs) < window {
			continue
		}
		post()
		wait()
	}
	post()
	for out > 0 {
		wait()
	}
	guest.ReportCPU(b, cpu)
}
