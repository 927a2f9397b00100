package leg

import (
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rbridge/rbridge/internal/testlog"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/transport"
)

// quietConn is a packet conn on which nothing arrives. Its ReadBatch ends
// at the read deadline when it honours deadlines; otherwise it blocks
// until Close whatever the deadline, as a read stuck in the kernel or a
// wedged ring would.
type quietConn struct {
	honour   bool
	mu       sync.Mutex
	deadline time.Time
	closed   chan struct{}
	once     sync.Once
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
	if c.honour {
		timeout = time.After(time.Until(d))
	}
	select {
	case <-c.closed:
		return 0, roce.ErrConnClosed
	case <-timeout:
		return 0, os.ErrDeadlineExceeded
	}
}

func (c *quietConn) WriteBatch(m []roce.Message) (int, error) { return len(m), nil }
func (c *quietConn) LocalAddr() netip.AddrPort                { return netip.MustParseAddrPort("10.9.0.1:4791") }
func (c *quietConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

// TestHealthReceiveLoop: Health fails, naming the leg, once a userspace
// leg's receive loop has not come round for StallAfter (its conn's read
// blocks for good, deadline or not); a quiet leg whose loop wakes on its
// deadline stays healthy.
func TestHealthReceiveLoop(t *testing.T) {
	for _, tc := range []struct {
		name   string
		honour bool
		want   string // in Health's error; "" healthy
	}{
		{"idle", true, ""},
		{"stuck", false, `the receive loop has not come round for`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &quietConn{honour: tc.honour, closed: make(chan struct{})}
			dev, err := transport.NewDevice(c, transport.DeviceOptions{IdleWake: 10 * time.Millisecond, Logger: testlog.New(t)})
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Close()
			u := &userspaceLeg{dev: dev, devs: []*transport.Device{dev}}
			if err := u.Health(time.Now(), 100*time.Millisecond); err != nil {
				t.Fatalf("a device just started: %v", err)
			}
			time.Sleep(300 * time.Millisecond)
			err = u.Health(time.Now(), 100*time.Millisecond)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("a quiet leg whose loop wakes: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("a stuck receive loop: Health %v, want %q", err, tc.want)
			}
		})
	}
}
