//go:build linux

package udpconn_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbridge/rbridge/internal/needs"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/roce/udpconn"
)

// listen opens a conn on ip at a free port.
func listen(t testing.TB, ip string) *udpconn.Conn {
	t.Helper()
	return listenWith(t, ip, udpconn.Options{})
}

// listenWith is listen with options (Addr is set here).
func listenWith(t testing.TB, ip string, o udpconn.Options) *udpconn.Conn {
	t.Helper()
	return udpconn.ListenFree(t, ip, o)
}

func packet(op roce.Opcode, qpn uint32, payload []byte) []byte {
	f := roce.PacketFields{BTH: roce.BTHFields{Opcode: op, PKey: roce.DefaultPKey, DestQP: qpn, PSN: 5}}
	return roce.AppendPacket(make([]byte, 0, roce.MaxPacket), &f, payload)
}

func TestListenNeedsSpecificAddress(t *testing.T) {
	if _, err := udpconn.Listen(udpconn.Options{Addr: netip.MustParseAddrPort("0.0.0.0:4791")}); err == nil {
		t.Fatal("listening on 0.0.0.0: no error")
	}
}

func TestListenBatchTooLarge(t *testing.T) {
	for _, n := range []int{udpconn.MaxBatch + 1, 1 << 40} {
		c, err := udpconn.Listen(udpconn.Options{Addr: netip.MustParseAddrPort("127.0.0.1:0"), Batch: n})
		if err == nil {
			c.Close()
			t.Errorf("batch of %d: no error", n)
		}
	}
}

func TestBatchRoundTrip(t *testing.T) {
	for _, ip := range []string{"127.0.0.1", "::1"} {
		t.Run(ip, func(t *testing.T) {
			a, b := listen(t, ip), listen(t, ip)
			var out []roce.Message
			for i := range 40 {
				p := packet(roce.RCSendOnly, uint32(i), []byte(fmt.Sprintf("packet %02d", i)))
				out = append(out, roce.Message{Buf: p, N: len(p), Addr: b.LocalAddr(), ECN: uint8(i % 3)})
			}
			if n, err := a.WriteBatch(out); err != nil || n != len(out) {
				t.Fatalf("WriteBatch = %d, %v", n, err)
			}
			in := make([]roce.Message, 16)
			for i := range in {
				in[i].Buf = make([]byte, roce.MaxPacket)
			}
			got := 0
			for got < len(out) {
				n, err := b.ReadBatch(in)
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range in[:n] {
					var p roce.Packet
					if err := p.Decode(m.Buf[:m.N]); err != nil {
						t.Fatal(err)
					}
					i := int(p.BTH.DestQP())
					if i != got || string(p.Payload) != fmt.Sprintf("packet %02d", i) || m.Addr != a.LocalAddr() || m.ECN != uint8(i%3) {
						t.Fatalf("message %d: qp %d %q from %v ECN %d", got, i, p.Payload, m.Addr, m.ECN)
					}
					// IPv6 packets are checked against their ICRC; IPv4 ones
					// cannot be (the IP ID is not visible).
					if m.ICRCChecked != (ip == "::1") {
						t.Fatalf("ICRCChecked = %v for %s", m.ICRCChecked, ip)
					}
					got++
				}
			}
		})
	}
}

// TestWriteBatchBadDestination: a destination the conn cannot reach from
// its address (the other family, or none) is an error, not a panic, and
// the messages before it in the batch are sent.
func TestWriteBatchBadDestination(t *testing.T) {
	for _, tc := range []struct {
		local string
		to    netip.AddrPort
		want  error
	}{
		{"127.0.0.1", netip.MustParseAddrPort("[::1]:4791"), roce.ErrAddrFamily},
		{"::1", netip.MustParseAddrPort("127.0.0.2:4791"), roce.ErrAddrFamily},
		{"127.0.0.1", netip.AddrPort{}, roce.ErrNoAddr},
	} {
		t.Run(tc.local+" to "+tc.to.String(), func(t *testing.T) {
			a, b := listen(t, tc.local), listen(t, tc.local)
			p, q := packet(roce.RCSendOnly, 1, []byte("sent")), packet(roce.RCSendOnly, 2, []byte("refused"))
			msgs := []roce.Message{{Buf: p, N: len(p), Addr: b.LocalAddr()}, {Buf: q, N: len(q), Addr: tc.to}, {Buf: p, N: len(p), Addr: b.LocalAddr()}}
			if n, err := a.WriteBatch(msgs); !errors.Is(err, tc.want) || n != 1 {
				t.Fatalf("WriteBatch = %d, %v; want 1 and an error matching %v", n, err, tc.want)
			}
			in := []roce.Message{{Buf: make([]byte, roce.MaxPacket)}}
			if n, err := b.ReadBatch(in); err != nil || n != 1 || in[0].N != len(p) || in[0].Addr != a.LocalAddr() {
				t.Fatalf("ReadBatch = %d, %v: %+v", n, err, in[0])
			}
		})
	}
}

func TestReadAfterClose(t *testing.T) {
	c := listen(t, "127.0.0.1")
	done := make(chan error)
	go func() {
		m := []roce.Message{{Buf: make([]byte, roce.MaxPacket)}}
		_, err := c.ReadBatch(m)
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	c.Close()
	select {
	case err := <-done:
		if !errors.Is(err, roce.ErrConnClosed) {
			t.Errorf("ReadBatch after Close: %v, want ErrConnClosed", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("ReadBatch still blocked after Close")
	}
}

// TestICRCMatchesKernelHeaders captures, on the loopback interface, the
// frames the kernel built for the conn's IPv4 datagrams and verifies their
// ICRC over the real IP header: the conn predicted it right.
func TestICRCMatchesKernelHeaders(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("RBRIDGE_REQUIRE_ROOT") == "1" {
			t.Fatal("needs root for an AF_PACKET capture")
		}
		t.Skip("needs root for an AF_PACKET capture on lo")
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_IP)))
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	lo, err := netIfIndex("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: lo}); err != nil {
		t.Fatal(err)
	}
	tv := unix.NsecToTimeval(int64(2 * time.Second))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	// The receiver listens on port 4791, so the frame is RoCEv2 to a decoder.
	a := listen(t, "127.0.0.1")
	b, err := udpconn.Listen(udpconn.Options{Addr: netip.MustParseAddrPort("127.0.0.53:4791")})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// Once whole, once gathered from headers, payload and trailer
	// (roce.Message.Payload): both must carry an ICRC that verifies.
	payload := []byte("checked by the kernel's own header: 41 bytes"[:41]) // a pad of 3
	p := packet(roce.RCRDMAWriteOnly, 0x77, payload)
	f := roce.PacketFields{BTH: roce.BTHFields{Opcode: roce.RCRDMAWriteOnly, PKey: roce.DefaultPKey, DestQP: 0x77}}
	g, hdr := roce.AppendPacketGather(nil, &f, len(payload))
	for _, m := range []roce.Message{
		{Buf: p, N: len(p), Addr: b.LocalAddr(), ECN: 2},
		{Buf: g, N: len(g), Hdr: hdr, Payload: payload, Addr: b.LocalAddr(), ECN: 2},
	} {
		if _, err := a.WriteBatch([]roce.Message{m}); err != nil {
			t.Fatal(err)
		}
		captureVerified(t, fd, b.LocalAddr(), m.Len())
	}
}

// captureVerified reads frames from the AF_PACKET socket fd until one for
// dst arrives and checks it: IP ID 0, transport length n, ICRC right.
func captureVerified(t *testing.T, fd int, dst netip.AddrPort, n int) {
	t.Helper()
	buf := make([]byte, 65536)
	for {
		got, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			t.Fatalf("no frame captured: %v", err)
		}
		var f roce.Frame
		if err := f.DecodeEthernet(buf[:got]); err != nil || f.Dst != dst {
			continue
		}
		if len(f.UDPPayload()) != n {
			t.Errorf("captured a %d-byte transport packet, sent %d", len(f.UDPPayload()), n)
		}
		if binary.BigEndian.Uint16(f.IP[4:]) != 0 {
			t.Errorf("IP ID %#x, the conn assumes 0", binary.BigEndian.Uint16(f.IP[4:]))
		}
		if err := f.VerifyICRC(); err != nil {
			t.Fatalf("ICRC over the kernel's headers: %v", err)
		}
		return
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func netIfIndex(name string) (int, error) {
	b, err := os.ReadFile("/sys/class/net/" + name + "/ifindex")
	if err != nil {
		return 0, err
	}
	var i int
	_, err = fmt.Sscanf(string(b), "%d", &i)
	return i, err
}

// TestTransportOverUDP runs RC queue pairs over two conns on loopback.
func TestTransportOverUDP(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	type side struct {
		dev *transport.Device
		mr  *transport.MR
		mem []byte
		cq  *transport.CQ
		qp  *transport.QP
		c   *udpconn.Conn
	}
	mk := func(ip string) *side {
		s := &side{c: listen(t, ip), mem: make([]byte, 1<<20), cq: transport.NewCQ(1024)}
		var err error
		if s.dev, err = transport.NewDevice(s.c, transport.DeviceOptions{Logger: quiet}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.dev.Close() })
		pd := transport.NewPD()
		if s.mr, err = pd.RegisterMR(s.mem, transport.AccessLocalWrite|transport.AccessRemoteWrite|transport.AccessRemoteRead); err != nil {
			t.Fatal(err)
		}
		if s.qp, err = s.dev.CreateQP(pd, transport.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b := mk("127.0.0.1"), mk("127.0.0.1")
	for _, p := range [][2]*side{{a, b}, {b, a}} {
		s, peer := p[0], p[1]
		for _, attr := range []transport.QPAttr{
			{State: transport.StateInit},
			{State: transport.StateRTR, DestQPN: peer.qp.QPN(), Remote: peer.c.LocalAddr(), RQPSN: 100, PathMTU: 4096},
			{State: transport.StateRTS, SQPSN: 100, Timeout: 14, RetryCnt: 7, RNRRetry: 7},
		} {
			if err := s.qp.Modify(attr); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range a.mem[:300000] {
		a.mem[i] = byte(i * 7)
	}
	// WRITE_WITH_IMM, so that b's receive completion orders the test's read
	// of b's memory after the write (for the race detector, which does not
	// see the ordering the network gives).
	if err := b.qp.PostRecv(transport.RecvWR{ID: 9}); err != nil {
		t.Fatal(err)
	}
	err := a.qp.PostSend(
		transport.SendWR{ID: 1, Opcode: transport.OpWriteWithImm, Imm: 7, Local: transport.SGE{MR: a.mr, Length: 300000}, Remote: b.mr.Addr(), RKey: b.mr.RKey(), Signaled: true},
		transport.SendWR{ID: 2, Opcode: transport.OpRead, Local: transport.SGE{MR: a.mr, Offset: 400000, Length: 300000}, Remote: b.mr.Addr(), RKey: b.mr.RKey(), Signaled: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wcs [2]transport.WC
	for got := 0; got < 2; {
		n, err := a.cq.PollWait(ctx, wcs[got:])
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}
	if wcs[0].ID != 1 || wcs[0].Status != transport.StatusSuccess || wcs[1].ID != 2 || wcs[1].Status != transport.StatusSuccess {
		t.Fatalf("completions %+v", wcs)
	}
	var bwc [1]transport.WC
	if _, err := b.cq.PollWait(ctx, bwc[:]); err != nil || bwc[0].ID != 9 || !bwc[0].HasImm || bwc[0].ByteLen != 300000 {
		t.Fatalf("b's receive completion: %+v, %v", bwc[0], err)
	}
	for i := range 300000 {
		if b.mem[i] != byte(i*7) || a.mem[400000+i] != byte(i*7) {
			t.Fatalf("byte %d differs after WRITE and READ back", i)
		}
	}
}

// TestMulticastGroup: a conn bound to a group and joined to it on an
// interface receives what a unicast conn sends to the group's address
// (from its own address); a group conn needs an interface to join on.
func TestMulticastGroup(t *testing.T) {
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := udpconn.Listen(udpconn.Options{Addr: netip.MustParseAddrPort("239.7.7.7:4791")}); err == nil {
		t.Error("a group conn without an interface: no error")
	}
	a := listen(t, "127.0.0.1")
	group := netip.AddrPortFrom(netip.MustParseAddr("239.7.7.7"), a.LocalAddr().Port())
	g, err := udpconn.Listen(udpconn.Options{Addr: group, Interface: lo.Index})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	p := packet(roce.UDSendOnly, transport.MulticastQPN, []byte("to the group"))
	if n, err := a.WriteBatch([]roce.Message{{Buf: p, N: len(p), Addr: group}}); err != nil || n != 1 {
		t.Fatalf("WriteBatch to %v = %d, %v", group, n, err)
	}
	in := []roce.Message{{Buf: make([]byte, roce.MaxPacket)}}
	done := make(chan error, 1)
	go func() {
		_, err := g.ReadBatch(in)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the group conn received nothing")
	}
	var pkt roce.Packet
	if err := pkt.Decode(in[0].Buf[:in[0].N]); err != nil || string(pkt.Payload) != "to the group" || in[0].Addr != a.LocalAddr() {
		t.Errorf("received %q from %v (%v), want the datagram from %v", pkt.Payload, in[0].Addr, err, a.LocalAddr())
	}
}

// TestMulticastGroupIPv6: a conn on an IPv6 group binds the group's
// address and joins it (MLD) on the interface. (Receiving is shown where
// IPv6 multicast flows, bridge's TestGatewayGroupIPv6 on a veth: Linux
// sends none on lo.)
func TestMulticastGroupIPv6(t *testing.T) {
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	group := netip.MustParseAddrPort("[ff05::db8:7]:4791")
	g, err := udpconn.Listen(udpconn.Options{Addr: group, Interface: lo.Index})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if g.LocalAddr() != group {
		t.Errorf("bound %v, want the group %v", g.LocalAddr(), group)
	}
}

// TestReadDeadline: past its read deadline ReadBatch returns no packet
// and an error that matches os.ErrDeadlineExceeded; with a later one it
// reads again.
func TestReadDeadline(t *testing.T) {
	a, b := listen(t, "127.0.0.1"), listen(t, "127.0.0.1")
	var _ roce.ReadDeadliner = a
	m := []roce.Message{{Buf: make([]byte, roce.MaxPacket)}}
	start := time.Now()
	if err := a.SetReadDeadline(start.Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	n, err := a.ReadBatch(m)
	if n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("ReadBatch past the deadline: %d, %v; want 0 and a deadline error", n, err)
	}
	if el := time.Since(start); el < 20*time.Millisecond || el > 2*time.Second {
		t.Errorf("ReadBatch returned %v after a 20 ms deadline", el)
	}
	if err := a.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	p := packet(roce.RCSendOnly, 0x11, []byte("after the deadline"))
	if _, err := b.WriteBatch([]roce.Message{{Buf: p, N: len(p), Addr: a.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	if n, err := a.ReadBatch(m); n != 1 || err != nil {
		t.Fatalf("ReadBatch with a later deadline: %d, %v", n, err)
	}
}

// TestDeviceWakesWhileIdle: a transport device on the socket goes round
// its receive loop while nothing arrives, so its heartbeat stays fresh.
func TestDeviceWakesWhileIdle(t *testing.T) {
	c := listen(t, "127.0.0.1")
	d, err := transport.NewDevice(c, transport.DeviceOptions{IdleWake: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	start := time.Now()
	time.Sleep(200 * time.Millisecond)
	last, wakes := d.ReceiveHeartbeat()
	if !wakes || !last.After(start.Add(100*time.Millisecond)) {
		t.Errorf("heartbeat %v after %v idle (wakes %v): want one in the last 100 ms", time.Since(last), time.Since(start), wakes)
	}
}

// TestTryReadBatch: TryReadBatch returns at once with nothing to read,
// reads what arrived, and fails once the deadline passed or the conn
// closed; a BusyPoll conn's socket has SO_BUSY_POLL (root).
func TestTryReadBatch(t *testing.T) {
	a, b := listen(t, "127.0.0.1"), listenWith(t, "127.0.0.1", udpconn.Options{BusyPoll: true})
	in := make([]roce.Message, 4)
	for i := range in {
		in[i].Buf = make([]byte, roce.MaxPacket)
	}
	if n, err := b.TryReadBatch(in); n != 0 || err != nil {
		t.Fatalf("TryReadBatch with nothing sent: %d, %v; want 0, nil", n, err)
	}
	var out []roce.Message
	for i := range 3 {
		p := packet(roce.RCSendOnly, uint32(i), []byte(fmt.Sprintf("polled %d", i)))
		out = append(out, roce.Message{Buf: p, N: len(p), Addr: b.LocalAddr()})
	}
	if _, err := a.WriteBatch(out); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for got := 0; got < len(out); {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d packets polled in 2 s", got, len(out))
		}
		n, err := b.TryReadBatch(in)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range in[:n] {
			var p roce.Packet
			if err := p.Decode(m.Buf[:m.N]); err != nil || string(p.Payload) != fmt.Sprintf("polled %d", got) || m.Addr != a.LocalAddr() {
				t.Fatalf("message %d: %q from %v (%v)", got, p.Payload, m.Addr, err)
			}
			got++
		}
	}
	if err := b.SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if n, err := b.TryReadBatch(in); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("TryReadBatch past the deadline: %d, %v; want a deadline error", n, err)
	}
	if err := b.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	t.Run("SO_BUSY_POLL", func(t *testing.T) {
		needs.Root(t, "SO_BUSY_POLL takes CAP_NET_ADMIN")
		if !b.SocketBusyPoll() {
			t.Error("a BusyPoll conn's socket has no SO_BUSY_POLL, as root")
		}
		if a.SocketBusyPoll() {
			t.Error("a conn without BusyPoll says its socket busy-polls")
		}
	})
	b.Close()
	if _, err := b.TryReadBatch(in); !errors.Is(err, roce.ErrConnClosed) {
		t.Errorf("TryReadBatch after Close: %v, want ErrConnClosed", err)
	}
}
