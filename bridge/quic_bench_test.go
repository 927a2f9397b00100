package bridge_test

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"

	"github.com/rbridge/rbridge/bridge/leg/legtest"
	"github.com/rbridge/rbridge/bridge/pool"
	"github.com/rbridge/rbridge/bridge/session"

	"github.com/rbridge/rbridge/internal/testlog"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/roce/udpconn"
)

// BenchmarkLegWrite is the cost of one RDMA WRITE carried over each kind
// of link between two points on loopback, window operations in flight:
// "roce", an RC QP of rbridge's userspace transport writing into a peer
// QP's memory region over UDP sockets (sendmmsg/recvmmsg batches), and
// "quic", a QUIC endpoint pair (the gateway-to-gateway leg: framing, TLS,
// QUIC's own loss recovery and flow control) whose far side copies the
// payload into its memory and completes, as a far gateway's session does
// when its own leg completes at once. Same sizes, same window, same run.
func BenchmarkLegWrite(b *testing.B) {
	for _, size := range []int{4 << 10, 64 << 10} {
		b.Run(fmt.Sprintf("roce/%d", size), func(b *testing.B) { benchRoCEWrite(b, size) })
		b.Run(fmt.Sprintf("quic/%d", size), func(b *testing.B) { benchQUICWrite(b, size) })
	}
}

const legWindow = 32

func benchRoCEWrite(b *testing.B, size int) {
	mk := func(host string) *transport.Device {
		c, err := udpconn.Listen(udpconn.Options{Addr: netip.AddrPortFrom(netip.MustParseAddr(lo(host)), roce.Port)})
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
	cdev, sdev := mk("21"), mk("22")
	cpd, spd := transport.NewPD(), transport.NewPD()
	cmr, err := cpd.RegisterMR(make([]byte, size), transport.AccessLocalWrite)
	if err != nil {
		b.Fatal(err)
	}
	smr, err := spd.RegisterMR(make([]byte, size), transport.AccessLocalWrite|transport.AccessRemoteWrite)
	if err != nil {
		b.Fatal(err)
	}
	scq := transport.NewCQ(1024)
	client, err := cdev.CreateQP(cpd, transport.QPInitAttr{Type: transport.RC, SendCQ: scq, RecvCQ: scq})
	if err != nil {
		b.Fatal(err)
	}
	server, err := sdev.CreateQP(spd, transport.QPInitAttr{Type: transport.RC, SendCQ: transport.NewCQ(16), RecvCQ: transport.NewCQ(16)})
	if err != nil {
		b.Fatal(err)
	}
	connectPairAt(b, client, server, netip.AddrPortFrom(netip.MustParseAddr(lo("21")), roce.Port), netip.AddrPortFrom(netip.MustParseAddr(lo("22")), roce.Port))
	wcs := make([]transport.WC, 64)
	posted, done := 0, 0
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for done < b.N {
		for posted-done < legWindow && posted < b.N {
			if err := client.PostSend(transport.SendWR{ID: uint64(posted), Opcode: transport.OpWrite, Local: transport.SGE{MR: cmr, Length: size},
				Remote: smr.Addr(), RKey: smr.RKey(), Signaled: true}); err != nil {
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
}

// writeSink is a far gateway's session that writes each WRITE into its
// memory and completes it at once.
type writeSink struct {
	mem []byte
}

func (w *writeSink) Request(r *transport.Request, _ *pool.Buf) transport.Reply {
	copy(w.mem, r.Payload)
	return transport.Reply{Result: transport.Done}
}
func (w *writeSink) Flush()              {}
func (w *writeSink) Done(op *session.Op) {}
func (w *writeSink) Failed(err error)    {}

// doneCounter is the near session's side: it counts completions.
type doneCounter struct {
	mu     sync.Mutex
	cond   *sync.Cond
	done   int
	failed error
}

func (d *doneCounter) Request(*transport.Request, *pool.Buf) transport.Reply {
	return transport.Reply{Result: transport.Failed, Status: transport.StatusRemInvReqErr}
}
func (d *doneCounter) Flush() {}
func (d *doneCounter) Done(op *session.Op) {
	d.mu.Lock()
	d.done++
	if op.Status != transport.StatusSuccess && d.failed == nil {
		d.failed = fmt.Errorf("op %v: %v", op.Opcode, op.Status)
	}
	d.cond.Signal()
	d.mu.Unlock()
}
func (d *doneCounter) Failed(err error) {
	d.mu.Lock()
	if d.failed == nil {
		d.failed = err
	}
	d.cond.Signal()
	d.mu.Unlock()
}

func benchQUICWrite(b *testing.B, size int) {
	pl, err := pool.New(pool.Options{Size: 16 << 20})
	if err != nil {
		b.Fatal(err)
	}
	qa, qb, stop := legtest.QUICPair(b, pl)
	dc := &doneCounter{}
	dc.cond = sync.NewCond(&dc.mu)
	if err := qa.Start(dc); err != nil {
		b.Fatal(err)
	}
	if err := qb.Start(&writeSink{mem: make([]byte, size)}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		qa.Close()
		qb.Close()
		stop()
		pl.Close()
	})
	ops := make([]*session.Op, legWindow)
	for i := range ops {
		buf, err := pl.Get(size)
		if err != nil {
			b.Fatal(err)
		}
		ops[i] = &session.Op{Opcode: transport.OpWrite, Buf: buf, Len: size, Remote: 0x1000, RKey: 7}
	}
	b.Cleanup(func() {
		for _, op := range ops {
			op.Buf.Release()
		}
	})
	one := make([]*session.Op, 1)
	posted := 0
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	dc.mu.Lock()
	for dc.done < b.N {
		for posted-dc.done < legWindow && posted < b.N {
			one[0] = ops[posted%legWindow]
			dc.mu.Unlock()
			if _, err := qa.Post(one); err != nil {
				b.Fatal(err)
			}
			dc.mu.Lock()
			posted++
		}
		if dc.failed != nil {
			b.Fatal(dc.failed)
		}
		if dc.done < posted {
			dc.cond.Wait()
		}
	}
	dc.mu.Unlock()
}
