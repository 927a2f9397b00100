package mcast_test

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/rbridge/rbridge/roce/mcast"
)

func mgid(s string) mcast.MGID { return mcast.MGID(netip.MustParseAddr(s).As16()) }

var (
	ib2roceIPv4 = mcast.Mapping{Form: mcast.IPoIB, Scope: mcast.ScopeSiteLocal, PKey: 0xffff}
	ib2roceIB   = mcast.Mapping{Form: mcast.RDMACM, Scope: mcast.ScopeSiteLocal, PKey: 0}
	roce        = mcast.Mapping{Form: mcast.RoCEv2}
)

// mappingVectors: groups and their MGIDs. The IPoIB and RDMA-CM ones on
// the default broadcast address were checked against Linux 6.1's
// ip_ib_mc_map and ipv6_ib_mc_map compiled from its headers (with byte 7
// set to 0x01 as cma_set_mgid does for RDMA_PS_UDP); the published ones
// say where they come from.
var mappingVectors = []struct {
	name  string
	m     mcast.Mapping
	group string
	want  string
}{
	{"RoCEv2 IPv4 is IPv4-mapped", roce, "239.1.2.3", "::ffff:239.1.2.3"},
	{"RoCEv2 IPv4 all-systems", roce, "224.0.0.1", "::ffff:224.0.0.1"},
	{"RoCEv2 IPv6 is the group", roce, "ff0e::1234", "ff0e::1234"},
	{"RoCEv2 IPv4-mapped input", roce, "::ffff:239.1.2.3", "::ffff:239.1.2.3"},

	{"IPoIB all-systems", mcast.DefaultIPoIB, "224.0.0.1", "ff12:401b:ffff::1"},
	// SuperUser 'In InfiniBand networks, what is an MGID' (NTP, 224.0.1.1).
	{"IPoIB NTP", mcast.DefaultIPoIB, "224.0.1.1", "ff12:401b:ffff::101"},
	{"IPoIB top nibble dropped", mcast.DefaultIPoIB, "239.255.255.255", "ff12:401b:ffff::fff:ffff"},
	{"IPoIB 239.1.2.3", mcast.DefaultIPoIB, "239.1.2.3", "ff12:401b:ffff::f01:203"},
	// Mellanox OFED manual, OpenSM partitions.conf: 'mgid=ff12:401b::16 # IGMP'
	// (P_Key bits zero, which OpenSM fills in).
	{"IPoIB IGMP, P_Key 0", mcast.Mapping{Form: mcast.IPoIB, Scope: 2}, "224.0.0.22", "ff12:401b::16"},
	// IBM POWER6 'Checking multicast groups': saquery shows
	// GID 0xff12601bffff0000:0x0000000000000016 (MLDv2 routers, ff02::16).
	{"IPoIB MLDv2 routers", mcast.DefaultIPoIB, "ff02::16", "ff12:601b:ffff::16"},
	{"IPoIB solicited-node", mcast.DefaultIPoIB, "ff02::1:ff12:3456", "ff12:601b:ffff::1:ff12:3456"},
	{"IPoIB IPv6 keeps the low 80 bits", mcast.DefaultIPoIB, "ff05:1:2:3:4:5:6:7", "ff12:601b:ffff:3:4:5:6:7"},
	{"IPoIB global scope, partition 0x8001", mcast.Mapping{Form: mcast.IPoIB, Scope: mcast.ScopeGlobal, PKey: 0x8001}, "239.1.2.3", "ff1e:401b:8001::f01:203"},
	// ib2roce's multicast.c builds ff15, the signature, 0xffff, the low 28 bits.
	{"ib2roce IPv4 format", ib2roceIPv4, "239.1.2.3", "ff15:401b:ffff::f01:203"},

	{"RDMA-CM IPv4", mcast.DefaultRDMACM, "239.1.2.3", "ff12:4001:ffff::f01:203"},
	{"RDMA-CM mDNS", mcast.DefaultRDMACM, "224.0.0.251", "ff12:4001:ffff::fb"},
	{"RDMA-CM IPv6", mcast.DefaultRDMACM, "ff02::16", "ff12:6001:ffff::16"},
	{"RDMA-CM passes an SA-assigned MGID through", mcast.DefaultRDMACM, "ff15:a01b::1:2", "ff15:a01b::1:2"},
	// ib2roce's "IB" format: ff15, 0x4001, no P_Key, the low 28 bits.
	{"ib2roce IB format", ib2roceIB, "239.1.2.3", "ff15:4001::f01:203"},

	{"SA-assigned", mcast.Mapping{Form: mcast.SAAssigned}, "ff12:a01b:ffff::1:4711:e001:203", "ff12:a01b:ffff::1:4711:e001:203"},
}

func TestMGID(t *testing.T) {
	for _, c := range mappingVectors {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.m.MGID(netip.MustParseAddr(c.group))
			if err != nil {
				t.Fatalf("%v.MGID(%s): %v", c.m, c.group, err)
			}
			if want := mgid(c.want); got != want {
				t.Errorf("%v.MGID(%s) = %v, want %v", c.m, c.group, got, want)
			}
		})
	}
}

// TestMGIDBytes pins the layout byte by byte, independent of IPv6
// notation: ip_ib_mc_map's buf[4..19].
func TestMGIDBytes(t *testing.T) {
	got, err := mcast.Mapping{Form: mcast.RDMACM, Scope: 8, PKey: 0x7fff}.MGID(netip.MustParseAddr("238.18.52.86"))
	if err != nil {
		t.Fatal(err)
	}
	want := mcast.MGID{0xff, 0x18, 0x40, 0x01, 0x7f, 0xff, 0, 0, 0, 0, 0, 0, 0x0e, 0x12, 0x34, 0x56}
	if got != want {
		t.Errorf("MGID bytes % x, want % x", got, want)
	}
}

func equateAddr() cmp.Option { return cmpopts.EquateComparable(netip.Addr{}) }

func TestParse(t *testing.T) {
	for _, c := range []struct {
		mgid string
		ib   bool
		want mcast.Group
	}{
		{"::ffff:239.1.2.3", false, mcast.Group{Addr: netip.MustParseAddr("239.1.2.3"), Mapping: roce, Bits: 32}},
		{"ff0e::1234", false, mcast.Group{Addr: netip.MustParseAddr("ff0e::1234"), Mapping: roce, Bits: 128}},
		{"ff12:401b:ffff::1", true, mcast.Group{Addr: netip.MustParseAddr("224.0.0.1"), Mapping: mcast.DefaultIPoIB, Bits: 32}},
		{"ff12:401b:ffff::fff:ffff", true, mcast.Group{Addr: netip.MustParseAddr("239.255.255.255"), Mapping: mcast.DefaultIPoIB, Bits: 32}},
		// The full 32 bits, as some tools write them (ib2roce's lookup
		// ORs 0xe0000000 back in for the same reason).
		{"ff12:401b:ffff::e000:1", true, mcast.Group{Addr: netip.MustParseAddr("224.0.0.1"), Mapping: mcast.DefaultIPoIB, Bits: 32}},
		{"ff15:4001::f01:203", true, mcast.Group{Addr: netip.MustParseAddr("239.1.2.3"), Mapping: ib2roceIB, Bits: 32}},
		{"ff12:4001:ffff::f01:203", true, mcast.Group{Addr: netip.MustParseAddr("239.1.2.3"), Mapping: mcast.DefaultRDMACM, Bits: 32}},
		{"ff12:601b:ffff::16", true, mcast.Group{Addr: netip.MustParseAddr("ff02::16"), Mapping: mcast.DefaultIPoIB, Bits: 80}},
		{"ff12:6001:ffff::1:ff12:3456", true, mcast.Group{Addr: netip.MustParseAddr("ff02::1:ff12:3456"), Mapping: mcast.DefaultRDMACM, Bits: 80}},
		{"ff15:a01b::1:2", true, mcast.Group{Addr: netip.MustParseAddr("ff15:a01b::1:2"), Mapping: mcast.Mapping{Form: mcast.SAAssigned, Scope: 5}, Bits: 128}},
	} {
		parse := mcast.ParseRoCEv2
		if c.ib {
			parse = mcast.ParseIB
		}
		got, err := parse(mgid(c.mgid))
		if err != nil {
			t.Errorf("parse %s: %v", c.mgid, err)
			continue
		}
		if diff := cmp.Diff(c.want, got, equateAddr()); diff != "" {
			t.Errorf("parse %s (-want +got):\n%s", c.mgid, diff)
		}
	}
}

// TestRoundTrip: every vector's MGID parses back to its group and mapping
// (for IPv6 groups in the IB forms, to a group with the same MGID).
func TestRoundTrip(t *testing.T) {
	for _, c := range mappingVectors {
		group := netip.MustParseAddr(c.group).Unmap()
		g, _ := c.m.MGID(group)
		parse := mcast.ParseIB
		if c.m.Form == mcast.RoCEv2 {
			parse = mcast.ParseRoCEv2
		}
		got, err := parse(g)
		if err != nil {
			t.Errorf("%s: parse %v: %v", c.name, g, err)
			continue
		}
		wantMapping := c.m
		if c.m.Form == mcast.SAAssigned || (c.m.Form == mcast.RDMACM && got.Mapping.Form == mcast.SAAssigned) {
			wantMapping = mcast.Mapping{Form: mcast.SAAssigned, Scope: g[1] & 0xf}
		}
		if got.Mapping != wantMapping || !got.Contains(group) {
			t.Errorf("%s: %v parses as %+v, want %v in %v", c.name, g, got, group, wantMapping)
		}
		if got.Bits == 128 || got.Bits == 32 {
			if got.Addr != group {
				t.Errorf("%s: %v parses as group %v, want %v", c.name, g, got.Addr, group)
			}
		}
		again, err := got.Mapping.MGID(got.Addr)
		if err != nil || again != g {
			t.Errorf("%s: the parsed group %v maps to %v (%v), want %v", c.name, got.Addr, again, err, g)
		}
	}
}

func TestContains(t *testing.T) {
	g, err := mcast.ParseIB(mgid("ff12:601b:ffff::1:ff12:3456"))
	if err != nil {
		t.Fatal(err)
	}
	for addr, want := range map[string]bool{
		"ff02::1:ff12:3456":       true,
		"ff05::1:ff12:3456":       true, // the scope is not in the MGID
		"ff02:0:1::1:ff12:3456":   true, // nor bytes 2 to 5
		"ff02::1:ff12:3457":       false,
		"ff02:0:0:1::1:ff12:3456": false, // byte 7 is
		"224.0.0.1":               false,
		"2001:db8::1:ff12:3456":   false, // not a multicast group
	} {
		if got := g.Contains(netip.MustParseAddr(addr)); got != want {
			t.Errorf("%v contains %s = %v, want %v", g.Addr, addr, got, want)
		}
	}
}

func TestMGIDErrors(t *testing.T) {
	for _, c := range []struct {
		m     mcast.Mapping
		group string
		want  error
	}{
		{roce, "10.0.0.1", mcast.ErrNotMulticast},
		{roce, "2001:db8::1", mcast.ErrNotMulticast},
		{mcast.DefaultIPoIB, "255.255.255.255", mcast.ErrNotMulticast},
		{mcast.DefaultRDMACM, "192.168.1.1", mcast.ErrNotMulticast},
		{mcast.DefaultIPoIB, "::ffff:10.0.0.1", mcast.ErrNotMulticast},
		{mcast.DefaultIPoIB, "", mcast.ErrNotMulticast},
		{mcast.Mapping{}, "239.1.2.3", mcast.ErrBadMapping},
		{mcast.Mapping{Form: 9}, "239.1.2.3", mcast.ErrBadMapping},
		{mcast.Mapping{Form: mcast.IPoIB, PKey: 0xffff}, "239.1.2.3", mcast.ErrBadMapping},
		{mcast.Mapping{Form: mcast.RDMACM, Scope: 0x12}, "239.1.2.3", mcast.ErrBadMapping},
		{mcast.Mapping{Form: mcast.SAAssigned}, "ff02::16", mcast.ErrBadMapping},
		{mcast.Mapping{Form: mcast.SAAssigned}, "239.1.2.3", mcast.ErrBadMapping},
	} {
		var group netip.Addr
		if c.group != "" {
			group = netip.MustParseAddr(c.group)
		}
		if _, err := c.m.MGID(group); !errors.Is(err, c.want) {
			t.Errorf("%v.MGID(%s): %v, want %v", c.m, c.group, err, c.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, c := range []struct {
		mgid string
		ib   bool
		want error
	}{
		{"::ffff:10.0.0.1", false, mcast.ErrNotMulticast}, // a unicast RoCEv2 GID
		{"fe80::1", false, mcast.ErrNotMulticast},
		{"::", false, mcast.ErrNotMulticast},
		{"fe80::202:c903:1:2", true, mcast.ErrNotMulticast},     // a port GID
		{"::ffff:239.1.2.3", true, mcast.ErrNotMulticast},       // a RoCEv2 MGID is not an IB one
		{"ff12:1234:ffff::1", true, mcast.ErrNotMapped},         // another signature
		{"ff02:401b:ffff::1", true, mcast.ErrNotMapped},         // flags 0: not what the kernel writes
		{"ff10:401b:ffff::1", true, mcast.ErrNotMapped},         // scope 0
		{"ff12:401b:ffff:1::1", true, mcast.ErrNotMapped},       // IPv4 with bytes 6-11 set
		{"ff12:401b:ffff::1000:1", true, mcast.ErrNotMulticast}, // top nibble 1: no IPv4 group
	} {
		parse := mcast.ParseRoCEv2
		if c.ib {
			parse = mcast.ParseIB
		}
		if g, err := parse(mgid(c.mgid)); !errors.Is(err, c.want) {
			t.Errorf("parse %s = %+v, %v; want %v", c.mgid, g, err, c.want)
		}
	}
}

func TestFromBroadcast(t *testing.T) {
	// The default IPoIB broadcast address, as `ip link show ib0` prints it.
	def := []byte{0x00, 0xff, 0xff, 0xff, 0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}
	for _, form := range []mcast.Form{mcast.IPoIB, mcast.RDMACM} {
		m, err := mcast.FromBroadcast(def, form)
		if err != nil {
			t.Fatal(err)
		}
		if want := (mcast.Mapping{Form: form, Scope: 2, PKey: 0xffff}); m != want {
			t.Errorf("FromBroadcast(default, %v) = %v, want %v", form, m, want)
		}
	}
	// A child interface on partition 0x8001 with site-local scope.
	child := append([]byte(nil), def...)
	child[5], child[8], child[9] = 0x15, 0x80, 0x01
	if m, err := mcast.FromBroadcast(child, mcast.IPoIB); err != nil || m != (mcast.Mapping{Form: mcast.IPoIB, Scope: 5, PKey: 0x8001}) {
		t.Errorf("FromBroadcast(partition 0x8001) = %v, %v", m, err)
	}
	bad := func(mod func(b []byte) []byte) []byte { return mod(append([]byte(nil), def...)) }
	for name, c := range map[string]struct {
		b    []byte
		form mcast.Form
	}{
		"short":           {def[:19], mcast.IPoIB},
		"long":            {append(append([]byte(nil), def...), 0), mcast.IPoIB},
		"not a multicast": {bad(func(b []byte) []byte { b[4] = 0xfe; return b }), mcast.IPoIB},
		"IPv6 signature":  {bad(func(b []byte) []byte { b[6] = 0x60; return b }), mcast.IPoIB},
		"scope 0":         {bad(func(b []byte) []byte { b[5] = 0x10; return b }), mcast.IPoIB},
		"RoCEv2 form":     {def, mcast.RoCEv2},
	} {
		if m, err := mcast.FromBroadcast(c.b, c.form); err == nil {
			t.Errorf("FromBroadcast(%s) = %v, want an error", name, m)
		}
	}
}

func TestEthernetMAC(t *testing.T) {
	for _, c := range []struct{ group, want string }{
		// Cisco/Wikipedia's example: the upper nine bits are ignored.
		{"234.129.2.3", "01:00:5e:01:02:03"},
		{"224.0.0.1", "01:00:5e:00:00:01"},
		{"239.255.255.255", "01:00:5e:7f:ff:ff"},
		{"224.128.0.1", "01:00:5e:00:00:01"}, // 32 groups share a MAC
		{"::ffff:239.1.2.3", "01:00:5e:01:02:03"},
		// RFC 2464 section 7's example.
		{"ff02:dead:beef::1:3", "33:33:00:01:00:03"},
		{"ff02::1:ff12:3456", "33:33:ff:12:34:56"},
		{"ff0e::1234", "33:33:00:00:12:34"},
	} {
		got, err := mcast.EthernetMAC(netip.MustParseAddr(c.group))
		if err != nil || got.String() != c.want {
			t.Errorf("EthernetMAC(%s) = %v, %v; want %s", c.group, got, err, c.want)
		}
	}
	for _, s := range []string{"10.0.0.1", "2001:db8::1", "255.255.255.255"} {
		if _, err := mcast.EthernetMAC(netip.MustParseAddr(s)); !errors.Is(err, mcast.ErrNotMulticast) {
			t.Errorf("EthernetMAC(%s): %v, want ErrNotMulticast", s, err)
		}
	}
	// A RoCE address handle's destination MAC (ib_resolve_eth_dmac).
	for mg, want := range map[string]string{"::ffff:239.1.2.3": "01:00:5e:01:02:03", "ff0e::1234": "33:33:00:00:12:34"} {
		got, err := mgid(mg).EthernetMAC()
		if err != nil || got.String() != want {
			t.Errorf("MGID %s EthernetMAC = %v, %v; want %s", mg, got, err, want)
		}
	}
	if _, err := mgid("::ffff:10.0.0.1").EthernetMAC(); !errors.Is(err, mcast.ErrNotMulticast) {
		t.Errorf("EthernetMAC of a unicast GID: %v", err)
	}
}

func TestStrings(t *testing.T) {
	for got, want := range map[string]string{
		mcast.DefaultIPoIB.String():                "IPoIB (scope 0x2, P_Key 0xffff)",
		mcast.Mapping{Form: mcast.RoCEv2}.String(): "RoCEv2",
		mcast.RDMACM.String():                      "RDMA-CM",
		mcast.Form(0).String():                     "Form(0)",
		mgid("ff12:401b:ffff::1").String():         "ff12:401b:ffff::1",
	} {
		if got != want {
			t.Errorf("%q, want %q", got, want)
		}
	}
}

// FuzzParseIB: ParseIB never panics, and what it accepts maps back to the
// same MGID. Run with go test ./roce/mcast -run '^$' -fuzz FuzzParseIB.
func FuzzParseIB(f *testing.F) {
	for _, c := range mappingVectors {
		g, _ := c.m.MGID(netip.MustParseAddr(c.group))
		f.Add(g[:])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) != 16 {
			return
		}
		g := mcast.MGID(b)
		for _, parse := range []func(mcast.MGID) (mcast.Group, error){mcast.ParseIB, mcast.ParseRoCEv2} {
			grp, err := parse(g)
			if err != nil {
				continue
			}
			again, err := grp.Mapping.MGID(grp.Addr)
			if err != nil {
				t.Fatalf("%v parses as %+v, which does not map: %v", g, grp, err)
			}
			want := g
			if grp.Mapping.Form != mcast.RoCEv2 && grp.Addr.Is4() {
				want[12] &= 0x0f // an IB IPv4 MGID with the group's top bits maps back without them
			}
			if again != want {
				t.Fatalf("%v parses as %+v, which maps to %v", g, grp, again)
			}
			if !grp.Contains(grp.Addr) {
				t.Fatalf("%+v does not contain its own group", grp)
			}
		}
	})
}
