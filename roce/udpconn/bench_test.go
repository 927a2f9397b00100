//go:build linux

package udpconn_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/rbridge/rbridge/internal/udpbaseline"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/roce/udpconn"
)

// rcPair is two RC QPs connected over two UDP conns on loopback.
type rcPair struct {
	a, b       *transport.QP
	amr, bmr   *transport.MR
	acq        *transport.CQ
	aDev, bDev *transport.Device
	ac, bc     *udpconn.Conn
}

// offloads are the benchmarks' two settings of the kernel's UDP batching:
// GSO and GRO on (the default) and off, measured in the same run.
var offloads = []struct {
	name string
	opts udpconn.Options
}{
	{"offload", udpconn.Options{}},
	{"no-offload", udpconn.Options{NoGSO: true, NoGRO: true}},
}

// reportCalls reports what one side took per message (op): its system
// calls (sendmmsg and recvmmsg) and the sends and reads they held.
func reportCalls(b *testing.B, side string, s udpconn.StatsSnapshot) {
	n := float64(b.N)
	b.ReportMetric(float64(s.TxCalls+s.RxCalls)/n, side+"-calls/op")
	b.ReportMetric(float64(s.TxBuffers+s.RxBuffers)/n, side+"-bufs/op")
}

func newRCPair(tb testing.TB, mtu int, mem int, opts udpconn.Options) *rcPair {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	p := &rcPair{acq: transport.NewCQ(4096)}
	mk := func() (*transport.Device, *transport.QP, *transport.MR, *udpconn.Conn) {
		c := listenWith(tb, "127.0.0.1", opts)
		dev, err := transport.NewDevice(c, transport.DeviceOptions{Logger: quiet})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { dev.Close() })
		pd := transport.NewPD()
		mr, err := pd.RegisterMR(make([]byte, mem), transport.AccessLocalWrite|transport.AccessRemoteWrite|transport.AccessRemoteRead)
		if err != nil {
			tb.Fatal(err)
		}
		cq := p.acq
		if p.aDev != nil {
			cq = transport.NewCQ(4096)
		}
		qp, err := dev.CreateQP(pd, transport.QPInitAttr{SendCQ: cq, RecvCQ: cq, MaxSendWR: 1024})
		if err != nil {
			tb.Fatal(err)
		}
		if p.aDev == nil {
			p.aDev = dev
		}
		return dev, qp, mr, c
	}
	p.aDev, p.a, p.amr, p.ac = mk()
	p.bDev, p.b, p.bmr, p.bc = mk()
	ac, bc := p.ac, p.bc
	for _, s := range []struct {
		qp   *transport.QP
		peer *transport.QP
		addr *udpconn.Conn
	}{{p.a, p.b, bc}, {p.b, p.a, ac}} {
		for _, attr := range []transport.QPAttr{
			{State: transport.StateInit},
			{State: transport.StateRTR, DestQPN: s.peer.QPN(), Remote: s.addr.LocalAddr(), RQPSN: 1, PathMTU: mtu},
			{State: transport.StateRTS, SQPSN: 1, Timeout: 14, RetryCnt: 7, RNRRetry: 7},
		} {
			if err := s.qp.Modify(attr); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return p
}

// BenchmarkRCWriteUDP moves RDMA WRITEs of each size between two Go QPs
// over loopback UDP, 32 outstanding, with the kernel's UDP batching on and
// off, and on with the conns lending what they read (offload-lent: GRO
// reads into frames of a memory pool, the responder placing each payload
// from where it landed); one op is one message. The calls and buffers per
// op are the sender's (a) and the receiver's (b).
func BenchmarkRCWriteUDP(b *testing.B) {
	src := newFrameSource(64)
	settings := append(offloads[:len(offloads):len(offloads)], struct {
		name string
		opts udpconn.Options
	}{"offload-lent", udpconn.Options{Frames: src, Arena: src.arena}})
	for _, size := range []int{64, 4096, 65536} {
		for _, off := range settings {
			b.Run(fmt.Sprintf("%d/%s", size, off.name), func(b *testing.B) { benchRCWrite(b, size, off.opts) })
		}
	}
}

func benchRCWrite(b *testing.B, size int, opts udpconn.Options) {
	p := newRCPair(b, 4096, 64*size, opts)
	ctx := context.Background()
	wcs := make([]transport.WC, 64)
	const window = 32
	outstanding := 0
	b.SetBytes(int64(size))
	b.ReportAllocs()
	// The window's free slots go in one post, as an application hands
	// ibv_post_send a list, and the baseline sends 64 datagrams a call.
	batch := make([]transport.SendWR, 0, window)
	post := func() {
		if err := p.a.PostSend(batch...); err != nil {
			b.Fatal(err)
		}
		outstanding += len(batch)
		batch = batch[:0]
	}
	i := 0
	for b.Loop() {
		for outstanding+len(batch) >= window {
			if len(batch) > 0 {
				post()
				continue
			}
			n, err := p.acq.PollWait(ctx, wcs)
			if err != nil {
				b.Fatal(err)
			}
			for _, wc := range wcs[:n] {
				if wc.Status != transport.StatusSuccess {
					b.Fatalf("completion %+v", wc)
				}
			}
			outstanding -= n
		}
		off := (i % 64) * size
		batch = append(batch, transport.SendWR{ID: uint64(i), Opcode: transport.OpWrite, Signaled: true,
			Local: transport.SGE{MR: p.amr, Offset: off, Length: size}, Remote: p.bmr.Addr() + uint64(off), RKey: p.bmr.RKey()})
		i++
	}
	if len(batch) > 0 {
		post()
	}
	for outstanding > 0 {
		n, err := p.acq.PollWait(ctx, wcs)
		if err != nil {
			b.Fatal(err)
		}
		outstanding -= n
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	st := p.aDev.Stats()
	b.ReportMetric(float64(st.Retransmit.Load())/float64(b.N), "retransmits/msg")
	reportCalls(b, "a", p.ac.Stats().Snapshot())
	reportCalls(b, "b", p.bc.Stats().Snapshot())
}

// BenchmarkUDPSocket is the floor the transport is compared with: the same
// bytes in 4096-byte datagrams through plain UDP sockets on loopback, batched
// as the transport batches (sendmmsg and recvmmsg, 64 a call), with the same
// 32-message window (at most 512 datagrams in flight, as the transport's
// packets) waited on the receiver's wake-up, and no reliability at all
// (internal/udpbaseline); with the kernel's UDP batching on and off, as
// the transport's.
func BenchmarkUDPSocket(b *testing.B) {
	for _, size := range []int{64, 4096, 65536} {
		for _, off := range offloads {
			b.Run(fmt.Sprintf("%d/%s", size, off.name), func(b *testing.B) { benchUDPSocket(b, size, off.opts) })
		}
	}
}

func benchUDPSocket(b *testing.B, size int, opts udpconn.Options) {
	lo := netip.MustParseAddrPort("127.0.0.1:0")
	f, err := udpbaseline.Open(udpbaseline.Options{From: lo, To: lo, Size: size, Datagram: 4096, Window: 32, NoGSO: opts.NoGSO, NoGRO: opts.NoGRO})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	ctx := context.Background()
	// Hand the flow as many messages at a time as one batch holds.
	chunk := max(1, 64/((size+4095)/4096))
	b.SetBytes(int64(size))
	b.ReportAllocs()
	pending := 0
	for b.Loop() {
		if pending++; pending == chunk {
			if err := f.Send(ctx, pending); err != nil {
				b.Fatal(err)
			}
			pending = 0
		}
	}
	if err := f.Send(ctx, pending); err != nil {
		b.Fatal(err)
	}
	r, err := f.Drain(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64(r.Lost())/float64(r.Sent), "lost/dgram")
	n := float64(b.N)
	b.ReportMetric(float64(r.TxCalls)/n, "a-calls/op")
	b.ReportMetric(float64(r.TxBuffers)/n, "a-bufs/op")
	b.ReportMetric(float64(r.RxCalls)/n, "b-calls/op")
	b.ReportMetric(float64(r.RxBuffers)/n, "b-bufs/op")
}

// BenchmarkConnBatch is the conn alone: one op is a message of packets
// written in one WriteBatch and read back with ReadBatch on another conn,
// 32 messages in flight, with the kernel's UDP batching on and off: a
// 64 KiB WRITE's 16 packets of 4 KiB (at MTU 4096), and single packets of
// 4 KiB and 64 bytes, which nothing coalesces. The bytes are the
// packets'; the calls and buffers per op are the writer's (a) and the
// reader's (b).
func BenchmarkConnBatch(b *testing.B) {
	for _, shape := range []struct{ packets, payload int }{{16, 4096}, {1, 4096}, {1, 64}} {
		for _, off := range offloads {
			b.Run(fmt.Sprintf("%dx%d/%s", shape.packets, shape.payload, off.name), func(b *testing.B) {
				benchConnBatch(b, shape.packets, shape.payload, off.opts)
			})
		}
	}
}

func benchConnBatch(b *testing.B, packets, payload int, opts udpconn.Options) {
	a, r := listenWith(b, "127.0.0.1", opts), listenWith(b, "127.0.0.1", opts)
	const inFlight = 32
	msgs := make([]roce.Message, packets)
	f := roce.PacketFields{BTH: roce.BTHFields{Opcode: roce.RCRDMAWriteMiddle, PKey: roce.DefaultPKey, DestQP: 0x11}}
	for i := range msgs {
		p := roce.AppendPacket(nil, &f, make([]byte, payload))
		msgs[i] = roce.Message{Buf: p, N: len(p), Addr: r.LocalAddr()}
	}
	in := make([]roce.Message, 32)
	for i := range in {
		in[i].Buf = make([]byte, roce.MaxPacket)
	}
	if err := r.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
		b.Fatal(err)
	}
	sent, got := 0, 0
	read := func() {
		n, err := r.ReadBatch(in)
		if err != nil {
			b.Fatalf("%d of %d packets read: %v", got, sent, err)
		}
		got += n
	}
	b.SetBytes(int64(packets * msgs[0].N))
	b.ReportAllocs()
	for b.Loop() {
		for sent-got >= inFlight*packets {
			read()
		}
		if _, err := a.WriteBatch(msgs); err != nil {
			b.Fatal(err)
		}
		sent += packets
	}
	for got < sent {
		read()
	}
	reportCalls(b, "a", a.Stats().Snapshot())
	reportCalls(b, "b", r.Stats().Snapshot())
}

// BenchmarkConnHop is what a busy-polled gateway's hop costs in system
// calls alone, the floor under its round trip: hop is one 64-byte packet
// written with WriteBatch and read on another conn without waiting
// (TryReadBatch; on loopback the write delivers it, so the first read
// finds it), one at a time; empty-read is a read without waiting that
// finds nothing, a busy-poll loop's idle round on one socket. A message
// through the gateway takes a hop more than direct each way, and the
// direct one-way time holds a wake-up that the hop does not.
func BenchmarkConnHop(b *testing.B) {
	b.Run("hop", func(b *testing.B) {
		a, r := listenWith(b, "127.0.0.1", udpconn.Options{}), listenWith(b, "127.0.0.1", udpconn.Options{})
		f := roce.PacketFields{BTH: roce.BTHFields{Opcode: roce.RCSendOnly, PKey: roce.DefaultPKey, DestQP: 0x11}}
		p := roce.AppendPacket(nil, &f, make([]byte, 64))
		out := []roce.Message{{Buf: p, N: len(p), Addr: r.LocalAddr()}}
		in := []roce.Message{{Buf: make([]byte, roce.MaxPacket)}}
		misses := 0
		b.SetBytes(int64(len(p)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := a.WriteBatch(out); err != nil {
				b.Fatal(err)
			}
			for {
				n, err := r.TryReadBatch(in)
				if err != nil {
					b.Fatal(err)
				}
				if n == 1 {
					break
				}
				misses++
			}
		}
		b.ReportMetric(float64(misses)/float64(b.N), "empty-reads/op")
	})
	b.Run("empty-read", func(b *testing.B) {
		r := listenWith(b, "127.0.0.1", udpconn.Options{})
		in := []roce.Message{{Buf: make([]byte, roce.MaxPacket)}}
		b.ReportAllocs()
		for b.Loop() {
			if n, err := r.TryReadBatch(in); err != nil || n != 0 {
				b.Fatalf("a read of an idle conn: %d packets, %v", n, err)
			}
		}
	})
}
