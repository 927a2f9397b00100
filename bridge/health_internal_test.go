package bridge

import (
	"errors"
	"strings"
	"testing"

	"github.com/rbridge/rbridge/bridge/config"
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
	g := &Gateway{cfg: cfg, sessions: map[*Session]*sessionInfo{}, stopped: map[string]error{}}
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
