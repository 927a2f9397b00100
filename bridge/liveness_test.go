package bridge_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge/config"
)

// TestGatewayLiveness: a route's liveness reaches its sessions: an idle
// session through the gateway probes both its connections, counted on
// /metrics, and stays up while both peers answer.
func TestGatewayLiveness(t *testing.T) {
	target := newCMApp(t, lo("4"))
	ln, err := target.cm.Listen(7471, 8)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	y := strings.NewReplacer("127.0.10.", loNet).Replace(`legs:
  - {name: a, kind: userspace, interface: lo, ip: 127.0.10.1, io: udp}
  - {name: b, kind: userspace, interface: lo, ip: 127.0.10.2, io: udp}
routes:
  - name: r
    listen: {leg: a, addr: "127.0.10.1:7471"}
    target: {leg: b, addr: "127.0.10.4:7471"}
    liveness: 1s
`)
	cfg, err := config.Parse("gw.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, cfg)
	cc, _, _ := dialThrough(t, ctx, newCMApp(t, lo("3")), target, ln, "1:7471")
	time.Sleep(2600 * time.Millisecond) // two idle periods and more
	m, _ := scrape(t, startAdmin(t, g))
	for _, dir := range []string{"to_target", "to_client"} {
		name := `rbridge_route_liveness_probes_total{direction="` + dir + `",route="r"}`
		if m[name] < 1 {
			t.Errorf("%s = %v after 2.6 s idle at a 1 s liveness, want a probe at least", name, m[name])
		}
	}
	select {
	case <-cc.Done():
		t.Fatal("the session ended with both peers alive")
	default:
	}
	if err := cc.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
}
