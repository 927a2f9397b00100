package bridge_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge/pool"

	"github.com/rbridge/rbridge/ibv"
	"github.com/rbridge/rbridge/integration/guest"
	"github.com/rbridge/rbridge/internal/testlog"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/xdp"
)

// BenchmarkGuestGatewayWrite moves RDMA WRITEs of each size, 32
// outstanding, from a kernel rxe client on the RoCE side into the IB
// fabric's target through the gateway (the userspace leg over AF_XDP on
// the pool's frames, the session, the verbs leg on rxe2), and, in the same
// run, each hop alone: the RoCE hop (the same client into a transport QP
// on the same AF_XDP conn, the transport's responder doing the work) and
// the IB hop (rxe2 to rxe3, kernel to kernel). cpu-us/op is the guest's
// CPU time per WRITE, every end and the kernel's work included. The
// relay's cost is what through costs beyond the sum of its two hops. copied-B/B is payload
// bytes the session copied per byte relayed (0: relayed from the frames).
func BenchmarkGuestGatewayWrite(b *testing.B) {
	for _, size := range []int{4096, 65536} {
		b.Run(fmt.Sprintf("through-afxdp/%d", size), func(b *testing.B) {
			g := newGatewayOver(b, "afxdp")
			writeWindow(b, g.client, g.target.mr.Addr(), g.target.mr.RKey(), len(g.target.arena.Bytes()), size)
			st := g.sess.Stats().Snapshot()
			b.ReportMetric(float64(st.Copied[0])/float64(max(st.TotalBytes(0), 1)), "copied-B/B")
		})
		b.Run(fmt.Sprintf("rxe-to-transport-afxdp/%d", size), func(b *testing.B) {
			// The RoCE hop alone: the same client WRITEs into memory of a
			// transport QP on the gateway's AF_XDP conn.
			guest.RequireKind(b, "rxe")
			ns := guest.UserNetns(b)
			pl, err := pool.New(pool.Options{Size: 32 << 20, Classes: []int{256, 4 << 10, 64 << 10}})
			check(b, err)
			client := openApp(b, ns.PeerDevice, ns.PeerIP)
			conns, prog, _ := afxdpConns(b, ns, pl)
			devs, err := transport.NewDevices(conns, transport.DeviceOptions{Logger: testlog.New(b)})
			check(b, err)
			b.Cleanup(func() {
				for _, d := range devs {
					d.Close()
				}
				check(b, pl.Close())
			})
			tdev := devs[0]
			mem, err := ibv.MapArena(1<<20, ibv.ArenaOptions{})
			check(b, err)
			b.Cleanup(func() { mem.Close() })
			pd := transport.NewPD()
			mr, err := pd.RegisterMR(mem.Bytes(), transport.AccessLocalWrite|transport.AccessRemoteWrite)
			check(b, err)
			cq := transport.NewCQ(64)
			qp, err := tdev.CreateQP(pd, transport.QPInitAttr{Type: transport.RC, SendCQ: cq, RecvCQ: cq})
			check(b, err)
			const cPSN, tPSN = 0x100, 0x200
			connectKernel(b, client.qp, client.gid, qp.QPN(), ns.IP, cPSN, tPSN, 14, 7)
			for _, a := range []transport.QPAttr{{State: transport.StateInit},
				{State: transport.StateRTR, DestQPN: client.qp.QPN(), Remote: netip.AddrPortFrom(ns.PeerIP, roce.Port), RQPSN: cPSN, PathMTU: 1024, MinRNRTimer: 1, MaxDestRdAtomic: 16},
				{State: transport.StateRTS, SQPSN: tPSN, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16}} {
				check(b, qp.Modify(a))
			}
			check(b, prog.AddQP(qp.QPN(), xdp.QP{RemoteQPN: client.qp.QPN()}))
			writeWindow(b, client, mr.Addr(), mr.RKey(), len(mem.Bytes()), size)
		})
		b.Run(fmt.Sprintf("rxe-to-rxe-ib/%d", size), func(b *testing.B) {
			guest.RequireKind(b, "rxe")
			ib := guest.IB(b)
			from, to := openApp(b, ib.GatewayDevice, ib.GatewayIP), openApp(b, ib.PeerDevice, ib.PeerIP)
			connectKernel(b, from.qp, from.gid, to.qp.QPN(), ib.PeerIP, 0x10, 0x20, 14, 7)
			connectKernel(b, to.qp, to.gid, from.qp.QPN(), ib.GatewayIP, 0x20, 0x10, 14, 7)
			writeWindow(b, from, to.mr.Addr(), to.mr.RKey(), len(to.arena.Bytes()), size)
		})
	}
}

// writeWindow WRITEs b.N times size bytes from a's memory into the span
// of space bytes at addr (rkey), 32 outstanding: when the window is full
// it waits for completions, then posts as many as the window allows in
// one call.
func writeWindow(b *testing.B, a *app, addr uint64, rkey uint32, space, size int) {
	const window = 32
	if 8*size > space {
		b.Fatalf("%d-byte WRITEs do not fit the target's %d bytes eight times", size, space)
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
			SGEs: []ibv.SGE{mustSGE(a.mr, off, size)}, RemoteAddr: addr + uint64(off), RKey: rkey})
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
