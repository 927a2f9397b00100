//go:build linux

package xdp_test

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/xdp"
)

// queueSide is one end of a veth pair with several queues: the classifier
// attached, a resolver, and an AF_XDP socket on each queue (OpenQueues),
// one UMEM shared by all.
type queueSide struct {
	ns     *netns
	ifc    string
	addr   netip.AddrPort
	qpn    uint32
	prog   *xdp.Program
	neigh  *xdp.Resolver
	frames *testFrames
	conns  []*xdp.Conn
}

// open finds the interface's queues (which must be n) and opens a socket
// on each.
func (s *queueSide) open(tb testing.TB, n int) {
	tb.Helper()
	s.prog = loadProgram(tb, xdp.Options{})
	s.frames = &testFrames{}
	var err error
	s.ns.do(func() {
		var ifi *net.Interface
		if ifi, err = net.InterfaceByName(s.ifc); err != nil {
			return
		}
		var got int
		var why string
		if got, why, err = xdp.RxQueues(ifi.Index); err != nil {
			return
		}
		tb.Logf("%s: %s", s.ifc, why)
		if got != n {
			err = fmt.Errorf("RxQueues: %d (%s), want the veth's %d", got, why, n)
			return
		}
		if s.neigh, err = xdp.NewResolver(xdp.ResolverOptions{Ifindex: ifi.Index, Src: s.addr.Addr(), Logger: testLogger(tb)}); err != nil {
			return
		}
		tb.Cleanup(func() { s.neigh.Close() })
		if _, err = s.prog.Attach(ifi.Index); err != nil {
			return
		}
		u := umem(tb, 4096*4096)
		s.frames.init(u, 4096)
		s.conns, err = xdp.OpenQueues(xdp.ConnOptions{Ifindex: ifi.Index, UMEM: u, Frames: s.frames, RingSize: 64,
			LocalAddr: s.addr, Neighbors: s.neigh, Program: s.prog, Mode: xdp.BindCopy, Logger: testLogger(tb)}, n)
	})
	if err != nil {
		tb.Fatalf("%s: %v", s.ifc, err)
	}
	tb.Cleanup(func() {
		for _, c := range s.conns {
			if err := c.Close(); err != nil {
				tb.Errorf("%s: Close: %v", s.ifc, err)
			}
		}
		if n := s.frames.outstanding(); n != 0 {
			tb.Errorf("%s: %d frames not given back after Close", s.ifc, n)
		}
	})
	if err := s.prog.AddQP(s.qpn, xdp.QP{}); err != nil {
		tb.Fatal(err)
	}
}

// TestOpenQueues: on an interface with four receive queues, OpenQueues
// binds a socket on each, sharing one UMEM, and a packet for an owned QP
// reaches the socket of the queue it arrived on, whichever that is (veth
// delivers what its peer sent on queue k to queue k). A queue without a
// socket passes the QP's packets to the kernel (counted NoSocket): what a
// leg with one socket, on queue 0, did with three quarters of its
// packets on such an interface. A group joined on any of the sockets
// receives the datagrams that reach any queue.
func TestOpenQueues(t *testing.T) {
	needRoot(t)
	const n = 4
	nsA, nsB := newNetns(t, nsName("qa")), newNetns(t, nsName("qb"))
	ifA, ifB := vethPairQueues(t, nsA, nsB, "10.99.4.1/24", "10.99.4.2/24", "02:00:00:00:94:0a", "02:00:00:00:94:0b", n)
	a := &queueSide{ns: nsA, ifc: ifA, addr: netip.MustParseAddrPort("10.99.4.1:4791"), qpn: 0x11}
	b := &queueSide{ns: nsB, ifc: ifB, addr: netip.MustParseAddrPort("10.99.4.2:4791"), qpn: 0x22}
	a.open(t, n)
	b.open(t, n)
	for i, c := range a.conns {
		if c.Mode() != a.conns[0].Mode() || c.Wakeup().NeedWakeup != a.conns[0].Wakeup().NeedWakeup {
			t.Errorf("queue %d bound %v, %v; queue 0 %v, %v: a shared socket binds as the UMEM's first", i, c.Mode(), c.Wakeup(), a.conns[0].Mode(), a.conns[0].Wakeup())
		}
	}

	// Each of B's queues sends three packets; A's socket of that queue
	// gets them, in order, and no other socket does.
	for k := range n {
		var pkts [][]byte
		for i := range 3 {
			pkts = append(pkts, sendOnly(a.qpn, uint32(k*3+i), fmt.Appendf(nil, "queue %d packet %d", k, i)))
		}
		sendPackets(t, b.conns[k], a.addr, 0, pkts...)
	}
	for k, c := range a.conns {
		got := readLent(t, c, 3)
		var frames []uint64
		for i, m := range got {
			var p roce.Packet
			if err := p.Decode(m.Buf[:m.N]); err != nil {
				t.Fatalf("queue %d: %v", k, err)
			}
			if want := fmt.Sprintf("queue %d packet %d", k, i); string(p.Payload) != want || p.BTH.PSN() != uint32(k*3+i) {
				t.Errorf("queue %d's socket got %q (PSN %d), want %q", k, p.Payload, p.BTH.PSN(), want)
			}
			frames = append(frames, m.Frame)
		}
		c.ReturnFrames(frames)
		if st, err := c.Stats(); err != nil || st.Received != 3 {
			t.Errorf("queue %d: received %d, want 3 (%v)", k, st.Received, err)
		}
	}
	cnt, err := a.prog.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if cnt.NoSocket != 0 {
		t.Errorf("classifier: %d packets found no socket on their queue, want 0", cnt.NoSocket)
	}

	// A group joined on queue 2's socket (the first's, whose groups all
	// feed) gets a datagram that arrived on queue 1.
	group := netip.MustParseAddr("239.9.4.1")
	var g *xdp.GroupConn
	a.ns.do(func() { g, err = a.conns[2].JoinGroup(group) })
	if err != nil {
		t.Fatalf("JoinGroup on queue 2: %v", err)
	}
	defer g.Close()
	if _, err := a.conns[0].JoinGroup(group); err == nil || !strings.Contains(err.Error(), "joined already") {
		t.Errorf("the group again on queue 0: %v, want joined already (the queues share their groups)", err)
	}
	ud := roce.PacketFields{BTH: roce.BTHFields{Opcode: roce.UDSendOnly, PKey: roce.DefaultPKey, DestQP: 0xffffff},
		DETH: roce.DETHFields{QKey: 0x11111111, SrcQP: b.qpn}}
	sendPackets(t, b.conns[1], netip.AddrPortFrom(group, roce.Port), 0, roce.AppendPacket(nil, &ud, []byte("to the group")))
	// A group's conn delivers while its socket is read, as a device reads
	// each of its queues all the time.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
				a.conns[1].TryReadBatch(make([]roce.Message, 1))
			}
		}
	}()
	msgs := []roce.Message{{Buf: make([]byte, roce.MaxPacket)}}
	read := make(chan error, 1)
	go func() {
		k, err := g.ReadBatch(msgs)
		if err == nil && k != 1 {
			err = fmt.Errorf("%d datagrams", k)
		}
		read <- err
	}()
	select {
	case err := <-read:
		if err != nil {
			t.Fatalf("the group's conn: %v", err)
		}
	case <-time.After(testTimeout):
		g.Close()
		t.Fatalf("the group's conn: no datagram in %v", testTimeout)
	}
	var p roce.Packet
	if err := p.Decode(msgs[0].Buf[:msgs[0].N]); err != nil || string(p.Payload) != "to the group" {
		t.Errorf("the group's datagram: %q, %v", p.Payload, err)
	}
	if st, _ := a.conns[1].Stats(); st.GroupReceived != 1 {
		t.Errorf("queue 1 handed %d datagrams to groups, want 1", st.GroupReceived)
	}

	// Without a socket on queue 3, its packets go to the kernel.
	if err := a.conns[3].Close(); err != nil {
		t.Fatal(err)
	}
	sendPackets(t, b.conns[3], a.addr, 0, sendOnly(a.qpn, 100, []byte("nobody")))
	sendPackets(t, b.conns[0], a.addr, 0, sendOnly(a.qpn, 101, []byte("queue 0")))
	m := readLent(t, a.conns[0], 1) // both were sent before it was read
	a.conns[0].ReturnFrames([]uint64{m[0].Frame})
	if cnt, err := a.prog.Counters(); err != nil || cnt.NoSocket != 1 {
		t.Errorf("classifier: %d packets without a socket after queue 3's closed, want 1 (%v)", cnt.NoSocket, err)
	}
}
