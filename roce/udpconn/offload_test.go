//go:build linux

package udpconn_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbridge/rbridge/internal/needs"
	"github.com/rbridge/rbridge/internal/netns"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/udpconn"
)

// needOffload skips t when the kernel has no GSO or GRO (before 4.18 and
// 5.0), as the conn's probe found; with RBRIDGE_REQUIRE_ROOT=1 (CI, a
// recent kernel) it fails instead.
func needOffload(t *testing.T) {
	t.Helper()
	c := listen(t, "127.0.0.1")
	var err error
	if o := c.Offload(); !o.GSO || !o.GRO {
		err = errors.New(o.String())
	}
	needs.Check(t, "UDP GSO and GRO (Linux 5.0)", err)
}

// TestOffloadProbed: a conn has GSO and GRO unless its options turn them
// off, and says so, with the reason, in its Offload.
func TestOffloadProbed(t *testing.T) {
	needOffload(t)
	for _, tc := range []struct {
		opts udpconn.Options
		want string
	}{
		{udpconn.Options{}, "gso on, gro on"},
		{udpconn.Options{NoGSO: true}, "gso off (turned off (Options.NoGSO)), gro on"},
		{udpconn.Options{NoGRO: true}, "gso on, gro off (turned off (Options.NoGRO))"},
		{udpconn.Options{NoGSO: true, NoGRO: true}, "gso off (turned off (Options.NoGSO)), gro off (turned off (Options.NoGRO))"},
	} {
		c := listenWith(t, "127.0.0.1", tc.opts)
		o := c.Offload()
		if got := o.String(); got != tc.want {
			t.Errorf("%+v: Offload %q, want %q", tc.opts, got, tc.want)
		}
		if o.GSO == tc.opts.NoGSO || o.GRO == tc.opts.NoGRO {
			t.Errorf("%+v: Offload %+v", tc.opts, o)
		}
	}
}

// seg is one packet of a batch in the offload tests: to which receiver,
// its payload length, its ECN, and whether the conn gathers it
// (roce.Message.Payload).
type seg struct {
	to, payload int
	ecn         uint8
	gather      bool
}

// segs returns n packets of one payload length to receiver 0.
func segs(n, payload int) []seg {
	out := make([]seg, n)
	for i := range out {
		out[i] = seg{payload: payload}
	}
	return out
}

// offloadCases are batches for one WriteBatch, and how many sends (one
// datagram, or a GSO send of several) the conn makes of each with GSO.
var offloadCases = []struct {
	name  string
	segs  []seg
	sends int
}{
	{"exactly one segment", segs(1, 1024), 1},
	{"above one MTU, the last shorter and odd", append(segs(4, 1024), seg{payload: 333}), 1},
	{"64 segments", segs(64, 256), 1},
	{"65 segments: past 64, which every kernel takes", segs(65, 256), 2},
	{"16 of 4 KiB: past 64 KiB", segs(16, 4096), 2},
	{"200 segments: more than one batch holds", segs(200, 64), 4},
	{"mixed destinations", []seg{{0, 1024, 0, false}, {0, 1024, 0, false}, {1, 1024, 0, false}, {1, 1024, 0, false}, {0, 1024, 0, false}, {1, 512, 0, false}}, 4},
	{"ECN changes", []seg{{0, 1024, 2, false}, {0, 1024, 2, false}, {0, 1024, 2, false}, {0, 1024, 0, false}, {0, 1024, 0, false}}, 2},
	{"longer after shorter", []seg{{0, 1024, 0, false}, {0, 1024, 0, false}, {0, 512, 0, false}, {0, 1024, 0, false}, {0, 1024, 0, false}}, 2},
	{"first longer than the rest", []seg{{0, 1040, 0, false}, {0, 1024, 0, false}, {0, 1024, 0, false}}, 2},
	{"gathered payloads", []seg{{0, 2048, 2, true}, {0, 2048, 2, true}, {0, 2048, 2, true}, {0, 100, 2, true}}, 1},
}

// batchOf builds the packets of segs, from the conn at index 0 of peers:
// packet i has PSN i and a payload of bytes i+j, a whole packet or
// gathered from where the payload lies.
func batchOf(segs []seg, peers []*udpconn.Conn) []roce.Message {
	msgs := make([]roce.Message, len(segs))
	for i, s := range segs {
		payload := make([]byte, s.payload)
		for j := range payload {
			payload[j] = byte(i + j)
		}
		f := roce.PacketFields{BTH: roce.BTHFields{Opcode: roce.RCSendMiddle, PKey: roce.DefaultPKey, DestQP: 0x11, PSN: uint32(i)}}
		m := roce.Message{Addr: peers[s.to].LocalAddr(), ECN: s.ecn}
		if s.gather {
			m.Buf, m.Hdr = roce.AppendPacketGather(nil, &f, len(payload))
			m.Payload = payload
		} else {
			m.Buf = roce.AppendPacket(nil, &f, payload)
		}
		m.N = len(m.Buf)
		msgs[i] = m
	}
	return msgs
}

// wantSends counts the sends of a case per receiver: the sends it makes,
// each to one receiver.
func wantSends(segs []seg, sends int, gso bool, receivers int) []int {
	out := make([]int, receivers)
	if !gso {
		for _, s := range segs {
			out[s.to]++
		}
		return out
	}
	// The cases' sends break where the destination changes, and
	// otherwise as the case says (one destination).
	runs := 0
	for i, s := range segs {
		if i == 0 || s.to != segs[i-1].to {
			out[s.to]++
			runs++
		}
	}
	if runs == 1 {
		out[segs[0].to] = sends
	}
	return out
}

// readAll reads n packets from c into a batch of in messages (fewer than
// a GRO buffer may hold, so some wait for the next read) and returns
// copies of them, each with its Addr, ECN and ICRCChecked.
func readAll(t *testing.T, c *udpconn.Conn, n, in int) []roce.Message {
	t.Helper()
	msgs := make([]roce.Message, in)
	for i := range msgs {
		msgs[i].Buf = bytes.Repeat([]byte{0xff}, roce.MaxPacket)
	}
	if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	var out []roce.Message
	for len(out) < n {
		got, err := c.ReadBatch(msgs)
		if err != nil {
			t.Fatalf("%d of %d packets read: %v", len(out), n, err)
		}
		for _, m := range msgs[:got] {
			m.Buf = bytes.Clone(m.Buf[:m.N])
			out = append(out, m)
		}
	}
	return out
}

// TestOffloadRoundTrip sends each case's batch with GSO on and off to
// receivers with GRO on and off, over IPv4 and IPv6: every packet
// arrives whole, in order, with its sender and ECN (and, over IPv6, an
// ICRC that verifies: each datagram's own, over its own length); the
// sender made the sends the case says (with GSO) or one per packet, and
// a GRO receiver got each GSO send as one buffer.
func TestOffloadRoundTrip(t *testing.T) {
	needOffload(t)
	for _, ip := range []string{"127.0.0.1", "::1"} {
		for _, gso := range []bool{true, false} {
			for _, gro := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s gso %v gro %v", ip, gso, gro), func(t *testing.T) {
					a := listenWith(t, ip, udpconn.Options{NoGSO: !gso})
					peers := []*udpconn.Conn{listenWith(t, ip, udpconn.Options{NoGRO: !gro}), listenWith(t, ip, udpconn.Options{NoGRO: !gro})}
					for _, tc := range offloadCases {
						before := a.Stats().Snapshot()
						rx := []udpconn.StatsSnapshot{peers[0].Stats().Snapshot(), peers[1].Stats().Snapshot()}
						msgs := batchOf(tc.segs, peers)
						if n, err := a.WriteBatch(msgs); err != nil || n != len(msgs) {
							t.Fatalf("%s: WriteBatch = %d, %v", tc.name, n, err)
						}
						after := a.Stats().Snapshot()
						sends := wantSends(tc.segs, tc.sends, gso, len(peers))
						if got, want := after.TxBuffers-before.TxBuffers, uint64(sends[0]+sends[1]); got != want {
							t.Errorf("%s: %d sends, want %d", tc.name, got, want)
						}
						if got := after.TxPackets - before.TxPackets; got != uint64(len(msgs)) {
							t.Errorf("%s: TxPackets moved by %d, want %d", tc.name, got, len(msgs))
						}
						for p, peer := range peers {
							var want []int // the indexes of the packets to peer
							for i, s := range tc.segs {
								if s.to == p {
									want = append(want, i)
								}
							}
							got := readAll(t, peer, len(want), 7)
							for k, m := range got {
								i := want[k]
								var pkt roce.Packet
								if err := pkt.Decode(m.Buf); err != nil {
									t.Fatalf("%s: packet %d to %d: %v", tc.name, i, p, err)
								}
								if pkt.BTH.PSN() != uint32(i) || m.Addr != a.LocalAddr() || m.ECN != tc.segs[i].ecn || m.ICRCChecked != (ip == "::1") {
									t.Fatalf("%s: packet %d to %d: PSN %d from %v ECN %d ICRC checked %v", tc.name, i, p, pkt.BTH.PSN(), m.Addr, m.ECN, m.ICRCChecked)
								}
								if len(pkt.Payload) != tc.segs[i].payload {
									t.Fatalf("%s: packet %d: %d payload bytes, want %d", tc.name, i, len(pkt.Payload), tc.segs[i].payload)
								}
								for j, v := range pkt.Payload {
									if v != byte(i+j) {
										t.Fatalf("%s: packet %d: payload byte %d is %d, want %d", tc.name, i, j, v, byte(i+j))
									}
								}
							}
							st := peer.Stats().Snapshot()
							if st.RxPackets-rx[p].RxPackets != uint64(len(want)) || st.RxBadICRC != 0 || st.RxTruncated != 0 {
								t.Errorf("%s: receiver %d: %+v, want %d packets more than %+v", tc.name, p, st, len(want), rx[p])
							}
							// Loopback coalesces nothing itself: a GRO
							// receiver gets what GSO sent as one buffer.
							wantBufs := uint64(len(want))
							if gso && gro {
								wantBufs = uint64(sends[p])
							}
							if got := st.RxBuffers - rx[p].RxBuffers; got != wantBufs {
								t.Errorf("%s: receiver %d read %d buffers, want %d", tc.name, p, got, wantBufs)
							}
						}
					}
				})
			}
		}
	}
}

// TestGROClosedWithPacketsLeft: a GRO read that left packets of a buffer
// for later reads hands none after Close; it returns ErrConnClosed.
func TestGROClosedWithPacketsLeft(t *testing.T) {
	needOffload(t)
	a, b := listen(t, "127.0.0.1"), listen(t, "127.0.0.1")
	if _, err := a.WriteBatch(batchOf(segs(10, 1024), []*udpconn.Conn{b})); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, b, 1, 1); len(got) != 1 {
		t.Fatalf("read %d packets, want 1", len(got))
	}
	if st := b.Stats().Snapshot(); st.RxBuffers != 1 || st.RxPackets != 1 {
		t.Fatalf("the first read: %+v, want one buffer read and one packet handed out", st)
	}
	b.Close()
	in := []roce.Message{{Buf: make([]byte, roce.MaxPacket)}}
	if n, err := b.ReadBatch(in); n != 0 || !errors.Is(err, roce.ErrConnClosed) {
		t.Errorf("ReadBatch after Close: %d, %v; want ErrConnClosed", n, err)
	}
}

// TestGROSmallBuffer: a GRO packet longer than the caller's buffer is
// counted as truncated and dropped; the packets around it arrive.
func TestGROSmallBuffer(t *testing.T) {
	needOffload(t)
	a, b := listen(t, "127.0.0.1"), listen(t, "127.0.0.1")
	if _, err := a.WriteBatch(batchOf(append(segs(3, 1024), seg{payload: 16}), []*udpconn.Conn{b})); err != nil {
		t.Fatal(err)
	}
	in := make([]roce.Message, 8)
	for i := range in {
		in[i].Buf = make([]byte, 64)
	}
	if err := b.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	n, err := b.ReadBatch(in)
	if err != nil || n != 1 {
		t.Fatalf("ReadBatch = %d, %v; want the one short packet", n, err)
	}
	var pkt roce.Packet
	if err := pkt.Decode(in[0].Buf[:in[0].N]); err != nil || pkt.BTH.PSN() != 3 {
		t.Fatalf("read PSN %d (%v), want 3", pkt.BTH.PSN(), err)
	}
	if st := b.Stats().Snapshot(); st.RxTruncated != 3 || st.RxPackets != 4 {
		t.Errorf("stats %+v, want 3 truncated of 4", st)
	}
}

// TestOffloadLogValue: the offload logs as a group that says why one is
// off.
func TestOffloadLogValue(t *testing.T) {
	o := udpconn.Offload{GSO: false, GRO: true, NoGSO: "a send failed with EIO"}
	v := o.LogValue().String()
	for _, want := range []string{"gso=false", "gro=true", "no_gso=a send failed with EIO"} {
		if !strings.Contains(v, want) {
			t.Errorf("LogValue %s: no %s", v, want)
		}
	}
	if strings.Contains(v, "no_gro") {
		t.Errorf("LogValue %s: a reason for GRO, which is on", v)
	}
}

// TestGSOOnTheWire sends a GSO batch out of a tun device in a network
// namespace of its own, whose kernel cuts it into datagrams itself (the
// tun offers checksum offload but no segmentation, as many NICs), and
// reads the datagrams from the tun: one per packet, in order, each with
// its own length and, over IPv4, IP ID 0, 1, 2, ...: the ICRC the conn
// predicted for each verifies over the headers the kernel wrote.
func TestGSOOnTheWire(t *testing.T) {
	needs.Root(t, "a network namespace and a tun device")
	needOffload(t)
	_, err := exec.LookPath("ip")
	needs.Check(t, "ip from iproute2", err)
	ns := fmt.Sprintf("rbgso%d", os.Getpid()%100000)
	ipCmd(t, "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	var tun *os.File
	err = netns.Do(ns, func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		// The file only once the device is attached: a tun fd polls
		// from then on.
		ifr, err := unix.NewIfreq("rbgso0")
		if err == nil {
			ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
			if err = unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
				err = fmt.Errorf("TUNSETIFF: %w", err)
			}
		}
		if err == nil {
			// Checksum offload, which older kernels' GSO needs, and no
			// UDP segmentation offload (TUN_F_USO4): the kernel
			// segments.
			err = unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, unix.TUN_F_CSUM)
		}
		if err != nil {
			unix.Close(fd)
			return err
		}
		tun = os.NewFile(uintptr(fd), "tun")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tun.Close() })
	ipCmd(t, "-n", ns, "addr", "add", "198.18.0.1/24", "dev", "rbgso0")
	ipCmd(t, "-n", ns, "addr", "add", "2001:db8::1/64", "dev", "rbgso0", "nodad")
	ipCmd(t, "-n", ns, "link", "set", "rbgso0", "up")
	for _, tc := range []struct{ local, peer string }{
		{"198.18.0.1", "198.18.0.2"},
		{"2001:db8::1", "2001:db8::2"},
	} {
		var c *udpconn.Conn
		if err := netns.Do(ns, func() (err error) {
			c, err = udpconn.Listen(udpconn.Options{Addr: netip.AddrPortFrom(netip.MustParseAddr(tc.local), 0)})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		peer := netip.AddrPortFrom(netip.MustParseAddr(tc.peer), roce.Port)
		segs := []seg{{0, 1024, 2, false}, {0, 1024, 2, true}, {0, 1024, 2, false}, {0, 1024, 2, true}, {0, 333, 2, false}}
		msgs := batchOf(segs, []*udpconn.Conn{c})
		for i := range msgs {
			msgs[i].Addr = peer
		}
		if n, err := c.WriteBatch(msgs); err != nil || n != len(msgs) {
			t.Fatalf("%s: WriteBatch = %d, %v", tc.local, n, err)
		}
		if st := c.Stats().Snapshot(); st.TxBuffers != 1 {
			t.Fatalf("%s: %d sends, want one GSO send", tc.local, st.TxBuffers)
		}
		for i := range msgs {
			pkt := readTun(t, tun)
			var f roce.Frame
			if err := f.DecodeIP(pkt); err != nil {
				t.Fatalf("%s: datagram %d: %v", tc.local, i, err)
			}
			if f.Dst != peer || f.Packet.BTH.PSN() != uint32(i) || len(f.UDPPayload()) != msgs[i].Len() || f.ECN != 2 {
				t.Fatalf("%s: datagram %d: to %v, PSN %d, %d bytes, ECN %d; want %v, %d, %d, 2", tc.local, i, f.Dst, f.Packet.BTH.PSN(), len(f.UDPPayload()), f.ECN, peer, i, msgs[i].Len())
			}
			if !f.IPv6 {
				if id := binary.BigEndian.Uint16(f.IP[4:]); id != uint16(i) {
					t.Errorf("%s: datagram %d has IP ID %d", tc.local, i, id)
				}
			}
			if err := f.VerifyICRC(); err != nil {
				t.Errorf("%s: datagram %d: ICRC over the kernel's headers: %v", tc.local, i, err)
			}
		}
	}
}

// readTun returns the next RoCEv2 datagram the tun device's kernel sent
// (skipping what else it sends, IPv6 router solicitations), waiting up to
// five seconds for it.
func readTun(t *testing.T, tun *os.File) []byte {
	t.Helper()
	buf := make([]byte, 65536)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if err := tun.SetReadDeadline(deadline); err != nil {
			t.Fatal(err)
		}
		n, err := tun.Read(buf)
		if err != nil {
			t.Fatalf("reading the tun: %v", err)
		}
		var f roce.Frame
		if err := f.DecodeIP(buf[:n]); err == nil || f.Dst.Port() == roce.Port {
			return buf[:n]
		}
	}
}

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}
