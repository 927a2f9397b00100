package leg

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/ibv"
)

// TestJoinedLink: the members' side's link: a userspace leg's interface,
// a verbs leg's RoCE netdev; a verbs leg on an InfiniBand port (no IGMP:
// membership is the subnet administrator's) is refused, saying so.
func TestJoinedLink(t *testing.T) {
	ip := netip.MustParseAddr("198.18.3.1")
	legs := map[string]GroupLeg{
		"user": &userspaceLeg{cfg: &config.Leg{Name: "user", Interface: "vgw0", Netns: "user0", IP: ip}},
		"roce": &verbsLeg{cfg: &config.Leg{Name: "roce", IP: ip},
			gid: ibv.GIDChoice{GIDEntry: ibv.GIDEntry{Device: "rxe2", Port: 1, Type: ibv.GIDTypeRoCEv2, Netdev: "veth4"}}},
		"ib": &verbsLeg{cfg: &config.Leg{Name: "ib", IP: ip},
			gid: ibv.GIDChoice{GIDEntry: ibv.GIDEntry{Device: "mlx5_0", Port: 1, Type: ibv.GIDTypeIB}}},
	}
	for _, tc := range []struct{ leg, ifname, ns, err string }{
		{leg: "user", ifname: "vgw0", ns: "user0"},
		{leg: "roce", ifname: "veth4"},
		{leg: "ib", err: `leg "ib" is on mlx5_0 port 1 index 0 IB`},
	} {
		ifname, ns, addr, err := legs[tc.leg].JoinedLink()
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "an InfiniBand port: membership there is the subnet administrator's") {
				t.Errorf("leg %s: %v; want an error with %q", tc.leg, err, tc.err)
			}
		case err != nil || ifname != tc.ifname || ns != tc.ns || addr != ip:
			t.Errorf("leg %s: %q in %q at %v, %v; want %q in %q at %v", tc.leg, ifname, ns, addr, err, tc.ifname, tc.ns, ip)
		}
	}
}
