package roce_test

import (
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
		hl := roce.PutIPUDPHeaders(b, src, dst, len(transport), roce.ECNCE)
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
