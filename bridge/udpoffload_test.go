package bridge_test

import (
	"strings"
	"testing"

	"github.com/rbridge/rbridge/bridge/config"
)

// TestUDPOffloadOff: udp_offload: false reaches the leg's socket, and its
// status says the kernel's batching is off and why; the other leg keeps
// it where the kernel has it.
func TestUDPOffloadOff(t *testing.T) {
	y := strings.NewReplacer("127.0.10.", loNet).Replace(`legs:
  - {name: a, kind: userspace, interface: lo, ip: 127.0.10.1, io: udp}
  - {name: b, kind: userspace, interface: lo, ip: 127.0.10.2, io: udp, udp_offload: false}
routes:
  - name: r
    listen: {leg: a, addr: "127.0.10.1:7471"}
    target: {leg: b, addr: "127.0.10.4:7471"}
`)
	cfg, err := config.Parse("gw.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, cfg)
	for _, l := range g.Status().Legs {
		switch l.Name {
		case "a":
			if !strings.HasPrefix(l.UDPOffload, "gso on") {
				t.Errorf("leg a's offload: %q, want gso on (the default, where the kernel has it)", l.UDPOffload)
			}
		case "b":
			if !strings.HasPrefix(l.UDPOffload, "gso off (") || !strings.Contains(l.UDPOffload, "gro off (") {
				t.Errorf("leg b's offload: %q, want gso and gro off, each with why", l.UDPOffload)
			}
		}
	}
}
