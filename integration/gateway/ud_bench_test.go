package gateway_test

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/rbridge/rbridge/ibv"
	"github.com/rbridge/rbridge/integration/guest"
)

// BenchmarkGuestUDThroughVsDirect: datagrams of 256 bytes on kernel rxe UD
// QPs, in one run: through `rbridge run` from the RoCE side (rxe1) to the
// IB fabric (rxe3), on a UD route (the client resolved the gateway's
// listen address with SIDR, the gateway the target's) and on a multicast
// group (roce_to_ib); and direct on one fabric with the same QPs' code,
// size, window and polling: rxe2 to rxe3 (the IB fabric: the through
// path's second hop alone) and rxe1 to rxe0 (the RoCE fabric: its sender
// to the other kernel rxe). window is how many datagrams may be sent and
// not yet received: UD has no flow control, and a window no larger than
// any receive queue on the way (the gateway's 32, the receivers' 64)
// keeps every datagram in a buffer. window=1 is one at a time; both
// windows are BenchmarkUDThroughVsDirect's on the host. The through rows report
// x-direct-ib and x-direct-roce: their rate over the median of each direct
// row's rounds in the same run (directRates). Last, as a cross-check, unmodified udaddy direct (rxe2 to
// rxe3) and through (rxe1 to rxe3), an op being one whole udaddy run.
//
// rbridge run is started as in the other tests, but with benchFlags (no
// pool trace, log level info; RBRIDGE_BENCH_PROFILE profiles it); its
// userspace leg is on a UDP socket.
// It runs only when asked: make integration PKG=./integration/gateway
// RUN='^$' GUEST_BENCH=GuestUDThroughVsDirect BASELINE=false.
func BenchmarkGuestUDThroughVsDirect(b *testing.B) {
	d := guest.RequireKind(b, "rxe")
	ns, ib := guest.UserNetns(b), guest.IB(b)
	const size = 256
	group, roceGroup := netip.MustParseAddr("239.192.8.1"), netip.MustParseAddr("239.192.8.2")

	// The receivers: a UD service on each fabric, and a member of each
	// fabric's group.
	ibSvc, roceSvc := listenUD(b, ib.PeerIP), listenUD(b, d.IP)
	ibMember := joinUD(b, ib.PeerIP, group, false)
	roceMember := joinUD(b, d.IP, roceGroup, false)

	cfg := fmt.Sprintf(`admin: {listen: "127.0.0.1:0", control: ""}
legs:
  - {name: roce, kind: userspace, interface: %s, ip: %v, io: udp, netns: %s}
  - {name: ib, kind: verbs, ip: %v, device: %s}
routes:
  - {name: ud-bench, ud: true, listen: {leg: roce, addr: "%v:%d"}, target: {leg: ib, addr: "%v"}}
  - {name: udaddy, ud: true, listen: {leg: roce, addr: "%v:%d"}, target: {leg: ib, addr: "%v:%d"}}
groups:
  - {name: bench, group: %v, roce: roce, ib: ib, direction: roce_to_ib}
`, ns.Netdev, ns.IP, ns.Name, ib.GatewayIP, ib.GatewayDevice, ns.IP, ibSvc.addr.Port(), ibSvc.addr,
		ns.IP, udaddyPort, ib.PeerIP, udaddyPort, group)
	logs, _ := startRbridge(b, "", filepath.Join(b.TempDir(), "gateway.yaml"), cfg, benchFlags(b)...)
	admin := adminAddr(b, logs)

	// The senders. A UD client is answered by a QP of its own on the
	// service's side, made for its request.
	flows := map[string]*udFlow{}
	udFlowTo := func(from netip.Addr, to netip.AddrPort, svc *udService) *udFlow {
		end, dst := resolveUD(b, from, to)
		select {
		case recv := <-svc.ends:
			return &udFlow{from: end, to: recv, dst: dst}
		case err := <-svc.errs:
			b.Fatal(err)
		case <-time.After(30 * time.Second):
			b.Fatalf("the UD service at %v accepted no request for %v's SIDR", svc.addr, to)
		}
		return nil
	}
	flows["ud/through"] = udFlowTo(ns.PeerIP, netip.AddrPortFrom(ns.IP, ibSvc.addr.Port()), ibSvc)
	flows["ud/direct-ib"] = udFlowTo(ib.GatewayIP, ibSvc.addr, ibSvc)
	flows["ud/direct-roce"] = udFlowTo(ns.PeerIP, roceSvc.addr, roceSvc)
	groupFlow := func(from, g netip.Addr, to *udEnd) *udFlow {
		m := joinUD(b, from, g, true)
		return &udFlow{from: m.end, to: to, dst: m.dst}
	}
	flows["group/through"] = groupFlow(ns.PeerIP, group, ibMember.end)
	flows["group/direct-ib"] = groupFlow(ib.GatewayIP, group, ibMember.end)
	flows["group/direct-roce"] = groupFlow(ns.PeerIP, roceGroup, roceMember.end)

	for _, kind := range []string{"ud", "group"} {
		for _, window := range []int{1, 16} {
			rates := directRates{}
			for _, path := range []string{"direct-ib", "direct-roce", "through"} {
				b.Run(fmt.Sprintf("%s/window=%d/%s", kind, window, path), func(b *testing.B) {
					r := flows[kind+"/"+path].run(b, size, window)
					if path != "through" {
						rates.add(path, r)
						return
					}
					for _, direct := range []string{"direct-ib", "direct-roce"} {
						if d := rates.median(direct); d > 0 {
							b.ReportMetric(r/d, "x-"+direct)
						}
					}
				})
			}
		}
	}

	// The cross-check: unmodified udaddy, udaddyCount datagrams each way
	// (its client sends them at once, its server answers them at once:
	// no more than the gateway's receive queues hold), the same server on
	// rxe3, its client direct on rxe2 and through from rxe1. An op is one
	// udaddy pair run, processes, rdma_cm and SIDR included: it is
	// dominated by what is not the datagrams.
	udaddyDirect := directRates{}
	for _, tc := range []struct {
		path   string
		client []string
	}{
		{"direct-ib", []string{"-b", ib.GatewayIP.String(), "-s", ib.PeerIP.String()}},
		{"through", []string{"-b", ns.PeerIP.String(), "-s", ns.IP.String()}},
	} {
		b.Run(fmt.Sprintf("udaddy/C=%d/%s", udaddyCount, tc.path), func(b *testing.B) {
			args := []string{"-C", fmt.Sprint(udaddyCount), "-S", fmt.Sprint(size)}
			for b.Loop() {
				udaddyPair(b, append([]string{"-b", ib.PeerIP.String()}, args...), append(tc.client, args...))
			}
			rate := float64(2*udaddyCount*b.N) / b.Elapsed().Seconds()
			b.ReportMetric(rate, "datagrams/s")
			if tc.path != "through" {
				udaddyDirect.add(tc.path, rate)
			} else if d := udaddyDirect.median("direct-ib"); d > 0 {
				b.ReportMetric(rate/d, "x-direct-ib")
			}
		})
	}

	// Nothing crossed that was not measured, and nothing was dropped.
	st := status(b, admin)
	for _, r := range st.Routes {
		if r.UD != nil && r.Name == "udaddy" {
			b.Logf("route %s: %+v", r.Name, r.UD.Stats)
		}
		if r.UD != nil && r.Name == "ud-bench" {
			b.Logf("route %s: %+v", r.Name, r.UD.Stats)
			if s := r.UD.Stats; s.Datagrams[0] != flows["ud/through"].sent || s.Datagrams[1] != 0 {
				b.Errorf("route %s relayed %v datagrams, want the %d the through rows sent, none back", r.Name, s.Datagrams, flows["ud/through"].sent)
			}
		}
	}
	for _, g := range st.Groups {
		b.Logf("group %s: %+v", g.Name, g.Stats)
		if s := g.Stats; s.Datagrams[0] != flows["group/through"].sent {
			b.Errorf("group %s relayed %v datagrams, want the %d the through rows sent", g.Name, s.Datagrams, flows["group/through"].sent)
		}
	}
}

func check(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

const (
	udaddyCount = 30   // datagrams each way of the udaddy runs
	udSlots     = 64   // receives posted on a receiving end
	udSlot      = 2048 // bytes a receive has: the GRH and a datagram of rxe's 1024-byte MTU
	udSendDepth = 64   // a sending end's send queue
	udGRH       = 40   // the Global Route Header a UD receive starts with
)

// udEnd is a UD QP on an rdma_cm id of the UDP port space on a kernel
// device, with a send and a receive CQ and udSlots receive slots.
type udEnd struct {
	id       *ibv.CMID
	pd       *ibv.PD
	scq, rcq *ibv.CQ
	qp       *ibv.QP
	mr       *ibv.MR
}

// newUDEnd makes id's UD QP (its device known: resolved, or a request's),
// with every receive slot posted when recv. Its cleanups run at the
// benchmark's end (tb is used for nothing else: it may run on any
// goroutine).
func newUDEnd(tb testing.TB, id *ibv.CMID, recv bool) (*udEnd, error) {
	e := &udEnd{id: id}
	dev, err := id.Device()
	if err != nil {
		return nil, err
	}
	if e.pd, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	tb.Cleanup(func() { e.pd.Close() })
	for _, cq := range []**ibv.CQ{&e.scq, &e.rcq} {
		if *cq, err = dev.NewCQ(ibv.CQOptions{Entries: udSlots + udSendDepth}); err != nil {
			return nil, err
		}
		c := *cq
		tb.Cleanup(func() { c.Close() })
	}
	if e.qp, err = id.CreateQP(e.pd, ibv.QPOptions{Type: ibv.QPTypeUD, SendCQ: e.scq, RecvCQ: e.rcq,
		Cap: ibv.QPCap{MaxSendWR: udSendDepth, MaxRecvWR: udSlots, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, err
	}
	tb.Cleanup(func() { e.qp.Close() })
	arena, err := ibv.MapArena(udSlots*udSlot, ibv.ArenaOptions{})
	if err != nil {
		return nil, err
	}
	tb.Cleanup(func() { arena.Close() })
	if e.mr, err = e.pd.RegMR(arena.Bytes(), ibv.AccessLocalWrite); err != nil {
		return nil, err
	}
	if !recv {
		return e, nil
	}
	wrs := make([]ibv.RecvWR, udSlots)
	for i := range wrs {
		sge, err := e.mr.SGE(i*udSlot, udSlot)
		if err != nil {
			return nil, err
		}
		wrs[i] = ibv.RecvWR{ID: uint64(i), SGEs: []ibv.SGE{sge}}
	}
	if _, err := e.qp.PostRecv(wrs); err != nil {
		return nil, fmt.Errorf("post %d receives on UD QP %d: %w", udSlots, e.qp.QPN(), err)
	}
	return e, nil
}

// udDest is where a sending end's datagrams go.
type udDest struct {
	ah        *ibv.AH
	qpn, qkey uint32
}

// udService is a UD service (rdma_cm's UDP port space) on a kernel device:
// each SIDR request is accepted with a UD QP of its own, whose end is sent
// on ends.
type udService struct {
	addr netip.AddrPort
	ends chan *udEnd
	errs chan error
}

// listenUD listens at ip on a port the kernel chooses.
func listenUD(tb testing.TB, ip netip.Addr) *udService {
	tb.Helper()
	ch, err := ibv.NewEventChannel()
	check(tb, err)
	id, err := ch.NewID(ibv.PortSpaceUDP)
	check(tb, err)
	check(tb, id.Bind(netip.AddrPortFrom(ip, 0)))
	check(tb, id.Listen(8))
	s := &udService{addr: id.LocalAddr(), ends: make(chan *udEnd, 4), errs: make(chan error, 4)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			ev, err := ch.Next(context.Background())
			if err != nil {
				return // closed
			}
			if ev.Type != ibv.CMConnectRequest {
				continue
			}
			e, err := newUDEnd(tb, ev.ID, true)
			if err == nil {
				err = ev.ID.Accept(ibv.ConnParam{NoMTUTrailer: true})
			}
			if err != nil {
				_ = ev.ID.Reject(nil)
				s.errs <- fmt.Errorf("UD service %v: accept %v: %w", s.addr, ev.ID.RemoteAddr(), err)
				continue
			}
			s.ends <- e
		}
	}()
	// Registered before the ends' cleanups, so it runs after them.
	tb.Cleanup(func() {
		ch.Close()
		<-done
	})
	return s
}

// resolveUD resolves the UD service at to from the kernel device with
// address from (SIDR, as udaddy's client does).
func resolveUD(tb testing.TB, from netip.Addr, to netip.AddrPort) (*udEnd, udDest) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ch, err := ibv.NewEventChannel()
	check(tb, err)
	tb.Cleanup(func() { ch.Close() })
	id, err := ch.NewID(ibv.PortSpaceUDP)
	check(tb, err)
	check(tb, id.ResolveAddr(from, to, 10*time.Second))
	_, err = ch.Expect(ctx, ibv.CMAddrResolved)
	check(tb, err)
	check(tb, id.ResolveRoute(10*time.Second))
	_, err = ch.Expect(ctx, ibv.CMRouteResolved)
	check(tb, err)
	e, err := newUDEnd(tb, id, false)
	check(tb, err)
	check(tb, id.Connect(ibv.ConnParam{NoMTUTrailer: true}))
	ev, err := ch.Expect(ctx, ibv.CMEstablished)
	if err != nil {
		tb.Fatalf("resolve UD service %v from %v: %v", to, from, err)
	}
	ah, err := e.pd.NewAH(ev.AH)
	check(tb, err)
	tb.Cleanup(func() { ah.Close() })
	return e, udDest{ah: ah, qpn: ev.QPN, qkey: ev.QKey}
}

// udMember is an end joined to a multicast group (send-only, or a full
// member whose receives are posted) and the group as a destination.
type udMember struct {
	end *udEnd
	dst udDest
}

func joinUD(tb testing.TB, from, group netip.Addr, sendOnly bool) udMember {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ch, err := ibv.NewEventChannel()
	check(tb, err)
	tb.Cleanup(func() { ch.Close() })
	id, err := ch.NewID(ibv.PortSpaceUDP)
	check(tb, err)
	check(tb, id.ResolveAddr(from, netip.AddrPortFrom(group, 0), 10*time.Second))
	_, err = ch.Expect(ctx, ibv.CMAddrResolved)
	check(tb, err)
	e, err := newUDEnd(tb, id, !sendOnly)
	check(tb, err)
	check(tb, id.JoinMulticast(group, ibv.JoinOptions{SendOnly: sendOnly}))
	tb.Cleanup(func() { _ = id.LeaveMulticast(group) }) // before the QP closes: an attached QP is not destroyed
	ev, err := ch.Expect(ctx, ibv.CMMulticastJoin)
	if err != nil {
		tb.Fatalf("join %v from %v: %v", group, from, err)
	}
	ah, err := e.pd.NewAH(ev.AH)
	check(tb, err)
	tb.Cleanup(func() { ah.Close() })
	return udMember{end: e, dst: udDest{ah: ah, qpn: ev.QPN, qkey: ev.QKey}}
}

// udFlow is a sending end, where it sends, and the end that receives it.
type udFlow struct {
	from, to *udEnd
	dst      udDest
	sent     uint64 // datagrams sent, every run
}

// run sends b.N datagrams of size bytes, at most window of them sent and
// not yet received, every send signaled; completions are polled, then
// waited for on the completion channel when none is there, as on every
// path. It reports datagrams/s and returns it. A datagram that does not
// arrive within 10 s fails it (UD: a lost one is never resent).
func (f *udFlow) run(b *testing.B, size, window int) float64 {
	sge, err := f.from.mr.SGE(0, size)
	check(b, err)
	for i := range size {
		f.from.mr.Bytes()[i] = byte(i)
	}
	wr := []ibv.SendWR{{Op: ibv.OpSend, Flags: ibv.SendSignaled, SGEs: []ibv.SGE{sge},
		AH: f.dst.ah, RemoteQPN: f.dst.qpn, RemoteQKey: f.dst.qkey}}
	rwcs := make([]ibv.WorkCompletion, udSlots)
	swcs := make([]ibv.WorkCompletion, udSendDepth)
	rwrs := make([]ibv.RecvWR, udSlots)
	rsges := make([]ibv.SGE, udSlots)
	var sent, got, sending int
	// wait returns what cq has, waiting up to 10 s for at least one.
	wait := func(cq *ibv.CQ, wcs []ibv.WorkCompletion, what string) int {
		n, err := cq.Poll(wcs)
		if n == 0 && err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			n, err = cq.Wait(ctx, wcs)
			cancel()
		}
		if err != nil {
			b.Fatalf("%s: %v (%d sent, %d received)", what, err, sent, got)
		}
		for _, wc := range wcs[:n] {
			if err := wc.Err(); err != nil {
				b.Fatalf("%s: %v", what, err)
			}
		}
		return n
	}
	receive := func() {
		n := wait(f.to.rcq, rwcs, "datagram lost")
		for i, wc := range rwcs[:n] {
			if wc.ByteLen != uint32(udGRH+size) {
				b.Fatalf("received %d bytes, want the GRH and %d", wc.ByteLen, size)
			}
			rsges[i], err = f.to.mr.SGE(int(wc.ID)*udSlot, udSlot)
			check(b, err)
			rwrs[i] = ibv.RecvWR{ID: wc.ID, SGEs: rsges[i : i+1]}
		}
		if _, err := f.to.qp.PostRecv(rwrs[:n]); err != nil {
			b.Fatal(err)
		}
		got += n
	}
	reap := func(block bool) {
		if block {
			sending -= wait(f.from.scq, swcs, "send completion")
			return
		}
		n, err := f.from.scq.Poll(swcs)
		check(b, err)
		for _, wc := range swcs[:n] {
			check(b, wc.Err())
		}
		sending -= n
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	cpu := guest.ReadCPUTimes(b)
	for b.Loop() {
		for sent-got >= window {
			receive()
		}
		for sending >= udSendDepth {
			reap(true)
		}
		wr[0].ID = uint64(sent)
		if _, err := f.from.qp.PostSend(wr); err != nil {
			b.Fatal(err)
		}
		sent++
		sending++
		reap(false)
	}
	for got < sent {
		receive()
	}
	for sending > 0 {
		reap(true)
	}
	guest.ReportCPU(b, cpu)
	f.sent += uint64(sent)
	rate := float64(b.N) / b.Elapsed().Seconds()
	b.ReportMetric(rate, "datagrams/s")
	return rate
}
