package igmp_test

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/rbridge/rbridge/internal/igmp"
)

var (
	grp6  = netip.MustParseAddr("ff05::4d:c77")
	grp6b = netip.MustParseAddr("ff0e::db8:1")
	ll    = netip.MustParseAddr("fe80::1")
	ll2   = netip.MustParseAddr("fe80::2")
)

var addrs = cmp.Comparer(func(a, b netip.Addr) bool { return a == b })

// TestParseMLD: MLD messages of both versions, framed as hosts send them
// (hop limit 1, Router Alert, the ICMPv6 checksum over the pseudo-header),
// parse back into the Message of the IGMP type of the same meaning.
func TestParseMLD(t *testing.T) {
	for _, tc := range []struct {
		name string
		msg  []byte
		dst  netip.Addr
		want igmp.Message
	}{
		{"v2 report", igmp.AppendMLDReportV2(nil, []igmp.Record{{Type: igmp.ChangeToExcludeMode, Group: grp6}, {Type: igmp.AllowNewSources, Group: grp6b, Sources: 2}}),
			netip.MustParseAddr("ff02::16"),
			igmp.Message{Type: igmp.TypeReportV3, Version: 2, Records: []igmp.Record{{Type: igmp.ChangeToExcludeMode, Group: grp6}, {Type: igmp.AllowNewSources, Group: grp6b, Sources: 2}}}},
		{"v1 report", igmp.AppendMLDv1(nil, igmp.TypeReportV2, grp6), grp6, igmp.Message{Type: igmp.TypeReportV2, Version: 1, Group: grp6}},
		{"v1 done", igmp.AppendMLDv1(nil, igmp.TypeLeave, grp6), netip.MustParseAddr("ff02::2"), igmp.Message{Type: igmp.TypeLeave, Version: 1, Group: grp6}},
		{"v2 general query", igmp.AppendMLDQuery(nil, igmp.QueryFields{Group: netip.IPv6Unspecified(), MaxResp: 10 * time.Second, QRV: 2, QQIC: 125}), igmp.AllNodes,
			igmp.Message{Type: igmp.TypeQuery, Version: 2, Group: netip.IPv6Unspecified(), MaxResp: 10 * time.Second, QRV: 2, QQIC: 125}},
		{"v2 group query, long", igmp.AppendMLDQuery(nil, igmp.QueryFields{Group: grp6, MaxResp: 100 * time.Second, SuppressRouter: true, QRV: 2}), grp6,
			igmp.Message{Type: igmp.TypeQuery, Version: 2, Group: grp6, MaxResp: igmp.DecodeMLDCode(igmp.EncodeMLDCode(100 * time.Second)), SuppressRouter: true, QRV: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pkt := igmp.AppendPacket6(nil, ll, tc.dst, tc.msg)
			p, err := igmp.ParsePacket(pkt)
			if err != nil {
				t.Fatal(err)
			}
			want := igmp.Packet{Src: ll, Dst: tc.dst, TTL: 1, Message: tc.want}
			if d := cmp.Diff(want, p, addrs); d != "" {
				t.Errorf("parse %x (-want +got):\n%s", pkt, d)
			}
			if tc.want.Type == igmp.TypeReportV3 {
				checkGopacketMLD(t, pkt, p.Message)
			}
			for n := range len(pkt) {
				if _, err := igmp.ParsePacket(pkt[:n]); err == nil {
					t.Errorf("parse of %d of %d bytes: no error", n, len(pkt))
				}
			}
			bad := bytes.Clone(pkt)
			bad[len(bad)-1] ^= 1
			if _, err := igmp.ParsePacket(bad); !errors.Is(err, igmp.ErrChecksum) {
				t.Errorf("parse with the last byte flipped: %v, want ErrChecksum", err)
			}
		})
	}
	if d := igmp.DecodeMLDCode(igmp.EncodeMLDCode(100 * time.Second)); d > 100*time.Second || d < 99*time.Second {
		t.Errorf("100 s as a Maximum Response Code is %v", d)
	}
	for _, c := range []uint16{0, 1, 0x7fff, 0x8000, 0x9234, 0xffff} {
		if got := igmp.EncodeMLDCode(igmp.DecodeMLDCode(c)); got != c {
			t.Errorf("code %#x is %v, encoded back %#x", c, igmp.DecodeMLDCode(c), got)
		}
	}
}

// checkGopacketMLD decodes an MLDv2 report with gopacket, an independent
// decoder, and compares its records.
func checkGopacketMLD(t *testing.T, pkt []byte, m igmp.Message) {
	t.Helper()
	p := gopacket.NewPacket(pkt, layers.LayerTypeIPv6, gopacket.Default)
	l, ok := p.Layer(layers.LayerTypeMLDv2MulticastListenerReport).(*layers.MLDv2MulticastListenerReportMessage)
	if !ok {
		t.Fatalf("gopacket decoded no MLDv2 report: %v", p)
	}
	if len(l.MulticastAddressRecords) != len(m.Records) {
		t.Fatalf("gopacket read %d records, we %d", len(l.MulticastAddressRecords), len(m.Records))
	}
	for i, r := range l.MulticastAddressRecords {
		if uint8(r.RecordType) != uint8(m.Records[i].Type) || !r.MulticastAddress.Equal(net.IP(m.Records[i].Group.AsSlice())) || int(r.N) != m.Records[i].Sources {
			t.Errorf("record %d: gopacket read %v %v (%d sources), we %+v", i, r.RecordType, r.MulticastAddress, r.N, m.Records[i])
		}
	}
}

// TestParseKernelMLD: MLD messages Linux 6.x sent (TestConnKernel's log).
func TestParseKernelMLD(t *testing.T) {
	h2, h1 := netip.MustParseAddr("fe80::e880:c9ff:fe30:ea39"), netip.MustParseAddr("fe80::c084:26ff:fe27:696")
	sn := netip.MustParseAddr("ff02::1:ff30:ea39") // the host's solicited-node group
	for _, tc := range []struct {
		name, hex string
		src, dst  netip.Addr
		want      igmp.Message
	}{
		{"v2 join: TO_EX({}), with the solicited-node group's", "6000000000380001fe80000000000000e880c9fffe30ea39ff0200000000000000000000000000163a000502000001008f00dbd40000000204000000ff0500000000000000000000004d0c7704000000ff0200000000000000000001ff30ea39",
			h2, netip.MustParseAddr("ff02::16"), igmp.Message{Type: igmp.TypeReportV3, Version: 2, Records: []igmp.Record{{Type: igmp.ChangeToExcludeMode, Group: grp6}, {Type: igmp.ChangeToExcludeMode, Group: sn}}}},
		{"v2 answer: IS_EX({})", "6000000000240001fe80000000000000e880c9fffe30ea39ff0200000000000000000000000000163a000502000001008f00ca580000000102000000ff0500000000000000000000004d0c77",
			h2, netip.MustParseAddr("ff02::16"), igmp.Message{Type: igmp.TypeReportV3, Version: 2, Records: []igmp.Record{{Type: igmp.ModeIsExclude, Group: grp6}}}},
		{"v2 leave: TO_IN({})", "6000000000240001fe80000000000000e880c9fffe30ea39ff0200000000000000000000000000163a000502000001008f00c9580000000103000000ff0500000000000000000000004d0c77",
			h2, netip.MustParseAddr("ff02::16"), igmp.Message{Type: igmp.TypeReportV3, Version: 2, Records: []igmp.Record{{Type: igmp.ChangeToIncludeMode, Group: grp6}}}},
		{"v1 report", "6000000000200001fe80000000000000c08426fffe270696ff0500000000000000000000004d0c773a0005020000010083007a5600000000ff0500000000000000000000004d0c77",
			h1, grp6, igmp.Message{Type: igmp.TypeReportV2, Version: 1, Group: grp6}},
		{"v1 done", "6000000000200001fe80000000000000c08426fffe270696ff0200000000000000000000000000023a000502000001008400861b00000000ff0500000000000000000000004d0c77",
			h1, netip.MustParseAddr("ff02::2"), igmp.Message{Type: igmp.TypeLeave, Version: 1, Group: grp6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := unhex(t, tc.hex)
			p, err := igmp.ParsePacket(b)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(igmp.Packet{Src: tc.src, Dst: tc.dst, TTL: 1, Message: tc.want}, p, addrs); d != "" {
				t.Errorf("parse (-want +got):\n%s", d)
			}
			if tc.want.Type == igmp.TypeReportV3 {
				checkGopacketMLD(t, b, p.Message)
			}
		})
	}
}

// TestTableMLD: the table keeps IPv6 groups as IPv4 ones: a report joins,
// a done queries the group from the link-local address and drops it; the
// link-local scope (ff02::) and the other family are not kept; a lower
// link-local address wins the election.
func TestTableMLD(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tb := igmp.NewTable(igmp.Options{Addr: ll2}, t0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	if qs, _ := tb.Advance(t0); len(qs) != 1 || qs[0].Dst() != igmp.AllNodes {
		t.Fatalf("startup queries %+v: want one general query to ff02::1", qs)
	}
	host := netip.MustParseAddr("fe80::9")
	rep := igmp.Message{Type: igmp.TypeReportV3, Version: 2, Records: []igmp.Record{{Type: igmp.ChangeToExcludeMode, Group: grp6},
		{Type: igmp.ChangeToExcludeMode, Group: netip.MustParseAddr("ff02::1:ff00:9")}, {Type: igmp.ChangeToExcludeMode, Group: grp}}}
	if ev := tb.Heard(igmp.Packet{Src: host, Message: rep}, at(1)); len(ev) != 1 || ev[0] != (igmp.Event{Kind: igmp.Joined, Group: grp6}) {
		t.Errorf("joined %+v: want %v alone", ev, grp6)
	}
	tb.Heard(igmp.Packet{Src: host, Message: igmp.Message{Type: igmp.TypeLeave, Version: 1, Group: grp6}}, at(2))
	qs, _ := tb.Advance(at(2))
	if len(qs) != 1 || qs[0].Group != grp6 || qs[0].Dst() != grp6 {
		t.Errorf("queries after the done %+v: want one for %v", qs, grp6)
	}
	pkt, err := igmp.ParsePacket(tb.AppendQuery(nil, qs[0]))
	if err != nil || pkt.Src != ll2 || pkt.Message.Version != 2 || pkt.Message.Group != grp6 {
		t.Errorf("the query sent %+v, %v: want an MLDv2 query for %v from %v", pkt, err, grp6, ll2)
	}
	tb.Advance(at(3))
	if _, gone := tb.Advance(at(4)); len(gone) != 1 || gone[0] != (igmp.Event{Kind: igmp.Left, Group: grp6}) {
		t.Errorf("gone %+v: want %v left", gone, grp6)
	}
	tb.Heard(igmp.Packet{Src: ll, Message: igmp.Message{Type: igmp.TypeQuery, Version: 2, Group: netip.IPv6Unspecified(), MaxResp: 10 * time.Second}}, at(5))
	if tb.Querier() {
		t.Error("a query from fe80::1 heard by fe80::2: still the querier")
	}
}
