package cm_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/cm"
	"github.com/rbridge/rbridge/roce/simnet"
	"github.com/rbridge/rbridge/roce/transport"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// node is a transport device on the simulated network with a CM.
type node struct {
	dev *transport.Device
	// rc, if set, is the device the node's RC QPs are made on (another
	// queue's than the CM's dev).
	rc  *transport.Device
	cm  *cm.Manager
	pd  *transport.PD
	mr  *transport.MR
	mem []byte
	cq  *transport.CQ
	ip  netip.Addr
}

func newNode(t *testing.T, n *simnet.Net, ip string) *node {
	t.Helper()
	nd := &node{ip: netip.MustParseAddr(ip)}
	conn, err := n.Listen(netip.AddrPortFrom(nd.ip, roce.Port))
	check(t, err)
	nd.dev, err = transport.NewDevice(conn, transport.DeviceOptions{Logger: quiet})
	check(t, err)
	t.Cleanup(func() { nd.dev.Close() })
	nd.start(t)
	return nd
}

// start gives a node with its devices its CM (on dev), PD, memory and
// CQ.
func (nd *node) start(t *testing.T) {
	t.Helper()
	nd.pd, nd.mem, nd.cq = transport.NewPD(), make([]byte, 1<<16), transport.NewCQ(1024)
	var err error
	nd.cm, err = cm.New(cm.Options{Device: nd.dev, Addr: nd.ip, Logger: quiet, RetryTimeout: 20 * time.Millisecond, MaxPathMTU: 1024})
	check(t, err)
	t.Cleanup(func() { nd.cm.Close() })
	nd.mr, err = nd.pd.RegisterMR(nd.mem, transport.AccessLocalWrite|transport.AccessRemoteWrite|transport.AccessRemoteRead)
	check(t, err)
}

// qp makes an RC QP in INIT with receives posted.
func (nd *node) qp(t *testing.T) *transport.QP {
	t.Helper()
	dev := nd.dev
	if nd.rc != nil {
		dev = nd.rc
	}
	qp, err := dev.CreateQP(nd.pd, transport.QPInitAttr{Type: transport.RC, SendCQ: nd.cq, RecvCQ: nd.cq})
	check(t, err)
	t.Cleanup(func() { qp.Close() })
	check(t, qp.Modify(transport.QPAttr{State: transport.StateInit}))
	for i := range 4 {
		check(t, qp.PostRecv(transport.RecvWR{ID: uint64(100 + i), Local: transport.SGE{MR: nd.mr, Offset: 1024 * i, Length: 1024}}))
	}
	return qp
}

func check(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func waitWC(t *testing.T, cq *transport.CQ) transport.WC {
	t.Helper()
	var wc [1]transport.WC
	if _, err := cq.PollWait(ctxT(t), wc[:]); err != nil {
		t.Fatalf("wait for a completion: %v", err)
	}
	if wc[0].Status != transport.StatusSuccess {
		t.Fatalf("completion %+v: %v", wc[0], wc[0].Status)
	}
	return wc[0]
}

// connect runs a listener on srv and dials it from cli; it returns both
// ends' connections.
func connect(t *testing.T, cli, srv *node, port uint16, cliData, srvData []byte) (cc, sc *cm.Conn) {
	t.Helper()
	l, err := srv.cm.Listen(port, 4)
	check(t, err)
	t.Cleanup(func() { l.Close() })
	var wg sync.WaitGroup
	wg.Add(1)
	var serr error
	go func() {
		defer wg.Done()
		req, err := l.Next(ctxT(t))
		if err != nil {
			serr = err
			return
		}
		if !bytes.Equal(req.PrivateData[:len(cliData)], cliData) || !req.HasIPCM || req.IPCM.Dst != srv.ip || req.IPCM.Src != cli.ip {
			serr = errors.New("server: request's private data or IP CM header differ")
		}
		sc, serr = req.Accept(ctxT(t), cm.AcceptOptions{QP: srv.qp(t), PrivateData: srvData})
	}()
	cc, err = cli.cm.Dial(ctxT(t), netip.AddrPortFrom(srv.ip, port), cm.DialOptions{QP: cli.qp(t), PrivateData: cliData})
	check(t, err)
	wg.Wait()
	check(t, serr)
	if !bytes.Equal(cc.PrivateData()[:len(srvData)], srvData) {
		t.Fatalf("client got private data %x, want %x...", cc.PrivateData()[:len(srvData)], srvData)
	}
	if cc.RemoteQPN() != sc.QP().QPN() || sc.RemoteQPN() != cc.QP().QPN() {
		t.Fatalf("QPNs: client sees %#x (server QP %#x), server sees %#x (client QP %#x)",
			cc.RemoteQPN(), sc.QP().QPN(), sc.RemoteQPN(), cc.QP().QPN())
	}
	return cc, sc
}

// traffic sends a message each way and writes and reads the server's
// memory from the client.
func traffic(t *testing.T, cli, srv *node, cc, sc *cm.Conn) {
	t.Helper()
	copy(cli.mem[8192:], "ping from the client")
	check(t, cc.QP().PostSend(transport.SendWR{ID: 1, Opcode: transport.OpSend, Signaled: true,
		Local: transport.SGE{MR: cli.mr, Offset: 8192, Length: 20}}))
	waitWC(t, cli.cq)
	if wc := waitWC(t, srv.cq); wc.Opcode != transport.OpRecv || string(srv.mem[1024*(wc.ID-100):][:20]) != "ping from the client" {
		t.Fatalf("server received %+v", wc)
	}
	copy(srv.mem[8192:], "pong from the server")
	check(t, sc.QP().PostSend(transport.SendWR{ID: 2, Opcode: transport.OpSend, Signaled: true,
		Local: transport.SGE{MR: srv.mr, Offset: 8192, Length: 20}}))
	waitWC(t, srv.cq)
	if wc := waitWC(t, cli.cq); string(cli.mem[1024*(wc.ID-100):][:20]) != "pong from the server" {
		t.Fatalf("client received %+v", wc)
	}
	for i := range 3000 {
		cli.mem[16384+i] = byte(i * 7)
	}
	check(t, cc.QP().PostSend(transport.SendWR{ID: 3, Opcode: transport.OpWrite, Signaled: true,
		Local: transport.SGE{MR: cli.mr, Offset: 16384, Length: 3000}, Remote: srv.mr.Addr() + 32768, RKey: srv.mr.RKey()}))
	waitWC(t, cli.cq)
	check(t, cc.QP().PostSend(transport.SendWR{ID: 4, Opcode: transport.OpRead, Signaled: true,
		Local: transport.SGE{MR: cli.mr, Offset: 40960, Length: 3000}, Remote: srv.mr.Addr() + 32768, RKey: srv.mr.RKey()}))
	waitWC(t, cli.cq)
	if !bytes.Equal(cli.mem[40960:40960+3000], cli.mem[16384:16384+3000]) {
		t.Fatal("RDMA READ back of the RDMA WRITE differs")
	}
}

func TestConnectTrafficDisconnect(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts simnet.Options
	}{
		{"lossless", simnet.Options{}},
		{"loss and duplicates", simnet.Options{Loss: 0.2, Duplicate: 0.2, Seed: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := simnet.New(tc.opts)
			cli, srv := newNode(t, n, "10.0.0.1"), newNode(t, n, "10.0.0.2")
			cc, sc := connect(t, cli, srv, 7471, []byte("client hello"), []byte("server hello"))
			traffic(t, cli, srv, cc, sc)
			check(t, cc.Disconnect(ctxT(t)))
			select {
			case <-sc.Done():
			case <-ctxT(t).Done():
				t.Fatal("server never saw the DREQ")
			}
			if s := sc.QP().State(); s != transport.StateError {
				t.Errorf("server QP after DREQ: %v, want ERR", s)
			}
			if s := cc.QP().State(); s != transport.StateError {
				t.Errorf("client QP after disconnect: %v, want ERR", s)
			}
		})
	}
}

func TestServerDisconnects(t *testing.T) {
	n := simnet.New(simnet.Options{})
	cli, srv := newNode(t, n, "10.0.0.1"), newNode(t, n, "10.0.0.2")
	cc, sc := connect(t, cli, srv, 7472, nil, nil)
	check(t, sc.Disconnect(ctxT(t)))
	select {
	case <-cc.Done():
	case <-ctxT(t).Done():
		t.Fatal("client never saw the DREQ")
	}
}

// TestDREQOutlivesDisconnect: a peer that cannot hear the DREQ when
// Disconnect gives up waiting (its link down) hears it once it can: the
// DREQ goes on being resent after Disconnect's context ended, and the
// peer's connection is released.
func TestDREQOutlivesDisconnect(t *testing.T) {
	var deaf atomic.Bool
	var dreqs atomic.Int32
	n := simnet.New(simnet.Options{Filter: func(from, to netip.AddrPort, pkt []byte) bool {
		if to.Addr() != netip.MustParseAddr("10.0.0.1") || !deaf.Load() {
			return true
		}
		if len(pkt) >= roce.BTHLen+roce.DETHLen+cm.MADLen && roce.BTH(pkt).DestQP() == 1 && cm.MADHeader(pkt[roce.BTHLen+roce.DETHLen:]).AttrID() == cm.AttrDREQ {
			dreqs.Add(1)
		}
		return false
	}})
	cli, srv := newNode(t, n, "10.0.0.1"), newNode(t, n, "10.0.0.2")
	cc, sc := connect(t, cli, srv, 7476, nil, nil)
	deaf.Store(true)
	ctx, cancel := context.WithTimeout(ctxT(t), 50*time.Millisecond)
	defer cancel()
	if err := sc.Disconnect(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("disconnect from a deaf client: %v, want its context's end", err)
	}
	wait := ctxT(t)
	for dreqs.Load() < 4 { // the retries (20 ms apart here) go on
		select {
		case <-wait.Done():
			t.Fatalf("%d DREQs sent in all: the retries stopped with Disconnect", dreqs.Load())
		case <-time.After(5 * time.Millisecond):
		}
	}
	select {
	case <-cc.Done():
		t.Fatal("the deaf client's connection was released: the test proved nothing")
	default:
	}
	if n, l := srv.cm.NumConns(), srv.cm.NumLingering(); n != 0 || l != 1 {
		t.Errorf("the server's manager holds %d connections and %d lingering, want 0 and 1", n, l)
	}
	deaf.Store(false)
	select {
	case <-cc.Done():
	case <-ctxT(t).Done():
		t.Fatalf("the client never heard the DREQ once it could (%d lost before)", dreqs.Load())
	}
	select {
	case <-sc.Done(): // the DREP came back
	case <-ctxT(t).Done():
		t.Fatal("the server's connection was not released by the client's DREP")
	}
	for wait := ctxT(t); srv.cm.NumLingering() != 0; {
		select {
		case <-wait.Done():
			t.Fatalf("%d connections still lingering after the DREP", srv.cm.NumLingering())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestDREQAfterAck: a server of two queues, its CM on queue 0's conn and
// the connection's QP on queue 1's. Disconnect's DREQ leaves by queue 1's
// conn, after the last ACK the QP sent there: a DREQ sent by queue 0's
// conn could overtake that ACK (two sockets, two transmit paths), and the
// client would flush a SEND the server had acknowledged. The old code
// sent it by queue 0's. The QP's packets are steered to queue 1's conn,
// as a reuseport program steers them, so that the QP stays there.
func TestDREQAfterAck(t *testing.T) {
	n := simnet.New(simnet.Options{})
	var w writes
	steered := &busyConn{queue: make(chan []byte, 64), done: make(chan struct{}), eager: true}
	cli := newNode(t, n, "10.0.0.1")
	srv := newQueuedNodeWrap(t, n, "10.0.0.2", func(q int, c roce.PacketConn) roce.PacketConn {
		rc := &recordedConn{PacketConn: c, queue: q, w: &w}
		if q == 0 {
			return &steerConn{PacketConn: rc, to: steered}
		}
		steered.PacketConn = rc
		return steered
	})
	cc, sc := connect(t, cli, srv, 7477, nil, nil)
	traffic(t, cli, srv, cc, sc)
	check(t, sc.Disconnect(ctxT(t)))
	w.mu.Lock()
	defer w.mu.Unlock()
	lastAck, dreq := -1, -1
	for i, p := range w.sent {
		switch {
		case dreq >= 0:
		case p.op == roce.RCAcknowledge:
			lastAck = i
		case p.cm == cm.AttrDREQ:
			dreq = i
		}
	}
	if lastAck < 0 || dreq < 0 {
		t.Fatalf("the server sent %+v: want ACKs, then a DREQ", w.sent)
	}
	if a := w.sent[lastAck]; a.queue != 1 {
		t.Fatalf("the server's QP sent its ACK by queue %d's conn, want 1's: the test proves nothing", a.queue)
	}
	if d := w.sent[dreq]; d.queue != 1 {
		t.Errorf("the DREQ left by queue %d's conn, want 1's, the conn of the QP's last ACK", d.queue)
	}
}

// TestDREQAfterAckReceived: a server with two queues, the CM on queue
// 0's device and the connection's QP on queue 1's, whose receive loop is
// busy (it reads nothing until it is asked to read without waiting, as
// after AfterReceived's wake-up); packets for its QP are steered to its
// conn as a reuseport program steers them. The server SENDs; the client
// receives it, acknowledges it and disconnects: its ACK waits in queue
// 1's conn while its DREQ reaches queue 0's. The CM releases the
// connection only after queue 1 handled what it held, so the server's
// SEND completes with success, as the client received it, not flushed.
// The old code flushed it: the DREQ overtook the ACK across the loops.
func TestDREQAfterAckReceived(t *testing.T) {
	n := simnet.New(simnet.Options{})
	cli := newNode(t, n, "10.0.0.1")
	busy := &busyConn{queue: make(chan []byte, 64), done: make(chan struct{})}
	srv := newQueuedNodeWrap(t, n, "10.0.0.2", func(q int, c roce.PacketConn) roce.PacketConn {
		if q == 0 {
			return &steerConn{PacketConn: c, to: busy}
		}
		busy.PacketConn = c
		return busy
	})
	cc, sc := connect(t, cli, srv, 7478, nil, nil)
	copy(srv.mem[8192:], "the last message")
	check(t, sc.QP().PostSend(transport.SendWR{ID: 9, Opcode: transport.OpSend, Signaled: true,
		Local: transport.SGE{MR: srv.mr, Offset: 8192, Length: 16}}))
	if wc := waitWC(t, cli.cq); string(cli.mem[1024*(wc.ID-100):][:16]) != "the last message" {
		t.Fatalf("client received %+v", wc)
	}
	check(t, cc.Disconnect(ctxT(t)))
	if st := sc.QP().Query().State; st != transport.StateError {
		t.Errorf("the server's QP in %v after its DREP, want the error state", st)
	}
	var wcs [8]transport.WC
	for {
		k, err := srv.cq.PollWait(ctxT(t), wcs[:])
		check(t, err)
		for _, wc := range wcs[:k] {
			if wc.ID != 9 {
				continue // the receives, flushed
			}
			if wc.Status != transport.StatusSuccess {
				t.Fatalf("the server's SEND, which the client received and acknowledged before its DREQ: %v", wc.Status)
			}
			return
		}
	}
}

// steerConn is queue 0's conn of a node whose QPs, but QP 1, are on
// queue 1: it hands their packets to queue 1's conn (to), as the
// kernel's reuseport steering does, and returns QP 1's.
type steerConn struct {
	roce.PacketConn
	to *busyConn
}

func (c *steerConn) ReadBatch(msgs []roce.Message) (int, error) {
	for {
		n, err := c.PacketConn.ReadBatch(msgs)
		if err != nil {
			return 0, err
		}
		k := 0
		for _, m := range msgs[:n] {
			if roce.BTH(m.Buf[:m.N]).DestQP() != 1 {
				c.to.queue <- append([]byte(nil), m.Buf[:m.N]...)
				continue
			}
			msgs[k].N, msgs[k].Addr, msgs[k].ECN = m.N, m.Addr, m.ECN
			copy(msgs[k].Buf, m.Buf[:m.N])
			k++
		}
		if k > 0 {
			return k, nil
		}
	}
}

// busyConn is queue 1's conn, whose receive loop is busy: each ReadBatch
// waits a moment and returns as an idle wake-up does
// (os.ErrDeadlineExceeded), leaving what was steered to it queued, until
// a read without waiting (TryReadBatch) takes it. An eager one is not
// busy: ReadBatch returns what was steered to it as it comes. It sends
// through its own conn.
type busyConn struct {
	roce.PacketConn
	queue chan []byte
	done  chan struct{}
	once  sync.Once
	eager bool
}

func (c *busyConn) ReadBatch(msgs []roce.Message) (int, error) {
	if c.eager {
		select {
		case <-c.done:
			return 0, roce.ErrConnClosed
		case b := <-c.queue:
			msgs[0].N = copy(msgs[0].Buf, b)
			msgs[0].Addr = netip.MustParseAddrPort("10.0.0.1:4791")
			n, err := c.TryReadBatch(msgs[1:])
			return n + 1, err
		case <-time.After(time.Millisecond):
			return 0, os.ErrDeadlineExceeded
		}
	}
	select {
	case <-c.done:
		return 0, roce.ErrConnClosed
	case <-time.After(time.Millisecond):
		return 0, os.ErrDeadlineExceeded
	}
}

func (c *busyConn) TryReadBatch(msgs []roce.Message) (int, error) {
	n := 0
	for n < len(msgs) {
		select {
		case b := <-c.queue:
			msgs[n].N = copy(msgs[n].Buf, b)
			msgs[n].Addr = netip.MustParseAddrPort("10.0.0.1:4791")
			n++
		default:
			return n, nil
		}
	}
	return n, nil
}

// SetReadDeadline makes the conn a roce.ReadDeadliner, which the device
// wakes (its reads return at once anyway).
func (c *busyConn) SetReadDeadline(time.Time) error { return nil }

func (c *busyConn) Close() error {
	c.once.Do(func() { close(c.done) })
	return c.PacketConn.Close()
}

// writes records, in order, the packets a node's conns wrote.
type writes struct {
	mu   sync.Mutex
	sent []written
}

// written is one packet: the queue whose conn wrote it, its opcode, and
// the CM attribute of a MAD.
type written struct {
	queue int
	op    roce.Opcode
	cm    cm.AttrID
}

// recordedConn writes through its conn and records each packet in w.
type recordedConn struct {
	roce.PacketConn
	queue int
	w     *writes
}

func (c *recordedConn) WriteBatch(msgs []roce.Message) (int, error) {
	c.w.mu.Lock()
	for _, m := range msgs {
		b := m.Buf[:m.N]
		p := written{queue: c.queue, op: roce.BTH(b).Opcode()}
		mad := m.Payload // a gathered packet's payload lies apart
		if mad == nil && len(b) >= roce.BTHLen+roce.DETHLen {
			mad = b[roce.BTHLen+roce.DETHLen:]
		}
		if roce.BTH(b).DestQP() == 1 && len(mad) >= cm.MADLen {
			p.cm = cm.MADHeader(mad).AttrID()
		}
		c.w.sent = append(c.w.sent, p)
	}
	c.w.mu.Unlock()
	return c.PacketConn.WriteBatch(msgs)
}

// newQueuedNodeWrap is newNode with two queues, each queue's conn wrapped
// by wrap: the CM on queue 0's device (port 4791), RC QPs on queue 1's
// (port 4792; simnet has no SO_REUSEPORT, so the second queue has a port
// of its own).
func newQueuedNodeWrap(t *testing.T, n *simnet.Net, ip string, wrap func(q int, c roce.PacketConn) roce.PacketConn) *node {
	t.Helper()
	nd := &node{ip: netip.MustParseAddr(ip)}
	var conns []roce.PacketConn
	for q, port := range []uint16{roce.Port, roce.Port + 1} {
		c, err := n.Listen(netip.AddrPortFrom(nd.ip, port))
		check(t, err)
		conns = append(conns, wrap(q, c))
	}
	devs, err := transport.NewDevices(conns, transport.DeviceOptions{Logger: quiet})
	check(t, err)
	for _, d := range devs {
		t.Cleanup(func() { d.Close() })
	}
	nd.dev, nd.rc = devs[0], devs[1]
	nd.start(t)
	return nd
}

func TestRejectUnknownService(t *testing.T) {
	n := simnet.New(simnet.Options{})
	cli, _ := newNode(t, n, "10.0.0.1"), newNode(t, n, "10.0.0.2")
	_, err := cli.cm.Dial(ctxT(t), netip.MustParseAddrPort("10.0.0.2:9"), cm.DialOptions{QP: cli.qp(t)})
	if !errors.Is(err, &cm.RejectError{Reason: cm.RejectInvalidServiceID}) {
		t.Fatalf("dial to a port nobody listens on: %v, want a REJ for an invalid service ID", err)
	}
	if want := "cm: dial 10.0.0.2:9: rejected: invalid service ID (8): nothing listens on that port"; err.Error() != want {
		t.Errorf("dial error %q, want %q", err, want)
	}
}

// TestDialPathMTU: Dial asks for a path MTU of the five, at most the
// manager's MaxPathMTU (1024 on these nodes).
func TestDialPathMTU(t *testing.T) {
	n := simnet.New(simnet.Options{})
	cli, _ := newNode(t, n, "10.0.0.1"), newNode(t, n, "10.0.0.2")
	for _, mtu := range []int{1000, 2048} {
		if _, err := cli.cm.Dial(ctxT(t), netip.MustParseAddrPort("10.0.0.2:9"), cm.DialOptions{QP: cli.qp(t), PathMTU: mtu}); err == nil || !strings.Contains(err.Error(), "path MTU") {
			t.Errorf("dial with path MTU %d: %v, want an error naming the path MTU", mtu, err)
		}
	}
}

func TestConsumerReject(t *testing.T) {
	n := simnet.New(simnet.Options{})
	cli, srv := newNode(t, n, "10.0.0.1"), newNode(t, n, "10.0.0.2")
	l, err := srv.cm.Listen(7473, 1)
	check(t, err)
	go func() {
		if req, err := l.Next(ctxT(t)); err == nil {
			_ = req.Reject([]byte("go away"))
		}
	}()
	_, err = cli.cm.Dial(ctxT(t), netip.AddrPortFrom(srv.ip, 7473), cm.DialOptions{QP: cli.qp(t)})
	var rej *cm.RejectError
	if !errors.As(err, &rej) || rej.Reason != cm.RejectConsumerDefined || !bytes.HasPrefix(rej.PrivateData, []byte("go away")) {
		t.Fatalf("dial: %v, want a consumer REJ with private data", err)
	}
}

// TestLostRTU drops the first RTUs: the server resends its REP, the client
// answers the duplicate with the RTU again.
func TestLostRTU(t *testing.T) {
	var dropped, reps atomic.Int32
	n := simnet.New(simnet.Options{Filter: func(from, to netip.AddrPort, pkt []byte) bool {
		if len(pkt) >= roce.BTHLen+roce.DETHLen+cm.MADLen && roce.BTH(pkt).DestQP() == 1 {
			mad := pkt[roce.BTHLen+roce.DETHLen:]
			switch cm.MADHeader(mad).AttrID() {
			case cm.AttrREP:
				reps.Add(1)
			case cm.AttrRTU:
				if dropped.Add(1) <= 2 {
					return false
				}
			}
		}
		return true
	}})
	cli, srv := newNode(t, n, "10.0.0.1"), newNode(t, n, "10.0.0.2")
	cc, sc := connect(t, cli, srv, 7474, nil, nil)
	traffic(t, cli, srv, cc, sc)
	if dropped.Load() < 3 {
		t.Errorf("%d RTUs seen, want the 2 dropped and one more", dropped.Load())
	}
	// The server sends its REP again on its timer and, when a slow
	// machine makes the client repeat its REQ, in answer to that: either
	// way the REP went out at least three times.
	if r := reps.Load(); r < 3 {
		t.Errorf("%d REPs sent (server stats %+v): want the first and at least 2 more", r, srv.cm.Stats().Snapshot())
	}
	if s := cli.cm.Stats().Snapshot(); s.Duplicates < 2 {
		t.Errorf("client stats %+v: want at least 2 duplicate REPs", s)
	}
}

// TestREPTimeout: a client that never answers the REP gets a REJ, and
// the server's Accept fails with ErrTimeout.
func TestREPTimeout(t *testing.T) {
	var drop atomic.Bool
	n := simnet.New(simnet.Options{Filter: func(from, to netip.AddrPort, pkt []byte) bool {
		return !(drop.Load() && to.Addr() == netip.MustParseAddr("10.0.0.1"))
	}})
	cli, srv := newNode(t, n, "10.0.0.1"), newNode(t, n, "10.0.0.2")
	l, err := srv.cm.Listen(7475, 1)
	check(t, err)
	done := make(chan error, 1)
	go func() {
		req, err := l.Next(ctxT(t))
		if err != nil {
			done <- err
			return
		}
		drop.Store(true) // the REP and its retries never arrive
		_, err = req.Accept(ctxT(t), cm.AcceptOptions{QP: srv.qp(t)})
		done <- err
	}()
	ctx, cancel := context.WithTimeout(ctxT(t), 2*time.Second)
	defer cancel()
	_, _ = cli.cm.Dial(ctx, netip.AddrPortFrom(srv.ip, 7475), cm.DialOptions{QP: cli.qp(t)})
	if err := <-done; !errors.Is(err, cm.ErrTimeout) && !errors.Is(err, &cm.RejectError{Reason: cm.RejectTimeout}) {
		t.Fatalf("accept without an RTU: %v, want a timeout", err)
	}
}

func TestListenTwice(t *testing.T) {
	n := simnet.New(simnet.Options{})
	srv := newNode(t, n, "10.0.0.2")
	l, err := srv.cm.Listen(7476, 1)
	check(t, err)
	if _, err := srv.cm.Listen(7476, 1); err == nil {
		t.Fatal("second listener on one port: no error")
	}
	check(t, l.Close())
	l, err = srv.cm.Listen(7476, 1)
	check(t, err)
	check(t, l.Close())
	if _, err := l.Next(ctxT(t)); !errors.Is(err, cm.ErrClosed) {
		t.Fatalf("Next on a closed listener: %v", err)
	}
}

// TestDialACKTimeouts: a dial's REQ gives the peer a Local ACK Timeout
// of PeerACKTimeout, which the passive side takes as its QP's
// retransmit timer (as Linux's does), while the dialing QP keeps its
// own, shorter one.
func TestDialACKTimeouts(t *testing.T) {
	var seen atomic.Int32
	n := simnet.New(simnet.Options{Filter: func(from, to netip.AddrPort, pkt []byte) bool {
		if len(pkt) >= roce.BTHLen+roce.DETHLen+cm.MADLen && roce.BTH(pkt).DestQP() == 1 {
			mad := pkt[roce.BTHLen+roce.DETHLen:]
			if cm.MADHeader(mad).AttrID() == cm.AttrREQ {
				if r, _, err := cm.ParseREQ(mad[cm.MADHeaderLen:]); err == nil {
					seen.Store(int32(r.Primary().Fields().LocalACKTimeout) + 1)
				}
			}
		}
		return true
	}})
	cli, srv := newNode(t, n, "10.0.0.1"), newNode(t, n, "10.0.0.2")
	cc, sc := connect(t, cli, srv, 7475, nil, nil)
	if got := seen.Load() - 1; got != cm.PeerACKTimeout {
		t.Errorf("the REQ's Local ACK Timeout: %d, want %d", got, cm.PeerACKTimeout)
	}
	if c, s := cc.QP().Query().Timeout, sc.QP().Query().Timeout; c != 14 || s != cm.PeerACKTimeout {
		t.Errorf("QP timeouts: the dialer's %d, want 14; the listener's %d, want %d", c, s, cm.PeerACKTimeout)
	}
}
