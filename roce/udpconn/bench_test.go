//go:build linux

package udpconn_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"testing"

	"github.com/rbridge/rbridge/internal/udpbaseline"
	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/roce/udpconn"
)

// rcPair is two RC QPs connected over two UDP conns on loopback.
type rcPair struct {
	a, b       *transport.QP
	amr, bmr   *transport.MR
	acq        *transport.CQ
	aDev, bDev *transport.Device
}

func newRCPair(tb testing.TB, mtu int, mem int) *rcPair {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	p := &rcPair{acq: transport.NewCQ(4096)}
	mk := func() (*transport.Device, *transport.QP, *transport.MR, *udpconn.Conn) {
		c := listen(tb, "127.0.0.1")
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
	var ac, bc *udpconn.Conn
	p.aDev, p.a, p.amr, ac = mk()
	p.bDev, p.b, p.bmr, bc = mk()
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
// over loopback UDP, 32 outstanding; one op is one message.
func BenchmarkRCWriteUDP(b *testing.B) {
	for _, size := range []int{64, 4096, 65536} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			p := newRCPair(b, 4096, 64*size)
			ctx := context.Background()
			wcs := make([]transport.WC, 64)
			const window = 32
			outstanding := 0
			b.SetBytes(int64(size))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				for outstanding >= window {
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
				err := p.a.PostSend(transport.SendWR{ID: uint64(i), Opcode: transport.OpWrite, Signaled: true,
					Local: transport.SGE{MR: p.amr, Offset: off, Length: size}, Remote: p.bmr.Addr() + uint64(off), RKey: p.bmr.RKey()})
				if err != nil {
					b.Fatal(err)
				}
				outstanding++
				i++
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
		})
	}
}

// BenchmarkUDPSocket is the floor the transport is compared with: the same
// bytes in 4096-byte datagrams through plain UDP sockets on loopback, batched
// as the transport batches (sendmmsg and recvmmsg, 64 a call), with the same
// 32-message window (at most 512 datagrams in flight, as the transport's
// packets) waited on the receiver's wake-up, and no reliability at all
// (internal/udpbaseline).
func BenchmarkUDPSocket(b *testing.B) {
	for _, size := range []int{64, 4096, 65536} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			lo := netip.MustParseAddrPort("127.0.0.1:0")
			f, err := udpbaseline.Open(udpbaseline.Options{From: lo, To: lo, Size: size, Datagram: 4096, Window: 32})
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
		})
	}
}
