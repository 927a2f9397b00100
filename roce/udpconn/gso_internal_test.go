//go:build linux

package udpconn

import (
	"bytes"
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rbridge/rbridge/roce"
)

// listenFree opens a conn on ip at a port the kernel says is free (the
// external tests have it as ListenFree: export_linux_test.go).
func listenFree(t testing.TB, ip string, o Options) *Conn {
	t.Helper()
	for port := 40000 + os.Getpid()%10000; port < 65000; port += 11 {
		o.Addr = netip.AddrPortFrom(netip.MustParseAddr(ip), uint16(port))
		c, err := Listen(o)
		if err == nil {
			t.Cleanup(func() { c.Close() })
			return c
		}
		if !errors.Is(err, unix.EADDRINUSE) {
			t.Fatal(err)
		}
	}
	t.Fatal("no free port")
	return nil
}

// hasSegment reports whether a sendmmsg header carries UDP_SEGMENT.
func hasSegment(h *unix.Msghdr) bool {
	if h.Control == nil {
		return false
	}
	ctl := unsafe.Slice(h.Control, h.Controllen)
	for len(ctl) >= unix.SizeofCmsghdr {
		c := (*unix.Cmsghdr)(unsafe.Pointer(&ctl[0]))
		if c.Level == unix.IPPROTO_UDP && c.Type == unix.UDP_SEGMENT {
			return true
		}
		ctl = ctl[min(cmsgAlign(int(c.Len)), len(ctl)):]
	}
	return false
}

// refusingGSO puts a kernel in front of c's sendmmsg that refuses GSO as a
// route through IPsec does (or, on older kernels, a device without
// checksum offload): the headers before the first GSO send go, and that
// send fails with EIO. It returns how many it refused. (The test hosts'
// kernel refuses GSO nowhere a test can make it: it checksums in software
// for devices without checksum offload, a tun without TUN_F_CSUM
// included, and is built without IPsec.)
func refusingGSO(c *Conn) *int {
	refused := new(int)
	kernel := c.wr.mmsg
	c.wr.mmsg = func(fd uintptr, hdrs []mmsghdr) (int, syscall.Errno) {
		for i := range hdrs {
			if hasSegment(&hdrs[i].hdr) {
				if i == 0 {
					*refused++
					return -1, unix.EIO
				}
				hdrs = hdrs[:i]
				break
			}
		}
		return kernel(fd, hdrs)
	}
	return refused
}

// TestGSORefused: when the kernel refuses a GSO send with EIO, the conn
// turns GSO off, says why (Offload, a warning, TxGSOErrors), and sends
// the same packets again a datagram each: all arrive, in order, and
// later batches never try GSO again.
func TestGSORefused(t *testing.T) {
	var logged bytes.Buffer
	a := listenFree(t, "127.0.0.1", Options{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	b := listenFree(t, "127.0.0.1", Options{})
	if !a.Offload().GSO {
		t.Skipf("no GSO to refuse: %v", a.Offload())
	}
	refused := refusingGSO(a)
	// A datagram alone (a shorter one: it can only end a GSO send), then
	// five that make one GSO send: the first goes, the second is
	// refused.
	mk := func(psn, payload int) roce.Message {
		f := roce.PacketFields{BTH: roce.BTHFields{Opcode: roce.RCSendMiddle, PKey: roce.DefaultPKey, DestQP: 0x11, PSN: uint32(psn)}}
		p := roce.AppendPacket(nil, &f, bytes.Repeat([]byte{byte(psn)}, payload))
		return roce.Message{Buf: p, N: len(p), Addr: b.LocalAddr()}
	}
	msgs := []roce.Message{mk(0, 512)}
	for i := 1; i <= 5; i++ {
		msgs = append(msgs, mk(i, 1024))
	}
	if n, err := a.WriteBatch(msgs); err != nil || n != len(msgs) {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	if *refused != 1 {
		t.Fatalf("the kernel refused %d GSO sends, want 1: the test proved nothing", *refused)
	}
	o := a.Offload()
	if o.GSO || !strings.Contains(o.NoGSO, "EIO") {
		t.Errorf("Offload after EIO: %v", o)
	}
	if !strings.Contains(logged.String(), "GSO turned off") {
		t.Errorf("no warning logged: %q", logged.String())
	}
	if st := a.Stats().Snapshot(); st.TxGSOErrors != 1 || st.TxPackets != 6 || st.TxBuffers != 6 {
		t.Errorf("stats %+v, want 1 GSO error and 6 packets in 6 sends", st)
	}
	// Later batches go a datagram a send, without trying.
	if n, err := a.WriteBatch(msgs[1:]); err != nil || n != 5 {
		t.Fatalf("WriteBatch after EIO = %d, %v", n, err)
	}
	if *refused != 1 {
		t.Errorf("GSO tried again after EIO turned it off")
	}
	in := make([]roce.Message, 4)
	for i := range in {
		in[i].Buf = make([]byte, roce.MaxPacket)
	}
	if err := b.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	var psns []uint32
	for len(psns) < 11 {
		n, err := b.ReadBatch(in)
		if err != nil {
			t.Fatalf("after %d packets: %v", len(psns), err)
		}
		for _, m := range in[:n] {
			var p roce.Packet
			if err := p.Decode(m.Buf[:m.N]); err != nil {
				t.Fatal(err)
			}
			psns = append(psns, p.BTH.PSN())
		}
	}
	want := []uint32{0, 1, 2, 3, 4, 5, 1, 2, 3, 4, 5}
	for i := range want {
		if psns[i] != want[i] {
			t.Fatalf("received PSNs %v, want %v", psns, want)
		}
	}
}

// TestEIOWithoutGSO: an EIO from a send that carried no GSO is an error
// like another; GSO stays on.
func TestEIOWithoutGSO(t *testing.T) {
	a := listenFree(t, "127.0.0.1", Options{})
	b := listenFree(t, "127.0.0.1", Options{})
	before := a.Offload()
	a.wr.mmsg = func(uintptr, []mmsghdr) (int, syscall.Errno) { return -1, unix.EIO }
	p := packet(1)
	if _, err := a.WriteBatch([]roce.Message{{Buf: p, N: len(p), Addr: b.LocalAddr()}}); !errors.Is(err, unix.EIO) {
		t.Errorf("WriteBatch: %v, want EIO", err)
	}
	if o := a.Offload(); o != before || a.Stats().TxGSOErrors.Load() != 0 {
		t.Errorf("Offload %v (was %v), %d GSO errors, after an EIO without GSO", o, before, a.Stats().TxGSOErrors.Load())
	}
}

func packet(psn uint32) []byte {
	f := roce.PacketFields{BTH: roce.BTHFields{Opcode: roce.RCSendOnly, PKey: roce.DefaultPKey, DestQP: 0x11, PSN: psn}}
	return roce.AppendPacket(nil, &f, []byte("one datagram"))
}
