package roce_test

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/rbridge/rbridge/roce"
)

func TestPutIPUDPHeaders(t *testing.T) {
	for _, tc := range []struct{ src, dst string }{
		{"10.0.0.1:49152", "10.0.0.2:4791"},
		{"[fd00::1]:49152", "[fd00::2]:4791"},
	} {
		src, dst := netip.MustParseAddrPort(tc.src), netip.MustParseAddrPort(tc.dst)
		f := roce.PacketFields{BTH: roce.BTHFields{Opcode: roce.RCSendOnly, PKey: roce.DefaultPKey, DestQP: 7, PSN: 9}}
		transport := roce.AppendPacket(nil, &f, []byte("payload"))
		b := filled(128)
		hl, err := roce.PutIPUDPHeaders(b, src, dst, len(transport), roce.ECNCE)
		if err != nil {
			t.Fatalf("%s: %v", tc.src, err)
		}
		if hl != roce.IPUDPLen(src.Addr().Is6()) {
			t.Fatalf("%s: header length %d", tc.src, hl)
		}
		pkt := append(b[:hl:hl], transport...)
		if err := roce.PutICRC(pkt); err != nil {
			t.Fatal(err)
		}
		var fr roce.Frame
		if err := fr.DecodeIP(pkt); err != nil {
			t.Fatalf("%s: %v", tc.src, err)
		}
		if fr.Src != src || fr.Dst != dst || fr.ECN != roce.ECNCE || fr.Packet.BTH.DestQP() != 7 || fr.VerifyICRC() != nil {
			t.Errorf("%s: decoded %+v", tc.src, fr)
		}
		// gopacket agrees on the lengths and, for IPv4, the checksum.
		lt := layers.LayerTypeIPv4
		if src.Addr().Is6() {
			lt = layers.LayerTypeIPv6
		}
		p := gopacket.NewPacket(pkt, lt, gopacket.Default)
		if el := p.ErrorLayer(); el != nil {
			t.Fatalf("%s: gopacket: %v", tc.src, el.Error())
		}
		if ip4, ok := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
			want := ip4.Checksum
			ip4.Checksum = 0
			sb := gopacket.NewSerializeBuffer()
			if err := ip4.SerializeTo(sb, gopacket.SerializeOptions{ComputeChecksums: true}); err != nil {
				t.Fatal(err)
			}
			if ip4.Checksum != want || ip4.Flags != layers.IPv4DontFragment || ip4.Id != 0 || ip4.TTL != 64 {
				t.Errorf("IPv4 header: checksum %#x (gopacket %#x), flags %v, id %d, ttl %d", want, ip4.Checksum, ip4.Flags, ip4.Id, ip4.TTL)
			}
		}
		if udp := p.Layer(layers.LayerTypeUDP).(*layers.UDP); int(udp.Length) != 8+len(transport) {
			t.Errorf("%s: UDP length %d", tc.src, udp.Length)
		}
	}
}

// TestPutIPUDPHeadersBadArguments: arguments that cannot make the headers
// are refused with an error, and the buffer is left as it was.
func TestPutIPUDPHeadersBadArguments(t *testing.T) {
	v4, v6 := netip.MustParseAddrPort("127.0.0.1:4791"), netip.MustParseAddrPort("[::1]:4791")
	mapped := netip.MustParseAddrPort("[::ffff:127.0.0.2]:4791")
	for _, tc := range []struct {
		name     string
		src, dst netip.AddrPort
		buf, n   int
		want     error
	}{
		{"IPv4 to IPv6", v4, v6, 48, 100, roce.ErrAddrFamily},
		{"IPv6 to IPv4", v6, v4, 48, 100, roce.ErrAddrFamily},
		{"IPv6 to IPv4-mapped", v6, mapped, 48, 100, roce.ErrAddrFamily},
		{"no destination", v4, netip.AddrPort{}, 48, 100, roce.ErrNoAddr},
		{"no source", netip.AddrPort{}, v6, 48, 100, roce.ErrNoAddr},
		{"IPv4 into 27 bytes", v4, v4, 27, 100, roce.ErrTruncated},
		{"IPv6 into 47 bytes", v6, v6, 47, 100, roce.ErrTruncated},
		{"IPv6 into nothing", v6, v6, 0, 100, roce.ErrTruncated},
		{"negative length", v4, v4, 48, -1, roce.ErrBadLength},
		{"IPv4 length past 65535", v4, v4, 48, 0xffff - 27, roce.ErrBadLength},
		{"IPv6 length past 65535", v6, v6, 48, 0xffff - 7, roce.ErrBadLength},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := filled(tc.buf)
			hl, err := roce.PutIPUDPHeaders(b, tc.src, tc.dst, tc.n, 0)
			if !errors.Is(err, tc.want) {
				t.Fatalf("PutIPUDPHeaders = %d, %v; want an error matching %v", hl, err, tc.want)
			}
			if !bytes.Equal(b, filled(tc.buf)) {
				t.Errorf("the refused call wrote into the buffer: % x", b)
			}
		})
	}
	// The largest lengths that fit, and an IPv4-mapped destination of an
	// IPv4 source, are accepted.
	for _, tc := range []struct {
		src, dst netip.AddrPort
		n        int
	}{{v4, v4, 0xffff - 28}, {v6, v6, 0xffff - 8}, {v4, mapped, 100}} {
		if _, err := roce.PutIPUDPHeaders(filled(48), tc.src, tc.dst, tc.n, 0); err != nil {
			t.Errorf("%v to %v, %d bytes: %v", tc.src, tc.dst, tc.n, err)
		}
	}
}

// TestSetIPv4ID: the ID lands in the header, the checksum is what gopacket
// computes for it, the ICRC over the new header differs from the old one
// (it covers the ID), and what is not a 20-byte IPv4 header is refused and
// left as it was.
func TestSetIPv4ID(t *testing.T) {
	src, dst := netip.MustParseAddrPort("10.0.0.1:4791"), netip.MustParseAddrPort("10.0.0.2:4791")
	f := roce.PacketFields{BTH: roce.BTHFields{Opcode: roce.RCSendMiddle, PKey: roce.DefaultPKey, DestQP: 7, PSN: 9}}
	transport := roce.AppendPacket(nil, &f, []byte("segment"))
	zero := filled(28)
	if _, err := roce.PutIPUDPHeaders(zero, src, dst, len(transport), 0); err != nil {
		t.Fatal(err)
	}
	crc0, err := roce.ICRCWithHeaders(zero, transport)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []uint16{0, 1, 63, 0xffff} {
		b := bytes.Clone(zero)
		if err := roce.SetIPv4ID(b, id); err != nil {
			t.Fatalf("ID %d: %v", id, err)
		}
		pkt := append(b, transport...)
		p := gopacket.NewPacket(pkt, layers.LayerTypeIPv4, gopacket.Default)
		ip4, ok := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		if !ok {
			t.Fatalf("ID %d: no IPv4 layer: %v", id, p.ErrorLayer())
		}
		want := ip4.Checksum
		ip4.Checksum = 0
		if err := ip4.SerializeTo(gopacket.NewSerializeBuffer(), gopacket.SerializeOptions{ComputeChecksums: true}); err != nil {
			t.Fatal(err)
		}
		if ip4.Id != id || ip4.Checksum != want || ip4.Flags != layers.IPv4DontFragment {
			t.Errorf("ID %d: header has ID %d, checksum %#x (gopacket %#x), flags %v", id, ip4.Id, want, ip4.Checksum, ip4.Flags)
		}
		crc, err := roce.ICRCWithHeaders(b, transport)
		if err != nil {
			t.Fatal(err)
		}
		if (crc == crc0) != (id == 0) {
			t.Errorf("ID %d: ICRC %#x, with ID 0 %#x: the ICRC covers the ID", id, crc, crc0)
		}
	}
	v6 := filled(48)
	if _, err := roce.PutIPUDPHeaders(v6, netip.MustParseAddrPort("[fd00::1]:4791"), netip.MustParseAddrPort("[fd00::2]:4791"), 100, 0); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"19 bytes", zero[:19], roce.ErrTruncated},
		{"nothing", nil, roce.ErrTruncated},
		{"IPv6", v6, roce.ErrBadLength},
		{"IPv4 with options", append([]byte{0x46}, zero[1:]...), roce.ErrBadLength},
	} {
		b := bytes.Clone(tc.b)
		if err := roce.SetIPv4ID(b, 5); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want an error matching %v", tc.name, err, tc.want)
		}
		if !bytes.Equal(b, tc.b) {
			t.Errorf("%s: the refused call wrote into the buffer", tc.name)
		}
	}
}
