package xdp_test

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/xdp"
)

var (
	group4      = netip.MustParseAddr("239.1.1.1")
	otherGroup4 = netip.MustParseAddr("239.1.1.2")
	group6      = netip.MustParseAddr("ff0e::1:2")
)

// TestClassifyGroups covers datagrams to QPN 0xFFFFFF: redirected when the
// IP destination is a group added (counted per group, never answered with
// a CNP, though CNPs are on), passed to the kernel otherwise, whatever QPs
// are owned. Every case runs once on a fresh program with group4 and
// group6 added.
func TestClassifyGroups(t *testing.T) {
	const mcastQPN = 0xFFFFFF
	ud := func(src, dst netip.Addr, ecn uint8, vlans int) []byte {
		return buildFrame(frameSpec{vlans: vlans, src: src, dst: dst, sport: 0xc001, ecn: ecn, transport: transport(roce.UDSendOnly, mcastQPN, 64)})
	}
	const len4, len6 = 14 + 20 + 8 + 12 + 8 + 64 + 4, 14 + 8 + 40 + 8 + 12 + 8 + 64 + 4
	for _, tc := range []struct {
		name   string
		frame  []byte
		action uint32
		want   xdp.Counters
		groups map[netip.Addr]xdp.GroupCounters
	}{
		{"ipv4 group", ud(ip4A, group4, 0, 0), xdpPass, xdp.Counters{NoSocket: 1},
			map[netip.Addr]xdp.GroupCounters{group4: {Packets: 1, Bytes: len4}}},
		{"ipv4 group ecn-ce", ud(ip4A, group4, 3, 0), xdpPass, xdp.Counters{NoSocket: 1},
			map[netip.Addr]xdp.GroupCounters{group4: {Packets: 1, Bytes: len4, ECNCE: 1}}},
		{"ipv6 group two vlans", ud(ip6A, group6, 0, 2), xdpPass, xdp.Counters{NoSocket: 1},
			map[netip.Addr]xdp.GroupCounters{group6: {Packets: 1, Bytes: len6}}},
		{"group not added", ud(ip4A, otherGroup4, 0, 0), xdpPass, xdp.Counters{Unjoined: 1}, nil},
		// An IPv4 group's MGID as an IPv6 destination is no IPv6 group
		// (ff00::/8): passed, though the key would match group4.
		{"ipv6 destination ::ffff:239.1.1.1", ud(ip6A, netip.AddrFrom16(group4.As16()), 0, 0), xdpPass, xdp.Counters{Unjoined: 1}, nil},
		{"unicast destination", ud(ip4A, ip4B, 0, 0), xdpPass, xdp.Counters{Unjoined: 1}, nil},
		{"truncated", ud(ip4A, group4, 0, 0)[:14+20+8+12+4], xdpDrop, xdp.Counters{DropTruncated: 1}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := loadProgram(t, xdp.Options{CNP: true})
			// A QP whose low 16 bits are 0xFFFFFF's: the QP filter's bit
			// for it is set, and still the group table decides.
			if err := p.AddQP(0x00FFFF, xdp.QP{RemoteQPN: remoteQP}); err != nil {
				t.Fatal(err)
			}
			for _, g := range []netip.Addr{group4, group6} {
				if err := p.AddGroup(g); err != nil {
					t.Fatal(err)
				}
			}
			ret, _ := run(t, p, tc.frame)
			if ret != tc.action {
				t.Errorf("action %s, want %s", actionNames[ret], actionNames[tc.action])
			}
			if diff := cmp.Diff(tc.want, counters(t, p)); diff != "" {
				t.Errorf("counters (-want +got):\n%s", diff)
			}
			for _, g := range []netip.Addr{group4, group6} {
				got, err := p.GroupCounters(g)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tc.groups[g], got); diff != "" {
					t.Errorf("group %v counters (-want +got):\n%s", g, diff)
				}
			}
		})
	}
}

// TestGroupTable checks adding and removing groups: an add again keeps the
// counters, a removed group's datagrams go to the kernel, and addresses
// that are not multicast are refused.
func TestGroupTable(t *testing.T) {
	p := loadProgram(t, xdp.Options{})
	frame := buildFrame(frameSpec{src: ip4A, dst: group4, sport: 1, transport: transport(roce.UDSendOnly, 0xFFFFFF, 0)})
	expect := func(step string, want xdp.Counters) {
		t.Helper()
		before := counters(t, p)
		run(t, p, frame)
		if diff := cmp.Diff(want, sub(counters(t, p), before)); diff != "" {
			t.Errorf("%s: counters (-want +got):\n%s", step, diff)
		}
	}
	expect("none added", xdp.Counters{Unjoined: 1})
	if err := p.AddGroup(group4); err != nil {
		t.Fatal(err)
	}
	expect("added", xdp.Counters{NoSocket: 1})
	if err := p.AddGroup(netip.AddrFrom16(group4.As16())); err != nil { // the mapped form: the same group
		t.Fatal(err)
	}
	if c, err := p.GroupCounters(group4); err != nil || c.Packets != 1 {
		t.Errorf("after adding again: %+v, %v; want the 1 packet kept", c, err)
	}
	expect("added again", xdp.Counters{NoSocket: 1})
	if err := p.RemoveGroup(group4); err != nil {
		t.Fatal(err)
	}
	expect("removed", xdp.Counters{Unjoined: 1})
	if err := p.RemoveGroup(group4); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Errorf("removing twice: %v, want ErrKeyNotExist", err)
	}
	if _, err := p.GroupCounters(group4); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Errorf("counters of a removed group: %v, want ErrKeyNotExist", err)
	}
	for _, a := range []netip.Addr{ip4A, ip6A, {}} {
		if err := p.AddGroup(a); err == nil {
			t.Errorf("AddGroup(%v): no error", a)
		}
	}
}
