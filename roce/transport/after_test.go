//go:build linux

package transport_test

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rbridge/rbridge/internal/testlog"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/simnet"
	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/roce/udpconn"
)

// TestAfterReceived: a function given to AfterReceived runs on the
// device's reader after what the conn held when it was given: on a
// device waiting on a UDP socket, after the datagrams already in the
// socket (its wait woken by a deadline); on a polled device, at the Poll
// that finds the conn empty; on a closed device, at once. One given to
// AfterAllReceived runs once, after every device of the set did.
func TestAfterReceived(t *testing.T) {
	// heldCount is how many datagrams fullConn's socket holds: for a QP
	// the device does not have, each counted as it is handled.
	const heldCount = 64
	// after starts a device on c (the conn or a wrapper of it) with an
	// hour's idle wake, gives it a function that reports the datagrams
	// handled by then, runs between (if any), and checks that the
	// function ran after every datagram the socket held.
	after := func(t *testing.T, c roce.PacketConn, between func()) {
		dev, err := transport.NewDevice(c, transport.DeviceOptions{Logger: testlog.New(t), IdleWake: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer dev.Close()
		ran := make(chan uint64, 1)
		dev.AfterReceived(func() { ran <- dev.Stats().RxUnknownQP.Load() })
		if between != nil {
			between()
		}
		select {
		case got := <-ran:
			if got != heldCount {
				t.Errorf("the function ran after %d of the %d datagrams the socket held", got, heldCount)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the function did not run in 5 s: the reader's wait (an hour) was not woken")
		}
	}
	t.Run("waiting", func(t *testing.T) {
		after(t, fullConn(t, "127.0.0.41:4791", "127.0.0.42:4791", heldCount), nil)
	})
	t.Run("woken as it stops waiting", func(t *testing.T) {
		// AfterReceived saw the reader about to wait and ended the wait
		// with a deadline in the past, as the reader instead went on to
		// read without waiting: that read meets the deadline too, and
		// must read on, not take the conn for empty.
		c := &lateWake{Conn: fullConn(t, "127.0.0.43:4791", "127.0.0.44:4791", heldCount), gate: make(chan struct{})}
		after(t, c, func() { close(c.gate) }) // the reader goes on, its deadline past
	})
	t.Run("polled", func(t *testing.T) {
		sn := simnet.New(simnet.Options{})
		a := newEndOpts(t, sn, "10.0.0.1:4791", transport.DeviceOptions{Polled: true})
		b, err := sn.Listen(netip.MustParseAddrPort("10.0.0.2:4791"))
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		var ran bool
		a.dev.AfterReceived(func() { ran = true })
		if ran {
			t.Fatal("the function ran before a Poll")
		}
		pkt := nobodys()
		msgs := []roce.Message{{Buf: pkt, N: len(pkt), Addr: a.addr}, {Buf: pkt, N: len(pkt), Addr: a.addr}}
		if _, err := b.WriteBatch(msgs); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
		if _, err := a.dev.Poll(); err != nil {
			t.Fatal(err)
		}
		if !ran {
			t.Fatal("the function did not run at the Poll that emptied the conn")
		}
		if got := a.dev.Stats().RxUnknownQP.Load(); got != 2 {
			t.Errorf("%d datagrams handled, want 2", got)
		}
	})
	t.Run("all", func(t *testing.T) {
		// Two devices of one set (NewDevices), each on a socket of its
		// own: the function runs once, after both read what they held.
		var conns []roce.PacketConn
		for _, a := range []string{"127.0.0.43:4791", "127.0.0.44:4791"} {
			c, err := udpconn.Listen(udpconn.Options{Addr: netip.MustParseAddrPort(a), Logger: testlog.New(t)})
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
		}
		tx, err := udpconn.Listen(udpconn.Options{Addr: netip.MustParseAddrPort("127.0.0.45:4791"), Logger: testlog.New(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Close()
		pkt := nobodys()
		var msgs []roce.Message
		for range 16 {
			for _, c := range conns {
				msgs = append(msgs, roce.Message{Buf: pkt, N: len(pkt), Addr: c.LocalAddr()})
			}
		}
		if k, err := tx.WriteBatch(msgs); err != nil || k != len(msgs) {
			t.Fatalf("sent %d of %d: %v", k, len(msgs), err)
		}
		waitHeld(t, conns...)
		devs, err := transport.NewDevices(conns, transport.DeviceOptions{Logger: testlog.New(t), IdleWake: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range devs {
			defer d.Close()
		}
		ran := make(chan [2]uint64, 2)
		devs[0].AfterAllReceived(func() {
			ran <- [2]uint64{devs[0].Stats().RxUnknownQP.Load(), devs[1].Stats().RxUnknownQP.Load()}
		})
		select {
		case got := <-ran:
			if got != [2]uint64{16, 16} {
				t.Errorf("the function ran after %v of the 16 datagrams each socket held", got)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the function did not run in 5 s")
		}
		select {
		case <-ran:
			t.Error("the function ran twice")
		case <-time.After(50 * time.Millisecond):
		}
	})
	t.Run("closed", func(t *testing.T) {
		sn := simnet.New(simnet.Options{})
		a := newEnd(t, sn, "10.0.0.3:4791")
		a.dev.Close()
		ran := false
		a.dev.AfterReceived(func() { ran = true })
		if !ran {
			t.Error("on a closed device the function did not run at once")
		}
	})
}

// nobodys is a SEND to a QP no device here has.
// fullConn returns a UDP conn at addr whose socket holds n datagrams
// for a QP nobody has, sent from a conn at from.
func fullConn(t *testing.T, addr, from string, n int) *udpconn.Conn {
	t.Helper()
	c, err := udpconn.Listen(udpconn.Options{Addr: netip.MustParseAddrPort(addr), Logger: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := udpconn.Listen(udpconn.Options{Addr: netip.MustParseAddrPort(from), Logger: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	pkt := nobodys()
	msgs := make([]roce.Message, n)
	for i := range msgs {
		msgs[i] = roce.Message{Buf: pkt, N: len(pkt), Addr: c.LocalAddr()}
	}
	if k, err := tx.WriteBatch(msgs); err != nil || k != n {
		t.Fatalf("sent %d of %d: %v", k, n, err)
	}
	waitHeld(t, c)
	return c
}

// lateWake is a UDP conn whose first long read deadline (the reader's,
// set before it looks for AfterReceived's functions) waits for gate, then
// lands in the past: as if AfterReceived's wake-up had come just then.
type lateWake struct {
	*udpconn.Conn
	gate chan struct{}
	once bool
}

func (c *lateWake) SetReadDeadline(t time.Time) error {
	if !c.once && time.Until(t) > time.Minute {
		c.once = true
		<-c.gate
		t = time.Now()
	}
	return c.Conn.SetReadDeadline(t)
}

func nobodys() []byte {
	f := roce.PacketFields{BTH: roce.BTHFields{Opcode: roce.RCSendOnly, PKey: roce.DefaultPKey, DestQP: 0x123456}}
	return roce.AppendPacket(nil, &f, []byte("nobody's"))
}

// waitHeld waits until the kernel has put what was sent to conns into
// their sockets (/proc/net/udp's rx_queue, steady and not empty): on
// loopback a send may leave its delivery to a softirq that runs later,
// and a function given to AfterReceived runs after what a socket held
// when it was given, not after what arrives later. No reader may be
// reading conns.
func waitHeld(t *testing.T, conns ...roce.PacketConn) {
	t.Helper()
	last := make([]int64, len(conns))
	deadline := time.Now().Add(5 * time.Second)
	for steady := 0; steady < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("the sockets held %v bytes after 5 s: what was sent did not arrive", last)
		}
		time.Sleep(5 * time.Millisecond)
		same := true
		for i, c := range conns {
			q := rxQueued(t, c.LocalAddr())
			if q == 0 || q != last[i] {
				same = false
			}
			last[i] = q
		}
		if same {
			steady++
		} else {
			steady = 0
		}
	}
}

// rxQueued returns the bytes the kernel holds for the UDP socket bound to
// addr (an IPv4 address), as /proc/net/udp gives them.
func rxQueued(t *testing.T, addr netip.AddrPort) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/net/udp")
	if err != nil {
		t.Fatal(err)
	}
	a := addr.Addr().As4()
	local := fmt.Sprintf("%02X%02X%02X%02X:%04X", a[3], a[2], a[1], a[0], addr.Port())
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 5 || f[1] != local {
			continue
		}
		_, rx, ok := strings.Cut(f[4], ":")
		if !ok {
			t.Fatalf("/proc/net/udp: %q: no tx_queue:rx_queue", line)
		}
		n, err := strconv.ParseInt(rx, 16, 64)
		if err != nil {
			t.Fatalf("/proc/net/udp: %q: %v", line, err)
		}
		return n
	}
	t.Fatalf("/proc/net/udp has no socket bound to %v", addr)
	return 0
}
