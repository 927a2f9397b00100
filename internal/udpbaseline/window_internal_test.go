package udpbaseline

import (
	"context"
	"errors"
	"io"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/ipv4"

	"github.com/rbridge/rbridge/roce/udpconn"
)

// fakeConn is both ends of a flow in memory: WriteBatch counts the
// datagrams sent and reports it on wrote; ReadBatch delivers what the test
// releases. With dgram set it is a kernel with GSO: a send holds its
// bytes' worth of dgram-byte datagrams, and with refuseGSO a send of
// several fails with EIO, as a route that takes no GSO.
type fakeConn struct {
	mu        sync.Mutex
	sent      int
	calls     []int // datagrams a call
	sends     []int // sends a call
	refused   int
	dgram     int
	refuseGSO bool
	wrote     chan int      // total sent after each WriteBatch
	release   chan int      // datagrams ReadBatch returns next
	closed    chan struct{} // Close
}

func newFakeConn() *fakeConn {
	return &fakeConn{wrote: make(chan int, 100), release: make(chan int), closed: make(chan struct{})}
}

func (c *fakeConn) WriteBatch(ms []ipv4.Message, _ int) (int, error) {
	c.mu.Lock()
	if c.refuseGSO && ms[0].OOB != nil {
		c.refused++
		c.mu.Unlock()
		return 0, os.NewSyscallError("sendmmsg", syscall.EIO)
	}
	dgrams := len(ms)
	if c.dgram > 0 {
		dgrams = 0
		for _, m := range ms {
			dgrams += len(m.Buffers[0]) / c.dgram
		}
	}
	c.sent += dgrams
	c.calls = append(c.calls, dgrams)
	c.sends = append(c.sends, len(ms))
	n := c.sent
	c.mu.Unlock()
	c.wrote <- n
	return len(ms), nil
}

func (c *fakeConn) ReadBatch(ms []ipv4.Message, _ int) (int, error) {
	select {
	case n := <-c.release:
		return n, nil
	case <-c.closed:
		return 0, errClosed
	}
}

var errClosed = errors.New("closed")

func (c *fakeConn) Close() error { close(c.closed); return nil }

func fakeFlow(t *testing.T, o Options) (*Flow, *fakeConn) {
	t.Helper()
	return fakeFlowOffload(t, o, newFakeConn(), udpconn.Offload{})
}

// fakeFlowOffload is fakeFlow over c, with the offload off says.
func fakeFlowOffload(t *testing.T, o Options, c *fakeConn, off udpconn.Offload) (*Flow, *fakeConn) {
	t.Helper()
	if o.Batch == 0 {
		o.Batch = 64
	}
	f := newFlow(o, c, c, off)
	f.closers = []io.Closer{c}
	f.start()
	t.Cleanup(func() { f.Close() })
	return f, c
}

// TestWindowWaits: the sender stops at the window and goes on exactly as
// far as what arrives opens it, in batches as large as the room allows.
func TestWindowWaits(t *testing.T) {
	f, c := fakeFlow(t, Options{Size: 64, Datagram: 4096, Window: 8, StallTimeout: time.Hour})
	done := make(chan error)
	go func() { done <- f.Send(context.Background(), 20) }()
	if n := <-c.wrote; n != 8 {
		t.Fatalf("first batch: %d datagrams, want the window of 8", n)
	}
	c.release <- 3 // three arrive: room for three more
	if n := <-c.wrote; n != 11 {
		t.Fatalf("after 3 arrived: %d sent, want 11", n)
	}
	select {
	case n := <-c.wrote:
		t.Fatalf("sent %d with a full window", n)
	case <-time.After(20 * time.Millisecond):
	}
	c.release <- 11
	if n := <-c.wrote; n != 19 {
		t.Fatalf("after 11 more arrived: %d sent, want 19", n)
	}
	c.release <- 8
	if n := <-c.wrote; n != 20 {
		t.Fatalf("the last datagram: %d sent, want 20", n)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if want := []int{8, 3, 8, 1}; !slices.Equal(c.calls, want) {
		t.Errorf("batches %v, want %v", c.calls, want)
	}
}

// TestWindowOfDatagrams: a message of many datagrams is held to
// MaxInflight datagrams, not to the window of whole messages.
func TestWindowOfDatagrams(t *testing.T) {
	f, c := fakeFlow(t, Options{Size: 1 << 20, Datagram: 1024, Window: 32, StallTimeout: time.Hour})
	go f.Send(context.Background(), 1)
	total := 0
	for total < MaxInflight {
		total = <-c.wrote
	}
	if total != MaxInflight {
		t.Fatalf("sent %d datagrams before the first arrived, want %d", total, MaxInflight)
	}
	select {
	case n := <-c.wrote:
		t.Fatalf("sent %d with %d in flight", n, MaxInflight)
	case <-time.After(20 * time.Millisecond):
	}
}

// TestStall: when nothing arrives, the sender takes what is in flight as
// lost after the stall timeout instead of waiting forever, and Drain
// reports the loss.
func TestStall(t *testing.T) {
	f, _ := fakeFlow(t, Options{Size: 64, Datagram: 4096, Window: 4, StallTimeout: time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.Send(ctx, 12); err != nil {
		t.Fatal(err)
	}
	r, err := f.Drain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.Sent != 12 || r.Received != 0 || r.Lost() != 12 || r.Messages != 0 {
		t.Errorf("nothing arrived: %+v, lost %d", r, r.Lost())
	}
}
