package bridge

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/rbridge/rbridge/bridge/leg"

	"github.com/rbridge/rbridge/bridge/session"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/internal/testlog"
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

// failingPort is a UD port whose receive fails at once.
type failingPort struct{ err error }

func (p failingPort) QPN() uint32                                                   { return 1 }
func (p failingPort) MTU() int                                                      { return 1024 }
func (p failingPort) Recv(context.Context, []leg.Datagram, bool) (int, error)       { return 0, p.err }
func (p failingPort) Send(context.Context, []leg.Datagram, leg.UDDest, *leg.UDSent) {}
func (p failingPort) Flush(context.Context, *leg.UDSent)                            {}
func (p failingPort) NoReceive() uint64                                             { return 0 }
func (p failingPort) Describe() string                                              { return "a failing port" }
func (p failingPort) Close() error                                                  { return nil }

// TestHealthGroupStopped: a group whose relay ends on its own (its QP's
// receive failed) makes Health fail, naming it and why; one stopped by
// the gateway (its context ended) does not.
func TestHealthGroupStopped(t *testing.T) {
	newGateway := func() *Gateway {
		return &Gateway{legs: map[string]leg.Leg{}, sessions: map[*session.Session]*sessionInfo{}, stopped: map[string]error{},
			halted: map[string]error{}, log: testlog.New(t, "multicast group stopped relaying")}
	}
	run := func(g *Gateway, ctx context.Context) {
		r := &groupRun{cfg: &config.Group{Name: "ticks", Direction: config.DirectionRoCEToIB}, stats: &UDStats{},
			ports: [2]leg.UDPort{failingPort{errors.New("the CQ overflowed")}, failingPort{}}}
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
