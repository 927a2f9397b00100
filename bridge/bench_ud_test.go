package bridge_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/cm"
	"github.com/rbridge/rbridge/roce/transport"
)

// BenchmarkUDThroughVsDirect: datagrams of 256 bytes from a UD client to
// a UD service of rbridge's transport on loopback, direct and through a
// gateway of two userspace legs, in one run. window is how many datagrams
// may be sent and not yet received: UD has no flow control, and a window
// no larger than any receive queue on the way (the gateway's 32, the
// service's 64) keeps every datagram in a buffer; window=1 is one at a
// time (each received before the next leaves). The client and the service
// do the same on both paths: allocs/op beyond direct's are the gateway's.
func BenchmarkUDThroughVsDirect(b *testing.B) {
	client, target := newCMApp(b, lo("3")), newCMApp(b, lo("4"))
	const receives = 64
	tqp, tcq := udTarget(b, target, receives)
	startGatewayWith(b, udConfig(b), bridge.GatewayOptions{})
	cqp, _ := client.udQP(b, 1)
	const size, off = 256, 512 << 10
	for i := range size {
		client.mem[off+i] = 'x'
	}
	for _, window := range []int{1, 16} {
		for _, tc := range []struct {
			name string
			to   netip.AddrPort
		}{
			{"direct", netip.AddrPortFrom(target.ip, 7174)},
			{"gateway", netip.AddrPortFrom(netip.MustParseAddr(lo("1")), 7174)},
		} {
			b.Run(fmt.Sprintf("window=%d/%s", window, tc.name), func(b *testing.B) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				svc, err := client.cm.ResolveUD(ctx, tc.to, cm.ResolveOptions{})
				if err != nil {
					b.Fatal(err)
				}
				dst := transport.UDDest{Addr: netip.AddrPortFrom(svc.Addr.Addr(), roce.Port), QPN: svc.QPN, QKey: cm.RDMAUDPQKey}
				wr := transport.SendWR{Opcode: transport.OpSendWithImm, Imm: cqp.QPN(), Local: transport.SGE{MR: client.mr, Offset: off, Length: size}, UD: &dst}
				var wcs [receives]transport.WC
				sent, got := 0, 0
				// receive waits for at least one datagram and posts its
				// receive again.
				receive := func() {
					n, err := tcq.PollWait(ctx, wcs[:])
					if err != nil {
						b.Fatalf("datagram lost: %d sent, %d received: %v", sent, got, err)
					}
					for _, wc := range wcs[:n] {
						if err := tqp.PostRecv(transport.RecvWR{ID: wc.ID, Local: transport.SGE{MR: target.mr, Offset: 4096 * int(wc.ID), Length: 4096}}); err != nil {
							b.Fatal(err)
						}
					}
					got += n
				}
				b.SetBytes(size)
				b.ReportAllocs()
				for b.Loop() {
					for sent-got >= window {
						receive()
					}
					if err := cqp.PostSend(wr); err != nil {
						b.Fatal(err)
					}
					sent++
				}
				for got < sent {
					receive()
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "datagrams/s")
			})
		}
	}
}
