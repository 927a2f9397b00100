package cm_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/rbridge/rbridge/ibv"
	"github.com/rbridge/rbridge/integration/guest"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/cm"
	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/roce/udpconn"
)

// Guest tests: an rdma_cm client on the kernel's rxe1 (through package ibv,
// that is librdmacm and the kernel's IB CM) connects to the CM of a
// transport device in network namespace user0.

const guestTimeout = 90 * time.Second // TCG

func guestCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), guestTimeout)
	t.Cleanup(cancel)
	return ctx
}

// server is the transport side: a device on a UDP socket in user0 and its
// CM.
type server struct {
	*node
}

func newGuestServer(t *testing.T, ns guest.Netns, tweak ...func(*cm.Options)) *server {
	t.Helper()
	var uc *udpconn.Conn
	check(t, ns.Do(func() (err error) {
		uc, err = udpconn.Listen(udpconn.Options{Addr: netip.AddrPortFrom(ns.IP, roce.Port)})
		return err
	}))
	nd := &node{ip: ns.IP, pd: transport.NewPD(), mem: make([]byte, 1<<16), cq: transport.NewCQ(1024)}
	var err error
	nd.dev, err = transport.NewDevice(uc, transport.DeviceOptions{Logger: quiet})
	check(t, err)
	t.Cleanup(func() { nd.dev.Close() })
	opts := cm.Options{Device: nd.dev, Addr: ns.IP, Logger: quiet}
	for _, f := range tweak {
		f(&opts)
	}
	nd.cm, err = cm.New(opts)
	check(t, err)
	t.Cleanup(func() { nd.cm.Close() })
	nd.mr, err = nd.pd.RegisterMR(nd.mem, transport.AccessLocalWrite|transport.AccessRemoteWrite|transport.AccessRemoteRead)
	check(t, err)
	return &server{nd}
}

// client is the kernel side: an rdma_cm id with its QP and memory.
type client struct {
	ch    *ibv.EventChannel
	id    *ibv.CMID
	pd    *ibv.PD
	cq    *ibv.CQ
	qp    *ibv.QP
	arena *ibv.Arena
	mr    *ibv.MR
}

const cliMem = 1 << 16

// remoteInfo is what each side tells the other in private data, as rping's
// "rdma info" message does: buffer address, rkey and length.
func remoteInfo(addr uint64, rkey, n uint32) []byte {
	b := make([]byte, 16)
	binary.BigEndian.PutUint64(b, addr)
	binary.BigEndian.PutUint32(b[8:], rkey)
	binary.BigEndian.PutUint32(b[12:], n)
	return b
}

func parseInfo(t *testing.T, b []byte) (addr uint64, rkey, n uint32) {
	t.Helper()
	if len(b) < 16 {
		t.Fatalf("private data of %d bytes, want at least 16", len(b))
	}
	return binary.BigEndian.Uint64(b), binary.BigEndian.Uint32(b[8:]), binary.BigEndian.Uint32(b[12:])
}

// dialKernel resolves ns.IP:port from rxe1 and sends the REQ; it returns
// once rdma_connect is called (the caller expects the outcome).
func dialKernel(t *testing.T, ns guest.Netns, port uint16, setup bool) *client {
	t.Helper()
	ctx := guestCtx(t)
	c := &client{}
	var err error
	c.ch, err = ibv.NewEventChannel()
	check(t, err)
	t.Cleanup(func() { c.close(t) })
	c.id, err = c.ch.NewID(ibv.PortSpaceTCP)
	check(t, err)
	check(t, c.id.ResolveAddr(ns.PeerIP, netip.AddrPortFrom(ns.IP, port), 0))
	_, err = c.ch.Expect(ctx, ibv.CMAddrResolved)
	check(t, err)
	check(t, c.id.ResolveRoute(0))
	_, err = c.ch.Expect(ctx, ibv.CMRouteResolved)
	check(t, err)
	c.setup(t)
	check(t, c.id.Connect(ibv.ConnParam{PrivateData: remoteInfo(c.mr.Addr()+32768, c.mr.RKey(), 8192),
		ResponderResources: 4, InitiatorDepth: 4, RetryCount: 7, RNRRetryCount: 7}))
	return c
}

func (c *client) close(t *testing.T) {
	for _, x := range []interface{ Close() error }{c.ch, c.mr, c.arena, c.cq, c.pd} {
		if x != nil {
			if err := x.Close(); err != nil {
				t.Errorf("close %T: %v", x, err)
			}
		}
	}
}

func (c *client) post(t *testing.T, wr ibv.SendWR) {
	t.Helper()
	wr.Flags |= ibv.SendSignaled
	if n, err := c.qp.PostSend([]ibv.SendWR{wr}); err != nil || n != 1 {
		t.Fatalf("kernel post send %v: %d: %v", wr.Op, n, err)
	}
}

func (c *client) wait(t *testing.T) ibv.WorkCompletion {
	t.Helper()
	var wc [1]ibv.WorkCompletion
	if _, err := c.cq.Wait(guestCtx(t), wc[:]); err != nil {
		t.Fatalf("kernel completion: %v", err)
	}
	if err := wc[0].Err(); err != nil {
		t.Fatalf("kernel completion %v: %v", wc[0].Opcode, err)
	}
	return wc[0]
}

func waitGuestWC(t *testing.T, cq *transport.CQ) transport.WC {
	t.Helper()
	var wc [1]transport.WC
	if _, err := cq.PollWait(guestCtx(t), wc[:]); err != nil {
		t.Fatalf("transport completion: %v", err)
	}
	if wc[0].Status != transport.StatusSuccess {
		t.Fatalf("transport completion %+v: %v", wc[0], wc[0].Status)
	}
	return wc[0]
}

// accept takes the next request on l, checks what rdma_cm put in it, and
// accepts it with the server's buffer in the private data.
func (s *server) accept(t *testing.T, l *cm.Listener, ns guest.Netns, done chan<- *cm.Conn, errs chan<- error) {
	req, err := l.Next(guestCtx(t))
	if err != nil {
		errs <- err
		return
	}
	switch {
	case !req.HasIPCM:
		errs <- errors.New("REQ without the RDMA IP CM header")
		return
	case req.IPCM.Src != ns.PeerIP || req.IPCM.Dst != ns.IP:
		errs <- errors.New("IP CM header names " + req.IPCM.Src.String() + " -> " + req.IPCM.Dst.String())
		return
	case req.Remote != ns.PeerIP:
		errs <- errors.New("REQ's primary path GID is " + req.Remote.String())
		return
	}
	t.Logf("REQ from %v (port %d): QPN %#x, PSN %#x, MTU %v, service %#x, responder resources %d, initiator depth %d, CM response timeouts %d/%d, retries %d/%d",
		req.Remote, req.IPCM.SrcPort, req.REQ.LocalQPN, req.REQ.StartingPSN, req.REQ.PathMTU, req.REQ.ServiceID,
		req.REQ.ResponderResources, req.REQ.InitiatorDepth, req.REQ.LocalCMResponseTimeout, req.REQ.RemoteCMResponseTimeout,
		req.REQ.RetryCount, req.REQ.RNRRetryCount)
	t.Logf("the kernel's REQ: %x", req.MAD)
	qp, err := s.dev.CreateQP(s.pd, transport.QPInitAttr{Type: transport.RC, SendCQ: s.cq, RecvCQ: s.cq})
	if err != nil {
		errs <- err
		return
	}
	t.Cleanup(func() { qp.Close() })
	if err := qp.Modify(transport.QPAttr{State: transport.StateInit}); err != nil {
		errs <- err
		return
	}
	for i := range 8 {
		if err := qp.PostRecv(transport.RecvWR{ID: uint64(100 + i), Local: transport.SGE{MR: s.mr, Offset: 1024 * i, Length: 1024}}); err != nil {
			errs <- err
			return
		}
	}
	c, err := req.Accept(guestCtx(t), cm.AcceptOptions{QP: qp, PrivateData: remoteInfo(s.mr.Addr()+32768, s.mr.RKey(), 8192)})
	if err != nil {
		errs <- err
		return
	}
	if a, _, _ := parseInfo(t, c.PrivateData()); a == 0 {
		errs <- errors.New("client's private data has no buffer address")
		return
	}
	done <- c
}

// connectGuest connects a kernel client to the server's listener on port.
func connectGuest(t *testing.T, ns guest.Netns, s *server, port uint16) (*client, *cm.Conn) {
	t.Helper()
	l, err := s.cm.Listen(port, 4)
	check(t, err)
	t.Cleanup(func() { l.Close() })
	done, errs := make(chan *cm.Conn, 1), make(chan error, 1)
	go s.accept(t, l, ns, done, errs)
	c := dialKernel(t, ns, port, true)
	ev, err := c.ch.Expect(guestCtx(t), ibv.CMEstablished)
	if err != nil {
		select {
		case serr := <-errs:
			t.Fatalf("kernel client: %v; server: %v", err, serr)
		default:
		}
		t.Fatalf("kernel client: %v", err)
	}
	var sc *cm.Conn
	select {
	case sc = <-done:
	case err := <-errs:
		t.Fatalf("server: %v", err)
	case <-guestCtx(t).Done():
		t.Fatal("server: no RTU")
	}
	addr, rkey, n := parseInfo(t, ev.Param.PrivateData)
	if addr != s.mr.Addr()+32768 || rkey != s.mr.RKey() || n != 8192 {
		t.Fatalf("kernel got the server's buffer as %#x/%#x/%d", addr, rkey, n)
	}
	t.Logf("connected: kernel QP %#x <-> transport QP %#x (path MTU %v)", c.qp.QPN(), sc.QP().QPN(), c.id.PathMTU())
	return c, sc
}

// TestGuestRDMACMClient: an unmodified rdma_cm client (librdmacm and the
// kernel's IB CM on rxe1) connects to the transport's CM, exchanges buffer
// information in private data, then both sides SEND, the kernel WRITEs and
// READs the transport's memory and the transport READs and WRITEs the
// kernel's (as rping's server does), and the kernel disconnects.
func TestGuestRDMACMClient(t *testing.T) {
	guest.RequireKind(t, "rxe")
	ns := guest.UserNetns(t)
	s := newGuestServer(t, ns)
	c, sc := connectGuest(t, ns, s, 7790)
	cliAddr, cliKey, _ := parseInfo(t, sc.PrivateData())
	kmem := c.arena.Bytes()

	// SEND, kernel to transport.
	copy(kmem[16384:], "rdma info from the kernel")
	c.post(t, ibv.SendWR{ID: 1, Op: ibv.OpSend, SGEs: []ibv.SGE{mustSGE(c.mr, 16384, 25)}})
	c.wait(t)
	if wc := waitGuestWC(t, s.cq); string(s.mem[1024*(wc.ID-100):][:wc.ByteLen]) != "rdma info from the kernel" {
		t.Fatalf("transport received %q", s.mem[1024*(wc.ID-100):][:wc.ByteLen])
	}
	// SEND, transport to kernel.
	copy(s.mem[16384:], "rdma info from the transport")
	check(t, sc.QP().PostSend(transport.SendWR{ID: 2, Opcode: transport.OpSend, Signaled: true, Local: transport.SGE{MR: s.mr, Offset: 16384, Length: 28}}))
	waitGuestWC(t, s.cq)
	if wc := c.wait(t); string(kmem[1024*(wc.ID-1000):][:wc.ByteLen]) != "rdma info from the transport" {
		t.Fatalf("kernel received %q", kmem[1024*(wc.ID-1000):][:wc.ByteLen])
	}
	// The kernel WRITEs 4000 bytes into the transport's buffer and READs
	// them back.
	for i := range 4000 {
		kmem[20000+i] = byte(i*13 + 1)
	}
	c.post(t, ibv.SendWR{ID: 3, Op: ibv.OpWrite, SGEs: []ibv.SGE{mustSGE(c.mr, 20000, 4000)}, RemoteAddr: s.mr.Addr() + 32768, RKey: s.mr.RKey()})
	c.wait(t)
	if !bytes.Equal(s.mem[32768:32768+4000], kmem[20000:24000]) {
		t.Fatal("the kernel's RDMA WRITE did not land in the transport's memory")
	}
	c.post(t, ibv.SendWR{ID: 4, Op: ibv.OpRead, SGEs: []ibv.SGE{mustSGE(c.mr, 24000, 4000)}, RemoteAddr: s.mr.Addr() + 32768, RKey: s.mr.RKey()})
	c.wait(t)
	if !bytes.Equal(kmem[24000:28000], kmem[20000:24000]) {
		t.Fatal("the kernel's RDMA READ of the transport's memory differs")
	}
	// The transport READs the kernel's buffer (rping's server step) and
	// WRITEs it back elsewhere.
	for i := range 3000 {
		kmem[32768+i] = byte(i*5 + 3)
	}
	check(t, sc.QP().PostSend(transport.SendWR{ID: 5, Opcode: transport.OpRead, Signaled: true,
		Local: transport.SGE{MR: s.mr, Offset: 45056, Length: 3000}, Remote: cliAddr, RKey: cliKey}))
	waitGuestWC(t, s.cq)
	if !bytes.Equal(s.mem[45056:48056], kmem[32768:35768]) {
		t.Fatal("the transport's RDMA READ of the kernel's memory differs")
	}
	check(t, sc.QP().PostSend(transport.SendWR{ID: 6, Opcode: transport.OpWrite, Signaled: true,
		Local: transport.SGE{MR: s.mr, Offset: 45056, Length: 3000}, Remote: cliAddr + 4096, RKey: cliKey}))
	waitGuestWC(t, s.cq)
	if !bytes.Equal(kmem[32768+4096:32768+4096+3000], kmem[32768:35768]) {
		t.Fatal("the transport's RDMA WRITE did not land in the kernel's memory")
	}

	// The kernel disconnects: DREQ, DREP.
	check(t, c.id.Disconnect())
	if _, err := c.ch.Expect(guestCtx(t), ibv.CMDisconnected); err != nil {
		t.Fatalf("kernel after rdma_disconnect: %v", err)
	}
	select {
	case <-sc.Done():
	case <-guestCtx(t).Done():
		t.Fatal("the transport never saw the DREQ")
	}
	if st := sc.QP().State(); st != transport.StateError {
		t.Errorf("transport QP after DREQ: %v, want ERR", st)
	}
	t.Logf("CM stats: %+v", s.cm.Stats().Snapshot())
}

// TestGuestTransportDisconnects: the transport side sends the DREQ; the
// kernel reports DISCONNECTED and answers with a DREP.
func TestGuestTransportDisconnects(t *testing.T) {
	guest.RequireKind(t, "rxe")
	ns := guest.UserNetns(t)
	s := newGuestServer(t, ns)
	c, sc := connectGuest(t, ns, s, 7791)
	done := make(chan error, 1)
	go func() { done <- sc.Disconnect(guestCtx(t)) }()
	if _, err := c.ch.Expect(guestCtx(t), ibv.CMDisconnected); err != nil {
		t.Fatalf("kernel after the transport's DREQ: %v", err)
	}
	// rdma_cm sends the DREP when the application answers DISCONNECTED
	// with rdma_disconnect (or destroys the id).
	check(t, c.id.Disconnect())
	check(t, <-done)
	if st := s.cm.Stats().Snapshot(); st.Timeouts != 0 {
		t.Errorf("CM stats %+v: the DREQ went unanswered", st)
	}
}

// TestGuestRejectUnknownPort: a REQ for a port nobody listens on gets a
// REJ with reason 8 (invalid service ID), which rdma_cm reports as
// REJECTED.
func TestGuestRejectUnknownPort(t *testing.T) {
	guest.RequireKind(t, "rxe")
	ns := guest.UserNetns(t)
	_ = newGuestServer(t, ns)
	c := dialKernel(t, ns, 7792, true)
	ev, err := c.ch.Next(guestCtx(t))
	check(t, err)
	if ev.Type != ibv.CMRejected || ev.Status != int(cm.RejectInvalidServiceID) {
		t.Fatalf("kernel got %v status %d, want %v status %d", ev.Type, ev.Status, ibv.CMRejected, cm.RejectInvalidServiceID)
	}
}

// setup makes the client's PD, CQ, RC QP on its cm_id, MR over an mmap'd
// arena, and posts eight 1 KiB receives.
func (c *client) setup(t *testing.T) {
	t.Helper()
	dev, err := c.id.Device()
	check(t, err)
	c.pd, err = dev.AllocPD()
	check(t, err)
	c.cq, err = dev.NewCQ(ibv.CQOptions{Entries: 256})
	check(t, err)
	c.qp, err = c.id.CreateQP(c.pd, ibv.QPOptions{Type: ibv.QPTypeRC, SendCQ: c.cq, RecvCQ: c.cq,
		Cap: ibv.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
	check(t, err)
	c.arena, err = ibv.MapArena(cliMem, ibv.ArenaOptions{})
	check(t, err)
	c.mr, err = c.pd.RegMR(c.arena.Bytes(), ibv.AccessAll)
	check(t, err)
	var wrs []ibv.RecvWR
	for i := range 8 {
		wrs = append(wrs, ibv.RecvWR{ID: uint64(1000 + i), SGEs: []ibv.SGE{mustSGE(c.mr, i*1024, 1024)}})
	}
	if n, err := c.qp.PostRecv(wrs); err != nil || n != len(wrs) {
		t.Fatalf("post recv: %d: %v", n, err)
	}
}
