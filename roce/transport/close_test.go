package transport_test

import (
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rbridge/rbridge/internal/testlog"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/transport"
)

// heldConn is a packet conn whose WriteBatch is held until the test lets it
// go, as a send that is still reading the MR's memory (the ICRC over a
// gathered payload) when Close is called.
type heldConn struct {
	entered chan struct{} // a WriteBatch started
	release chan struct{} // lets it finish
	closed  chan struct{}
	writes  atomic.Int32
}

var _ roce.PacketConn = (*heldConn)(nil)

func (c *heldConn) ReadBatch([]roce.Message) (int, error) {
	<-c.closed
	return 0, roce.ErrConnClosed
}

func (c *heldConn) WriteBatch(msgs []roce.Message) (int, error) {
	c.writes.Add(1)
	c.entered <- struct{}{}
	<-c.release
	return len(msgs), nil
}

func (c *heldConn) LocalAddr() netip.AddrPort { return netip.MustParseAddrPort("10.0.0.1:4791") }
func (c *heldConn) Close() error              { close(c.closed); return nil }

// TestCloseWaitsForSend: Close returns only once a send under way has
// finished, and nothing is sent after it, so the MRs' memory (an mmap'd
// arena) can be unmapped as soon as Close returns.
func TestCloseWaitsForSend(t *testing.T) {
	c := &heldConn{entered: make(chan struct{}, 1), release: make(chan struct{}), closed: make(chan struct{})}
	dev, err := transport.NewDevice(c, transport.DeviceOptions{Logger: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	pd, cq := transport.NewPD(), transport.NewCQ(16)
	mr, err := pd.RegisterMR(make([]byte, 4096), transport.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := dev.CreateQP(pd, transport.QPInitAttr{SendCQ: cq, RecvCQ: cq})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []transport.QPAttr{
		{State: transport.StateInit},
		{State: transport.StateRTR, DestQPN: 0x11, Remote: netip.MustParseAddrPort("10.0.0.2:4791"), PathMTU: 1024},
		{State: transport.StateRTS, Timeout: 1, RetryCnt: 7, RNRRetry: 7},
	} {
		if err := qp.Modify(a); err != nil {
			t.Fatal(err)
		}
	}
	go qp.PostSend(transport.SendWR{Opcode: transport.OpWrite, Local: transport.SGE{MR: mr, Length: 4096}, Remote: 0x1000, RKey: 1})
	<-c.entered
	closed := make(chan error)
	go func() { closed <- dev.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a send was under way", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(c.release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	n := c.writes.Load()
	time.Sleep(20 * time.Millisecond) // a retransmission timer of 8 us would have fired
	if got := c.writes.Load(); got != n {
		t.Errorf("%d sends after Close returned", got-n)
	}
}
