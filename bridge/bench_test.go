package bridge_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"

	"github.com/rbridge/rbridge/bridge/leg"

	"github.com/rbridge/rbridge/bridge/pool"
	"github.com/rbridge/rbridge/bridge/session"

	"github.com/rbridge/rbridge/internal/testlog"
	"github.com/rbridge/rbridge/roce/simnet"
	"github.com/rbridge/rbridge/roce/transport"
)

// instantLeg is an endpoint that completes what is posted on it when the
// benchmark says (drain), and counts completions of its requests: the
// session's own cost, with no network and no far side behind it.
type instantLeg struct {
	h         session.Handler
	posted    []*session.Op
	completed int
	maxSGE    int
}

func (l *instantLeg) Start(h session.Handler) error { l.h = h; return nil }
func (l *instantLeg) Limits() session.Limits {
	return session.Limits{MaxSend: 256, MaxRdAtomic: 16, MTU: 4096, MaxSGE: l.maxSGE}
}
func (l *instantLeg) Post(ops []*session.Op) (int, error) {
	l.posted = append(l.posted, ops...)
	return len(ops), nil
}
func (l *instantLeg) Complete(transport.Token, transport.Completion) error { l.completed++; return nil }
func (l *instantLeg) Close() error                                         { return nil }

func (l *instantLeg) drain() {
	for _, op := range l.posted {
		op.Status = transport.StatusSuccess
		l.h.Done(op)
	}
	clear(l.posted)
	l.posted = l.posted[:0]
}

// BenchmarkRelay is the session's cost per relayed message: a SEND or a
// WRITE taken from one endpoint, posted on the other, its completion
// carried back. "copied": the payload arrives in the transport's receive
// buffer and is copied into a pool buffer (a UDP leg); "lent": it arrives
// in a pool frame (AF_XDP over the pool) and goes out from there. The
// copied-B/B metric is payload bytes copied per byte relayed.
func BenchmarkRelay(b *testing.B) {
	for _, lent := range []bool{false, true} {
		for _, size := range []int{64, 4096} {
			for _, op := range []transport.Opcode{transport.OpSend, transport.OpWrite} {
				mode := "copied"
				if lent {
					mode = "lent"
				}
				b.Run(fmt.Sprintf("%s/%v/%d", mode, op, size), func(b *testing.B) {
					benchRelay(b, op, size, lent)
				})
			}
		}
	}
}

func benchRelay(b *testing.B, op transport.Opcode, size int, lent bool) {
	pl, err := pool.New(pool.Options{Size: 4 << 20})
	if err != nil {
		b.Fatal(err)
	}
	near, far := &instantLeg{}, &instantLeg{maxSGE: 16}
	s, err := session.New(session.Options{A: near, B: far, Pool: pl, Logger: testlog.New(b)})
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, size)
	var frame *pool.Buf
	if lent {
		if frame, err = pl.Get(4096); err != nil {
			b.Fatal(err)
		}
		payload = frame.B()[:size]
	}
	r := transport.Request{Op: op, First: true, Last: true, Payload: payload, Length: uint32(size), RKey: 1, VA: 0x1000, Lent: lent}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for b.Loop() {
		near.h.Request(&r, frame)
		near.h.Flush()
		far.drain()
	}
	b.StopTimer()
	if near.completed != b.N {
		b.Fatalf("%d of %d relayed messages completed", near.completed, b.N)
	}
	st := s.Stats().Snapshot()
	b.ReportMetric(float64(st.Copied[0])/float64(st.TotalBytes(0)), "copied-B/B")
	s.Close()
	if frame != nil {
		frame.Release()
	}
	if err := pl.Close(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkThroughVsDirect sends 4 KiB SENDs from a client QP on the
// simulated network to a peer QP directly, and through a session (the
// gateway's userspace endpoint, the relay, and a far leg that completes at
// once): the ratio is what the gateway adds to one hop of the transport.
func BenchmarkThroughVsDirect(b *testing.B) {
	const size, window = 4096, 32
	for _, through := range []bool{false, true} {
		name := "direct"
		if through {
			name = "through"
		}
		b.Run(name, func(b *testing.B) {
			n := simnet.New(simnet.Options{})
			mk := func(addr string) *transport.Device {
				c, err := n.Listen(netip.MustParseAddrPort(addr))
				if err != nil {
					b.Fatal(err)
				}
				d, err := transport.NewDevice(c, transport.DeviceOptions{Logger: testlog.New(b)})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { d.Close() })
				return d
			}
			cdev, sdev := mk("10.0.0.2:4791"), mk("10.0.0.1:4791")
			cpd, spd := transport.NewPD(), transport.NewPD()
			cmr, err := cpd.RegisterMR(make([]byte, size), transport.AccessLocalWrite)
			if err != nil {
				b.Fatal(err)
			}
			scq, rcq := transport.NewCQ(1024), transport.NewCQ(1024)
			client, err := cdev.CreateQP(cpd, transport.QPInitAttr{Type: transport.RC, SendCQ: scq, RecvCQ: scq})
			if err != nil {
				b.Fatal(err)
			}
			var server *transport.QP
			var smr *transport.MR
			if through {
				pl, err := pool.New(pool.Options{Size: 16 << 20})
				if err != nil {
					b.Fatal(err)
				}
				pmr, _ := spd.RegisterMR(pl.Arena(), transport.AccessLocalWrite)
				ep, err := leg.NewUserspaceEndpoint(leg.UserspaceOptions{Device: sdev, PD: spd, MR: pmr})
				if err != nil {
					b.Fatal(err)
				}
				server = ep.QP()
				connectPair(b, client, server)
				sess, err := session.New(session.Options{A: ep, B: newFastLeg(), Pool: pl, Logger: testlog.New(b)})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { sess.Close(); pl.Close() })
			} else {
				smr, _ = spd.RegisterMR(make([]byte, size), transport.AccessLocalWrite)
				if server, err = sdev.CreateQP(spd, transport.QPInitAttr{Type: transport.RC, SendCQ: rcq, RecvCQ: rcq, MaxRecvWR: 8 * window}); err != nil {
					b.Fatal(err)
				}
				connectPair(b, client, server)
				for range 8 * window {
					if err := server.PostRecv(transport.RecvWR{Local: transport.SGE{MR: smr, Length: size}}); err != nil {
						b.Fatal(err)
					}
				}
				// The direct peer's application takes its messages and
				// posts the receives again, on a goroutine of its own (as
				// the fast far leg completes on its own).
				ctx, cancel := context.WithCancel(context.Background())
				b.Cleanup(cancel)
				go func() {
					rwcs := make([]transport.WC, 64)
					for {
						r, err := rcq.PollWait(ctx, rwcs)
						if err != nil {
							return
						}
						for range r {
							if server.PostRecv(transport.RecvWR{Local: transport.SGE{MR: smr, Length: size}}) != nil {
								return
							}
						}
					}
				}()
			}
			wcs := make([]transport.WC, 64)
			posted, done := 0, 0
			b.SetBytes(size)
			b.ReportAllocs()
			b.ResetTimer()
			for done < b.N {
				for posted-done < window && posted < b.N {
					if err := client.PostSend(transport.SendWR{ID: uint64(posted), Opcode: transport.OpSend, Local: transport.SGE{MR: cmr, Length: size}, Signaled: true}); err != nil {
						b.Fatal(err)
					}
					posted++
				}
				k, err := scq.PollWait(b.Context(), wcs)
				if err != nil {
					b.Fatal(err)
				}
				for _, wc := range wcs[:k] {
					if wc.Status != transport.StatusSuccess {
						b.Fatalf("completion %+v", wc)
					}
				}
				done += k
			}
		})
	}
}

// fastLeg completes what is posted on it at once, on a goroutine of its
// own, as a far HCA would.
type fastLeg struct {
	h    session.Handler
	ch   chan *session.Op
	done chan struct{}
	once sync.Once
}

func newFastLeg() *fastLeg {
	return &fastLeg{ch: make(chan *session.Op, 256), done: make(chan struct{})}
}

func (l *fastLeg) Start(h session.Handler) error {
	l.h = h
	go func() {
		for {
			select {
			case op := <-l.ch:
				op.Status = transport.StatusSuccess
				l.h.Done(op)
			case <-l.done:
				return
			}
		}
	}()
	return nil
}

func (l *fastLeg) Limits() session.Limits {
	return session.Limits{MaxSend: 256, MaxRdAtomic: 16, MTU: 4096}
}

func (l *fastLeg) Post(ops []*session.Op) (int, error) {
	for i, op := range ops {
		select {
		case l.ch <- op:
		case <-l.done:
			return i, session.ErrEndpointFailed
		}
	}
	return len(ops), nil
}

func (l *fastLeg) Complete(transport.Token, transport.Completion) error { return nil }

func (l *fastLeg) Close() error {
	l.once.Do(func() {
		close(l.done)
		for {
			select {
			case op := <-l.ch:
				op.Status = transport.StatusWRFlushErr
				l.h.Done(op)
			default:
				return
			}
		}
	})
	return nil
}

func connectPair(b *testing.B, a, c *transport.QP) {
	b.Helper()
	connectPairAt(b, a, c, netip.MustParseAddrPort("10.0.0.2:4791"), netip.MustParseAddrPort("10.0.0.1:4791"))
}

// connectPairAt connects QP a at aAddr with QP c at cAddr, path MTU 4096.
func connectPairAt(b *testing.B, a, c *transport.QP, aAddr, cAddr netip.AddrPort) {
	b.Helper()
	for _, p := range []struct {
		qp, peer *transport.QP
		to       netip.AddrPort
	}{{a, c, cAddr}, {c, a, aAddr}} {
		for _, at := range []transport.QPAttr{{State: transport.StateInit},
			{State: transport.StateRTR, DestQPN: p.peer.QPN(), Remote: p.to, RQPSN: 1, PathMTU: 4096, MaxDestRdAtomic: 16, MinRNRTimer: 1},
			{State: transport.StateRTS, SQPSN: 1, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16}} {
			if err := p.qp.Modify(at); err != nil {
				b.Fatal(err)
			}
		}
	}
}
