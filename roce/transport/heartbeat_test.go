package transport_test

import (
	"fmt"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/rbridge/rbridge/internal/testlog"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/transport"
)

// quietConn is a packet conn on which nothing arrives: ReadBatch waits for
// Close, or, when it honours deadlines, for the read deadline.
type quietConn struct {
	honour bool // the deadline ends the wait (false: a read stuck for good)

	mu       sync.Mutex
	deadline time.Time
	closed   chan struct{}
	once     sync.Once
}

func newQuietConn(honour bool) *quietConn {
	return &quietConn{honour: honour, closed: make(chan struct{})}
}

func (c *quietConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return nil
}

func (c *quietConn) ReadBatch([]roce.Message) (int, error) {
	c.mu.Lock()
	d := c.deadline
	c.mu.Unlock()
	var timeout <-chan time.Time
	if c.honour && !d.IsZero() {
		timeout = time.After(time.Until(d))
	}
	select {
	case <-c.closed:
		return 0, roce.ErrConnClosed
	case <-timeout:
		return 0, fmt.Errorf("quiet conn: %w", os.ErrDeadlineExceeded)
	}
}

func (c *quietConn) WriteBatch(msgs []roce.Message) (int, error) { return len(msgs), nil }
func (c *quietConn) LocalAddr() netip.AddrPort                   { return netip.MustParseAddrPort("10.9.0.1:4791") }
func (c *quietConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

// plainConn is a quiet conn that cannot stop waiting (no SetReadDeadline).
type plainConn struct{ q *quietConn }

func (c plainConn) ReadBatch(m []roce.Message) (int, error)  { return c.q.ReadBatch(m) }
func (c plainConn) WriteBatch(m []roce.Message) (int, error) { return c.q.WriteBatch(m) }
func (c plainConn) LocalAddr() netip.AddrPort                { return c.q.LocalAddr() }
func (c plainConn) Close() error                             { return c.q.Close() }

// TestReceiveHeartbeat: the receive loop's heartbeat stays fresh on a
// quiet conn that wakes it, ages on one whose read is stuck despite its
// deadline, and a conn that cannot wake the loop says so.
func TestReceiveHeartbeat(t *testing.T) {
	for _, tc := range []struct {
		name         string
		conn         roce.PacketConn
		wakes, fresh bool
	}{
		{"idle", newQuietConn(true), true, true},
		{"stuck", newQuietConn(false), true, false},
		{"no deadline", plainConn{newQuietConn(true)}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := transport.NewDevice(tc.conn, transport.DeviceOptions{IdleWake: 10 * time.Millisecond, Logger: testlog.New(t)})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			start := time.Now()
			time.Sleep(150 * time.Millisecond)
			last, wakes := d.ReceiveHeartbeat()
			fresh := last.After(start.Add(100 * time.Millisecond))
			if wakes != tc.wakes || fresh != tc.fresh {
				t.Errorf("heartbeat %v old after %v: wakes %v, fresh %v; want %v, %v", time.Since(last).Round(time.Millisecond),
					time.Since(start).Round(time.Millisecond), wakes, fresh, tc.wakes, tc.fresh)
			}
		})
	}
}
