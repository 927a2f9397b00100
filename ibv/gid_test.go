package ibv_test

import (
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rbridge/rbridge/ibv"
)

func gid(s string) ibv.GID {
	g, err := ibv.ParseGID(s)
	if err != nil {
		panic(err)
	}
	return g
}

// A port as rxe and mlx5 fill it: per address a RoCEv1 and a RoCEv2 entry;
// the link-local pair first.
func roceTable(dev, netdev, ll string, ips ...string) []ibv.GIDEntry {
	var t []ibv.GIDEntry
	add := func(a string) {
		for _, typ := range []ibv.GIDType{ibv.GIDTypeIB, ibv.GIDTypeRoCEv2} {
			t = append(t, ibv.GIDEntry{Device: dev, Port: 1, Index: len(t), GID: gid(a), Type: typ, Netdev: netdev})
		}
	}
	add(ll)
	for _, ip := range ips {
		add(ip)
	}
	return t
}

func TestChooseGID(t *testing.T) {
	mlx := roceTable("mlx5_0", "eth0", "fe80::1", "10.0.0.1", "2001:db8::1")
	two := append(roceTable("mlx5_0", "eth0", "fe80::1", "10.0.0.1"), roceTable("mlx5_1", "eth1", "fe80::2", "10.0.1.1")...)
	sameIP := append(roceTable("mlx5_0", "eth0", "fe80::1", "10.0.0.1"), roceTable("rxe0", "vlan5", "fe80::1:1", "10.0.0.1")...)
	v1only := []ibv.GIDEntry{{Device: "mlx4_0", Port: 1, Index: 0, GID: gid("10.0.0.9"), Type: ibv.GIDTypeRoCEv1, Netdev: "eth0"}}
	ib := []ibv.GIDEntry{{Device: "mlx5_2", Port: 1, Index: 0, GID: gid("fe80::248a:703:49:1234"), Type: ibv.GIDTypeIB}}
	// siw on veth2 (MAC 52:54:00:12:34:56) beside rxe on veth0: siw's GID
	// is its netdev's MAC, the rest zero, of type IB; no netdev is given.
	mac := net.HardwareAddr{0x52, 0x54, 0x00, 0x12, 0x34, 0x56}
	var macGID ibv.GID
	copy(macGID[:], mac)
	siw := append(roceTable("rxe0", "veth0", "fe80::5", "198.18.1.1"), ibv.GIDEntry{Device: "siw0", Port: 1, Index: 0, GID: macGID, Type: ibv.GIDTypeIB})
	twoSiw := append(slices.Clone(siw), ibv.GIDEntry{Device: "irdma0", Port: 1, Index: 0, GID: macGID, Type: ibv.GIDTypeIB})
	withZero := append([]ibv.GIDEntry{{Device: "rxe0", Port: 1, Index: 0, Type: ibv.GIDTypeRoCEv2}}, roceTable("rxe0", "veth0", "fe80::5", "198.18.1.1")...)

	for _, tc := range []struct {
		name      string
		table     []ibv.GIDEntry
		q         ibv.GIDQuery
		wantDev   string
		wantIndex int
		wantErr   error
		reason    string // substring of the reason (or the error)
	}{
		{name: "ipv4 mapped", table: mlx, q: ibv.GIDQuery{IP: netip.MustParseAddr("10.0.0.1")}, wantDev: "mlx5_0", wantIndex: 3, reason: "only RoCEv2 GID for 10.0.0.1; skipped mlx5_0 port 1 index 2 IB"},
		{name: "ipv4 given as mapped", table: mlx, q: ibv.GIDQuery{IP: netip.MustParseAddr("::ffff:10.0.0.1")}, wantDev: "mlx5_0", wantIndex: 3},
		{name: "ipv6", table: mlx, q: ibv.GIDQuery{IP: netip.MustParseAddr("2001:db8::1")}, wantDev: "mlx5_0", wantIndex: 5},
		{name: "link-local", table: mlx, q: ibv.GIDQuery{IP: netip.MustParseAddr("fe80::1")}, wantDev: "mlx5_0", wantIndex: 1},
		{name: "link-local with zone", table: mlx, q: ibv.GIDQuery{IP: netip.MustParseAddr("fe80::1%eth0")}, wantDev: "mlx5_0", wantIndex: 1, reason: "on netdev eth0"},
		{name: "link-local wrong zone", table: mlx, q: ibv.GIDQuery{IP: netip.MustParseAddr("fe80::1%eth9")}, wantErr: ibv.ErrNoGID, reason: "outside it: mlx5_0"},
		{name: "second device", table: two, q: ibv.GIDQuery{IP: netip.MustParseAddr("10.0.1.1")}, wantDev: "mlx5_1", wantIndex: 3},
		{name: "same ip on two netdevs", table: sameIP, q: ibv.GIDQuery{IP: netip.MustParseAddr("10.0.0.1")}, wantErr: ibv.ErrAmbiguousGID, reason: "2 RoCEv2 entries: mlx5_0 port 1 index 3 RoCEv2 ::ffff:10.0.0.1 (eth0), rxe0 port 1 index 3 RoCEv2 ::ffff:10.0.0.1 (vlan5)"},
		{name: "same ip, netdev named", table: sameIP, q: ibv.GIDQuery{IP: netip.MustParseAddr("10.0.0.1"), Netdev: "vlan5"}, wantDev: "rxe0", wantIndex: 3},
		{name: "same ip, device named", table: sameIP, q: ibv.GIDQuery{IP: netip.MustParseAddr("10.0.0.1"), Device: "mlx5_0"}, wantDev: "mlx5_0", wantIndex: 3},
		{name: "roce v1 only", table: v1only, q: ibv.GIDQuery{IP: netip.MustParseAddr("10.0.0.9")}, wantErr: ibv.ErrNoGID, reason: "only mlx4_0 port 1 index 0 RoCEv1"},
		{name: "unknown ip", table: mlx, q: ibv.GIDQuery{IP: netip.MustParseAddr("10.9.9.9")}, wantErr: ibv.ErrNoGID, reason: "no GID table entry holds this address"},
		{name: "infiniband port", table: ib, q: ibv.GIDQuery{IP: netip.MustParseAddr("10.0.0.1")}, wantErr: ibv.ErrNoGID},
		{name: "no ip", table: mlx, q: ibv.GIDQuery{}, wantErr: ibv.ErrNoGID, reason: "no IP address"},
		{name: "zero gid skipped", table: withZero, q: ibv.GIDQuery{IP: netip.MustParseAddr("198.18.1.1")}, wantDev: "rxe0", wantIndex: 3},
		{name: "iwarp", table: siw, q: ibv.GIDQuery{IP: netip.MustParseAddr("198.18.2.1"), MAC: mac, MACNetdev: "veth2"}, wantDev: "siw0", wantIndex: 0,
			reason: "iWARP: siw0 port 1's GID is veth2's hardware address 52:54:00:12:34:56, which holds 198.18.2.1"},
		{name: "iwarp device named", table: twoSiw, q: ibv.GIDQuery{IP: netip.MustParseAddr("198.18.2.1"), MAC: mac, MACNetdev: "veth2", Device: "irdma0"}, wantDev: "irdma0", wantIndex: 0},
		{name: "iwarp on two devices", table: twoSiw, q: ibv.GIDQuery{IP: netip.MustParseAddr("198.18.2.1"), MAC: mac, MACNetdev: "veth2"}, wantErr: ibv.ErrAmbiguousGID, reason: "2 iWARP devices run on veth2"},
		{name: "iwarp other netdev named", table: siw, q: ibv.GIDQuery{IP: netip.MustParseAddr("198.18.2.1"), MAC: mac, MACNetdev: "veth2", Netdev: "veth0"}, wantErr: ibv.ErrNoGID, reason: "no GID table entry holds this address"},
		{name: "iwarp other mac", table: siw, q: ibv.GIDQuery{IP: netip.MustParseAddr("198.18.2.1"), MAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, MACNetdev: "veth2"}, wantErr: ibv.ErrNoGID},
		{name: "roce before iwarp", table: siw, q: ibv.GIDQuery{IP: netip.MustParseAddr("198.18.1.1"), MAC: mac, MACNetdev: "veth0"}, wantDev: "rxe0", wantIndex: 3},
		{name: "override", table: mlx, q: ibv.GIDQuery{IP: netip.MustParseAddr("10.0.0.1"), UseIndex: true, Index: 3}, wantDev: "mlx5_0", wantIndex: 3, reason: "explicit override: index 3"},
		{name: "override warns", table: mlx, q: ibv.GIDQuery{IP: netip.MustParseAddr("10.0.0.1"), UseIndex: true, Index: 0}, wantDev: "mlx5_0", wantIndex: 0, reason: "warning: type IB, not RoCEv2; GID fe80::1 is not 10.0.0.1"},
		{name: "override missing", table: mlx, q: ibv.GIDQuery{UseIndex: true, Index: 42}, wantErr: ibv.ErrNoGID},
		{name: "override on two devices", table: two, q: ibv.GIDQuery{UseIndex: true, Index: 1}, wantErr: ibv.ErrAmbiguousGID},
		{name: "override device named", table: two, q: ibv.GIDQuery{UseIndex: true, Index: 1, Device: "mlx5_1"}, wantDev: "mlx5_1", wantIndex: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ibv.ChooseGID(tc.table, tc.q)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("ChooseGID: error %v, want %v", err, tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.reason) {
					t.Errorf("ChooseGID error %q does not say %q", err, tc.reason)
				}
				return
			}
			if err != nil {
				t.Fatalf("ChooseGID: %v", err)
			}
			if got.Device != tc.wantDev || got.Index != tc.wantIndex {
				t.Errorf("ChooseGID chose %v, want %s index %d", got.GIDEntry, tc.wantDev, tc.wantIndex)
			}
			if !strings.Contains(got.Reason, tc.reason) {
				t.Errorf("ChooseGID reason %q does not say %q", got.Reason, tc.reason)
			}
			if got.Override != tc.q.UseIndex {
				t.Errorf("ChooseGID Override = %v, want %v", got.Override, tc.q.UseIndex)
			}
		})
	}
}

func TestGIDText(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		addr     netip.Addr
	}{
		{"10.0.0.1", "::ffff:10.0.0.1", netip.MustParseAddr("10.0.0.1")},
		{"::ffff:198.18.1.1", "::ffff:198.18.1.1", netip.MustParseAddr("198.18.1.1")},
		{"fe80::5054:ff:fe12:3456", "fe80::5054:ff:fe12:3456", netip.MustParseAddr("fe80::5054:ff:fe12:3456")},
	} {
		g := gid(tc.in)
		if g.String() != tc.want || g.Addr() != tc.addr {
			t.Errorf("GID %q: String %q Addr %v, want %q %v", tc.in, g, g.Addr(), tc.want, tc.addr)
		}
		b, _ := g.MarshalText()
		var back ibv.GID
		if err := back.UnmarshalText(b); err != nil || back != g {
			t.Errorf("GID %q round trip: %v %v", tc.in, back, err)
		}
	}
	if _, err := ibv.ParseGID("not-a-gid"); err == nil {
		t.Error("ParseGID(not-a-gid): no error")
	}
	if diff := cmp.Diff("RoCEv2", ibv.GIDTypeRoCEv2.String()); diff != "" {
		t.Error(diff)
	}
}
