package bridge_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge/pool"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/rbridge/rbridge/bridge"
	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/bridge/leg"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/cm"
	"github.com/rbridge/rbridge/roce/transport"
)

// udConfig is a gateway of two userspace legs on loopback with a UD route
// from leg a's port 7174 to the target's on leg b (whose path MTU is 1024,
// a's 4096).
func udConfig(t testing.TB) *config.Config {
	t.Helper()
	return udConfigWith(t, "")
}

// udConfigWith is udConfig with the route's extra keys (lines of its own,
// indented as the route's).
func udConfigWith(t testing.TB, routeKeys string) *config.Config {
	t.Helper()
	y := `legs:
  - {name: a, kind: userspace, interface: lo, ip: 127.0.10.1, io: udp}
  - {name: b, kind: userspace, interface: lo, ip: 127.0.10.2, io: udp, mtu: 1024}
routes:
  - name: u
    ud: true
    listen: {leg: a, addr: "127.0.10.1:7174"}
    target: {leg: b, addr: "127.0.10.4:7174"}
` + routeKeys
	c, err := config.Parse("gw.yaml", []byte(strings.ReplaceAll(y, "127.0.10.", loNet)))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// udTarget has target answer every SIDR_REQ to its port 7174 with a UD
// QP of n receives (udQP), until tb ends; tcq is the QP's receive CQ.
func udTarget(tb testing.TB, target *cmApp, n int) (tqp *transport.QP, tcq *transport.CQ) {
	tb.Helper()
	ln, err := target.cm.ListenUD(7174, 4)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	tqp, tcq = target.udQP(tb, n)
	go func() {
		for {
			req, err := ln.Next(context.Background())
			if err != nil {
				return
			}
			_ = req.Accept(cm.SIDRAcceptOptions{QP: tqp})
		}
	}()
	return tqp, tcq
}

// udQP makes a UD QP of the app with rdma_cm's Q_Key and n receives of
// 4 KiB posted at the start of its memory.
func (a *cmApp) udQP(t testing.TB, n int) (*transport.QP, *transport.CQ) {
	t.Helper()
	rcq := transport.NewCQ(256)
	qp, err := a.dev.CreateQP(a.pd, transport.QPInitAttr{Type: transport.UD, SendCQ: a.cq, RecvCQ: rcq})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qp.Close() })
	for _, st := range []transport.QPAttr{{State: transport.StateInit, QKey: cm.RDMAUDPQKey}, {State: transport.StateRTR}, {State: transport.StateRTS}} {
		if err := qp.Modify(st); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		if err := qp.PostRecv(transport.RecvWR{ID: uint64(i), Local: transport.SGE{MR: a.mr, Offset: 4096 * i, Length: 4096}}); err != nil {
			t.Fatal(err)
		}
	}
	return qp, rcq
}

// sendUD sends size bytes filled with fill from offset 512 KiB of the
// app's memory.
func (a *cmApp) sendUD(t testing.TB, qp *transport.QP, to netip.Addr, qpn uint32, imm uint32, size int, fill byte) {
	t.Helper()
	const off = 512 << 10
	copy(a.mem[off:off+size], bytes.Repeat([]byte{fill}, size))
	if err := qp.PostSend(transport.SendWR{Opcode: transport.OpSendWithImm, Imm: imm, Local: transport.SGE{MR: a.mr, Offset: off, Length: size},
		UD: &transport.UDDest{Addr: netip.AddrPortFrom(to, roce.Port), QPN: qpn, QKey: cm.RDMAUDPQKey}}); err != nil {
		t.Fatal(err)
	}
}

func waitUD(t *testing.T, cq *transport.CQ) transport.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wcs [1]transport.WC
	if _, err := cq.PollWait(ctx, wcs[:]); err != nil {
		t.Fatalf("no datagram: %v", err)
	}
	return wcs[0]
}

func noUD(t *testing.T, cq *transport.CQ, what string) {
	t.Helper()
	time.Sleep(100 * time.Millisecond)
	var wcs [1]transport.WC
	if cq.Poll(wcs[:]) != 0 {
		t.Errorf("%s: a datagram arrived: %+v", what, wcs[0])
	}
}

// TestGatewayUD: a UD client resolves the route's listen address (SIDR)
// and gets the gateway's QP; the gateway resolved the target first, with
// the client's private data, and hands back the target's. Datagrams cross
// both ways with their immediate data (a QPN there is translated to the
// gateway's QP on the far side, as udaddy needs to answer), each side
// sending the Q_Key its own resolution named; one too long for the
// target's leg and one from a stranger are dropped and counted.
func TestGatewayUD(t *testing.T) {
	client, target, stranger := newCMApp(t, lo("3")), newCMApp(t, lo("4")), newCMApp(t, lo("5"))
	ln, err := target.cm.ListenUD(7174, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tqp, tcq := target.udQP(t, 16)
	served := make(chan error, 1)
	go func() {
		req, err := ln.Next(context.Background())
		if err == nil {
			if !bytes.HasPrefix(req.PrivateData, []byte("hello target")) || req.Remote != netip.MustParseAddr(lo("2")) {
				err = fmt.Errorf("the target's SIDR_REQ: from %v, private data %q", req.Remote, req.PrivateData[:16])
			}
			err = errors.Join(err, req.Accept(cm.SIDRAcceptOptions{QP: tqp, PrivateData: []byte("hello client")}))
		}
		served <- err
	}()
	g := startGatewayWith(t, udConfig(t), bridge.GatewayOptions{})
	gwA, gwB := netip.MustParseAddr(lo("1")), netip.MustParseAddr(lo("2"))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	svc, err := client.cm.ResolveUD(ctx, netip.AddrPortFrom(gwA, 7174), cm.ResolveOptions{PrivateData: []byte("hello target")})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if svc.QKey != cm.RDMAUDPQKey || !bytes.HasPrefix(svc.PrivateData, []byte("hello client")) {
		t.Fatalf("resolved %+v: want the gateway's QP, rdma_cm's Q_Key and the target's private data", svc)
	}
	cqp, ccq := client.udQP(t, 16)

	const n = 5
	var gwTargetQPN uint32
	for i := range n {
		// The client's QPN as immediate data, as udaddy sends.
		client.sendUD(t, cqp, gwA, svc.QPN, cqp.QPN(), 100+i, byte('a'+i))
		wc := waitUD(t, tcq)
		if wc.Status != transport.StatusSuccess || wc.ByteLen != 100+i || wc.Src.Addr() != gwB || !wc.HasImm || wc.Imm != wc.SrcQPN ||
			!bytes.Equal(target.mem[4096*int(wc.ID):][:wc.ByteLen], bytes.Repeat([]byte{byte('a' + i)}, 100+i)) {
			t.Fatalf("datagram %d at the target: %+v, want %d bytes from the gateway's %v with its QPN as immediate data", i, wc, 100+i, gwB)
		}
		gwTargetQPN = wc.SrcQPN
		// The target answers where it came from, with its own QPN, and
		// with plain immediate data.
		imm := tqp.QPN()
		if i%2 == 1 {
			imm = 0xfeed0000 + uint32(i)
		}
		target.sendUD(t, tqp, wc.Src.Addr(), wc.SrcQPN, imm, 200+i, byte('A'+i))
		wc = waitUD(t, ccq)
		want := svc.QPN // the target's QPN became the gateway's
		if i%2 == 1 {
			want = 0xfeed0000 + uint32(i)
		}
		if wc.Status != transport.StatusSuccess || wc.ByteLen != 200+i || wc.Src.Addr() != gwA || wc.SrcQPN != svc.QPN || wc.Imm != want ||
			!bytes.Equal(client.mem[4096*int(wc.ID):][:wc.ByteLen], bytes.Repeat([]byte{byte('A' + i)}, 200+i)) {
			t.Fatalf("reply %d at the client: %+v, want %d bytes from the gateway's QP %#x at %v, immediate %#x", i, wc, 200+i, svc.QPN, gwA, want)
		}
	}
	// Longer than leg b's MTU (1024): dropped, not truncated.
	client.sendUD(t, cqp, gwA, svc.QPN, 7, 2000, 'x')
	noUD(t, tcq, "a datagram longer than the target leg's MTU")
	// A stranger that learned the gateway's QPN: not the client.
	sqp, _ := stranger.udQP(t, 1)
	stranger.sendUD(t, sqp, gwA, svc.QPN, 7, 10, 'y')
	noUD(t, tcq, "a stranger's datagram")
	// The target's QP sends to the gateway's from elsewhere: the client's
	// own QP answering the gateway's target side is not the target.
	client.sendUD(t, cqp, gwB, gwTargetQPN, 7, 10, 'z')
	noUD(t, ccq, "a datagram to the target side from another address")

	st := g.UDStats("u")
	if st == nil {
		t.Fatal("no UD stats for route u")
	}
	want := bridge.UDStatsSnapshot{Resolved: 1, Datagrams: [2]uint64{n, n}, ImmQPNRewritten: [2]uint64{n, 3},
		DropTooLong: [2]uint64{1, 0}, DropUnknownPeer: [2]uint64{1, 1}}
	for i := range n {
		want.Bytes[0] += uint64(100 + i)
		want.Bytes[1] += uint64(200 + i)
	}
	if d := cmp.Diff(want, *st); d != "" {
		t.Errorf("UD stats (-want +got):\n%s", d)
	}
	// The same in /metrics, linted, and described as collected.
	m, b := scrape(t, startAdmin(t, g))
	promtool(t, b)
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(bridge.NewCollector(g)); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Gather(); err != nil {
		t.Errorf("pedantic gather: %v", err)
	}
	for name, v := range map[string]float64{
		`rbridge_route_ud_resolved_total{route="u"}`:                                           1,
		`rbridge_route_ud_datagrams_total{direction="to_target",route="u"}`:                    n,
		`rbridge_route_ud_datagrams_total{direction="to_client",route="u"}`:                    n,
		`rbridge_route_ud_payload_bytes_total{direction="to_client",route="u"}`:                float64(want.Bytes[1]),
		`rbridge_route_ud_imm_qpn_rewritten_total{direction="to_client",route="u"}`:            3,
		`rbridge_route_ud_dropped_total{cause="too_long",direction="to_target",route="u"}`:     1,
		`rbridge_route_ud_dropped_total{cause="unknown_peer",direction="to_client",route="u"}`: 1,
		`rbridge_route_ud_dropped_total{cause="no_receive",direction="to_target",route="u"}`:   0,
	} {
		if got, ok := m[name]; !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, v)
		}
	}
	clients := g.Status().UDClients
	if len(clients) != 1 || clients[0].ClientQPN != cqp.QPN() || clients[0].TargetQPN != tqp.QPN() || clients[0].Route != "u" {
		t.Errorf("status UD clients %+v, want the one client's QP %#x and the target's %#x", clients, cqp.QPN(), tqp.QPN())
	}
}

// TestGatewayUDBurst: a client sends three windows' worth of datagrams
// back to back, more than the gateway's receive queue holds and than it
// keeps sends outstanding: each is counted once, relayed or dropped for
// want of a receive (UD has no flow control: a burst may outrun the
// relay), the target gets every one relayed, in order, and once the pair
// is idle it holds its receive queues' buffers only.
func TestGatewayUDBurst(t *testing.T) {
	client, target := newCMApp(t, lo("3")), newCMApp(t, lo("4"))
	const n = 3 * leg.UDSendWindow
	_, tcq := udTarget(t, target, n)
	g := startGatewayWith(t, udConfig(t), bridge.GatewayOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gwA := netip.MustParseAddr(lo("1"))
	svc, err := client.cm.ResolveUD(ctx, netip.AddrPortFrom(gwA, 7174), cm.ResolveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cqp, _ := client.udQP(t, 1)
	for i := range n {
		// Immediate data above every QPN: the route rewrites one that
		// names a QPN of the session's.
		client.sendUD(t, cqp, gwA, svc.QPN, 1<<24+uint32(i), 100, 'b')
	}
	var st *bridge.UDStatsSnapshot
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		st = g.UDStats("u")
		if st.Datagrams[0]+st.DropNoReceive[0] == n || time.Now().After(deadline) {
			break
		}
	}
	drops := 0
	for _, d := range st.Drops() {
		drops += int(d.N[0] + d.N[1])
	}
	if st.Datagrams[0] == 0 || st.Datagrams[0]+st.DropNoReceive[0] != n || drops != int(st.DropNoReceive[0]) || st.Bytes[0] != 100*st.Datagrams[0] {
		t.Fatalf("UD stats %+v after a burst of %d: want each relayed or dropped for no receive, and nothing else", st, n)
	}
	var wcs [n]transport.WC
	got, last := 0, -1
	for got < int(st.Datagrams[0]) {
		k, err := tcq.PollWait(ctx, wcs[:])
		if err != nil {
			t.Fatalf("%d datagrams at the target, %d relayed: %v", got, st.Datagrams[0], err)
		}
		for _, wc := range wcs[:k] {
			if wc.Status != transport.StatusSuccess || wc.ByteLen != 100 || int(wc.Imm) <= last {
				t.Fatalf("datagram %d at the target %+v, after immediate data %d", got, wc, last)
			}
			last = int(wc.Imm)
		}
		got += k
	}
	noUD(t, tcq, "a datagram more than the gateway relayed")
	// A packet's frame goes back to the pool once its receive loop is done
	// with it, which may be just after the target saw the datagram.
	waitState(t, g, "the pair idle holding just its two receive queues' buffers", func(s bridge.GatewayState) bool {
		return s.PoolInUse == 2*leg.UDRecvDepth
	})
	t.Logf("%d of %d relayed, %d dropped for no receive", st.Datagrams[0], n, st.DropNoReceive[0])
}

// TestGatewayUDRefused: a target that refuses gives the client its
// status and private data; a port nothing listens on, "not supported".
func TestGatewayUDRefused(t *testing.T) {
	client, target := newCMApp(t, lo("3")), newCMApp(t, lo("4"))
	g := startGatewayWith(t, udConfig(t), bridge.GatewayOptions{})
	to := netip.AddrPortFrom(netip.MustParseAddr(lo("1")), 7174)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := client.cm.ResolveUD(ctx, to, cm.ResolveOptions{}); !errors.Is(err, &cm.SIDRError{Status: cm.SIDRUnsupported}) {
		t.Errorf("resolve through the gateway to a port nothing listens on: %v, want SIDR status 1", err)
	}
	ln, err := target.cm.ListenUD(7174, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if req, err := ln.Next(ctx); err == nil {
			_ = req.Reject(cm.SIDRReject, []byte("not you"))
		}
	}()
	_, err = client.cm.ResolveUD(ctx, to, cm.ResolveOptions{})
	var se *cm.SIDRError
	if !errors.As(err, &se) || se.Status != cm.SIDRReject || !bytes.HasPrefix(se.PrivateData, []byte("not you")) {
		t.Errorf("resolve through the gateway to a target that rejects: %v, want status 2 with its private data", err)
	}
	if st := g.UDStats("u"); st == nil || st.Refused != 2 || st.Resolved != 0 {
		t.Errorf("UD stats %+v, want 2 refused", st)
	}
	// The target's refusal reached the client through the gateway's
	// receive loop, which lets the frame that carried it go just after.
	waitState(t, g, "each leg's QP 1 only and no pool buffer held after refusals", func(s bridge.GatewayState) bool {
		return s.UserspaceQPs == 2 && s.PoolInUse == 0
	})
}

// TestGatewayUDPoolEmpty: a gateway with a tiny pool whose last buffers
// are taken: a UD datagram that arrives finds no buffer to keep the
// receive queue full, and is dropped and counted as pool empty, each way,
// with no other counter moving; once buffers are back, datagrams cross
// both ways again, and the pair holds just its receive queues' buffers.
func TestGatewayUDPoolEmpty(t *testing.T) {
	client, target := newCMApp(t, lo("3")), newCMApp(t, lo("4"))
	tqp, tcq := udTarget(t, target, 16)
	const bufs = 72 // the pair's two receive queues take 64
	g := startGatewayWith(t, udConfig(t), bridge.GatewayOptions{Pool: pool.Options{Size: bufs * 4096, Classes: []int{4096}}})
	free := func() int { return g.Pool().Stats()[0].Free }
	if st := g.Pool().Stats(); len(st) != 1 || st[0].Total != bufs || st[0].Free != bufs {
		t.Fatalf("pool %+v, want one class of %d free 4 KiB buffers", st, bufs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gwA := netip.MustParseAddr(lo("1"))
	svc, err := client.cm.ResolveUD(ctx, netip.AddrPortFrom(gwA, 7174), cm.ResolveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := free(); got != bufs-64 {
		t.Fatalf("%d buffers free with one UD client, want %d: its pair's receive queues hold 2 x 32", got, bufs-64)
	}
	var held []*pool.Buf
	hold := func() {
		t.Helper()
		// What a datagram just relayed holds comes back once its send
		// completed: wait for it, or it would be a buffer for the next.
		for deadline := time.Now().Add(5 * time.Second); free() != bufs-64; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d buffers free, want %d once the gateway is idle", free(), bufs-64)
			}
		}
		for {
			b, err := g.Pool().Get(4096)
			if errors.Is(err, pool.ErrExhausted) {
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, b)
		}
	}
	release := func() {
		for _, b := range held {
			b.Release()
		}
		held = held[:0]
	}
	defer release()
	cqp, ccq := client.udQP(t, 16)

	const k = 5
	hold()
	for i := range k {
		client.sendUD(t, cqp, gwA, svc.QPN, 0, 100, byte('a'+i))
	}
	noUD(t, tcq, "a datagram through a gateway whose pool is empty")
	release()
	// Buffers back: the client's datagram crosses, and the target's answer.
	client.sendUD(t, cqp, gwA, svc.QPN, 0, 100, 'c')
	wc := waitUD(t, tcq)
	if wc.Status != transport.StatusSuccess || wc.ByteLen != 100 || target.mem[4096*int(wc.ID)] != 'c' {
		t.Fatalf("the datagram after the pool emptied: %+v", wc)
	}
	gwTarget, gwTargetQPN := wc.Src.Addr(), wc.SrcQPN // the gateway's target side
	hold()
	for i := range k {
		target.sendUD(t, tqp, gwTarget, gwTargetQPN, 0, 200, byte('A'+i))
	}
	noUD(t, ccq, "an answer through a gateway whose pool is empty")
	release()
	target.sendUD(t, tqp, gwTarget, gwTargetQPN, 0, 200, 'C')
	if wc := waitUD(t, ccq); wc.Status != transport.StatusSuccess || wc.ByteLen != 200 || client.mem[4096*int(wc.ID)] != 'C' {
		t.Fatalf("the answer after the pool emptied: %+v", wc)
	}

	// A datagram is counted once its send returned, which may be after
	// the far side received it.
	want := bridge.UDStatsSnapshot{Resolved: 1, Datagrams: [2]uint64{1, 1}, Bytes: [2]uint64{100, 200}, DropPoolEmpty: [2]uint64{k, k}}
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(time.Millisecond) {
		d := cmp.Diff(want, *g.UDStats("u"))
		if d == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("UD stats (-want +got):\n%s", d)
			break
		}
	}
	if st := g.Pool().Stats()[0]; st.Free != bufs-64 || st.Exhausted < 2*k || st.Overreleased != 0 {
		t.Errorf("pool after the drops %+v: want %d free (each drop reposted its buffer), at least %d times exhausted, none over-released", st, bufs-64, 2*k)
	}
	m, _ := scrape(t, startAdmin(t, g))
	for _, dir := range []string{"to_target", "to_client"} {
		if name := `rbridge_route_ud_dropped_total{cause="pool_empty",direction="` + dir + `",route="u"}`; m[name] != k {
			t.Errorf("%s = %v, want %d", name, m[name], k)
		}
	}
}

// TestGatewayUDRate: two clients of one UD route send far faster than the
// route's rate limit: together they get no more across than its burst and
// its rate over the time they took (the limit is the route's, not each
// client's: a limit per client would let each its own burst through), the
// others dropped and counted under cause "rate". A reload that changes
// only the rate leaves the route and its clients running under the new
// one at once. Without a limit every datagram crosses.
func TestGatewayUDRate(t *testing.T) {
	const (
		n     = 25               // datagrams each client sends
		every = time.Millisecond // apart: 2000 a second from the two
		limit = 10               // a second
		burst = 2                // at once
		keys  = "    rate: {packets: 10, burst_packets: 2}\n"
	)
	for _, tc := range []struct {
		name, keys string
	}{{"limited", keys}, {"unlimited", ""}} {
		t.Run(tc.name, func(t *testing.T) {
			clients := []*cmApp{newCMApp(t, lo("3")), newCMApp(t, lo("5"))}
			target := newCMApp(t, lo("4"))
			tqp, tcq := udTarget(t, target, 2*n+8)
			g := startGatewayWith(t, udConfigWith(t, tc.keys), bridge.GatewayOptions{})
			gwA := netip.MustParseAddr(lo("1"))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var svcs []*cm.UDService
			var qps []*transport.QP
			for _, c := range clients {
				svc, err := c.cm.ResolveUD(ctx, netip.AddrPortFrom(gwA, 7174), cm.ResolveOptions{})
				if err != nil {
					t.Fatal(err)
				}
				qp, _ := c.udQP(t, 1)
				svcs, qps = append(svcs, svc), append(qps, qp)
			}
			// handled is what the gateway did with the datagrams toward the
			// target (relayed or dropped, whatever the cause).
			handled := func(st *bridge.UDStatsSnapshot) uint64 {
				return st.Datagrams[0] + st.DropRate[0] + st.DropNoReceive[0] + st.DropPoolEmpty[0] + st.DropSendFailed[0] + st.DropTooLong[0] + st.DropUnknownPeer[0]
			}
			flood := func(per int, pause time.Duration) (crossed int, st *bridge.UDStatsSnapshot, elapsed time.Duration) {
				t.Helper()
				before := handled(g.UDStats("u"))
				start := time.Now()
				for range per {
					for i, c := range clients {
						c.sendUD(t, qps[i], gwA, svcs[i].QPN, 0, 64, 'r')
					}
					time.Sleep(pause)
				}
				for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
					st = g.UDStats("u")
					if handled(st)-before >= uint64(len(clients)*per) || time.Now().After(deadline) {
						break
					}
				}
				elapsed = time.Since(start)
				// What the target received, by the gateway QP that sent it
				// (one per client).
				bySender := map[uint32]int{}
				var wcs [16]transport.WC
				for idle := 0; idle < 10; {
					k := tcq.Poll(wcs[:])
					if k == 0 {
						idle++
						time.Sleep(20 * time.Millisecond)
						continue
					}
					idle = 0
					for _, wc := range wcs[:k] {
						if wc.Status != transport.StatusSuccess || wc.ByteLen != 64 || target.mem[4096*int(wc.ID)] != 'r' {
							t.Errorf("datagram at the target %+v: want 64 bytes of 'r'", wc)
						}
						bySender[wc.SrcQPN]++
						crossed++
						if err := tqp.PostRecv(transport.RecvWR{ID: wc.ID, Local: transport.SGE{MR: target.mr, Offset: 4096 * int(wc.ID), Length: 4096}}); err != nil {
							t.Fatal(err)
						}
					}
				}
				t.Logf("%d datagrams from %d clients: %d crossed in %v, by the gateway's QP toward the target %v", len(clients)*per, len(clients), crossed, elapsed.Round(time.Millisecond), bySender)
				return crossed, st, elapsed
			}
			crossed, st, elapsed := flood(n, every)
			sent := uint64(len(clients) * n)
			if uint64(crossed) != st.Datagrams[0] {
				t.Errorf("%d datagrams reached the target through the gateway, which counted %d relayed", crossed, st.Datagrams[0])
			}
			if dropped := handled(st) - st.Datagrams[0]; dropped != sent-uint64(crossed) {
				t.Errorf("%d of %d crossed and %d were counted dropped (%+v): want %d", crossed, sent, dropped, *st, sent-uint64(crossed))
			}
			if st.DropRate[1] != 0 {
				t.Errorf("%d dropped for the rate toward the client, which nothing was sent to", st.DropRate[1])
			}
			if tc.keys == "" {
				if uint64(crossed) != sent || st.DropRate[0] != 0 {
					t.Errorf("without a limit %d of %d crossed (stats %+v)", crossed, sent, *st)
				}
				if s := routeStatus(t, g, "u"); s.UD.Rate != nil {
					t.Errorf("status of route u shows a rate %+v without one", s.UD.Rate)
				}
				return
			}
			checkRate(t, g, crossed, burst, limit, elapsed, st.DropRate[0], `rbridge_route_ud_dropped_total{cause="rate",direction="to_target",route="u"}`)
			if s := routeStatus(t, g, "u"); s.UD.Rate == nil || *s.UD.Rate != (config.Rate{Packets: limit, BurstPackets: burst}) {
				t.Errorf("status of route u: rate %+v, want the limit in force", s.UD.Rate)
			}

			// The same file again: nothing changes.
			if res, err := g.Reload(udConfigWith(t, tc.keys)); err != nil || res.RouteRateChanged != nil || !cmp.Equal(res.Unchanged, []string{"u"}) {
				t.Errorf("reload with the same rate: %+v, %v; want route u unchanged, no rate changed", res, err)
			}
			// A higher rate: in force at once for the running clients, the
			// route not restarted (its clients keep their QPs).
			res, err := g.Reload(udConfigWith(t, "    rate: {packets: 1000, burst_packets: 100}\n"))
			if err != nil || !cmp.Equal(res.RouteRateChanged, []string{"u"}) || !cmp.Equal(res.Unchanged, []string{"u"}) {
				t.Fatalf("reload with another rate: %+v, %v; want route u unchanged and its rate changed", res, err)
			}
			if got, want := res.String(), "unchanged u; rate changed of route u"; got != want {
				t.Errorf("reload result %q, want %q", got, want)
			}
			if s := routeStatus(t, g, "u"); s.UD.Clients != 2 || s.UD.Rate == nil || s.UD.Rate.Packets != 1000 {
				t.Errorf("status of route u after the reload: %+v; want its 2 clients and the new rate", s.UD)
			}
			const k = 10 // each: 20 within the new burst of 100
			before := *st
			crossed, st, _ = flood(k, 0)
			if crossed != len(clients)*k || st.DropRate[0] != before.DropRate[0] {
				t.Errorf("after the reload %d of %d crossed, dropped for the rate %d more: want all (stats %+v)", crossed, len(clients)*k, st.DropRate[0]-before.DropRate[0], *st)
			}
		})
	}
}

// routeStatus is the gateway's status of a UD route.
func routeStatus(t *testing.T, g *bridge.Gateway, name string) bridge.RouteStatus {
	t.Helper()
	for _, r := range g.Status().Routes {
		if r.Name == name {
			if r.UD == nil {
				t.Fatalf("status of route %s has no UD part: %+v", name, r)
			}
			return r
		}
	}
	t.Fatalf("no route %s in the status", name)
	return bridge.RouteStatus{}
}
