package cm_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/rbridge/rbridge/ibv"
	"github.com/rbridge/rbridge/integration/guest"
	"github.com/rbridge/rbridge/roce/cm"
	"github.com/rbridge/rbridge/roce/transport"
)

// Guest tests of the active side: the transport in user0 dials an rdma_cm
// listener on the kernel's rxe1 (package ibv: librdmacm and the kernel's IB
// CM).

// kernelListener is an rdma_cm id listening on rxe1's address.
type kernelListener struct {
	ch  *ibv.EventChannel
	lid *ibv.CMID
}

func listenKernel(t *testing.T, ns guest.Netns, port uint16) *kernelListener {
	t.Helper()
	k := &kernelListener{}
	var err error
	k.ch, err = ibv.NewEventChannel()
	check(t, err)
	t.Cleanup(func() { k.ch.Close() })
	k.lid, err = k.ch.NewID(ibv.PortSpaceTCP)
	check(t, err)
	check(t, k.lid.Bind(netip.AddrPortFrom(ns.PeerIP, port)))
	check(t, k.lid.Listen(4))
	return k
}

// accept takes the next connect request, gives its id a QP and memory as
// dialKernel does, and accepts it with the kernel's buffer in the private
// data. It returns the accepted end and the private data the transport
// sent.
func (k *kernelListener) accept(t *testing.T) (*client, []byte) {
	t.Helper()
	ctx := guestCtx(t)
	ev, err := expectEvent(ctx, k.ch, ibv.CMConnectRequest)
	check(t, err)
	c := &client{id: ev.ID}
	t.Cleanup(func() {
		for _, x := range []interface{ Close() error }{c.id, c.mr, c.arena, c.cq, c.pd} {
			if x != nil {
				x.Close()
			}
		}
	})
	c.setup(t)
	check(t, c.id.Accept(ibv.ConnParam{PrivateData: remoteInfo(c.mr.Addr()+32768, c.mr.RKey(), 8192),
		ResponderResources: 4, InitiatorDepth: 4, RNRRetryCount: 7}))
	return c, ev.Param.PrivateData
}

// dialGuest dials the kernel listener on port from the transport, asking
// for path MTU mtu (0: Dial's default), and returns both ends,
// established.
func dialGuest(t *testing.T, ns guest.Netns, s *server, k *kernelListener, port uint16, mtu int) (*client, *cm.Conn) {
	t.Helper()
	qp, err := s.dev.CreateQP(s.pd, transport.QPInitAttr{Type: transport.RC, SendCQ: s.cq, RecvCQ: s.cq})
	check(t, err)
	t.Cleanup(func() { qp.Close() })
	check(t, qp.Modify(transport.QPAttr{State: transport.StateInit}))
	for i := range 8 {
		check(t, qp.PostRecv(transport.RecvWR{ID: uint64(100 + i), Local: transport.SGE{MR: s.mr, Offset: 1024 * i, Length: 1024}}))
	}
	type result struct {
		c   *cm.Conn
		err error
	}
	dialed := make(chan result, 1)
	go func() {
		c, err := s.cm.Dial(guestCtx(t), netip.AddrPortFrom(ns.PeerIP, port),
			cm.DialOptions{QP: qp, PrivateData: remoteInfo(s.mr.Addr()+32768, s.mr.RKey(), 8192), PathMTU: mtu})
		dialed <- result{c, err}
	}()
	kc, got := k.accept(t)
	if a, rkey, n := parseInfo(t, got); a != s.mr.Addr()+32768 || rkey != s.mr.RKey() || n != 8192 {
		t.Fatalf("kernel got the transport's buffer as %#x/%#x/%d", a, rkey, n)
	}
	r := <-dialed
	if r.err != nil {
		t.Fatalf("transport dial: %v", r.err)
	}
	if _, err := expectEvent(guestCtx(t), k.ch, ibv.CMEstablished); err != nil {
		t.Fatalf("kernel after the transport's RTU: %v", err)
	}
	addr, rkey, n := parseInfo(t, r.c.PrivateData())
	if addr != kc.mr.Addr()+32768 || rkey != kc.mr.RKey() || n != 8192 {
		t.Fatalf("transport got the kernel's buffer as %#x/%#x/%d", addr, rkey, n)
	}
	if r.c.RemoteQPN() != kc.qp.QPN() {
		t.Fatalf("transport connected to QP %#x, the kernel's is %#x", r.c.RemoteQPN(), kc.qp.QPN())
	}
	applied := 0
	if len(r.c.PrivateData()) >= 4 {
		if tr := r.c.PrivateData()[len(r.c.PrivateData())-4:]; tr[0] == 'r' && tr[1] == 'b' && tr[2] == 1 {
			applied = 128 << tr[3]
		}
	}
	t.Logf("connected: transport QP %#x -> kernel QP %#x (the REQ's path MTU as the kernel id has it: %v; the MTU the kernel applied, from its REP's trailer: %d)",
		qp.QPN(), kc.qp.QPN(), kc.id.PathMTU(), applied)
	return kc, r.c
}

// TestGuestDialKernel: the transport dials an rdma_cm listener on rxe1,
// both sides SEND, the transport WRITEs and READs the kernel's memory
// (4000 bytes: several packets at the path MTU), and each side in turn
// ends a connection.
func TestGuestDialKernel(t *testing.T) {
	guest.RequireKind(t, "rxe")
	ns := guest.UserNetns(t)
	s := newGuestServer(t, ns)
	const port = 7795
	k := listenKernel(t, ns, port)

	// Connection 1: traffic, then the transport disconnects. The REQ asks
	// for 4096; the kernel end (package ibv) lowers it to rxe1's active
	// MTU (1024 on its 1500-byte link) and says so in its REP's MTU
	// trailer, which the transport must follow: the 4000-byte WRITE and
	// READ fail otherwise.
	kc, cc := dialGuest(t, ns, s, k, port, 4096)
	kmem := kc.arena.Bytes()
	copy(s.mem[16384:], "hello from the transport")
	check(t, cc.QP().PostSend(transport.SendWR{ID: 1, Opcode: transport.OpSend, Signaled: true, Local: transport.SGE{MR: s.mr, Offset: 16384, Length: 24}}))
	waitGuestWC(t, s.cq)
	if wc := kc.wait(t); string(kmem[1024*(wc.ID-1000):][:wc.ByteLen]) != "hello from the transport" {
		t.Fatalf("kernel received %q", kmem[1024*(wc.ID-1000):][:wc.ByteLen])
	}
	copy(kmem[16384:], "hello from the kernel")
	kc.post(t, ibv.SendWR{ID: 2, Op: ibv.OpSend, SGEs: []ibv.SGE{mustSGE(kc.mr, 16384, 21)}})
	kc.wait(t)
	if wc := waitGuestWC(t, s.cq); string(s.mem[1024*(wc.ID-100):][:wc.ByteLen]) != "hello from the kernel" {
		t.Fatalf("transport received %q", s.mem[1024*(wc.ID-100):][:wc.ByteLen])
	}
	kaddr, kkey, _ := parseInfo(t, cc.PrivateData())
	for i := range 4000 {
		s.mem[20000+i] = byte(i*7 + 5)
	}
	check(t, cc.QP().PostSend(transport.SendWR{ID: 3, Opcode: transport.OpWrite, Signaled: true,
		Local: transport.SGE{MR: s.mr, Offset: 20000, Length: 4000}, Remote: kaddr, RKey: kkey}))
	waitGuestWC(t, s.cq)
	if !bytes.Equal(kmem[32768:32768+4000], s.mem[20000:24000]) {
		t.Fatal("the transport's RDMA WRITE did not land in the kernel's memory")
	}
	check(t, cc.QP().PostSend(transport.SendWR{ID: 4, Opcode: transport.OpRead, Signaled: true,
		Local: transport.SGE{MR: s.mr, Offset: 40000, Length: 4000}, Remote: kaddr, RKey: kkey}))
	waitGuestWC(t, s.cq)
	if !bytes.Equal(s.mem[40000:44000], s.mem[20000:24000]) {
		t.Fatal("the transport's RDMA READ of the kernel's memory differs")
	}
	done := make(chan error, 1)
	go func() { done <- cc.Disconnect(guestCtx(t)) }()
	if _, err := expectEvent(guestCtx(t), k.ch, ibv.CMDisconnected); err != nil {
		t.Fatalf("kernel after the transport's DREQ: %v", err)
	}
	check(t, kc.id.Disconnect()) // rdma_cm's DREP
	check(t, <-done)

	// Connection 2: Dial's default MTU; the kernel disconnects.
	kc, cc = dialGuest(t, ns, s, k, port, 0)
	check(t, kc.id.Disconnect())
	if _, err := expectEvent(guestCtx(t), k.ch, ibv.CMDisconnected); err != nil {
		t.Fatalf("kernel after its DREQ: %v", err)
	}
	select {
	case <-cc.Done():
	case <-guestCtx(t).Done():
		t.Fatal("the transport never saw the kernel's DREQ")
	}
	if st := cc.QP().State(); st != transport.StateError {
		t.Errorf("transport QP after the kernel's DREQ: %v, want ERR", st)
	}
	if st := s.cm.Stats().Snapshot(); st.Timeouts != 0 {
		t.Errorf("CM stats %+v: a message went unanswered", st)
	}
	t.Logf("CM stats: %+v", s.cm.Stats().Snapshot())
}

// TestGuestDialNoListener: a Dial to a port of rxe1's address where
// nothing listens fails with the kernel's REJ (invalid service ID).
func TestGuestDialNoListener(t *testing.T) {
	guest.RequireKind(t, "rxe")
	ns := guest.UserNetns(t)
	s := newGuestServer(t, ns)
	qp, err := s.dev.CreateQP(s.pd, transport.QPInitAttr{Type: transport.RC, SendCQ: s.cq, RecvCQ: s.cq})
	check(t, err)
	t.Cleanup(func() { qp.Close() })
	_, err = s.cm.Dial(guestCtx(t), netip.AddrPortFrom(ns.PeerIP, 7796), cm.DialOptions{QP: qp})
	t.Logf("dial error: %v", err)
	if !errors.Is(err, &cm.RejectError{Reason: cm.RejectInvalidServiceID}) {
		t.Fatalf("dial to a port nobody listens on: %v, want the REJ's invalid service ID", err)
	}
	if st := qp.State(); st != transport.StateError {
		t.Errorf("QP after the REJ: %v, want ERR", st)
	}
}

// expectEvent is EventChannel.Expect on a channel that several of the
// test's connections share: an earlier connection's TIMEWAIT_EXIT, which
// the kernel sends once its time wait ends, whenever that is, is skipped.
func expectEvent(ctx context.Context, ch *ibv.EventChannel, want ibv.CMEventType) (ibv.CMEvent, error) {
	for {
		ev, err := ch.Expect(ctx, want)
		var wrong *ibv.CMEventError
		if errors.As(err, &wrong) && ev.Type == ibv.CMTimewaitExit && want != ibv.CMTimewaitExit {
			continue
		}
		return ev, err
	}
}
