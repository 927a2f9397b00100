//go:build linux

package xdp_test

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbridge/rbridge/internal/testlog"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/xdp"
)

// side is one end of the end-to-end set-up: a namespace, its veth end, the
// classifier attached there and an AF_XDP Conn on queue 0.
type side struct {
	ns   *netns
	ifc  string
	addr netip.AddrPort
	prog *xdp.Program
	conn *xdp.Conn
	qpn  uint32
	// neigh resolves the Conn's peers, made with resolve's Timeout and
	// Hold (set before start).
	neigh   *xdp.Resolver
	resolve xdp.ResolverOptions
	// frames, if set before start, owns the Conn's UMEM (ConnOptions.Frames).
	frames *testFrames
	// ringSize and noNeedWakeup, if set before start, are the Conn's
	// ConnOptions.RingSize and NoNeedWakeup.
	ringSize     int
	noNeedWakeup bool
}

const testTimeout = 5 * time.Second

func umem(tb testing.TB, size int) []byte {
	tb.Helper()
	b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		tb.Fatalf("mmap UMEM: %v", err)
	}
	tb.Cleanup(func() { unix.Munmap(b) })
	return b
}

// start loads and attaches the classifier and opens the Conn, in s.ns.
func (s *side) start(tb testing.TB, remoteQPN uint32, mode xdp.BindMode, opts xdp.Options) {
	tb.Helper()
	if err := s.tryStart(tb, remoteQPN, mode, opts); err != nil {
		tb.Fatalf("%s: %v", s.ifc, err)
	}
}

// tryStart is start that returns NewConn's error.
func (s *side) tryStart(tb testing.TB, remoteQPN uint32, mode xdp.BindMode, opts xdp.Options) error {
	tb.Helper()
	s.prog = loadProgram(tb, opts)
	var err error
	s.ns.do(func() {
		var ifi *net.Interface
		if ifi, err = net.InterfaceByName(s.ifc); err != nil {
			return
		}
		ro := s.resolve
		ro.Ifindex, ro.Src, ro.Logger = ifi.Index, s.addr.Addr(), testlog.New(tb)
		if s.neigh, err = xdp.NewResolver(ro); err != nil {
			return
		}
		tb.Cleanup(func() {
			if err := s.neigh.Close(); err != nil {
				tb.Errorf("%s: Resolver.Close: %v", s.ifc, err)
			}
		})
		var m xdp.Mode
		if m, err = s.prog.Attach(ifi.Index); err != nil {
			return
		}
		tb.Logf("%s: classifier attached in %v mode", s.ifc, m)
		o := xdp.ConnOptions{
			Ifindex:   ifi.Index,
			UMEM:      umem(tb, 8192*4096), // 2048-entry rings: the receive benchmark's bursts fit
			LocalAddr: s.addr,
			Neighbors: s.neigh,
			Program:   s.prog,
			Mode:      mode,
			Logger:    testLogger(tb),

			RingSize:     s.ringSize,
			NoNeedWakeup: s.noNeedWakeup,
		}
		if s.frames != nil {
			s.frames.init(o.UMEM, 4096)
			o.Frames = s.frames
		}
		s.conn, err = xdp.NewConn(o)
	})
	if err != nil {
		return err
	}
	tb.Logf("%s: AF_XDP socket in %v mode, %v", s.ifc, s.conn.Mode(), s.conn.Wakeup())
	tb.Cleanup(func() {
		if err := s.conn.Close(); err != nil {
			tb.Errorf("%s: Conn.Close: %v", s.ifc, err)
		}
	})
	return s.prog.AddQP(s.qpn, xdp.QP{RemoteQPN: remoteQPN})
}

// setup builds two namespaces joined by a veth pair with the classifier
// and a Conn on each end, each resolving the other's Ethernet address
// through its namespace's neighbour table (a Resolver): nothing needs to
// have crossed the veth before.
func setup(tb testing.TB, tag string, mode xdp.BindMode, xmode xdp.Mode) (a, b *side) {
	return setupWith(tb, tag, mode, xdp.Options{Mode: xmode})
}

// setupWith is setup with the classifiers loaded with opts.
func setupWith(tb testing.TB, tag string, mode xdp.BindMode, opts xdp.Options) (a, b *side) {
	a, b = &side{}, &side{}
	setupSides(tb, tag, a, b, mode, opts)
	return a, b
}

// setupSides is setupWith for sides the caller made (with frames).
func setupSides(tb testing.TB, tag string, a, b *side, mode xdp.BindMode, opts xdp.Options) {
	nsA, nsB := newNetns(tb, nsName(tag+"a")), newNetns(tb, nsName(tag+"b"))
	ifA, ifB := vethPair(tb, nsA, nsB, "10.99.0.1/24", "10.99.0.2/24", "02:00:00:00:99:0a", "02:00:00:00:99:0b")
	a.ns, a.ifc, a.addr, a.qpn = nsA, ifA, netip.MustParseAddrPort("10.99.0.1:4791"), 0x11
	b.ns, b.ifc, b.addr, b.qpn = nsB, ifB, netip.MustParseAddrPort("10.99.0.2:4791"), 0x22
	a.start(tb, b.qpn, mode, opts)
	b.start(tb, a.qpn, mode, opts)
}

// readN reads until n messages arrived or the timeout passed, then closes
// the Conn to unblock its reader and fails.
func readN(tb testing.TB, c *xdp.Conn, n int) []roce.Message {
	tb.Helper()
	type result struct {
		msgs []roce.Message
		err  error
	}
	done := make(chan result, 1)
	go func() {
		var got []roce.Message
		batch := make([]roce.Message, 32)
		for len(got) < n {
			for i := range batch {
				batch[i] = roce.Message{Buf: make([]byte, roce.MaxPacket)}
			}
			k, err := c.ReadBatch(batch[:min(len(batch), n-len(got))])
			if err != nil {
				done <- result{got, err}
				return
			}
			got = append(got, batch[:k]...)
		}
		done <- result{got, nil}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			tb.Fatalf("ReadBatch after %d of %d: %v", len(r.msgs), n, r.err)
		}
		return r.msgs
	case <-time.After(testTimeout):
		c.Close()
		r := <-done
		tb.Fatalf("read %d of %d packets in %v", len(r.msgs), n, testTimeout)
		return nil
	}
}

func sendPackets(tb testing.TB, c *xdp.Conn, to netip.AddrPort, ecn uint8, pkts ...[]byte) {
	tb.Helper()
	msgs := make([]roce.Message, len(pkts))
	for i, p := range pkts {
		msgs[i] = roce.Message{Buf: p, N: len(p), Addr: to, ECN: ecn}
	}
	n, err := c.WriteBatch(msgs)
	if err != nil || n != len(msgs) {
		tb.Fatalf("WriteBatch: sent %d of %d: %v", n, len(msgs), err)
	}
}

func sendOnly(qpn, psn uint32, payload []byte) []byte {
	f := roce.PacketFields{BTH: roce.BTHFields{Opcode: roce.RCSendOnly, PKey: roce.DefaultPKey, DestQP: qpn, PSN: psn}}
	return roce.AppendPacket(nil, &f, payload)
}

// udpExchange sends a datagram from a kernel socket in one namespace to one
// in the other and checks it arrives: traffic that is not RoCEv2 for an
// owned QP reaches the kernel through the classifier.
func udpExchange(tb testing.TB, from, to *netns, dst netip.AddrPort, payload []byte) {
	tb.Helper()
	var rc *net.UDPConn
	var err error
	to.do(func() { rc, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(dst)) })
	if err != nil {
		tb.Fatalf("listen %v: %v", dst, err)
	}
	defer rc.Close()
	var sc *net.UDPConn
	from.do(func() { sc, err = net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(dst)) })
	if err != nil {
		tb.Fatalf("dial %v: %v", dst, err)
	}
	defer sc.Close()
	if _, err := sc.Write(payload); err != nil {
		tb.Fatalf("send to %v: %v", dst, err)
	}
	rc.SetReadDeadline(time.Now().Add(testTimeout))
	buf := make([]byte, 2048)
	n, err := rc.Read(buf)
	if err != nil {
		tb.Fatalf("kernel socket %v: %v", dst, err)
	}
	if !bytes.Equal(buf[:n], payload) {
		tb.Fatalf("kernel socket %v got % x, want % x", dst, buf[:n], payload)
	}
}

func TestEndToEnd(t *testing.T) {
	for _, mode := range []xdp.Mode{xdp.ModeNative, xdp.ModeGeneric} {
		t.Run(mode.String(), func(t *testing.T) { testEndToEnd(t, mode) })
	}
}

func testEndToEnd(t *testing.T, mode xdp.Mode) {
	a, b := setup(t, mode.String()[:1], xdp.BindAuto, mode)

	// Nothing has crossed the veth: the first packet's neighbour is
	// resolved (ARP, which the classifier passes) while it is held.
	t.Run("first packet to a peer never contacted", func(t *testing.T) {
		if e := neighEntry(t, a.ns, a.ifc, b.addr.Addr()); e != "" {
			t.Fatalf("%s's neighbour table before the first packet: %q, want no entry", a.ns.name, e)
		}
		sendPackets(t, a.conn, b.addr, 0, sendOnly(b.qpn, 0, []byte("first")))
		if m := readN(t, b.conn, 1)[0]; !bytes.Contains(m.Buf[:m.N], []byte("first")) || m.Addr != a.addr {
			t.Errorf("first packet: got % x from %v", m.Buf[:m.N], m.Addr)
		}
		if e := neighEntry(t, a.ns, a.ifc, b.addr.Addr()); !strings.Contains(e, "lladdr 02:00:00:00:99:0b") {
			t.Errorf("%s's neighbour table after the first packet: %q, want b's address", a.ns.name, e)
		}
		if got, want := a.neigh.Stats().Snapshot(), (xdp.ResolverStatsSnapshot{Asked: 1, Answered: 1}); got != want {
			t.Errorf("resolver stats %+v, want %+v", got, want)
		}
		if st, err := a.conn.Stats(); err != nil || st.HeldForNeighbor != 1 || st.NoNeighbor != 0 || st.Sent != 1 {
			t.Errorf("conn stats %+v (%v), want the one packet held, then sent", st, err)
		}
	})

	t.Run("roce to AF_XDP", func(t *testing.T) {
		const n = 200
		before, err := b.prog.QPCounters(b.qpn)
		if err != nil {
			t.Fatal(err)
		}
		var pkts [][]byte
		for i := range n {
			pkts = append(pkts, sendOnly(b.qpn, uint32(i), bytes.Repeat([]byte{byte(i)}, 1+i%64)))
		}
		for i := 0; i < n; i += 50 {
			sendPackets(t, a.conn, b.addr, 2, pkts[i:i+50]...)
		}
		got := readN(t, b.conn, n)
		for i, m := range got {
			if !bytes.Equal(m.Buf[:m.N-roce.ICRCLen], pkts[i][:len(pkts[i])-roce.ICRCLen]) {
				t.Fatalf("packet %d: got % x, want % x", i, m.Buf[:m.N], pkts[i])
			}
			if m.Addr != a.addr || m.ECN != 2 || !m.ICRCChecked {
				t.Fatalf("packet %d: from %v ECN %d ICRC checked %v, want %v ECN 2 checked", i, m.Addr, m.ECN, m.ICRCChecked, a.addr)
			}
		}
		qc, err := b.prog.QPCounters(b.qpn)
		if err != nil {
			t.Fatal(err)
		}
		if qc.Packets-before.Packets != n {
			t.Errorf("qp counters %+v, before %+v: want %d packets more", qc, before, n)
		}
		// And back.
		sendPackets(t, b.conn, a.addr, 0, sendOnly(a.qpn, 1, []byte("reply")))
		if m := readN(t, a.conn, 1)[0]; !bytes.Contains(m.Buf[:m.N], []byte("reply")) {
			t.Errorf("reply: got % x", m.Buf[:m.N])
		}
	})

	t.Run("non-roce reaches the kernel", func(t *testing.T) {
		udpExchange(t, a.ns, b.ns, netip.MustParseAddrPort("10.99.0.2:9999"), []byte("not roce"))
		udpExchange(t, b.ns, a.ns, netip.MustParseAddrPort("10.99.0.1:9999"), []byte("back"))
	})

	t.Run("unowned qp reaches the kernel", func(t *testing.T) {
		var rc *net.UDPConn
		var err error
		b.ns.do(func() { rc, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(b.addr)) })
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		p := sendOnly(0x999, 0, []byte("for the kernel"))
		sendPackets(t, a.conn, b.addr, 0, p)
		rc.SetReadDeadline(time.Now().Add(testTimeout))
		buf := make([]byte, 2048)
		n, err := rc.Read(buf)
		if err != nil {
			t.Fatalf("kernel socket on 4791: %v", err)
		}
		if !bytes.Equal(buf[:n-roce.ICRCLen], p[:len(p)-roce.ICRCLen]) {
			t.Errorf("kernel socket got % x", buf[:n])
		}
	})

	t.Run("fault injection", func(t *testing.T) {
		before, err := b.prog.Counters()
		if err != nil {
			t.Fatal(err)
		}
		if err := b.prog.SetFault(xdp.Fault{EveryNth: 4}); err != nil {
			t.Fatal(err)
		}
		var pkts [][]byte
		for i := range 40 {
			pkts = append(pkts, sendOnly(b.qpn, uint32(i), []byte{byte(i)}))
		}
		sendPackets(t, a.conn, b.addr, 0, pkts...)
		got := readN(t, b.conn, 30)
		if err := b.prog.SetFault(xdp.Fault{}); err != nil {
			t.Fatal(err)
		}
		sendPackets(t, a.conn, b.addr, 0, sendOnly(b.qpn, 99, []byte("marker")))
		got = append(got, readN(t, b.conn, 1)...)
		var psns []uint32
		for _, m := range got {
			psns = append(psns, roce.BTH(m.Buf).PSN())
		}
		for i, psn := range psns[:30] {
			if want := uint32(i + i/3); psn != want {
				t.Fatalf("PSNs received %v: every 4th should be missing", psns)
			}
		}
		if psns[30] != 99 {
			t.Errorf("after the fault was cleared got PSN %d, want the marker 99", psns[30])
		}
		after, err := b.prog.Counters()
		if err != nil {
			t.Fatal(err)
		}
		if d := after.DropFault - before.DropFault; d != 10 {
			t.Errorf("DropFault moved by %d, want 10", d)
		}
	})

	t.Run("ecn-ce delivered with its mark", func(t *testing.T) {
		before, err := b.prog.QPCounters(b.qpn)
		if err != nil {
			t.Fatal(err)
		}
		sendPackets(t, a.conn, b.addr, roce.ECNCE, sendOnly(b.qpn, 5, []byte("marked")))
		m := readN(t, b.conn, 1)[0]
		var p roce.Packet
		if err := p.Decode(m.Buf[:m.N]); err != nil {
			t.Fatal(err)
		}
		if m.ECN != roce.ECNCE || string(p.Payload) != "marked" {
			t.Errorf("got ECN %d payload %q, want the marked packet (ECN %d)", m.ECN, p.Payload, roce.ECNCE)
		}
		after, err := b.prog.QPCounters(b.qpn)
		if err != nil {
			t.Fatal(err)
		}
		if after.ECNCE-before.ECNCE != 1 || after.CNPs != before.CNPs {
			t.Errorf("QP counters moved %+v -> %+v, want one ECN-CE and no CNP", before, after)
		}
	})
	for _, s := range []*side{a, b} {
		st, err := s.conn.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if st.BadFrames != 0 || st.BadICRC != 0 || st.TooLong != 0 {
			t.Errorf("%s: conn stats %+v", s.ifc, st)
		}
		t.Logf("%s: conn stats %+v", s.ifc, st)
	}
}

// TestCNPFromXDP: with Options.CNP the receiving classifier answers an
// ECN-CE packet with a CNP from XDP, which reaches the sender's socket; the
// marked packet itself is consumed.
func TestCNPFromXDP(t *testing.T) {
	a, b := setupWith(t, "n", xdp.BindAuto, xdp.Options{CNP: true})
	sendPackets(t, a.conn, b.addr, roce.ECNCE, sendOnly(b.qpn, 5, []byte("marked")))
	m := readN(t, a.conn, 1)[0]
	var p roce.Packet
	if err := p.Decode(m.Buf[:m.N]); err != nil {
		t.Fatalf("decode CNP: %v", err)
	}
	if p.Opcode() != roce.CNP || !p.BTH.BECN() || p.BTH.DestQP() != a.qpn || !m.ICRCChecked || m.Addr.Addr() != b.addr.Addr() {
		t.Errorf("got %v BECN %v to QP %#x from %v (ICRC checked %v), want a CNP to QP %#x from %v",
			p.Opcode(), p.BTH.BECN(), p.BTH.DestQP(), m.Addr, m.ICRCChecked, a.qpn, b.addr.Addr())
	}
	c, err := b.prog.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if c.CNPSent != 1 {
		t.Errorf("CNPSent %d, want 1", c.CNPSent)
	}
	if st, err := b.conn.Stats(); err != nil || st.Received != 0 {
		t.Errorf("the receiver's conn got %d packets (%v), want none: the marked one was made into the CNP", st.Received, err)
	}
}

// TestConnClose checks that Close unblocks a waiting ReadBatch and that the
// methods fail with ErrConnClosed afterwards.
func TestConnClose(t *testing.T) {
	_, b := setup(t, "c", xdp.BindCopy, 0)
	errc := make(chan error, 1)
	go func() {
		_, err := b.conn.ReadBatch([]roce.Message{{Buf: make([]byte, roce.MaxPacket)}})
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := b.conn.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, roce.ErrConnClosed) {
			t.Errorf("ReadBatch after Close: %v, want ErrConnClosed", err)
		}
	case <-time.After(testTimeout):
		t.Fatal("Close did not unblock ReadBatch")
	}
	if _, err := b.conn.WriteBatch([]roce.Message{{Buf: make([]byte, 16), N: 16, Addr: netip.MustParseAddrPort("10.99.0.1:4791")}}); !errors.Is(err, roce.ErrConnClosed) {
		t.Errorf("WriteBatch after Close: %v, want ErrConnClosed", err)
	}
	if err := b.conn.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestConnNeighborUnanswered: one batch to an address nobody holds and to
// b, neither contacted before. WriteBatch returns at once, both packets
// held; b's arrives while the other's neighbour is still being resolved.
// Once that failed, a packet to it is refused at once with an error naming
// it that wraps ErrNoNeighbor; the one held is dropped: both counted.
func TestConnNeighborUnanswered(t *testing.T) {
	const timeout = time.Second
	a, b := &side{resolve: xdp.ResolverOptions{Timeout: timeout, Hold: 5 * time.Second}}, &side{}
	setupSides(t, "u", a, b, xdp.BindAuto, xdp.Options{})
	dead := netip.MustParseAddrPort("10.99.0.99:4791")
	if e := neighEntry(t, a.ns, a.ifc, dead.Addr()) + neighEntry(t, a.ns, a.ifc, b.addr.Addr()); e != "" {
		t.Fatalf("%s's neighbour table before: %q, want no entries", a.ns.name, e)
	}
	p := sendOnly(b.qpn, 0, []byte("not held up"))
	start := time.Now()
	n, err := a.conn.WriteBatch([]roce.Message{{Buf: p, N: len(p), Addr: dead}, {Buf: p, N: len(p), Addr: b.addr}})
	if took := time.Since(start); n != 2 || err != nil || took > timeout/2 {
		t.Fatalf("WriteBatch = %d, %v in %v; want both sent (held) at once", n, err, took)
	}
	readN(t, b.conn, 1)
	if took := time.Since(start); took >= timeout {
		t.Errorf("b's packet arrived after %v, when the other's resolution was over: it waited for it", took)
	}
	if _, err := a.neigh.HardwareAddr(dead.Addr()); !errors.Is(err, xdp.ErrNoNeighbor) {
		t.Fatalf("the resolution of %v: %v, want ErrNoNeighbor", dead.Addr(), err)
	}
	start = time.Now()
	n, err = a.conn.WriteBatch([]roce.Message{{Buf: p, N: len(p), Addr: dead}})
	if took := time.Since(start); n != 0 || !errors.Is(err, xdp.ErrNoNeighbor) || !strings.Contains(err.Error(), dead.Addr().String()) || took > timeout/2 {
		t.Errorf("WriteBatch to %v after it failed = %d, %v in %v; want at once an error naming it that wraps ErrNoNeighbor", dead, n, err, took)
	}
	if st, err := a.conn.Stats(); err != nil || st.HeldForNeighbor != 2 || st.Sent != 1 {
		t.Errorf("conn stats %+v (%v), want 2 packets held, 1 sent", st, err)
	}
	// Close drops what is still held, if the resolution's end has not yet.
	if err := a.conn.Close(); err != nil {
		t.Fatal(err)
	}
	if st, _ := a.conn.Stats(); st.NoNeighbor != 2 { // closed: the kernel's ring counters are gone, the conn's own are not
		t.Errorf("conn stats %+v, want 2 packets dropped for want of a neighbour: the one held and the one refused", st)
	}
	if got, want := a.neigh.Stats().Snapshot(), (xdp.ResolverStatsSnapshot{Asked: 2, Answered: 1, Failed: 1}); got != want {
		t.Errorf("resolver stats %+v, want %+v", got, want)
	}
}
