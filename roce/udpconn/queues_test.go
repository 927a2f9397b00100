//go:build linux

package udpconn_test

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbridge/rbridge/internal/needs"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/udpconn"
)

// listenQueues opens n queues on ip at a port the kernel chose free.
func listenQueues(t testing.TB, ip string, n int) *udpconn.Queues {
	t.Helper()
	for range 10 {
		pc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(ip), 0)))
		if err != nil {
			t.Fatal(err)
		}
		a := pc.LocalAddr().(*net.UDPAddr).AddrPort()
		pc.Close()
		q, err := udpconn.ListenQueues(udpconn.Options{Addr: a}, n)
		if errors.Is(err, unix.EADDRINUSE) {
			continue // taken between the two binds
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			for _, c := range q.Conns {
				c.Close()
			}
			q.Close()
		})
		return q
	}
	t.Fatal("no free port in 10 tries")
	return nil
}

// TestQueuesSteerByQPN sends datagrams to the QPs of both queues from
// several source ports (which the kernel's hash would spread) and checks
// that each reached the socket of its queue (roce.QueueOf).
func TestQueuesSteerByQPN(t *testing.T) {
	needs.Root(t, "a reuseport BPF program")
	q := listenQueues(t, "127.0.0.1", 2)
	to := q.Conns[0].LocalAddr()
	qpns := []uint32{0x11, 0x12, 0x13, 0x14, 1, roce.MaxQueues + 1, 0xffffff, 0xfffffd}
	want := make([]map[string]bool, 2)
	for i := range want {
		want[i] = map[string]bool{}
	}
	const senders = 8
	for s := range senders {
		uc, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(to))
		if err != nil {
			t.Fatal(err)
		}
		defer uc.Close()
		for _, qpn := range qpns {
			tag := fmt.Sprintf("sender %d qp %#x", s, qpn)
			if _, err := uc.Write(packet(roce.RCSendOnly, qpn, []byte(tag))); err != nil {
				t.Fatal(err)
			}
			want[roce.QueueOf(qpn, 2)][tag] = true
		}
		short := fmt.Sprintf("short %04d!", s) // 11 bytes, a byte short of a BTH: queue 0
		if _, err := uc.Write([]byte(short)); err != nil {
			t.Fatal(err)
		}
		want[0][short] = true
	}
	for i, c := range q.Conns {
		got := map[string]bool{}
		var bytes uint64
		in := make([]roce.Message, 16)
		for j := range in {
			in[j].Buf = make([]byte, roce.MaxPacket)
		}
		if err := c.SetReadDeadline(time.Now().Add(2 * time.Second)); err != nil {
			t.Fatal(err)
		}
		for len(got) < len(want[i]) {
			n, err := c.ReadBatch(in)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range in[:n] {
				bytes += uint64(m.N)
				var p roce.Packet
				if m.N < 12 {
					got[string(m.Buf[:m.N])] = true
				} else if err := p.Decode(m.Buf[:m.N]); err != nil {
					t.Fatalf("queue %d: %v", i, err)
				} else {
					got[string(p.Payload)] = true
				}
			}
		}
		if st := c.Stats().Snapshot(); st.RxBytes != bytes || st.RxPackets != uint64(len(got)) {
			t.Errorf("queue %d counted %d packets, %d bytes; read %d, %d", i, st.RxPackets, st.RxBytes, len(got), bytes)
		}
		for tag := range got {
			if !want[i][tag] {
				t.Errorf("queue %d received %q, which is queue %d's", i, tag, 1-i)
			}
		}
		for tag := range want[i] {
			if !got[tag] {
				t.Errorf("queue %d never received %q", i, tag)
			}
		}
	}
	sc, err := q.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if wantSC := (udpconn.SteerCounters{Steered: senders * uint64(len(qpns)+1), Short: senders}); sc != wantSC {
		t.Errorf("steering counters %+v, want %+v", sc, wantSC)
	}
}

// TestQueuesRefuseAHeldAddress: a group does not join a socket that holds
// its address already, whatever that socket's SO_REUSEPORT.
func TestQueuesRefuseAHeldAddress(t *testing.T) {
	needs.Root(t, "a reuseport BPF program")
	q := listenQueues(t, "127.0.0.1", 2)
	if _, err := udpconn.ListenQueues(udpconn.Options{Addr: q.Conns[0].LocalAddr()}, 2); !errors.Is(err, unix.EADDRINUSE) {
		t.Errorf("a second group on a group's address: %v, want EADDRINUSE", err)
	}
	if _, err := udpconn.Listen(udpconn.Options{Addr: q.Conns[0].LocalAddr()}); !errors.Is(err, unix.EADDRINUSE) {
		t.Errorf("a conn on a group's address: %v, want EADDRINUSE", err)
	}
}

func TestQueuesBadCount(t *testing.T) {
	for _, n := range []int{0, -1, roce.MaxQueues + 1} {
		if _, err := udpconn.ListenQueues(udpconn.Options{Addr: netip.MustParseAddrPort("127.0.0.1:0")}, n); err == nil {
			t.Errorf("ListenQueues with %d queues: no error", n)
		}
	}
}
