package transport_test

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/rbridge/rbridge/internal/testlog"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/simnet"
	"github.com/rbridge/rbridge/roce/transport"
)

// TestDevicePolled: a polled device (DeviceOptions.Polled) receives only
// as its Poll is called, here by a goroutine that spins on it, and carries
// the RC workload (every opcode, a lossy link) to a device that is not
// polled; after Close, Poll says the device is closed.
func TestDevicePolled(t *testing.T) {
	n := simnet.New(simnet.Options{Loss: 0.01, Duplicate: 0.01, Seed: 7})
	a := newEndOpts(t, n, "10.0.0.1:4791", transport.DeviceOptions{Polled: true})
	b := newEnd(t, n, "10.0.0.2:4791")
	connect(t, a, b, connOpts{mtu: 1024, retry: 7, rnrRetry: 7})
	polledWorkload(t, a, b)
	a.dev.Close()
	if _, err := a.dev.Poll(); !errors.Is(err, roce.ErrConnClosed) {
		t.Errorf("Poll after Close: %v, want roce.ErrConnClosed", err)
	}
}

// TestDevicePolledNeedsTryReader: a polled device on a conn that cannot
// read without waiting is refused; Poll on a device that is not polled is
// an error.
func TestDevicePolledNeedsTryReader(t *testing.T) {
	n := simnet.New(simnet.Options{})
	c, err := n.Listen(netip.MustParseAddrPort("10.0.0.3:4791"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := transport.NewDevice(waitOnly{c}, transport.DeviceOptions{Polled: true}); err == nil {
		t.Error("a polled device on a conn without TryReadBatch: no error")
	}
	b := newEnd(t, n, "10.0.0.4:4791")
	if _, err := b.dev.Poll(); err == nil {
		t.Error("Poll on a device that is not polled: no error")
	}
}

// waitOnly hides its conn's TryReadBatch.
type waitOnly struct{ roce.PacketConn }

// tryLender lends frames of its own arena (as an AF_XDP socket lends its
// UMEM's), filled from the inner conn without waiting.
type tryLender struct {
	*simnet.Conn
	arena   []byte
	free    []uint64
	lent    int // frames out, not yet returned
	scratch []roce.Message
}

const lendFrame = 4096

func newTryLender(c *simnet.Conn, frames int) *tryLender {
	l := &tryLender{Conn: c, arena: make([]byte, frames*lendFrame)}
	for i := range frames {
		l.free = append(l.free, uint64(i*lendFrame))
	}
	return l
}

func (l *tryLender) LendsFrames() bool { return true }

func (l *tryLender) ReadBatchLent([]roce.Message) (int, error) {
	return 0, errors.New("tryLender: a polled device must not wait")
}

func (l *tryLender) TryReadBatchLent(msgs []roce.Message) (int, error) {
	if len(l.scratch) < len(msgs) {
		l.scratch = make([]roce.Message, len(msgs))
		for i := range l.scratch {
			l.scratch[i].Buf = make([]byte, roce.MaxPacket)
		}
	}
	n := min(len(msgs), len(l.free))
	n, err := l.Conn.TryReadBatch(l.scratch[:n])
	if err != nil {
		return 0, err
	}
	for i, m := range l.scratch[:n] {
		off := l.free[len(l.free)-1]
		l.free = l.free[:len(l.free)-1]
		l.lent++
		b := l.arena[off : off+uint64(m.N) : off+uint64(m.N)]
		copy(b, m.Buf[:m.N])
		msgs[i] = roce.Message{Buf: b, N: m.N, Addr: m.Addr, ECN: m.ECN, Lent: true, Frame: off}
	}
	return n, nil
}

func (l *tryLender) ReturnFrames(frames []uint64) {
	l.free = append(l.free, frames...)
	l.lent -= len(frames)
}

// TestDevicePolledLent: a polled device on a conn that lends its frames
// (an AF_XDP socket over the pool, busy-polled) reads through Poll without
// waiting, carries the RC workload over a lossy link, and hands every
// frame back; a lending conn that cannot read without waiting is refused.
func TestDevicePolledLent(t *testing.T) {
	n := simnet.New(simnet.Options{Loss: 0.01, Duplicate: 0.01, Seed: 9})
	ap := netip.MustParseAddrPort("10.0.0.5:4791")
	c, err := n.Listen(ap)
	if err != nil {
		t.Fatal(err)
	}
	l := newTryLender(c, 64)
	dev, err := transport.NewDevice(l, transport.DeviceOptions{Polled: true, Logger: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	a := &end{dev: dev, pd: transport.NewPD(), mem: make([]byte, memSize), addr: ap,
		scq: transport.NewCQ(8192), rcq: transport.NewCQ(8192)}
	b := newEnd(t, n, "10.0.0.6:4791")
	a.access = b.access
	if a.mr, err = a.pd.RegisterMR(a.mem, a.access); err != nil {
		t.Fatal(err)
	}
	connect(t, a, b, connOpts{mtu: 1024, retry: 7, rnrRetry: 7})
	polledWorkload(t, a, b)
	if l.lent != 0 || len(l.free) != 64 {
		t.Errorf("%d frames still lent, %d of 64 free after the workload", l.lent, len(l.free))
	}

	c2, err := n.Listen(netip.MustParseAddrPort("10.0.0.7:4791"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := transport.NewDevice(waitLender{newTryLender(c2, 4)}, transport.DeviceOptions{Polled: true}); err == nil {
		t.Error("a polled device on a lending conn without TryReadBatchLent: no error")
	}
}

// waitLender hides its conn's TryReadBatchLent (and TryReadBatch).
type waitLender struct{ roce.FrameLender }

// polledWorkload carries the RC workload from a, whose device is polled,
// to b, while a goroutine spins on a's Poll, as a busy-polled loop does;
// it fails the test if Poll failed or read nothing.
func polledWorkload(t *testing.T, a, b *end) {
	t.Helper()
	stop, stopped := make(chan struct{}), make(chan error, 1)
	polls := 0
	go func() {
		for {
			select {
			case <-stop:
				stopped <- nil
				return
			default:
			}
			k, err := a.dev.Poll()
			if err != nil {
				stopped <- err
				return
			}
			polls += k
		}
	}()
	workload(t, a, b, 60, 3*1024+17, 16, 20*time.Second)
	close(stop)
	if err := <-stopped; err != nil {
		t.Fatalf("poll: %v", err)
	}
	if polls == 0 {
		t.Fatal("the polled device read no packet through Poll: the test proved nothing")
	}
}
