package interop_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/rbridge/rbridge/ibv"
	"github.com/rbridge/rbridge/integration/guest"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/roce/udpconn"
)

const memSize = 1 << 20

// kernelEnd is an RC QP on the kernel's rxe, driven through ibv.
type kernelEnd struct {
	dev   *ibv.Device
	pd    *ibv.PD
	cq    *ibv.CQ
	qp    *ibv.QP
	mr    *ibv.MR
	arena *ibv.Arena
	gid   ibv.GIDChoice
}

// goEnd is an RC QP of rbridge's transport on a UDP socket in the user
// namespace.
type goEnd struct {
	dev *transport.Device
	pd  *transport.PD
	mr  *transport.MR
	mem []byte
	cq  *transport.CQ
	qp  *transport.QP
	ip  netip.Addr
}

func check(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// lossyConn drops a fraction of the packets it sends and receives, for
// go-back-N in both directions against the kernel.
type lossyConn struct {
	roce.PacketConn
	mu      sync.Mutex
	rng     *rand.Rand
	loss    float64
	dropped int
}

func (c *lossyConn) drop() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.rng.Float64() < c.loss
	if d {
		c.dropped++
	}
	return d
}

func (c *lossyConn) WriteBatch(msgs []roce.Message) (int, error) {
	keep := msgs[:0:0]
	for _, m := range msgs {
		if !c.drop() {
			keep = append(keep, m)
		}
	}
	if _, err := c.PacketConn.WriteBatch(keep); err != nil {
		return 0, err
	}
	return len(msgs), nil
}

func (c *lossyConn) ReadBatch(msgs []roce.Message) (int, error) {
	for {
		n, err := c.PacketConn.ReadBatch(msgs)
		if err != nil {
			return n, err
		}
		out := 0
		for i := range n {
			if c.drop() {
				continue
			}
			msgs[out], msgs[i] = msgs[i], msgs[out]
			out++
		}
		if out > 0 {
			return out, nil
		}
	}
}

// openKernelEnd opens an rxe device and makes an RC QP (in RESET), a CQ and
// an MR over an mmap'd arena on it, with the GID rbridge picks for ip.
func openKernelEnd(t testing.TB, device string, ip netip.Addr) *kernelEnd {
	k := &kernelEnd{}
	var err error
	k.dev, err = ibv.OpenDevice(device)
	check(t, err)
	t.Cleanup(func() { k.dev.Close() })
	k.gid, err = k.dev.ChooseGID(ibv.GIDQuery{IP: ip})
	check(t, err)
	k.pd, err = k.dev.AllocPD()
	check(t, err)
	k.cq, err = k.dev.NewCQ(ibv.CQOptions{Entries: 256})
	check(t, err)
	k.qp, err = k.pd.NewQP(ibv.QPOptions{Type: ibv.QPTypeRC, SendCQ: k.cq, RecvCQ: k.cq, Cap: ibv.QPCap{MaxSendWR: 128, MaxRecvWR: 64}})
	check(t, err)
	k.arena, err = ibv.MapArena(memSize, ibv.ArenaOptions{})
	check(t, err)
	t.Cleanup(func() { k.arena.Close() })
	k.mr, err = k.pd.RegMR(k.arena.Bytes(), ibv.AccessAll)
	check(t, err)
	return k
}

// connectToRXE sets up the kernel QP on the rxe device that shares an L2
// segment with the user namespace, and a transport QP in that namespace,
// and connects them as an out-of-band exchange (QPN, PSN, GID, MTU) would.
func connectToRXE(t testing.TB, loss float64) (*kernelEnd, *goEnd, *lossyConn) {
	var lossy *lossyConn
	k, g := connectToRXEOver(t, func(ns guest.Netns) []roce.PacketConn {
		var uc *udpconn.Conn
		check(t, ns.Do(func() (err error) {
			uc, err = udpconn.Listen(udpconn.Options{Addr: netip.AddrPortFrom(ns.IP, roce.Port)})
			return err
		}))
		lossy = &lossyConn{PacketConn: uc, rng: rand.New(rand.NewPCG(7, 11)), loss: loss}
		return []roce.PacketConn{lossy}
	})
	return k, g, lossy
}

// connectToRXEOver is connectToRXE with the transport's packet I/O made by
// mkConn in the user namespace: a conn, or one per receive queue (AF_XDP),
// each a device of its own; the QP is on the first (g.dev), and a packet
// another queue receives is handed to it.
func connectToRXEOver(t testing.TB, mkConn func(guest.Netns) []roce.PacketConn) (*kernelEnd, *goEnd) {
	guest.RequireKind(t, "rxe")
	ns := guest.UserNetns(t)
	k := openKernelEnd(t, ns.PeerDevice, ns.PeerIP)
	check(t, k.qp.ToInit(ibv.InitParams{Port: 1, Access: ibv.AccessAll}))

	g := &goEnd{mem: make([]byte, memSize), cq: transport.NewCQ(256), ip: ns.IP, pd: transport.NewPD()}
	devs, err := transport.NewDevices(mkConn(ns), transport.DeviceOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	check(t, err)
	t.Cleanup(func() {
		for _, d := range devs {
			d.Close()
		}
	})
	g.dev = devs[0]
	g.mr, err = g.pd.RegisterMR(g.mem, transport.AccessLocalWrite|transport.AccessRemoteWrite|transport.AccessRemoteRead|transport.AccessRemoteAtomic)
	check(t, err)
	g.qp, err = g.dev.CreateQP(g.pd, transport.QPInitAttr{Type: transport.RC, SendCQ: g.cq, RecvCQ: g.cq})
	check(t, err)

	const kPSN, gPSN = 0x1000, 0xfffff8 // the transport's PSNs wrap
	dgid, err := ibv.ParseGID("::ffff:" + ns.IP.String())
	check(t, err)
	check(t, k.qp.ToRTR(ibv.RTRParams{PathMTU: ibv.MTU1024, DestQPN: g.qp.QPN(), RQPSN: gPSN, MaxDestRdAtomic: 16,
		MinRNRTimer: 1, AH: ibv.AHAttr{IsGlobal: true, Port: 1, GRH: ibv.GRH{DGID: dgid, SGIDIndex: uint8(k.gid.Index), HopLimit: 64}}}))
	check(t, k.qp.ToRTS(ibv.RTSParams{SQPSN: kPSN, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16}))
	for _, a := range []transport.QPAttr{
		{State: transport.StateInit},
		{State: transport.StateRTR, DestQPN: k.qp.QPN(), Remote: netip.AddrPortFrom(ns.PeerIP, roce.Port), RQPSN: kPSN, PathMTU: 1024, MinRNRTimer: 1, MaxDestRdAtomic: 16},
		{State: transport.StateRTS, SQPSN: gPSN, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
	} {
		check(t, g.qp.Modify(a))
	}
	t.Logf("kernel %s QP %#x (GID index %d: %s) <-> transport QP %#x at %v", ns.PeerDevice, k.qp.QPN(), k.gid.Index, k.gid.Reason, g.qp.QPN(), ns.IP)
	return k, g
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // TCG is slow
	t.Cleanup(cancel)
	return c
}

func waitGo(t *testing.T, cq *transport.CQ, n int) []transport.WC {
	t.Helper()
	out := make([]transport.WC, 0, n)
	buf := make([]transport.WC, 16)
	for len(out) < n {
		k, err := cq.PollWait(ctx(t), buf[:min(len(buf), n-len(out))])
		if err != nil {
			t.Fatalf("transport completions: %v after %+v", err, out)
		}
		out = append(out, buf[:k]...)
	}
	for _, wc := range out {
		if wc.Status != transport.StatusSuccess {
			t.Fatalf("transport completion %+v: %v", wc, wc.Status)
		}
	}
	return out
}

func waitKernel(t *testing.T, cq *ibv.CQ, n int) []ibv.WorkCompletion {
	t.Helper()
	out := make([]ibv.WorkCompletion, 0, n)
	buf := make([]ibv.WorkCompletion, 16)
	for len(out) < n {
		k, err := cq.Wait(ctx(t), buf[:min(len(buf), n-len(out))])
		if err != nil {
			t.Fatalf("kernel completions: %v after %+v", err, out)
		}
		out = append(out, buf[:k]...)
	}
	for _, wc := range out {
		if err := wc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func fill(b []byte, seed int) {
	for i := range b {
		b[i] = byte(i*31 + seed)
	}
}

func same(t *testing.T, what string, got, want []byte) {
	t.Helper()
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%s: byte %d of %d is %#x, want %#x", what, i, len(want), got[i], want[i])
		}
	}
}

// exercise runs every RC opcode in both directions between the kernel QP
// and the transport QP and checks the bytes and the atomic results.
func exercise(t *testing.T, k *kernelEnd, g *goEnd) {
	km := k.mr.Bytes()
	const n = 5000 // five packets at MTU 1024, the last one short
	// Transport -> kernel: SEND and SEND_WITH_IMM into posted receives.
	_, err := k.qp.PostRecv([]ibv.RecvWR{{ID: 1, SGEs: []ibv.SGE{mustSGE(k.mr, 0, 8192)}}, {ID: 2, SGEs: []ibv.SGE{mustSGE(k.mr, 8192, 8192)}}, {ID: 3, SGEs: []ibv.SGE{mustSGE(k.mr, 16384, 64)}}})
	check(t, err)
	fill(g.mem[:n], 1)
	sge := func(off, l int) transport.SGE { return transport.SGE{MR: g.mr, Offset: off, Length: l} }
	check(t, g.qp.PostSend(
		transport.SendWR{ID: 1, Opcode: transport.OpSend, Local: sge(0, n), Signaled: true},
		transport.SendWR{ID: 2, Opcode: transport.OpSendWithImm, Imm: 0xc0ffee, Local: sge(0, 100), Signaled: true},
		// WRITE into the kernel's memory, then WRITE_WITH_IMM (consumes receive 3).
		transport.SendWR{ID: 3, Opcode: transport.OpWrite, Local: sge(0, n), Remote: k.mr.Addr() + 65536, RKey: k.mr.RKey(), Signaled: true},
		transport.SendWR{ID: 4, Opcode: transport.OpWriteWithImm, Imm: 77, Local: sge(0, 10), Remote: k.mr.Addr() + 131072, RKey: k.mr.RKey(), Signaled: true},
	))
	waitGo(t, g.cq, 4)
	r := waitKernel(t, k.cq, 3)
	if r[0].ByteLen != n || r[1].ByteLen != 100 || r[1].Imm != 0xc0ffee || r[2].Imm != 77 || r[2].ByteLen != 10 {
		t.Fatalf("kernel receives: %+v", r)
	}
	same(t, "SEND into rxe", km[:n], g.mem[:n])
	same(t, "WRITE into rxe", km[65536:65536+n], g.mem[:n])

	// Transport READs the kernel's memory; atomics on the kernel's counter.
	fill(km[200000:200000+n], 9)
	binary.LittleEndian.PutUint64(km[300000:], 40)
	check(t, g.qp.PostSend(
		transport.SendWR{ID: 5, Opcode: transport.OpRead, Local: sge(100000, n), Remote: k.mr.Addr() + 200000, RKey: k.mr.RKey(), Signaled: true},
		transport.SendWR{ID: 6, Opcode: transport.OpFetchAdd, SwapAdd: 2, Local: sge(8, 8), Remote: k.mr.Addr() + 300000, RKey: k.mr.RKey(), Signaled: true},
		transport.SendWR{ID: 7, Opcode: transport.OpCompareSwap, Compare: 42, SwapAdd: 1000, Local: sge(16, 8), Remote: k.mr.Addr() + 300000, RKey: k.mr.RKey(), Signaled: true},
	))
	waitGo(t, g.cq, 3)
	same(t, "READ from rxe", g.mem[100000:100000+n], km[200000:200000+n])
	if fa, cs, now := binary.LittleEndian.Uint64(g.mem[8:]), binary.LittleEndian.Uint64(g.mem[16:]), binary.LittleEndian.Uint64(km[300000:]); fa != 40 || cs != 42 || now != 1000 {
		t.Fatalf("atomics on rxe: FETCH_ADD saw %d, COMPARE_SWAP saw %d, counter now %d; want 40, 42, 1000", fa, cs, now)
	}

	// Kernel -> transport: SEND, WRITE, WRITE_WITH_IMM, READ and atomics
	// against the transport's memory: the transport is the responder.
	check(t, g.qp.PostRecv(transport.RecvWR{ID: 11, Local: sge(400000, 8192)}, transport.RecvWR{ID: 12, Local: sge(410000, 64)}))
	fill(km[500000:500000+n], 5)
	fill(g.mem[600000:600000+n], 6)
	binary.LittleEndian.PutUint64(g.mem[700000:], 7)
	_, err = k.qp.PostSend([]ibv.SendWR{
		{ID: 21, Op: ibv.OpSend, Flags: ibv.SendSignaled, SGEs: []ibv.SGE{mustSGE(k.mr, 500000, n)}},
		{ID: 22, Op: ibv.OpWrite, Flags: ibv.SendSignaled, SGEs: []ibv.SGE{mustSGE(k.mr, 500000, n)}, RemoteAddr: g.mr.Addr() + 800000, RKey: g.mr.RKey()},
		{ID: 23, Op: ibv.OpWriteWithImm, Flags: ibv.SendSignaled, Imm: 99, SGEs: []ibv.SGE{mustSGE(k.mr, 500000, 3)}, RemoteAddr: g.mr.Addr() + 900000, RKey: g.mr.RKey()},
		{ID: 24, Op: ibv.OpRead, Flags: ibv.SendSignaled, SGEs: []ibv.SGE{mustSGE(k.mr, 520000, n)}, RemoteAddr: g.mr.Addr() + 600000, RKey: g.mr.RKey()},
		{ID: 25, Op: ibv.OpFetchAdd, Flags: ibv.SendSignaled, SGEs: []ibv.SGE{mustSGE(k.mr, 540000, 8)}, RemoteAddr: g.mr.Addr() + 700000, RKey: g.mr.RKey(), CompareAdd: 3},
		{ID: 26, Op: ibv.OpCompareSwap, Flags: ibv.SendSignaled, SGEs: []ibv.SGE{mustSGE(k.mr, 540008, 8)}, RemoteAddr: g.mr.Addr() + 700000, RKey: g.mr.RKey(), CompareAdd: 10, Swap: 500},
	})
	check(t, err)
	waitKernel(t, k.cq, 6)
	gr := waitGo(t, g.cq, 2)
	if gr[0].ID != 11 || gr[0].ByteLen != n || gr[1].ID != 12 || gr[1].Opcode != transport.OpRecvWriteWithImm || gr[1].Imm != 99 || gr[1].ByteLen != 3 {
		t.Fatalf("transport receives: %+v", gr)
	}
	same(t, "SEND from rxe", g.mem[400000:400000+n], km[500000:500000+n])
	same(t, "WRITE from rxe", g.mem[800000:800000+n], km[500000:500000+n])
	same(t, "READ by rxe", km[520000:520000+n], g.mem[600000:600000+n])
	if fa, cs, now := binary.LittleEndian.Uint64(km[540000:]), binary.LittleEndian.Uint64(km[540008:]), binary.LittleEndian.Uint64(g.mem[700000:]); fa != 7 || cs != 10 || now != 500 {
		t.Fatalf("atomics by rxe: FETCH_ADD saw %d, COMPARE_SWAP saw %d, counter now %d; want 7, 10, 500", fa, cs, now)
	}
}

// TestGuestTransportWithRXE: the transport as requester and as responder
// for every RC opcode against the kernel's rxe.
func TestGuestTransportWithRXE(t *testing.T) {
	k, g, _ := connectToRXE(t, 0)
	exercise(t, k, g)
	st := g.dev.Stats()
	t.Logf("transport: rx %d tx %d, retransmits %d, NAKs sent %d", st.RxPackets.Load(), st.TxPackets.Load(), st.Retransmit.Load(), st.TxNAKs.Load())
}

// TestGuestTransportWithRXELoss drops 5% of the transport's packets each
// way: rxe's go-back-N and the transport's recover each other's losses.
func TestGuestTransportWithRXELoss(t *testing.T) {
	k, g, lossy := connectToRXE(t, 0.05)
	for round := range 4 {
		t.Run(fmt.Sprint(round), func(t *testing.T) { exercise(t, k, g) })
	}
	st := g.dev.Stats()
	t.Logf("dropped %d packets; transport: retransmits %d, timeouts %d, NAKs sent %d, duplicates %d",
		lossy.dropped, st.Retransmit.Load(), st.Timeouts.Load(), st.TxNAKs.Load(), st.RxDuplicate.Load())
	if lossy.dropped == 0 {
		t.Fatal("no packet was dropped: the test proved nothing")
	}
}
