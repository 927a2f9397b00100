package roce_test

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/rbridge/rbridge/roce"
)

func TestGopacketNewPacket(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		for _, s := range samples() {
			b := buildFrame(t, s, v6)
			p := gopacket.NewPacket(b, layers.LayerTypeEthernet, gopacket.Default)
			if el := p.ErrorLayer(); el != nil {
				t.Fatalf("%s: decode error %v", s.name, el.Error())
			}
			l, ok := p.Layer(roce.LayerTypeRoCEv2).(*roce.RoCEv2)
			if !ok {
				t.Fatalf("%s: no RoCEv2 layer in %v", s.name, p)
			}
			want := keepCarried(s.fields.BTH.Opcode, s.fields)
			want.BTH.PadCount = uint8(-len(s.payload) & 3)
			if diff := cmp.Diff(want, l.PacketFields); diff != "" {
				t.Errorf("%s: fields (-want +got):\n%s", s.name, diff)
			}
			if !bytes.Equal(l.LayerPayload(), s.payload) {
				t.Errorf("%s: payload %x, want %x", s.name, l.LayerPayload(), s.payload)
			}
			if len(s.payload) > 0 && p.ApplicationLayer() == nil {
				t.Errorf("%s: no payload layer after RoCEv2", s.name)
			}
			if err := roce.VerifyLayerICRC(p); err != nil {
				t.Errorf("%s: %v", s.name, err)
			}
		}
	}
}

func TestDecodingLayerParserDoesNotAllocate(t *testing.T) {
	b := buildFrame(t, samples()[10], false) // RC_RDMA_WRITE_ONLY
	var (
		eth     layers.Ethernet
		ip4     layers.IPv4
		ip6     layers.IPv6
		udp     layers.UDP
		r       roce.RoCEv2
		payload gopacket.Payload
	)
	parser := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, &eth, &ip4, &ip6, &udp, &r, &payload)
	decoded := make([]gopacket.LayerType, 0, 8)
	if err := parser.DecodeLayers(b, &decoded); err != nil {
		t.Fatal(err)
	}
	if want := []gopacket.LayerType{layers.LayerTypeEthernet, layers.LayerTypeIPv4, layers.LayerTypeUDP, roce.LayerTypeRoCEv2, gopacket.LayerTypePayload}; !cmp.Equal(want, decoded) {
		t.Errorf("decoded %v, want %v", decoded, want)
	}
	if r.BTH.Opcode != roce.RCRDMAWriteOnly || r.RETH.RKey == 0 {
		t.Errorf("RoCEv2 layer %+v", r.PacketFields)
	}
	if n := testing.AllocsPerRun(100, func() { _ = parser.DecodeLayers(b, &decoded) }); n != 0 {
		t.Errorf("DecodeLayers allocates %.1f times, want 0", n)
	}
}

func TestSerializeErrors(t *testing.T) {
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	ack := &roce.RoCEv2{PacketFields: roce.PacketFields{BTH: roce.BTHFields{Opcode: roce.RCAcknowledge}}}
	if err := gopacket.SerializeLayers(buf, opts, ack); err == nil {
		t.Errorf("ComputeChecksums without SetNetworkLayerForICRC: no error")
	}
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{}, ack, gopacket.Payload{1}); err == nil {
		t.Errorf("payload on an ACK: no error")
	}
	bad := &roce.RoCEv2{PacketFields: roce.PacketFields{BTH: roce.BTHFields{Opcode: 0x1e}}}
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{}, bad); err == nil {
		t.Errorf("reserved opcode: no error")
	}
	if err := ack.SetNetworkLayerForICRC(&layers.IPv6{}, &layers.UDP{}); err != nil {
		t.Errorf("IPv6 network layer refused: %v", err)
	}
}
