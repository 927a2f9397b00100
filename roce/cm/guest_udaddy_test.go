package cm_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rbridge/rbridge/integration/guest"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/cm"
	"github.com/rbridge/rbridge/roce/transport"
)

// udaddy (rdma-core's librdmacm/examples/udaddy.c) in rdma_cm's UDP port
// space, port 7174 (fixed in udaddy): the client resolves the server with
// a SIDR_REQ, then SENDs -C datagrams of -S bytes WITH_IMM carrying its
// own QPN; the server answers each client with as many datagrams, to the
// QPN in the immediate data and an address handle made from the first
// datagram's GRH, with its own Q_Key. Both ends use RDMA_UDP_QKEY.
const udaddyPort = 7174

// udEnd is a UD QP of the transport with count receives of size bytes
// posted from the node's memory.
type udEnd struct {
	qp       *transport.QP
	scq, rcq *transport.CQ
}

func newUDEnd(t *testing.T, nd *node, count, size int) *udEnd {
	t.Helper()
	e := &udEnd{scq: transport.NewCQ(64), rcq: transport.NewCQ(64)}
	var err error
	e.qp, err = nd.dev.CreateQP(nd.pd, transport.QPInitAttr{Type: transport.UD, SendCQ: e.scq, RecvCQ: e.rcq})
	check(t, err)
	t.Cleanup(func() { e.qp.Close() })
	for _, a := range []transport.QPAttr{{State: transport.StateInit, QKey: cm.RDMAUDPQKey}, {State: transport.StateRTR}, {State: transport.StateRTS}} {
		check(t, e.qp.Modify(a))
	}
	for i := range count {
		check(t, e.qp.PostRecv(transport.RecvWR{ID: uint64(i), Local: transport.SGE{MR: nd.mr, Offset: 1024 * i, Length: size}}))
	}
	return e
}

// sendUD sends count datagrams of size bytes (a recognizable pattern) to
// qpn at ip, with imm as their immediate data.
func (e *udEnd) sendUD(t *testing.T, nd *node, ip netip.Addr, qpn, qkey uint32, imm uint32, count, size int) {
	t.Helper()
	const off = 32768
	for i := range size {
		nd.mem[off+i] = byte('a' + i%26)
	}
	for i := range count {
		check(t, e.qp.PostSend(transport.SendWR{ID: uint64(i), Opcode: transport.OpSendWithImm, Imm: imm, Signaled: true,
			Local: transport.SGE{MR: nd.mr, Offset: off, Length: size},
			UD:    &transport.UDDest{Addr: netip.AddrPortFrom(ip, roce.Port), QPN: qpn, QKey: qkey}}))
		waitGuestWC(t, e.scq)
	}
}

func runUdaddy(t *testing.T, ctx context.Context, args ...string) (*exec.Cmd, *bytes.Buffer, <-chan error) {
	t.Helper()
	udaddy, err := exec.LookPath("udaddy")
	if err != nil {
		t.Fatalf("udaddy is part of the guest image: %v", err)
	}
	cmd := exec.CommandContext(ctx, udaddy, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	check(t, cmd.Start())
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	return cmd, &out, waited
}

// TestGuestUdaddyClient: the unmodified udaddy client on rxe1 resolves a
// UD service of the transport's CM (SIDR) and exchanges datagrams with it:
// its datagrams reach the QP the SIDR_REP named only if the QPN and Q_Key
// were right (the transport drops a wrong Q_Key), and the replies sent to
// the source QPN and address they came from reach udaddy, which exits 0
// after receiving all of them.
func TestGuestUdaddyClient(t *testing.T) {
	guest.RequireKind(t, "rxe")
	ns := guest.UserNetns(t)
	s := newGuestServer(t, ns)
	const count, size = 5, 100
	l, err := s.cm.ListenUD(udaddyPort, 1)
	check(t, err)
	defer l.Close()
	e := newUDEnd(t, s.node, count, 1024)

	ctx := guestCtx(t)
	_, out, waited := runUdaddy(t, ctx, "-s", ns.IP.String(), "-b", ns.PeerIP.String(), "-C", fmt.Sprint(count), "-S", fmt.Sprint(size))
	fail := func(format string, args ...any) {
		t.Helper()
		select {
		case err := <-waited:
			t.Logf("udaddy (exit %v) output:\n%s", err, out)
		case <-time.After(5 * time.Second):
			t.Logf("udaddy output so far:\n%s", out)
		}
		t.Fatalf(format, args...)
	}

	req, err := l.Next(ctx)
	if err != nil {
		fail("no SIDR_REQ from udaddy: %v", err)
	}
	t.Logf("the kernel's SIDR_REQ: %x", req.MAD)
	switch {
	case !req.HasIPCM || req.IPCM.Src != ns.PeerIP || req.IPCM.Dst != ns.IP || req.Remote != ns.PeerIP:
		fail("SIDR_REQ from %v, IP CM header %+v (present %v), want %v -> %v", req.Remote, req.IPCM, req.HasIPCM, ns.PeerIP, ns.IP)
	case req.SIDRREQ.ServiceID != cm.ServiceID(cm.PortSpaceUDP, udaddyPort) || req.SIDRREQ.PKey != roce.DefaultPKey:
		fail("SIDR_REQ service ID %#x P_Key %#x", req.SIDRREQ.ServiceID, req.SIDRREQ.PKey)
	}
	check(t, req.Accept(cm.SIDRAcceptOptions{QP: e.qp}))

	// udaddy's datagrams: count of size bytes, WITH_IMM its QPN.
	var first transport.WC
	for i := range count {
		wc := waitGuestWC(t, e.rcq)
		if wc.ByteLen != size || !wc.HasImm || wc.Imm != wc.SrcQPN || wc.Src.Addr() != ns.PeerIP {
			fail("datagram %d from udaddy: %+v, want %d bytes with its QPN as immediate data from %v", i, wc, size, ns.PeerIP)
		}
		if i == 0 {
			first = wc
		}
	}
	t.Logf("%d datagrams of %d bytes from udaddy's QP %#x at %v to the transport's QP %#x", count, size, first.SrcQPN, first.Src, e.qp.QPN())
	// The replies, to where they came from, with the Q_Key udaddy's QP has.
	e.sendUD(t, s.node, first.Src.Addr(), first.SrcQPN, cm.RDMAUDPQKey, e.qp.QPN(), count, size)

	select {
	case err = <-waited:
	case <-ctx.Done():
		err = errors.New("still running after the replies")
	}
	t.Logf("udaddy client output:\n%s", out)
	if err != nil {
		t.Fatalf("udaddy client: %v", err)
	}
	if !strings.Contains(out.String(), "data transfers complete") {
		t.Errorf("udaddy did not complete its data transfers")
	}
	if st := s.cm.Stats().Snapshot(); st.Rejects != 0 || st.RxMalformed != 0 {
		t.Errorf("CM stats %+v", st)
	}
	if d := s.dev.Stats().UDDropped.Load(); d != 0 {
		t.Errorf("%d datagrams dropped by the transport (a wrong Q_Key, QPN or no receive)", d)
	}
	t.Logf("CM stats: %+v", s.cm.Stats().Snapshot())
}

// TestGuestUdaddyServer: the transport's CM resolves the unmodified udaddy
// server on rxe1 (SIDR_REQ to the kernel's CM; its rdma_accept answers),
// gets its QP's number and rdma_cm's Q_Key, and sends it datagrams with
// the transport QP's number as immediate data; udaddy answers every one
// of them to that QPN, and exits 0.
func TestGuestUdaddyServer(t *testing.T) {
	guest.RequireKind(t, "rxe")
	ns := guest.UserNetns(t)
	s := newGuestServer(t, ns)
	const count, size = 5, 100
	e := newUDEnd(t, s.node, count, 1024)

	ctx := guestCtx(t)
	cmd, out, waited := runUdaddy(t, ctx, "-b", ns.PeerIP.String(), "-C", fmt.Sprint(count), "-S", fmt.Sprint(size))
	defer cmd.Process.Kill()
	to := netip.AddrPortFrom(ns.PeerIP, udaddyPort)
	var svc *cm.UDService
	var err error
	for attempt := 1; ; attempt++ {
		// udaddy may not listen yet: the kernel's CM then answers
		// "service ID not supported".
		svc, err = s.cm.ResolveUD(ctx, to, cm.ResolveOptions{PrivateData: []byte("rbridge")})
		if err == nil {
			break
		}
		if !errors.Is(err, &cm.SIDRError{Status: cm.SIDRUnsupported}) || attempt == 100 {
			t.Logf("udaddy output:\n%s", out)
			t.Fatalf("resolve udaddy at %v (attempt %d): %v", to, attempt, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("resolved %v: QPN %#x, Q_Key %#x, service %#x", svc.Addr, svc.QPN, svc.QKey, svc.ServiceID)
	t.Logf("the kernel's SIDR_REP: %x", svc.MAD)
	if svc.QKey != cm.RDMAUDPQKey || svc.QPN < 2 || svc.QPN > 0xffffff {
		t.Fatalf("udaddy's service: QPN %#x Q_Key %#x, want a QP and rdma_cm's Q_Key %#x", svc.QPN, svc.QKey, cm.RDMAUDPQKey)
	}
	e.sendUD(t, s.node, ns.PeerIP, svc.QPN, svc.QKey, e.qp.QPN(), count, size)
	for i := range count {
		wc := waitGuestWC(t, e.rcq)
		if wc.ByteLen != size || wc.SrcQPN != svc.QPN || wc.Src.Addr() != ns.PeerIP {
			t.Fatalf("reply %d from udaddy: %+v, want %d bytes from QP %#x at %v", i, wc, size, svc.QPN, ns.PeerIP)
		}
	}
	t.Logf("%d replies of %d bytes from udaddy's QP %#x", count, size, svc.QPN)
	select {
	case err = <-waited:
	case <-ctx.Done():
		err = errors.New("still running after its replies")
	}
	t.Logf("udaddy server output:\n%s", out)
	if err != nil {
		t.Fatalf("udaddy server: %v", err)
	}
	if !strings.Contains(out.String(), "data transfers complete") {
		t.Errorf("udaddy did not complete its data transfers")
	}
	if d := s.dev.Stats().UDDropped.Load(); d != 0 {
		t.Errorf("%d datagrams dropped by the transport", d)
	}
	t.Logf("CM stats: %+v", s.cm.Stats().Snapshot())
}
