package bridge

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/bridge/config"
)

// TestFewReceives: a route with a protocol names the verbs legs it
// crosses whose receives per connection are fewer than a storage queue
// sends at once (the default 16 included); a userspace leg, a leg with
// enough, and a route without a protocol are not named.
func TestFewReceives(t *testing.T) {
	cfg, err := config.Parse("gw.yaml", []byte(`legs:
  - {name: ib, kind: verbs, ip: 10.10.0.1}
  - {name: ib2, kind: verbs, ip: 10.10.0.2, receives: 40}
  - {name: ib3, kind: verbs, ip: 10.10.0.3, receives: 128}
  - {name: roce, kind: userspace, interface: eth1, ip: 10.20.0.1}
routes:
  - {name: a, listen: {leg: roce, addr: "10.20.0.1:4420"}, target: {leg: ib, addr: "10.10.0.9:4420"}, protocol: nvme}
  - {name: b, listen: {leg: ib2, addr: "10.10.0.2:4420"}, target: {leg: ib3, addr: "10.10.0.9:4421"}, protocol: nvme}
  - {name: c, listen: {leg: roce, addr: "10.20.0.1:4421"}, target: {leg: ib, addr: "10.10.0.9:4422"}}
`))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range [][]legReceives{{{"ib", 16}}, {{"ib2", 40}}, nil} {
		if d := cmp.Diff(want, fewReceives(cfg, &cfg.Routes[i]), cmp.AllowUnexported(legReceives{})); d != "" {
			t.Errorf("route %s (-want +got):\n%s", cfg.Routes[i].Name, d)
		}
	}
}
