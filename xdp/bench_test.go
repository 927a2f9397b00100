//go:build linux

package xdp_test

import (
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/xdp"
)

// BenchmarkClassifier measures the classifier next to a bare XDP_PASS
// program with BPF_PROG_TEST_RUN on the same frame, in the same run: the
// "ratio" metric is classifier time / XDP_PASS time per packet.
func BenchmarkClassifier(b *testing.B) {
	p := loadProgram(b, xdp.Options{})
	if err := p.AddQP(ownedQP, xdp.QP{RemoteQPN: remoteQP}); err != nil {
		b.Fatal(err)
	}
	classify, pass := p.Programs()
	for _, bc := range []struct {
		name  string
		frame []byte
	}{
		{"not-roce", buildFrame(frameSpec{src: ip4A, dst: ip4B, sport: 1, dport: 53, transport: make([]byte, 64)})},
		{"unowned", buildFrame(roceFrame(roce.RCSendOnly, otherQP, 0))},
		{"owned", buildFrame(roceFrame(roce.RCSendOnly, ownedQP, 0))},
		{"owned-ipv6-vlan", buildFrame(frameSpec{vlans: 1, src: ip6A, dst: ip6B, sport: 1, transport: transport(roce.RCRDMAWriteOnly, ownedQP, 64)})},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.frame)))
			var tc, tp time.Duration
			// Alternate in rounds so that both see the same machine.
			const rounds = 4
			n := max(b.N/rounds, 1)
			for range rounds {
				_, d, err := classify.Benchmark(bc.frame, n, nil)
				if err != nil {
					b.Fatal(err)
				}
				tc += d
				_, d, err = pass.Benchmark(bc.frame, n, nil)
				if err != nil {
					b.Fatal(err)
				}
				tp += d
			}
			b.ReportMetric(float64(tc.Nanoseconds())/rounds, "classify-ns/pkt")
			b.ReportMetric(float64(tp.Nanoseconds())/rounds, "pass-ns/pkt")
			b.ReportMetric(float64(tc)/float64(tp), "ratio")
		})
	}
}

// BenchmarkReceive measures packets/s received on one veth end, from the
// same AF_XDP sender in the other namespace blasting 64-byte RoCEv2 SENDs:
// through the classifier to an AF_XDP Conn, and through the kernel to a UDP
// socket (recvmmsg, no XDP program). Each sub-benchmark reports pkts/s.
func BenchmarkReceive(b *testing.B) {
	mode := xdp.ModeNative
	if os.Getenv("RBRIDGE_XDP_GENERIC") == "1" {
		mode = xdp.ModeGeneric
	}
	a, bs := setup(b, "b", xdp.BindAuto, mode)
	udpExchange(b, a.ns, bs.ns, netip.MustParseAddrPort("10.99.0.2:9999"), []byte("arp"))
	udpExchange(b, bs.ns, a.ns, netip.MustParseAddrPort("10.99.0.1:9999"), []byte("arp"))
	var ifindex int
	bs.ns.do(func() {
		ifi, err := net.InterfaceByName(bs.ifc)
		if err == nil {
			ifindex = ifi.Index
		}
	})
	pkt := sendOnly(bs.qpn, 0, make([]byte, 64))

	// The sender: WriteBatch of 64 until stopped; stop returns how many it
	// sent.
	blast := func(b *testing.B) (stop func() uint64) {
		var done atomic.Bool
		var sent atomic.Uint64
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			msgs := make([]roce.Message, 64)
			for i := range msgs {
				msgs[i] = roce.Message{Buf: pkt, N: len(pkt), Addr: bs.addr}
			}
			for !done.Load() {
				n, err := a.conn.WriteBatch(msgs)
				sent.Add(uint64(n))
				if err != nil {
					b.Error(err)
					return
				}
			}
		}()
		var once sync.Once
		stop = func() uint64 {
			once.Do(func() { done.Store(true); wg.Wait() })
			return sent.Load()
		}
		b.Cleanup(func() { stop() }) // also when the benchmark fails early
		return stop
	}
	// report gives the receive rate, and the share of the packets sent that
	// arrived: near 1 means the sender, not the receiver, set the pace.
	report := func(b *testing.B, start time.Time, stop func() uint64) {
		el := time.Since(start)
		sent := stop()
		b.ReportMetric(float64(b.N)/el.Seconds(), "pkts/s")
		b.ReportMetric(float64(b.N)/float64(sent), "delivered")
	}

	b.Run("afxdp", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(pkt)))
		msgs := make([]roce.Message, 64)
		for i := range msgs {
			msgs[i].Buf = make([]byte, roce.MaxPacket)
		}
		stop := blast(b)
		st0, err := bs.conn.Stats()
		if err != nil {
			b.Fatal(err)
		}
		watchdog := time.AfterFunc(30*time.Second, func() { bs.conn.Close() })
		defer watchdog.Stop()
		b.ResetTimer()
		start := time.Now()
		for got := 0; got < b.N; {
			n, err := bs.conn.ReadBatch(msgs[:min(len(msgs), b.N-got)])
			if err != nil {
				b.Fatalf("ReadBatch after %d of %d: %v", got, b.N, err)
			}
			got += n
		}
		report(b, start, stop)
		st, err := bs.conn.Stats()
		if err != nil {
			b.Fatal(err)
		}
		// Frames the reader was too slow for (the rest of the loss is in
		// the kernel, before the classifier).
		b.ReportMetric(float64(st.RXRingDrops-st0.RXRingDrops)/float64(b.N), "ringdrops/pkt")
	})

	b.Run("udp", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(pkt)))
		if err := bs.prog.Detach(ifindex); err != nil {
			b.Fatal(err)
		}
		defer bs.ns.do(func() {
			if _, err := bs.prog.Attach(ifindex); err != nil {
				b.Error(err)
			}
		})
		var uc *net.UDPConn
		var err error
		bs.ns.do(func() { uc, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(bs.addr)) })
		if err != nil {
			b.Fatal(err)
		}
		defer uc.Close()
		if err := uc.SetReadBuffer(4 << 20); err != nil {
			b.Fatal(err)
		}
		mm := newMmsg(64, roce.MaxPacket)
		stop := blast(b)
		b.ResetTimer()
		start := time.Now()
		var p roce.Packet
		for got := 0; got < b.N; {
			uc.SetReadDeadline(time.Now().Add(testTimeout))
			n, err := mm.read(uc, min(64, b.N-got))
			if err != nil {
				b.Fatalf("recvmmsg after %d of %d: %v", got, b.N, err)
			}
			for i := range n {
				if err := p.Decode(mm.bufs[i][:mm.hdrs[i].Len]); err != nil {
					b.Fatal(err)
				}
			}
			got += n
		}
		report(b, start, stop)
	})
}

// mmsg is a recvmmsg batch: the UDP receiver's fair counterpart of
// ReadBatch.
type mmsg struct {
	hdrs []unix.Mmsghdr
	iovs []unix.Iovec
	bufs [][]byte
}

func newMmsg(n, size int) *mmsg {
	m := &mmsg{hdrs: make([]unix.Mmsghdr, n), iovs: make([]unix.Iovec, n), bufs: make([][]byte, n)}
	for i := range n {
		m.bufs[i] = make([]byte, size)
		m.iovs[i].Base = &m.bufs[i][0]
		m.iovs[i].SetLen(size)
		m.hdrs[i].Hdr.Iov = &m.iovs[i]
		m.hdrs[i].Hdr.SetIovlen(1)
	}
	return m
}

func (m *mmsg) read(uc *net.UDPConn, n int) (int, error) {
	rc, err := uc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var got int
	var serr error
	err = rc.Read(func(fd uintptr) bool {
		r, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&m.hdrs[0])), uintptr(n), unix.MSG_DONTWAIT, 0, 0)
		if e == unix.EAGAIN {
			return false
		}
		if e != 0 {
			serr = e
		}
		got = int(r)
		return true
	})
	if err == nil {
		err = serr
	}
	return got, err
}
