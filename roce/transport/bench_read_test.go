//go:build linux

package transport_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/roce/udpconn"
)

// BenchmarkReadNeighbour: two devices over UDP on loopback, two RC QP
// pairs between them. One pair keeps two 4 MiB READs outstanding, their
// data all at the responder at once; the other does 64-byte RDMA WRITEs
// one at a time, each waited for: ns/op is that WRITE's round trip
// beside the READ stream, read_MB/s the stream's rate. "budget" is the
// responder as it is (a READ's stream yields its receive loop every
// ResponseBudget packets); "one-go" writes each READ's responses in one
// go (DeviceOptions.ResponseBudget -1), as before the budget. Each
// reports the same WRITE's round trip alone (alone_ns) and the READ
// stream's rate alone (alone_read_MB/s), measured first.
func BenchmarkReadNeighbour(b *testing.B) {
	for _, bc := range []struct {
		name   string
		budget int
	}{{"budget", 0}, {"one-go", -1}} {
		b.Run(bc.name, func(b *testing.B) { benchReadNeighbour(b, bc.budget) })
	}
}

func benchReadNeighbour(b *testing.B, budget int) {
	const readSize, mtu = 4 << 20, 4096
	type side struct {
		dev   *transport.Device
		mr    *transport.MR
		mem   []byte
		cq    [2]*transport.CQ
		qp    [2]*transport.QP
		where netip.AddrPort
	}
	open := func(ip string) *side {
		c, err := udpconn.Listen(udpconn.Options{Addr: netip.MustParseAddrPort(ip + ":4791")})
		if err != nil {
			b.Fatal(err)
		}
		dev, err := transport.NewDevice(c, transport.DeviceOptions{ResponseBudget: budget})
		if err != nil {
			c.Close()
			b.Fatal(err)
		}
		b.Cleanup(func() { dev.Close() })
		s := &side{dev: dev, mem: make([]byte, 2*readSize+4096), where: c.LocalAddr()}
		pd := transport.NewPD()
		if s.mr, err = pd.RegisterMR(s.mem, transport.AccessLocalWrite|transport.AccessRemoteWrite|transport.AccessRemoteRead); err != nil {
			b.Fatal(err)
		}
		for i := range s.qp {
			s.cq[i] = transport.NewCQ(64)
			if s.qp[i], err = dev.CreateQP(pd, transport.QPInitAttr{Type: transport.RC, SendCQ: s.cq[i], RecvCQ: s.cq[i]}); err != nil {
				b.Fatal(err)
			}
		}
		return s
	}
	client, server := open("127.0.0.71"), open("127.0.0.72")
	for i := range 2 {
		for _, p := range [][2]*side{{client, server}, {server, client}} {
			for _, attr := range []transport.QPAttr{
				{State: transport.StateInit},
				{State: transport.StateRTR, DestQPN: p[1].qp[i].QPN(), Remote: p[1].where, RQPSN: 1, PathMTU: mtu, MaxDestRdAtomic: 4},
				{State: transport.StateRTS, SQPSN: 1, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4},
			} {
				if err := p[0].qp[i].Modify(attr); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wc := make([]transport.WC, 4)
	write := func() {
		if err := client.qp[1].PostSend(transport.SendWR{ID: 1, Opcode: transport.OpWrite, Signaled: true,
			Local: transport.SGE{MR: client.mr, Offset: 2 * readSize, Length: 64}, Remote: server.mr.Addr() + 2*readSize, RKey: server.mr.RKey()}); err != nil {
			b.Fatal(err)
		}
		if n, err := client.cq[1].PollWait(ctx, wc[:1]); err != nil || n != 1 || wc[0].Status != transport.StatusSuccess {
			b.Fatalf("WRITE: %d completions, %v, %+v", n, err, wc[:n])
		}
	}
	const alone = 2000
	start := time.Now()
	for range alone {
		write()
	}
	aloneNs := float64(time.Since(start).Nanoseconds()) / alone

	read := func(slot int) error {
		return client.qp[0].PostSend(transport.SendWR{ID: uint64(slot), Opcode: transport.OpRead, Signaled: true,
			Local: transport.SGE{MR: client.mr, Offset: slot * readSize, Length: readSize}, Remote: server.mr.Addr() + uint64(slot*readSize), RKey: server.mr.RKey()})
	}
	// stream is the READ stream, two outstanding, until ctx ends; it
	// sends how many completed on reads.
	stream := func(ctx context.Context, reads chan<- int) {
		n, inflight := 0, 0
		defer func() { reads <- n }()
		for slot := range 2 {
			if read(slot) != nil {
				return
			}
			inflight++
		}
		rwc := make([]transport.WC, 2)
		wait := ctx
		for inflight > 0 {
			if ctx.Err() != nil && wait == ctx {
				// Ended: what is in flight completes, the next stream's
				// completions are its own.
				var cancel context.CancelFunc
				wait, cancel = context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
			}
			k, err := client.cq[0].PollWait(wait, rwc)
			if err != nil && ctx.Err() == nil {
				return
			}
			for _, w := range rwc[:k] {
				inflight--
				if w.Status != transport.StatusSuccess {
					return
				}
				n++
				if ctx.Err() == nil {
					if read(int(w.ID)) != nil {
						return
					}
					inflight++
				}
			}
		}
	}
	// The stream alone for a while, then drained.
	actx, acancel := context.WithCancel(ctx)
	reads := make(chan int, 1)
	start = time.Now()
	go stream(actx, reads)
	time.Sleep(time.Second)
	acancel()
	streamAlone := float64(<-reads) * readSize / 1e6 / time.Since(start).Seconds()
	go stream(ctx, reads)
	time.Sleep(20 * time.Millisecond) // the stream under way
	b.ResetTimer()
	start = time.Now()
	for range b.N {
		write()
	}
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	n := <-reads
	b.ReportMetric(aloneNs, "alone_ns")
	b.ReportMetric(streamAlone, "alone_read_MB/s")
	b.ReportMetric(float64(n)*readSize/1e6/elapsed.Seconds(), "read_MB/s")
	b.ReportMetric(float64(server.dev.Stats().ReadYields.Load()), "yields")
}
