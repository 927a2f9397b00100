package bridge_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge/leg"

	"github.com/rbridge/rbridge/bridge/pool"
	"github.com/rbridge/rbridge/bridge/session"

	"github.com/rbridge/rbridge/ibv"
	"github.com/rbridge/rbridge/integration/guest"
	"github.com/rbridge/rbridge/internal/testlog"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/roce/udpconn"
	"github.com/rbridge/rbridge/xdp"
)

// In the guest: a RoCE application on kernel rxe1 reaches an IB-side
// application on rxe3 (the IB fabric, which nothing on the RoCE side can
// reach) through a session whose userspace leg runs in user0 and whose
// verbs leg is rxe2.

func check(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// app is an application's RC QP on a kernel device, with 1 MiB of memory
// that peers may READ, WRITE and do atomics on.
type app struct {
	dev   *ibv.Device
	pd    *ibv.PD
	cq    *ibv.CQ
	qp    *ibv.QP
	arena *ibv.Arena
	mr    *ibv.MR
	gid   ibv.GIDChoice
	ip    netip.Addr
}

func openApp(t testing.TB, device string, ip netip.Addr) *app {
	t.Helper()
	a := &app{ip: ip}
	var err error
	a.dev, err = ibv.OpenDevice(device)
	check(t, err)
	t.Cleanup(func() { a.dev.Close() })
	a.gid, err = a.dev.ChooseGID(ibv.GIDQuery{IP: ip})
	check(t, err)
	a.pd, err = a.dev.AllocPD()
	check(t, err)
	a.cq, err = a.dev.NewCQ(ibv.CQOptions{Entries: 512})
	check(t, err)
	a.qp, err = a.pd.NewQP(ibv.QPOptions{Type: ibv.QPTypeRC, SendCQ: a.cq, RecvCQ: a.cq, Cap: ibv.QPCap{MaxSendWR: 128, MaxRecvWR: 128}})
	check(t, err)
	a.arena, err = ibv.MapArena(1<<20, ibv.ArenaOptions{})
	check(t, err)
	t.Cleanup(func() { a.arena.Close() })
	a.mr, err = a.pd.RegMR(a.arena.Bytes(), ibv.AccessAll)
	check(t, err)
	return a
}

// connectKernel moves a kernel QP to RTS toward a peer QP at ip.
func connectKernel(t testing.TB, q *ibv.QP, gid ibv.GIDChoice, peerQPN uint32, peerIP netip.Addr, sq, rq uint32, timeout, retry uint8) {
	t.Helper()
	dgid, err := ibv.ParseGID("::ffff:" + peerIP.String())
	check(t, err)
	check(t, q.ToInit(ibv.InitParams{Port: 1, Access: ibv.AccessAll}))
	check(t, q.ToRTR(ibv.RTRParams{PathMTU: ibv.MTU1024, DestQPN: peerQPN, RQPSN: rq, MaxDestRdAtomic: 16, MinRNRTimer: 1,
		AH: ibv.AHAttr{IsGlobal: true, Port: 1, GRH: ibv.GRH{DGID: dgid, SGIDIndex: uint8(gid.Index), HopLimit: 64}}}))
	check(t, q.ToRTS(ibv.RTSParams{SQPSN: sq, Timeout: timeout, RetryCnt: retry, RNRRetry: 7, MaxRdAtomic: 16}))
}

// gw is the gateway: the pool, the userspace leg toward the client, the
// verbs leg toward the target, and the session between them.
type gw struct {
	pool   *pool.Pool
	near   *leg.UserspaceEndpoint
	far    *leg.VerbsEndpoint
	vqp    *ibv.QP
	vmr    *ibv.MR
	sess   *session.Session
	client *app
	target *app
	io     string
	conn   roce.PacketConn // the userspace leg's
}

func newGateway(t *testing.T) *gw { return newGatewayOver(t, "udp") }

// newGatewayOver builds the gateway with its userspace leg's packets on a
// UDP socket ("udp") or on AF_XDP behind the classifier ("afxdp").
func newGatewayOver(t testing.TB, io string) *gw {
	t.Helper()
	guest.RequireKind(t, "rxe")
	ns := guest.UserNetns(t)
	ib := guest.IB(t)
	g := &gw{io: io}
	var err error
	g.pool, err = pool.New(pool.Options{Size: 32 << 20, Classes: []int{256, 4 << 10, 64 << 10}})
	check(t, err)
	g.client = openApp(t, ns.PeerDevice, ns.PeerIP)
	g.target = openApp(t, ib.PeerDevice, ib.PeerIP)

	// The userspace leg, in user0, toward the client.
	var conns []roce.PacketConn
	var prog *xdp.Program
	var frames *pool.Frames
	switch io {
	case "udp":
		// Its GRO reads land in the pool's 64 KiB buffers and are lent to
		// the session, as the gateway's leg does.
		frames, err = g.pool.LendFrames(udpconn.FrameLen, 0.5)
		check(t, err)
		check(t, ns.Do(func() error {
			conn, err := udpconn.Listen(udpconn.Options{Addr: netip.AddrPortFrom(ns.IP, roce.Port), Frames: frames, Arena: g.pool.Arena()})
			conns = []roce.PacketConn{conn}
			return err
		}))
	case "afxdp":
		conns, prog, frames = afxdpConns(t, ns, g.pool)
	default:
		t.Fatalf("packet I/O %q", io)
	}
	g.conn = conns[0]
	// A device per conn (the AF_XDP leg's queues): the QP is queue 0's,
	// and a packet the NIC put on another queue is handed to it.
	devs, err := transport.NewDevices(conns, transport.DeviceOptions{Logger: testlog.New(t)})
	check(t, err)
	t.Cleanup(func() {
		for _, d := range devs {
			d.Close()
		}
	})
	tdev := devs[0]
	tpd := transport.NewPD()
	tmr, err := tpd.RegisterMR(g.pool.Arena(), transport.AccessLocalWrite)
	check(t, err)
	g.near, err = leg.NewUserspaceEndpoint(leg.UserspaceOptions{Device: tdev, PD: tpd, MR: tmr, Frames: frames})
	check(t, err)
	const cPSN, nPSN = 0x100, 0xfffff0
	connectKernel(t, g.client.qp, g.client.gid, g.near.QP().QPN(), ns.IP, cPSN, nPSN, 14, 7)
	for _, a := range []transport.QPAttr{{State: transport.StateInit},
		{State: transport.StateRTR, DestQPN: g.client.qp.QPN(), Remote: netip.AddrPortFrom(ns.PeerIP, roce.Port), RQPSN: cPSN, PathMTU: 1024, MinRNRTimer: 1, MaxDestRdAtomic: 16},
		{State: transport.StateRTS, SQPSN: nPSN, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16}} {
		check(t, g.near.QP().Modify(a))
	}
	if prog != nil {
		check(t, prog.AddQP(g.near.QP().QPN(), xdp.QP{RemoteQPN: g.client.qp.QPN()}))
		t.Cleanup(func() {
			c, err := prog.Counters()
			check(t, err)
			t.Logf("classifier: %d frames redirected to AF_XDP", c.Redirected)
			if c.Redirected == 0 {
				t.Error("nothing went through AF_XDP")
			}
		})
	}

	// The verbs leg, on rxe2, toward the target.
	vdev, err := ibv.OpenDevice(ib.GatewayDevice)
	check(t, err)
	t.Cleanup(func() { vdev.Close() })
	vgid, err := vdev.ChooseGID(ibv.GIDQuery{IP: ib.GatewayIP})
	check(t, err)
	vpd, err := vdev.AllocPD()
	check(t, err)
	vcq, err := vdev.NewCQ(ibv.CQOptions{Entries: 512})
	check(t, err)
	g.vqp, err = vpd.NewQP(ibv.QPOptions{Type: ibv.QPTypeRC, SendCQ: vcq, RecvCQ: vcq, Cap: ibv.QPCap{MaxSendWR: 128, MaxRecvWR: 64, MaxSendSGE: 16}})
	check(t, err)
	g.vmr, err = vpd.RegMR(g.pool.Arena(), ibv.AccessLocalWrite)
	check(t, err)
	const vPSN, tPSN = 0x2000, 0x3000
	connectKernel(t, g.vqp, vgid, g.target.qp.QPN(), ib.PeerIP, vPSN, tPSN, 14, 7)
	connectKernel(t, g.target.qp, g.target.gid, g.vqp.QPN(), ib.GatewayIP, tPSN, vPSN, 14, 7)
	g.far, err = leg.NewVerbsEndpoint(leg.VerbsOptions{QP: g.vqp, CQ: vcq, MR: g.vmr, Pool: g.pool, RecvDepth: 32})
	check(t, err)

	g.sess, err = session.New(session.Options{A: g.near, B: g.far, Pool: g.pool, Logger: testlog.New(t, "session failed")})
	check(t, err)
	t.Cleanup(func() {
		_ = g.sess.Close()
		for _, d := range devs {
			d.Close() // their AF_XDP sockets give their frames back to the pool
		}
		if err := g.pool.Close(); err != nil {
			t.Errorf("after the session: %v", err)
		}
	})
	t.Logf("client %s QP %d -> gateway userspace QP %#x (user0) | gateway %s QP %d -> target %s QP %d",
		ns.PeerDevice, g.client.qp.QPN(), g.near.QP().QPN(), ib.GatewayDevice, g.vqp.QPN(), ib.PeerDevice, g.target.qp.QPN())
	return g
}

func waitWCs(t testing.TB, cq *ibv.CQ, n int) []ibv.WorkCompletion {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // TCG is slow
	defer cancel()
	out := make([]ibv.WorkCompletion, 0, n)
	buf := make([]ibv.WorkCompletion, 16)
	for len(out) < n {
		k, err := cq.Wait(ctx, buf[:min(len(buf), n-len(out))])
		if err != nil {
			t.Fatalf("completions: %v after %+v", err, out)
		}
		out = append(out, buf[:k]...)
	}
	return out
}

func fillPattern(b []byte, seed int) {
	for i := range b {
		b[i] = byte(i*31 + seed + i>>10)
	}
}

// exerciseGateway runs every RC opcode from the client to the target and
// a SEND back, and checks every byte, immediate and atomic result.
func exerciseGateway(t *testing.T, g *gw) {
	c, tg := g.client, g.target
	cm, tm := c.mr.Bytes(), tg.mr.Bytes()
	_, err := tg.qp.PostRecv([]ibv.RecvWR{{ID: 1, SGEs: []ibv.SGE{mustSGE(tg.mr, 0, 65536)}}, {ID: 2, SGEs: []ibv.SGE{mustSGE(tg.mr, 65536, 4096)}},
		{ID: 3, SGEs: []ibv.SGE{mustSGE(tg.mr, 69632, 64)}}})
	check(t, err)
	fillPattern(cm[:100000], 1)
	fillPattern(tm[600<<10:700<<10], 2)
	binary.LittleEndian.PutUint64(tm[900<<10:], 1000)
	binary.LittleEndian.PutUint64(tm[900<<10+8:], 7)
	s := func(off, n int) []ibv.SGE { return []ibv.SGE{mustSGE(c.mr, off, n)} }
	ta := tg.mr.Addr()
	wrs := []ibv.SendWR{
		{ID: 1, Op: ibv.OpSend, SGEs: s(0, 5000), Flags: ibv.SendSignaled},
		{ID: 2, Op: ibv.OpSendWithImm, Imm: 0xc0ffee, SGEs: s(100, 100), Flags: ibv.SendSignaled},
		{ID: 3, Op: ibv.OpWrite, SGEs: s(0, 70000), RemoteAddr: ta + 256<<10, RKey: tg.mr.RKey(), Flags: ibv.SendSignaled},
		{ID: 4, Op: ibv.OpWriteWithImm, Imm: 77, SGEs: s(300, 10), RemoteAddr: ta + 512<<10, RKey: tg.mr.RKey(), Flags: ibv.SendSignaled},
		{ID: 5, Op: ibv.OpRead, SGEs: s(200<<10, 30000), RemoteAddr: ta + 600<<10, RKey: tg.mr.RKey(), Flags: ibv.SendSignaled},
		{ID: 6, Op: ibv.OpFetchAdd, SGEs: s(300<<10, 8), RemoteAddr: ta + 900<<10, RKey: tg.mr.RKey(), CompareAdd: 5, Flags: ibv.SendSignaled},
		{ID: 7, Op: ibv.OpCompareSwap, SGEs: s(300<<10+8, 8), RemoteAddr: ta + 900<<10 + 8, RKey: tg.mr.RKey(), CompareAdd: 7, Swap: 99, Flags: ibv.SendSignaled},
	}
	if _, err := c.qp.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	for i, wc := range waitWCs(t, c.cq, len(wrs)) {
		if wc.ID != uint64(i+1) || wc.Status != ibv.WCSuccess {
			t.Fatalf("client completion %d: %+v (%v)", i, wc, wc.Status)
		}
	}
	recvs := waitWCs(t, tg.cq, 3)
	for i, want := range []struct {
		n    uint32
		imm  uint32
		flag ibv.WCFlags
		op   ibv.WCOpcode
	}{{5000, 0, 0, ibv.WCRecv}, {100, 0xc0ffee, ibv.WCFlagWithImm, ibv.WCRecv}, {10, 77, ibv.WCFlagWithImm, ibv.WCRecvRDMAWithImm}} {
		wc := recvs[i]
		if wc.Status != ibv.WCSuccess || wc.ByteLen != want.n || wc.Opcode != want.op || wc.Flags&ibv.WCFlagWithImm != want.flag || (want.flag != 0 && wc.Imm != want.imm) {
			t.Fatalf("target receive %d: %+v, want %d bytes %v imm %#x", i, wc, want.n, want.op, want.imm)
		}
	}
	for _, c := range []struct {
		what      string
		got, want []byte
	}{
		{"SEND", tm[:5000], cm[:5000]},
		{"SEND_WITH_IMM", tm[65536 : 65536+100], cm[100:200]},
		{"WRITE", tm[256<<10 : 256<<10+70000], cm[:70000]},
		{"WRITE_WITH_IMM", tm[512<<10 : 512<<10+10], cm[300:310]},
		{"READ", cm[200<<10 : 200<<10+30000], tm[600<<10 : 600<<10+30000]},
	} {
		if !bytes.Equal(c.got, c.want) {
			t.Errorf("%s: the bytes that arrived differ from those sent", c.what)
		}
	}
	if got := binary.LittleEndian.Uint64(cm[300<<10:]); got != 1000 {
		t.Errorf("FETCH_ADD returned %d, want 1000", got)
	}
	if got := binary.LittleEndian.Uint64(tm[900<<10:]); got != 1005 {
		t.Errorf("FETCH_ADD left %d, want 1005", got)
	}
	if got, now := binary.LittleEndian.Uint64(cm[300<<10+8:]), binary.LittleEndian.Uint64(tm[900<<10+8:]); got != 7 || now != 99 {
		t.Errorf("COMPARE_SWAP returned %d and left %d, want 7 and 99", got, now)
	}

	// The target answers with a SEND: relayed to the client.
	_, err = c.qp.PostRecv([]ibv.RecvWR{{ID: 9, SGEs: s(400<<10, 8192)}})
	check(t, err)
	fillPattern(tm[700<<10:700<<10+3000], 3)
	_, err = tg.qp.PostSend([]ibv.SendWR{{ID: 8, Op: ibv.OpSendWithImm, Imm: 42, SGEs: []ibv.SGE{mustSGE(tg.mr, 700<<10, 3000)}, Flags: ibv.SendSignaled}})
	check(t, err)
	if wc := waitWCs(t, tg.cq, 1)[0]; wc.Status != ibv.WCSuccess {
		t.Fatalf("target SEND: %v", wc.Status)
	}
	if wc := waitWCs(t, c.cq, 1)[0]; wc.ID != 9 || wc.Status != ibv.WCSuccess || wc.ByteLen != 3000 || wc.Imm != 42 {
		t.Fatalf("client receive: %+v", wc)
	}
	if !bytes.Equal(cm[400<<10:400<<10+3000], tm[700<<10:700<<10+3000]) {
		t.Error("the target's SEND arrived with other bytes")
	}
	st := g.sess.Stats().Snapshot()
	t.Logf("relayed: %d ops (%d bytes, %d copied) client to target, %d ops (%d bytes, %d copied) back",
		st.TotalOps(0), st.TotalBytes(0), st.Copied[0], st.TotalOps(1), st.TotalBytes(1), st.Copied[1])
	if st.Copied[1] != 0 {
		t.Errorf("%d bytes copied relaying the target's SEND: it is relayed from its receive buffer", st.Copied[1])
	}
	// Over AF_XDP and over UDP alike the client's payloads go out from the
	// pool's buffers they were received into (over UDP, those of short
	// reads packed into one by the socket): the session copies nothing.
	// Over UDP only if the socket found a buffer free for each read.
	if uc, ok := g.conn.(*udpconn.Conn); ok {
		ust := uc.Stats().Snapshot()
		t.Logf("the UDP socket: %d datagrams read, %d lent, %d of them packed, %d reads found no buffer free", ust.RxPackets, ust.RxLent, ust.RxPacked, ust.RxLendShort)
		if !uc.LendsFrames() || ust.RxLent == 0 || ust.RxLendShort != 0 {
			t.Errorf("the UDP socket lends %v: %d datagrams lent, %d reads found no buffer free; want every read lent", uc.LendsFrames(), ust.RxLent, ust.RxLendShort)
		}
	}
	if st.Copied[0] != 0 {
		t.Errorf("%d of %d bytes copied relaying the client's ops over %s: they go out from the pool's buffers the socket lent", st.Copied[0], st.TotalBytes(0), g.io)
	}
}

// afxdpConns attaches the classifier to user0's veth and opens an AF_XDP
// conn on each of its receive queues for the userspace leg, as the leg
// does (xdp.OpenQueues, one UMEM: the pool).
func afxdpConns(t testing.TB, ns guest.Netns, pl *pool.Pool) ([]roce.PacketConn, *xdp.Program, *pool.Frames) {
	t.Helper()
	p, err := xdp.Load(xdp.Options{Logger: testlog.New(t)})
	check(t, err)
	t.Cleanup(func() { p.Close() })
	mac, err := os.ReadFile("/sys/class/net/" + ns.PeerNetdev + "/address") // rxe1 answers from its netdev's MAC
	check(t, err)
	hw, err := net.ParseMAC(strings.TrimSpace(string(mac)))
	check(t, err)
	frames, err := pl.Frames(4096)
	check(t, err)
	umem := pl.Arena()
	umem = umem[:len(umem)&^4095]
	var conns []roce.PacketConn
	check(t, ns.Do(func() error {
		ifi, err := net.InterfaceByName(ns.Netdev)
		if err != nil {
			return err
		}
		if _, err := p.Attach(ifi.Index); err != nil {
			return err
		}
		n, why, err := xdp.RxQueues(ifi.Index)
		if err != nil {
			return err
		}
		t.Logf("%s: an AF_XDP socket on each queue: %s", ns.Netdev, why)
		cs, err := xdp.OpenQueues(xdp.ConnOptions{Ifindex: ifi.Index, UMEM: umem, Frames: frames, RingSize: 128, LocalAddr: netip.AddrPortFrom(ns.IP, roce.Port),
			Neighbors: xdp.StaticNeighbors{ns.PeerIP: hw}, Program: p, Logger: testlog.New(t)}, n)
		for _, c := range cs {
			conns = append(conns, c)
		}
		return err
	}))
	return conns, p, frames
}

func TestGuestGatewayEveryOpcode(t *testing.T) {
	for _, io := range []string{"udp", "afxdp"} {
		t.Run(io, func(t *testing.T) { exerciseGateway(t, newGatewayOver(t, io)) })
	}
}

// The RoCE side cannot reach the IB fabric except through the gateway: a
// client QP aimed straight at the target never gets an answer.
func TestGuestIBFabricUnreachableDirectly(t *testing.T) {
	guest.RequireKind(t, "rxe")
	ns, ib := guest.UserNetns(t), guest.IB(t)
	c, tg := openApp(t, ns.PeerDevice, ns.PeerIP), openApp(t, ib.PeerDevice, ib.PeerIP)
	// rxe resolves the path when the QP enters RTR: with no way to the IB
	// fabric from rxe1, that is where the direct path ends.
	dgid, err := ibv.ParseGID("::ffff:" + ib.PeerIP.String())
	check(t, err)
	check(t, c.qp.ToInit(ibv.InitParams{Port: 1, Access: ibv.AccessAll}))
	err = c.qp.ToRTR(ibv.RTRParams{PathMTU: ibv.MTU1024, DestQPN: tg.qp.QPN(), RQPSN: 1, MaxDestRdAtomic: 16, MinRNRTimer: 1,
		AH: ibv.AHAttr{IsGlobal: true, Port: 1, GRH: ibv.GRH{DGID: dgid, SGIDIndex: uint8(c.gid.Index), HopLimit: 64}}})
	if err != nil {
		if !errors.Is(err, syscall.ETIMEDOUT) && !errors.Is(err, syscall.ENETUNREACH) && !errors.Is(err, syscall.EHOSTUNREACH) {
			t.Fatalf("a QP aimed straight at the IB fabric: %v, want no path (timed out or unreachable)", err)
		}
		t.Logf("no direct path from %s to %v: %v", ns.PeerDevice, ib.PeerIP, err)
		return
	}
	// Should rxe build the path anyway, nothing answers on it.
	check(t, c.qp.ToRTS(ibv.RTSParams{SQPSN: 1, Timeout: 10, RetryCnt: 1, RNRRetry: 7, MaxRdAtomic: 16}))
	_, err = c.qp.PostSend([]ibv.SendWR{{ID: 1, Op: ibv.OpSend, SGEs: []ibv.SGE{mustSGE(c.mr, 0, 64)}, Flags: ibv.SendSignaled}})
	check(t, err)
	if wc := waitWCs(t, c.cq, 1)[0]; wc.Status != ibv.WCRetryExcErr {
		t.Fatalf("a SEND straight to the IB fabric completed %v, want transport retry counter exceeded", wc.Status)
	}
}

// A bad rkey at the target reaches the client as a remote access error.
func TestGuestGatewayBadRKey(t *testing.T) {
	g := newGateway(t)
	c, tg := g.client, g.target
	_, err := c.qp.PostSend([]ibv.SendWR{{ID: 1, Op: ibv.OpWrite, SGEs: []ibv.SGE{mustSGE(c.mr, 0, 100)}, RemoteAddr: tg.mr.Addr(),
		RKey: tg.mr.RKey() + 1, Flags: ibv.SendSignaled}})
	check(t, err)
	if wc := waitWCs(t, c.cq, 1)[0]; wc.Status != ibv.WCRemAccessErr {
		t.Fatalf("a WRITE with a bad rkey completed %v at the client, want remote access error", wc.Status)
	}
	select {
	case <-g.sess.Done():
	case <-time.After(time.Minute):
		t.Fatal("the session did not end after the far failure")
	}
}

// WRITEs the client posts together, the last with a bad rkey: they cross
// in chunks, often posted together on the far leg, and the target's
// refusal of the last fails it alone. The WRITEs before it completed, at
// the target and so at the client, and their bytes are there.
func TestGuestGatewayBadRKeyAfterWrites(t *testing.T) {
	for _, io := range []string{"udp", "afxdp"} {
		t.Run(io, func(t *testing.T) {
			g := newGatewayOver(t, io)
			c, tg := g.client, g.target
			cm, tm := c.arena.Bytes(), tg.arena.Bytes()
			const size, good = 64 << 10, 3
			fillPattern(cm[:good*size], 5)
			var wrs []ibv.SendWR
			for i := range good {
				wrs = append(wrs, ibv.SendWR{ID: uint64(i), Op: ibv.OpWrite, SGEs: []ibv.SGE{mustSGE(c.mr, i*size, size)},
					RemoteAddr: tg.mr.Addr() + uint64(i*size), RKey: tg.mr.RKey(), Flags: ibv.SendSignaled})
			}
			wrs = append(wrs, ibv.SendWR{ID: good, Op: ibv.OpWrite, SGEs: []ibv.SGE{mustSGE(c.mr, 0, 100)}, RemoteAddr: tg.mr.Addr(),
				RKey: tg.mr.RKey() + 1, Flags: ibv.SendSignaled})
			_, err := c.qp.PostSend(wrs)
			check(t, err)
			for i, wc := range waitWCs(t, c.cq, good+1) {
				want := ibv.WCSuccess
				if i == good {
					want = ibv.WCRemAccessErr
				}
				if wc.ID != uint64(i) || wc.Status != want {
					t.Errorf("client completion %d: WR %d %v, want WR %d %v", i, wc.ID, wc.Status, i, want)
				}
			}
			if !bytes.Equal(tm[:good*size], cm[:good*size]) {
				t.Error("the WRITEs before the refused one did not all land at the target")
			}
			select {
			case <-g.sess.Done():
			case <-time.After(time.Minute):
				t.Fatal("the session did not end after the far failure")
			}
		})
	}
}

// A one-sided operation from the IB side aims at the gateway's own memory:
// it fails at the target with a remote access error and touches nothing.
func TestGuestGatewayRefusesOneSidedFromVerbsSide(t *testing.T) {
	g := newGateway(t)
	tg := g.target
	arena := g.pool.Arena()
	fillPattern(arena, 9)
	before := bytes.Clone(arena)
	_, err := tg.qp.PostSend([]ibv.SendWR{{ID: 1, Op: ibv.OpWrite, SGEs: []ibv.SGE{mustSGE(tg.mr, 0, 4096)}, RemoteAddr: g.vmr.Addr(),
		RKey: g.vmr.RKey(), Flags: ibv.SendSignaled}})
	check(t, err)
	if wc := waitWCs(t, tg.cq, 1)[0]; wc.Status != ibv.WCRemAccessErr {
		t.Fatalf("the target's WRITE into gateway memory completed %v, want remote access error", wc.Status)
	}
	if !bytes.Equal(arena, before) {
		t.Fatal("the target's WRITE changed pool memory")
	}
}

// With 5% loss on the RoCE side (netem on both ends of user0's wire), every
// opcode still crosses.
func TestGuestGatewayWithLoss(t *testing.T) {
	for _, io := range []string{"udp", "afxdp"} {
		t.Run(io, func(t *testing.T) { gatewayWithLoss(t, io) })
	}
}

func gatewayWithLoss(t *testing.T, io string) {
	g := newGatewayOver(t, io)
	ns := guest.UserNetns(t)
	if out, err := exec.Command("/usr/sbin/modprobe", "sch_netem").CombinedOutput(); err != nil {
		t.Fatalf("modprobe sch_netem: %v\n%s", err, out)
	}
	tc := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("/usr/sbin/tc", args...).CombinedOutput(); err != nil {
			t.Fatalf("tc %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	tc("qdisc", "add", "dev", "vuser0", "root", "netem", "loss", "5%")
	t.Cleanup(func() { _ = exec.Command("/usr/sbin/tc", "qdisc", "del", "dev", "vuser0", "root").Run() })
	check(t, ns.Do(func() error {
		tc("qdisc", "add", "dev", ns.Netdev, "root", "netem", "loss", "5%")
		return nil
	}))
	t.Cleanup(func() {
		_ = ns.Do(func() error { return exec.Command("/usr/sbin/tc", "qdisc", "del", "dev", ns.Netdev, "root").Run() })
	})
	// A round is some 80 packets each way: at 5% loss, one in sixty
	// rounds loses none toward the gateway, and proves nothing. Rounds
	// go on until netem dropped something there, five at most.
	var out []byte
	for round := 1; ; round++ {
		exerciseGateway(t, g)
		var err error
		out, err = exec.Command("/usr/sbin/tc", "-s", "qdisc", "show", "dev", "vuser0").CombinedOutput()
		check(t, err)
		if strings.Contains(string(out), "dropped") && !strings.Contains(string(out), "dropped 0,") {
			t.Logf("netem dropped packets on vuser0 within %d rounds", round)
			return
		}
		if round == 5 {
			break
		}
	}
	t.Errorf("netem dropped nothing on vuser0 in 5 rounds: the test proved nothing\n%s", out)
}
