package igmp_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/rbridge/rbridge/internal/igmp"
)

var (
	grp  = netip.MustParseAddr("239.1.2.3")
	grp2 = netip.MustParseAddr("239.9.9.9")
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestParse: messages of every version and type, as hosts send them; the
// first vector's checksum worked out by hand.
func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
		want igmp.Message
	}{
		{"v3 report TO_EX({}) 239.1.2.3, by hand", unhex(t, "2200e8f9 00000001 04000000 ef010203"),
			igmp.Message{Type: igmp.TypeReportV3, Version: 3, Records: []igmp.Record{{Type: igmp.ChangeToExcludeMode, Group: grp}}}},
		{"v3 report, two records, sources", igmp.AppendReportV3(nil, []igmp.Record{{Type: igmp.ChangeToIncludeMode, Group: grp}, {Type: igmp.AllowNewSources, Group: grp2, Sources: 3}}),
			igmp.Message{Type: igmp.TypeReportV3, Version: 3, Records: []igmp.Record{{Type: igmp.ChangeToIncludeMode, Group: grp}, {Type: igmp.AllowNewSources, Group: grp2, Sources: 3}}}},
		{"v2 report", igmp.AppendV2(nil, igmp.TypeReportV2, grp, 0), igmp.Message{Type: igmp.TypeReportV2, Version: 2, Group: grp}},
		{"v2 leave", igmp.AppendV2(nil, igmp.TypeLeave, grp, 0), igmp.Message{Type: igmp.TypeLeave, Version: 2, Group: grp}},
		{"v1 report", igmp.AppendV2(nil, igmp.TypeReportV1, grp, 0), igmp.Message{Type: igmp.TypeReportV1, Version: 1, Group: grp}},
		{"v1 query", igmp.AppendV2(nil, igmp.TypeQuery, netip.IPv4Unspecified(), 0),
			igmp.Message{Type: igmp.TypeQuery, Version: 1, Group: netip.IPv4Unspecified(), MaxResp: 10 * time.Second}},
		{"v2 group query", igmp.AppendV2(nil, igmp.TypeQuery, grp, time.Second), igmp.Message{Type: igmp.TypeQuery, Version: 2, Group: grp, MaxResp: time.Second}},
		{"v3 general query", igmp.AppendQuery(nil, igmp.QueryFields{MaxResp: 10 * time.Second, QRV: 2, QQIC: 125}),
			igmp.Message{Type: igmp.TypeQuery, Version: 3, Group: netip.IPv4Unspecified(), MaxResp: 10 * time.Second, QRV: 2, QQIC: 125}},
		{"v3 group query, S", igmp.AppendQuery(nil, igmp.QueryFields{Group: grp, MaxResp: time.Second, SuppressRouter: true, QRV: 2, QQIC: 125}),
			igmp.Message{Type: igmp.TypeQuery, Version: 3, Group: grp, MaxResp: time.Second, SuppressRouter: true, QRV: 2, QQIC: 125}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, n, err := igmp.Parse(tc.b)
			if err != nil {
				t.Fatal(err)
			}
			if n != len(tc.b) {
				t.Errorf("took %d bytes of %d", n, len(tc.b))
			}
			if d := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); d != "" {
				t.Errorf("parse %x (-want +got):\n%s", tc.b, d)
			}
			checkGopacket(t, tc.b, got)
		})
	}
}

// checkGopacket decodes b with gopacket's IGMP layer, an independent
// decoder, and compares what both read.
func checkGopacket(t *testing.T, b []byte, m igmp.Message) {
	t.Helper()
	p := gopacket.NewPacket(b, layers.LayerTypeIGMP, gopacket.Default)
	switch l := p.Layer(layers.LayerTypeIGMP).(type) {
	case *layers.IGMPv1or2:
		if uint8(l.Type) != uint8(m.Type) || !l.GroupAddress.Equal(net.IP(m.Group.AsSlice())) {
			t.Errorf("gopacket read %v %v, we %v %v", l.Type, l.GroupAddress, m.Type, m.Group)
		}
	case *layers.IGMP:
		if uint8(l.Type) != uint8(m.Type) || len(l.GroupRecords) != len(m.Records) {
			t.Fatalf("gopacket read %v with %d records, we %v with %d", l.Type, len(l.GroupRecords), m.Type, len(m.Records))
		}
		for i, r := range l.GroupRecords {
			if uint8(r.Type) != uint8(m.Records[i].Type) || !r.MulticastAddress.Equal(net.IP(m.Records[i].Group.AsSlice())) || int(r.NumberOfSources) != m.Records[i].Sources {
				t.Errorf("record %d: gopacket read %v %v (%d sources), we %+v", i, r.Type, r.MulticastAddress, r.NumberOfSources, m.Records[i])
			}
		}
		if m.Type == igmp.TypeQuery && (l.MaxResponseTime != m.MaxResp || l.RobustnessValue != m.QRV || l.SupressRouterProcessing != m.SuppressRouter) {
			t.Errorf("gopacket read query %+v, we %+v", l, m)
		}
	default:
		t.Errorf("gopacket decoded no IGMP layer: %v", p)
	}
}

// TestParseErrors: every prefix of every message is refused (never a
// panic), and so is a wrong checksum or an unknown type.
func TestParseErrors(t *testing.T) {
	msgs := [][]byte{
		igmp.AppendReportV3(nil, []igmp.Record{{Type: igmp.ChangeToExcludeMode, Group: grp}, {Type: igmp.ModeIsInclude, Group: grp2, Sources: 2}}),
		igmp.AppendV2(nil, igmp.TypeReportV2, grp, 0),
		igmp.AppendQuery(nil, igmp.QueryFields{Group: grp, MaxResp: time.Second}),
	}
	for _, b := range msgs {
		for n := range len(b) {
			if n == igmp.HeaderLen && b[0] == byte(igmp.TypeQuery) {
				continue // a v3 query's first 8 bytes are a v2 query (the rest was zeros)
			}
			if m, _, err := igmp.Parse(b[:n]); err == nil {
				t.Errorf("parse of %d of the %d bytes %x: %+v, want an error", n, len(b), b, m)
			}
		}
		bad := bytes.Clone(b)
		bad[1] ^= 0x10 // Max Resp Code (reserved in a v3 report)
		if _, _, err := igmp.Parse(bad); !errors.Is(err, igmp.ErrChecksum) {
			t.Errorf("parse of %x with a byte flipped: %v, want ErrChecksum", bad, err)
		}
	}
	if _, _, err := igmp.Parse(unhex(t, "13000000 00000000")); !errors.Is(err, igmp.ErrType) {
		t.Errorf("parse of type 0x13 (DVMRP): %v, want ErrType", err)
	}
}

// TestCode: the exponential form of Max Resp Code round-trips (RFC 3376
// section 4.1.1).
func TestCode(t *testing.T) {
	for c := range 256 {
		d := igmp.DecodeCode(uint8(c))
		if got := igmp.EncodeCode(d); got != uint8(c) {
			t.Errorf("code %#x is %v, encoded back %#x", c, d, got)
		}
	}
	if d := igmp.DecodeCode(0x80); d != 12800*time.Millisecond {
		t.Errorf("code 0x80: %v, want 12.8s", d)
	}
}

// TestPacket: the query packet a table sends parses back, with the IPv4
// header IGMP wants (TTL 1, Router Alert) and the checksums right; prefix
// cuts and a bad header checksum are refused.
func TestPacket(t *testing.T) {
	src := netip.MustParseAddr("10.0.0.1")
	tb := igmp.NewTable(igmp.Options{Addr: src}, time.Unix(0, 0))
	pkt := tb.AppendQuery(bytes.Repeat([]byte{0xff}, 3)[:0], igmp.Query{Group: grp, MaxResp: time.Second})
	p, err := igmp.ParsePacket(pkt)
	if err != nil {
		t.Fatal(err)
	}
	want := igmp.Packet{Src: src, Dst: grp, TTL: 1, Message: igmp.Message{Type: igmp.TypeQuery, Version: 3, Group: grp, MaxResp: time.Second, QRV: 2, QQIC: 125}}
	if d := cmp.Diff(want, p, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); d != "" {
		t.Errorf("query packet %x (-want +got):\n%s", pkt, d)
	}
	if pkt[20] != 0x94 || pkt[21] != 0x04 {
		t.Errorf("query packet %x: no Router Alert option", pkt)
	}
	gen, err := igmp.ParsePacket(tb.AppendQuery(nil, igmp.Query{MaxResp: 10 * time.Second}))
	if err != nil || gen.Dst != igmp.AllSystems || gen.Message.Group != netip.IPv4Unspecified() {
		t.Errorf("general query %+v, %v: want one to 224.0.0.1 for group 0.0.0.0", gen, err)
	}
	for n := range len(pkt) {
		if _, err := igmp.ParsePacket(pkt[:n]); err == nil {
			t.Errorf("parse of %d of %d bytes: no error", n, len(pkt))
		}
	}
	bad := bytes.Clone(pkt)
	bad[8] = 64 // the TTL, under the header checksum
	if _, err := igmp.ParsePacket(bad); !errors.Is(err, igmp.ErrChecksum) {
		t.Errorf("parse with the TTL changed: %v, want ErrChecksum", err)
	}
}

// FuzzParse: no input panics Parse or ParsePacket; what Parse takes it
// takes within the input.
func FuzzParse(f *testing.F) {
	f.Add(igmp.AppendReportV3(nil, []igmp.Record{{Type: igmp.ChangeToExcludeMode, Group: grp}, {Type: igmp.AllowNewSources, Group: grp2, Sources: 2}}))
	f.Add(igmp.AppendV2(nil, igmp.TypeLeave, grp, 0))
	f.Add(igmp.AppendQuery(nil, igmp.QueryFields{Group: grp, MaxResp: time.Second}))
	tb := igmp.NewTable(igmp.Options{Addr: netip.MustParseAddr("10.0.0.1")}, time.Unix(0, 0))
	f.Add(tb.AppendQuery(nil, igmp.Query{MaxResp: time.Second}))
	ll, g6 := netip.MustParseAddr("fe80::1"), netip.MustParseAddr("ff05::1")
	f.Add(igmp.AppendPacket6(nil, ll, netip.MustParseAddr("ff02::16"), igmp.AppendMLDReportV2(nil, []igmp.Record{{Type: igmp.ModeIsInclude, Group: g6, Sources: 1}})))
	f.Add(igmp.AppendPacket6(nil, ll, g6, igmp.AppendMLDv1(nil, igmp.TypeReportV2, g6)))
	f.Add(igmp.AppendPacket6(nil, ll, g6, igmp.AppendMLDQuery(nil, igmp.QueryFields{Group: g6, MaxResp: time.Second})))
	tb6 := igmp.NewTable(igmp.Options{Addr: ll}, time.Unix(0, 0))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, n, err := igmp.Parse(b); err == nil && (n > len(b) || n < igmp.HeaderLen) {
			t.Errorf("parse of %d bytes took %d", len(b), n)
		}
		if _, n, err := igmp.ParseMLD(b); err == nil && n > len(b) {
			t.Errorf("MLD parse of %d bytes took %d", len(b), n)
		}
		p, err := igmp.ParsePacket(b)
		if err == nil {
			tb.Heard(p, time.Unix(1, 0))
			tb6.Heard(p, time.Unix(1, 0))
			tb6.Advance(time.Unix(2, 0))
		}
	})
}

// TestParseKernel: messages Linux 6.x sent (TestConnKernel's log), as a
// Conn reads them: IPv4 with Router Alert, then IGMP; gopacket reads the
// same.
func TestParseKernel(t *testing.T) {
	g := netip.MustParseAddr("239.77.47.219")
	host := netip.MustParseAddr("10.98.0.2")
	for _, tc := range []struct {
		name, hex string
		dst       string
		want      igmp.Message
	}{
		{"v3 join: TO_EX({})", "46c00028000040000102f9950a620002e0000016940400002200bad50000000104000000ef4d2fdb", "224.0.0.22",
			igmp.Message{Type: igmp.TypeReportV3, Version: 3, Records: []igmp.Record{{Type: igmp.ChangeToExcludeMode, Group: g}}}},
		{"v3 answer to a query: IS_EX({})", "46c00028000040000102f9950a620002e0000016940400002200bcd50000000102000000ef4d2fdb", "224.0.0.22",
			igmp.Message{Type: igmp.TypeReportV3, Version: 3, Records: []igmp.Record{{Type: igmp.ModeIsExclude, Group: g}}}},
		{"v3 leave: TO_IN({})", "46c00028000040000102f9950a620002e0000016940400002200bbd50000000103000000ef4d2fdb", "224.0.0.22",
			igmp.Message{Type: igmp.TypeReportV3, Version: 3, Records: []igmp.Record{{Type: igmp.ChangeToIncludeMode, Group: g}}}},
		{"v2 report", "46c00020000040000102ba8b0a620002ef4d2fdb940400001600cad6ef4d2fdb", "239.77.47.219",
			igmp.Message{Type: igmp.TypeReportV2, Version: 2, Group: g}},
		{"v2 leave", "46c00020000040000102f9b10a620002e0000002940400001700c9d6ef4d2fdb", "224.0.0.2",
			igmp.Message{Type: igmp.TypeLeave, Version: 2, Group: g}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := unhex(t, tc.hex)
			p, err := igmp.ParsePacket(b)
			if err != nil {
				t.Fatal(err)
			}
			want := igmp.Packet{Src: host, Dst: netip.MustParseAddr(tc.dst), TTL: 1, Message: tc.want}
			if d := cmp.Diff(want, p, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); d != "" {
				t.Errorf("parse (-want +got):\n%s", d)
			}
			checkGopacket(t, b[24:], p.Message)
		})
	}
}
