package bridge

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge/session"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/internal/testlog"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/transport"
)

// TestHealth: a gateway is healthy while every route's accept loop runs;
// one that ended on its own is named, and so is a gateway that closes.
func TestHealth(t *testing.T) {
	cfg, err := config.Parse("gw.yaml", []byte(`legs:
  - {name: a, kind: userspace, interface: lo, ip: 127.0.10.1, io: udp}
  - {name: b, kind: userspace, interface: lo, ip: 127.0.10.2, io: udp}
routes:
  - {name: r1, listen: {leg: a, addr: "127.0.10.1:7471"}, target: {leg: b, addr: "127.0.10.4:7471"}}
  - {name: r2, listen: {leg: b, addr: "127.0.10.2:7471"}, target: {leg: a, addr: "127.0.10.3:7471"}}
`))
	if err != nil {
		t.Fatal(err)
	}
	g := &Gateway{cfg: cfg, sessions: map[*session.Session]*sessionInfo{}, stopped: map[string]error{}}
	if err := g.Health(); err != nil {
		t.Errorf("every accept loop running: %v", err)
	}
	g.stopped["r2"] = errors.New("cm: listener closed")
	if err := g.Health(); err == nil || err.Error() != `bridge: gateway: route "r2" stopped accepting: cm: listener closed` {
		t.Errorf("r2's loop ended: %v", err)
	}
	g.closing = true
	if err := g.Health(); err == nil || !strings.Contains(err.Error(), "closing") {
		t.Errorf("closing: %v", err)
	}
}

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
		{"stuck", false, `bridge: gateway: leg "roce": the receive loop has not come round for`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &quietConn{honour: tc.honour, closed: make(chan struct{})}
			dev, err := transport.NewDevice(c, transport.DeviceOptions{IdleWake: 10 * time.Millisecond, Logger: testlog.New(t)})
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Close()
			g := &Gateway{legs: map[string]leg{"roce": &userspaceLeg{dev: dev}}, sessions: map[*session.Session]*sessionInfo{},
				stopped: map[string]error{}, stall: 100 * time.Millisecond}
			if err := g.Health(); err != nil {
				t.Fatalf("a device just started: %v", err)
			}
			time.Sleep(300 * time.Millisecond)
			err = g.Health()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("a quiet leg whose loop wakes: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("a stuck receive loop: Health %v, want %q", err, tc.want)
			}
		})
	}
}

// failingPort is a UD port whose receive fails at once.
type failingPort struct{ err error }

func (p failingPort) qpn() uint32                                                   { return 1 }
func (p failingPort) mtu() int                                                      { return 1024 }
func (p failingPort) recv(context.Context) (*udDatagram, error)                     { return nil, p.err }
func (p failingPort) send(context.Context, *udDatagram, udDest, uint32, bool) error { return nil }
func (p failingPort) noReceive() uint64                                             { return 0 }
func (p failingPort) describe() string                                              { return "a failing port" }
func (p failingPort) close() error                                                  { return nil }

// TestHealthGroupStopped: a group whose relay ends on its own (its QP's
// receive failed) makes Health fail, naming it and why; one stopped by
// the gateway (its context ended) does not.
func TestHealthGroupStopped(t *testing.T) {
	newGateway := func() *Gateway {
		return &Gateway{legs: map[string]leg{}, sessions: map[*session.Session]*sessionInfo{}, stopped: map[string]error{},
			halted: map[string]error{}, log: testlog.New(t, "multicast group stopped relaying")}
	}
	run := func(g *Gateway, ctx context.Context) {
		r := &groupRun{cfg: &config.Group{Name: "ticks", Direction: config.DirectionRoCEToIB}, stats: &UDStats{},
			ports: [2]udPort{failingPort{errors.New("the CQ overflowed")}, failingPort{}}}
		r.routineRelay(ctx, g, 0)
	}
	g := newGateway()
	run(g, context.Background())
	if err := g.Health(); err == nil || !strings.Contains(err.Error(), `group "ticks" stopped: relaying roce_to_ib: the CQ overflowed`) {
		t.Errorf("Health after the group's receive failed: %v", err)
	}
	g = newGateway()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	run(g, ctx)
	if err := g.Health(); err != nil {
		t.Errorf("Health after the gateway stopped the group: %v", err)
	}
}
