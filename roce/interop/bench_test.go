package interop_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/rbridge/rbridge/ibv"
	"github.com/rbridge/rbridge/integration/guest"
	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/xdp"
)

// kernelPair connects rxe0 to rxe1 through ibv: the direct kernel path the
// transport is compared with.
func kernelPair(b *testing.B) (*kernelEnd, *kernelEnd) {
	d := guest.RequireKind(b, "rxe")
	a, c := openKernelEnd(b, d.Name, d.IP), openKernelEnd(b, d.Peer, d.PeerIP)
	for _, k := range []*kernelEnd{a, c} {
		check(b, k.qp.ToInit(ibv.InitParams{Port: 1, Access: ibv.AccessAll}))
	}
	for _, p := range [][2]*kernelEnd{{a, c}, {c, a}} {
		check(b, p[0].qp.ToRTR(ibv.RTRParams{PathMTU: ibv.MTU1024, DestQPN: p[1].qp.QPN(), RQPSN: 1, MaxDestRdAtomic: 16,
			AH: ibv.AHAttr{IsGlobal: true, Port: 1, GRH: ibv.GRH{DGID: p[1].gid.GID, SGIDIndex: uint8(p[0].gid.Index), HopLimit: 64}}}))
		check(b, p[0].qp.ToRTS(ibv.RTSParams{SQPSN: 1, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16}))
	}
	return a, c
}

const window = 32

// BenchmarkGuestWrite moves RDMA WRITEs of each size into rxe1's memory,
// 32 outstanding, from the userspace transport in user0 and, in the same
// run, from rxe0 (the kernel to the kernel). Compare the MB/s figures: the
// transport's goal is to be no slower than rxe; cpu-us/op is the guest's
// CPU time per WRITE, both ends and the kernel's work included, steadier
// under TCG than the rates. Both loops drive their QP the same way: wait for
// completions when the window is full, then post as many WRs as it allows
// in one call (one doorbell for rxe, one batch of packets for the
// transport).
//
// The transport runs in several configurations (guestConfigs).
func BenchmarkGuestWrite(b *testing.B) {
	for _, size := range []int{64, 4096, 65536} {
		for _, c := range guestConfigs {
			b.Run(fmt.Sprintf("transport-%s/%d", c.name, size), func(b *testing.B) {
				var k *kernelEnd
				var g *goEnd
				if c.afxdp {
					var prog *xdp.Program
					k, g = connectToRXEOver(b, afxdpConn(b, &prog, c.mode))
					check(b, prog.AddQP(g.qp.QPN(), xdp.QP{RemoteQPN: k.qp.QPN()}))
				} else {
					k, g, _ = connectToRXE(b, 0)
				}
				writeLoop(b, g, k, size, c.procs)
			})
		}
		b.Run(fmt.Sprintf("rxe-to-rxe/%d", size), func(b *testing.B) {
			a, c := kernelPair(b)
			wcs := make([]ibv.WorkCompletion, window)
			wrs := make([]ibv.SendWR, 0, window)
			windowLoop(b, size,
				func(i, off int) {
					wrs = append(wrs, ibv.SendWR{ID: uint64(i), Op: ibv.OpWrite, Flags: ibv.SendSignaled,
						SGEs: []ibv.SGE{mustSGE(a.mr, off, size)}, RemoteAddr: c.mr.Addr() + uint64(off), RKey: c.mr.RKey()})
				},
				func() int {
					if len(wrs) == 0 {
						return 0
					}
					n, err := a.qp.PostSend(wrs)
					check(b, err)
					if n != len(wrs) {
						b.Fatalf("posted %d of %d WRs", n, len(wrs))
					}
					wrs = wrs[:0]
					return n
				},
				func() int {
					n, err := a.cq.Wait(ctx(b), wcs)
					check(b, err)
					for _, wc := range wcs[:n] {
						check(b, wc.Err())
					}
					return n
				})
		})
	}
}

// windowLoop drives a QP the same way for either path, for b.N WRITEs of
// size bytes: add queues WRITE i at offset off; when window WRs are
// outstanding or queued, post posts the queued ones in one call and
// returns how many, and wait waits for completions and returns how many
// (failing the benchmark on an error one). It reports the guest's CPU
// time per WRITE.
func windowLoop(b *testing.B, size int, add func(i, off int), post, wait func() int) {
	out, queued := 0, 0
	b.SetBytes(int64(size))
	cpu := guest.ReadCPUTimes(b)
	for i := 0; b.Loop(); i++ {
		add(i, (i%8)*size)
		if queued++; out+queued < window {
			continue
		}
		out += post()
		queued = 0
		out -= wait()
	}
	out += post()
	for out > 0 {
		out -= wait()
	}
	guest.ReportCPU(b, cpu)
}

// guestConfigs are the transport's configurations in BenchmarkGuestWrite:
//   - udp: a UDP socket, Go's defaults. The reference.
//   - gomaxprocs1: GOMAXPROCS=1. On the guest's two vCPUs, with two Ps each
//     completion handed from the transport's receive goroutine to the
//     posting one wakes the idle P, whose thread spins and polls the network
//     on the vCPU the kernel's receive path needs.
//   - afxdp: AF_XDP, the classifier attached in the loader's choice of mode
//     (native: veth has it).
//   - afxdp-generic: the classifier in generic (skb) mode. Packets reach
//     the namespace's veth as socket buffers from the bridge; veth's native
//     XDP copies each into a fresh page before running the program, generic
//     XDP runs on the socket buffer.
var guestConfigs = []struct {
	name  string
	afxdp bool
	mode  xdp.Mode
	procs int // GOMAXPROCS, 0 for Go's default
}{
	{"udp", false, 0, 0},
	{"udp-gomaxprocs1", false, 0, 1},
	{"afxdp-gomaxprocs1", true, 0, 1},
	{"afxdp-generic", true, xdp.ModeGeneric, 0},
	{"afxdp-generic-gomaxprocs1", true, xdp.ModeGeneric, 1},
}

// writeLoop posts RDMA WRITEs of size bytes from the transport into the
// kernel's MR, window outstanding, for b.N, with GOMAXPROCS set to procs
// (unless 0).
func writeLoop(b *testing.B, g *goEnd, k *kernelEnd, size, procs int) {
	if procs > 0 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
	}
	wcs := make([]transport.WC, window)
	wrs := make([]transport.SendWR, 0, window)
	windowLoop(b, size,
		func(i, off int) {
			wrs = append(wrs, transport.SendWR{ID: uint64(i), Opcode: transport.OpWrite, Signaled: true,
				Local: transport.SGE{MR: g.mr, Offset: off, Length: size}, Remote: k.mr.Addr() + uint64(off), RKey: k.mr.RKey()})
		},
		func() int {
			if len(wrs) == 0 {
				return 0
			}
			check(b, g.qp.PostSend(wrs...))
			n := len(wrs)
			wrs = wrs[:0]
			return n
		},
		func() int {
			n, err := g.cq.PollWait(ctx(b), wcs)
			check(b, err)
			for _, wc := range wcs[:n] {
				if wc.Status != transport.StatusSuccess {
					b.Fatalf("%+v", wc)
				}
			}
			return n
		})
	st := g.dev.Stats()
	ops := float64(b.N)
	b.ReportMetric(float64(st.TxPackets.Load())/ops, "txpkts/op")
	b.ReportMetric(float64(st.RxPackets.Load())/ops, "rxpkts/op")
	b.ReportMetric(float64(st.Retransmit.Load())/ops, "retx/op")
	b.ReportMetric(float64(st.Timeouts.Load()), "timeouts")
	b.ReportMetric(float64(st.TailProbes.Load())/ops, "probes/op")
}
