package transport_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/rbridge/rbridge/roce/simnet"
	"github.com/rbridge/rbridge/roce/transport"
)

// BenchmarkGoodputLoss moves 64 KiB RDMA WRITEs over the simulated network
// without loss and with 0.1%, 1% and 5% random loss; the ratio of each lossy
// MB/s figure to the lossless one is the goodput kept under that loss.
func BenchmarkGoodputLoss(b *testing.B) {
	for _, loss := range []float64{0, 0.001, 0.01, 0.05} {
		b.Run(fmt.Sprintf("loss=%g", loss), func(b *testing.B) {
			net, a, peer := pair(b, simnet.Options{Loss: loss, Seed: 42}, connOpts{mtu: 4096, retry: 7, rnrRetry: 7, timeout: 14})
			const size = 64 << 10
			ctx := context.Background()
			wcs := make([]transport.WC, 64)
			outstanding := 0
			b.SetBytes(size)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				for outstanding >= 16 {
					n, err := a.scq.PollWait(ctx, wcs)
					if err != nil {
						b.Fatal(err)
					}
					for _, wc := range wcs[:n] {
						if wc.Status != transport.StatusSuccess {
							st := net.Stats()
							b.Fatalf("completion %+v; net sent %d delivered %d overflow %d lost %d; a timeouts %d retrans %d; peer rx %d dup %d oos %d naks %d malformed %d",
								wc, st.Sent.Load(), st.Delivered.Load(), st.Overflow.Load(), st.Lost.Load(),
								a.dev.Stats().Timeouts.Load(), a.dev.Stats().Retransmit.Load(), peer.dev.Stats().RxPackets.Load(),
								peer.dev.Stats().RxDuplicate.Load(), peer.dev.Stats().RxOutOfSequence.Load(), peer.dev.Stats().TxNAKs.Load(), peer.dev.Stats().RxMalformed.Load())
						}
					}
					outstanding -= n
				}
				off := (i % 32) * size
				if err := a.qp.PostSend(transport.SendWR{ID: uint64(i), Opcode: transport.OpWrite, Signaled: true,
					Local: sge(a, off, size), Remote: addr(peer, off), RKey: peer.mr.RKey()}); err != nil {
					b.Fatal(err)
				}
				outstanding++
				i++
			}
			for outstanding > 0 {
				n, err := a.scq.PollWait(ctx, wcs)
				if err != nil {
					b.Fatal(err)
				}
				outstanding -= n
			}
			b.ReportMetric(float64(a.dev.Stats().Retransmit.Load())/float64(b.N), "retransmits/msg")
			b.ReportMetric(float64(a.dev.Stats().Timeouts.Load())/float64(b.N), "timeouts/msg")
			b.ReportMetric(float64(a.dev.Stats().TailProbes.Load())/float64(b.N), "probes/msg")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/msg")
			// Packets sent per message: 16 without loss, more for each
			// packet resent.
			b.ReportMetric(float64(a.dev.Stats().TxPackets.Load())/float64(b.N), "packets/msg")
			// Packets the simulated network dropped for a full receive
			// queue, beyond the random loss asked for.
			b.ReportMetric(float64(net.Stats().Overflow.Load()), "overflows")
		})
	}
}
