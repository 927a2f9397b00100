//go:build linux

package xdp_test

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
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
	for _, g := range []netip.Addr{group4, group6} {
		if err := p.AddGroup(g); err != nil {
			b.Fatal(err)
		}
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
		{"group", buildFrame(frameSpec{src: ip4A, dst: group4, sport: 1, transport: transport(roce.UDSendOnly, 0xFFFFFF, 64)})},
		{"group-ipv6", buildFrame(frameSpec{src: ip6A, dst: group6, sport: 1, transport: transport(roce.UDSendOnly, 0xFFFFFF, 64)})},
		{"group-unjoined", buildFrame(frameSpec{src: ip4A, dst: otherGroup4, sport: 1, transport: transport(roce.UDSendOnly, 0xFFFFFF, 64)})},
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

// BenchmarkClassifierOnVeth measures what the attached classifier costs the
// traffic it passes to the kernel, next to a bare XDP_PASS program on the
// same veth, in alternating rounds of the same run. The generator (below)
// sends from one namespace; veth runs the receiving end's XDP program and
// IP and UDP stack on the sender's core, up to a UDP socket that is never
// read (its full buffer drops each datagram after the stack's work). The
// sender's rate is then the whole receive path's: "ratio" is the time per
// packet with the classifier / with XDP_PASS.
func BenchmarkClassifierOnVeth(b *testing.B) {
	a, bs := setup(b, "v", xdp.BindAuto, xdp.ModeNative)
	var ifA, ifB int
	a.ns.do(func() { ifA = ifindex(b, a.ifc) })
	bs.ns.do(func() { ifB = ifindex(b, bs.ifc) })
	gen := newGenerator(b, ifA)
	classify, pass := bs.prog.Programs()
	l, undo := passInstead(b, bs, ifB)
	b.Cleanup(undo)
	var err error
	for _, bc := range []struct {
		name  string
		port  uint16
		frame []byte
	}{
		{"not-roce", 9, udpFrame(a, bs, 9, make([]byte, 64))},
		{"unowned", roce.Port, udpFrame(a, bs, roce.Port, sendOnly(otherQP, 0, make([]byte, 64)))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.frame)))
			var uc *net.UDPConn
			bs.ns.do(func() {
				uc, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(bs.addr.Addr(), bc.port)))
			})
			if err != nil {
				b.Fatal(err)
			}
			defer uc.Close()
			// Fill the socket's buffer first, so every round sees the same drop.
			a.ns.do(func() { _, err = gen.send(bc.frame, 1<<16) })
			if err != nil {
				b.Fatal(err)
			}
			var tc, tp time.Duration
			const rounds = 10
			n := uint32(max(b.N/rounds, 1))
			b.ResetTimer()
			for i := range 2 * rounds {
				prog, sum := pass, &tp
				if i%2 == 1 {
					prog, sum = classify, &tc
				}
				if err := l.Update(prog); err != nil {
					b.Fatalf("swap the XDP program: %v", err)
				}
				a.ns.do(func() {
					start := time.Now()
					_, err = gen.send(bc.frame, n)
					*sum += time.Since(start)
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(tc.Nanoseconds())/float64(n*rounds), "classify-ns/pkt")
			b.ReportMetric(float64(tp.Nanoseconds())/float64(n*rounds), "pass-ns/pkt")
			b.ReportMetric(float64(tc)/float64(tp), "ratio")
		})
	}
}

// passInstead swaps side s's classifier on its veth for the bare XDP_PASS
// program (on a link whose program can be updated); undo swaps back.
func passInstead(tb testing.TB, s *side, ifindex int) (l link.Link, undo func()) {
	tb.Helper()
	if err := s.prog.Detach(ifindex); err != nil {
		tb.Fatal(err)
	}
	_, pass := s.prog.Programs()
	var err error
	s.ns.do(func() {
		l, err = link.AttachXDP(link.XDPOptions{Program: pass, Interface: ifindex, Flags: link.XDPDriverMode})
	})
	if err != nil {
		tb.Fatalf("attach XDP_PASS: %v", err)
	}
	return l, func() {
		l.Close()
		s.ns.do(func() {
			if _, err := s.prog.Attach(ifindex); err != nil {
				tb.Error(err)
			}
		})
	}
}

// udpFrame is an Ethernet frame from side a to side b's veth address, UDP
// to port (a RoCEv2 payload gets its ICRC).
func udpFrame(a, b *side, port uint16, payload []byte) []byte {
	f := buildFrame(frameSpec{src: a.addr.Addr(), dst: b.addr.Addr(), sport: 0xc001, dport: port, transport: payload})
	copy(f[0:6], []byte{0x02, 0, 0, 0, 0x99, 0x0b}) // the veth ends' addresses (setup)
	copy(f[6:12], []byte{0x02, 0, 0, 0, 0x99, 0x0a})
	return f
}

// BenchmarkReceive measures packets/s received on one veth end from the
// same sender in the other namespace, 64-byte RoCEv2 SENDs: through the
// classifier to an AF_XDP Conn (ReadBatch: decode, ICRC check, copy out),
// and through the kernel's IP and UDP stack to a UDP socket (recvmmsg and
// decode) behind a bare XDP_PASS program. Each sub-benchmark reports
// pkts/s, and "delivered", the share of the frames sent that arrived: near 1
// means the sender, not the receiver, set the pace; and the system calls
// the process made per packet (syscallCounter; the generator's bpf calls
// aside), with the AF_XDP Conn's own count of reads that waited and fill
// ring wakeups.
//
// The sender is a generator: an XDP program that redirects one frame to the
// veth, run in BPF_PROG_RUN's live-frame mode. veth hands such frames to
// its peer as raw buffers, the way a NIC driver hands its pages to XDP, so
// the receiving end sees what it would on a NIC (no socket buffer built by
// the sender) and the sender outpaces either receiver.
func BenchmarkReceive(b *testing.B) {
	a, bs := setup(b, "b", xdp.BindAuto, xdp.ModeNative) // veth takes redirected frames only with native XDP on the peer
	var ifA, ifB int
	a.ns.do(func() { ifA = ifindex(b, a.ifc) })
	bs.ns.do(func() { ifB = ifindex(b, bs.ifc) })
	frame := udpFrame(a, bs, roce.Port, sendOnly(bs.qpn, 0, make([]byte, 64)))
	gen := newGenerator(b, ifA)

	// blast runs the generator in namespace a (where its ifindex means the
	// veth) until stopped; stop returns how many frames it sent.
	blast := func(b *testing.B) (stop func() uint64) {
		var done atomic.Bool
		var sent atomic.Uint64
		var wg sync.WaitGroup
		wg.Add(1)
		go a.ns.do(func() {
			defer wg.Done()
			for !done.Load() {
				n, err := gen.send(frame, 4096)
				sent.Add(uint64(n))
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
		var once sync.Once
		stop = func() uint64 {
			once.Do(func() { done.Store(true); wg.Wait() })
			return sent.Load()
		}
		b.Cleanup(func() { stop() }) // also when the benchmark fails early
		return stop
	}
	report := func(b *testing.B, start time.Time, stop func() uint64) {
		el := time.Since(start)
		sent := stop()
		b.ReportMetric(float64(b.N)/el.Seconds(), "pkts/s")
		b.ReportMetric(float64(b.N)/float64(sent), "delivered")
	}

	b.Run("afxdp", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(frame)))
		msgs := make([]roce.Message, 64)
		for i := range msgs {
			msgs[i].Buf = make([]byte, roce.MaxPacket)
		}
		sc := newSyscallCounter(b)
		stop := blast(b)
		st0, err := bs.conn.Stats()
		if err != nil {
			b.Fatal(err)
		}
		watchdog := time.AfterFunc(30*time.Second, func() { bs.conn.Close() })
		defer watchdog.Stop()
		b.ResetTimer()
		calls := sc.read(b)
		start := time.Now()
		for got := 0; got < b.N; {
			n, err := bs.conn.ReadBatch(msgs[:min(len(msgs), b.N-got)])
			if err != nil {
				b.Fatalf("ReadBatch after %d of %d: %v", got, b.N, err)
			}
			got += n
		}
		report(b, start, stop)
		sc.report(b, calls, b.N)
		st, err := bs.conn.Stats()
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(st.RXWaits-st0.RXWaits)/float64(b.N), "waits/pkt")
		b.ReportMetric(float64(st.FillKicks-st0.FillKicks)/float64(b.N), "fillkicks/pkt")
		// Frames the reader was too slow for (the rest of the loss is in
		// the kernel, before the classifier).
		b.ReportMetric(float64(st.RXRingDrops-st0.RXRingDrops)/float64(b.N), "ringdrops/pkt")
	})

	b.Run("udp", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(frame)))
		_, undo := passInstead(b, bs, ifB)
		defer undo()
		var err error
		var uc *net.UDPConn
		bs.ns.do(func() { uc, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(bs.addr)) })
		if err != nil {
			b.Fatal(err)
		}
		defer uc.Close()
		if err := uc.SetReadBuffer(4 << 20); err != nil {
			b.Fatal(err)
		}
		mm := newMmsg(64, roce.MaxPacket)
		sc := newSyscallCounter(b)
		stop := blast(b)
		b.ResetTimer()
		calls := sc.read(b)
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
		sc.report(b, calls, b.N)
	})
}

// BenchmarkSend measures packets/s sent by an AF_XDP Conn in copy mode,
// WriteBatch 64 64-byte RoCEv2 SENDs at a time (Ethernet, IP and UDP
// headers and the ICRC built into each frame, the TX ring, sendto,
// completions reaped), to the veth's other end, where a bare XDP_DROP
// program drops them. veth runs that end's XDP on the sender's core,
// inside the sendto. It reports the Conn's sendto calls per packet
// ("kicks/pkt", and those the ring's flag let it skip) and the system
// calls the process made per packet.
func BenchmarkSend(b *testing.B) {
	a, bs := setup(b, "s", xdp.BindCopy, xdp.ModeNative)
	// Resolve b's address while the classifier still passes ARP.
	sendPackets(b, a.conn, bs.addr, 0, sendOnly(bs.qpn, 0, nil))
	readN(b, bs.conn, 1)
	var ifB int
	bs.ns.do(func() { ifB = ifindex(b, bs.ifc) })
	dropInstead(b, bs, ifB)

	pkt := sendOnly(bs.qpn, 0, make([]byte, 64))
	msgs := make([]roce.Message, 64)
	for i := range msgs {
		msgs[i] = roce.Message{Buf: pkt, N: len(pkt), Addr: bs.addr}
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(pkt)))
	sc := newSyscallCounter(b)
	st0, err := a.conn.Stats()
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	calls := sc.read(b)
	start := time.Now()
	for done := 0; done < b.N; {
		n, err := a.conn.WriteBatch(msgs[:min(len(msgs), b.N-done)])
		if err != nil {
			b.Fatalf("WriteBatch after %d of %d: %v", done, b.N, err)
		}
		done += n
	}
	el := time.Since(start)
	sc.report(b, calls, b.N)
	st, err := a.conn.Stats()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/el.Seconds(), "pkts/s")
	b.ReportMetric(float64(st.TXKicks-st0.TXKicks)/float64(b.N), "kicks/pkt")
	b.ReportMetric(float64(st.TXKicksSkipped-st0.TXKicksSkipped)/float64(b.N), "skipped/pkt")
}

// dropInstead swaps side s's classifier on its veth for a bare XDP_DROP
// program, until the benchmark ends.
func dropInstead(tb testing.TB, s *side, ifindex int) {
	tb.Helper()
	if err := s.prog.Detach(ifindex); err != nil {
		tb.Fatal(err)
	}
	drop, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.XDP,
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 1), asm.Return()}, // XDP_DROP
	})
	if err != nil {
		tb.Fatalf("load XDP_DROP: %v", err)
	}
	tb.Cleanup(func() { drop.Close() })
	var l link.Link
	s.ns.do(func() {
		l, err = link.AttachXDP(link.XDPOptions{Program: drop, Interface: ifindex, Flags: link.XDPDriverMode})
	})
	if err != nil {
		tb.Fatalf("attach XDP_DROP: %v", err)
	}
	tb.Cleanup(func() { l.Close() })
}

func ifindex(tb testing.TB, name string) int {
	tb.Helper()
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		tb.Fatal(err)
	}
	return ifi.Index
}

// generator transmits copies of a frame on an interface at kernel speed: an
// XDP program that redirects every frame to the interface, run by
// BPF_PROG_RUN in live-frame mode (BPF_F_TEST_XDP_LIVE_FRAMES, Linux 5.18).
type generator struct{ prog *ebpf.Program }

func newGenerator(tb testing.TB, ifindex int) *generator {
	tb.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:    ebpf.XDP,
		License: "GPL",
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R1, int32(ifindex)),
			asm.Mov.Imm(asm.R2, 0),
			asm.FnRedirect.Call(),
			asm.Return(),
		},
	})
	if err != nil {
		tb.Fatalf("load the generator: %v", err)
	}
	tb.Cleanup(func() { prog.Close() })
	return &generator{prog}
}

// send transmits n copies of frame; it runs in the namespace whose
// interface the generator was made for.
func (g *generator) send(frame []byte, n uint32) (int, error) {
	// Live-frame mode reports no return value: the receiver's count is
	// the proof that frames went out.
	if _, err := g.prog.Run(&ebpf.RunOptions{Data: frame, Repeat: n, Flags: unix.BPF_F_TEST_XDP_LIVE_FRAMES}); err != nil {
		return 0, fmt.Errorf("generator: %w", err)
	}
	return int(n), nil
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
