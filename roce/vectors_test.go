package roce_test

import (
	"net"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/rbridge/rbridge/roce"
)

// sample is one RoCEv2 packet of every kind rbridge knows, built by rbridge's
// own serializer.
type sample struct {
	name    string
	fields  roce.PacketFields
	payload []byte
}

// allOpcodes lists every opcode in the table.
func allOpcodes() []roce.Opcode {
	var ops []roce.Opcode
	for i := range 256 {
		if op := roce.Opcode(i); op.Valid() {
			ops = append(ops, op)
		}
	}
	return ops
}

// samples returns a packet for every opcode with distinct field values and,
// where the opcode has payload, a payload whose length needs padding.
func samples() []sample {
	var out []sample
	for i, op := range allOpcodes() {
		f := roce.PacketFields{
			BTH: roce.BTHFields{
				Opcode: op, SE: i%3 == 0, MigReq: i%2 == 1, PKey: roce.DefaultPKey,
				DestQP: 0x000100 + uint32(i), AckReq: i%2 == 0, PSN: (0xfffffe + uint32(i)) & roce.PSNMask,
			},
			RETH:         roce.RETHFields{VA: 0x7f00_1234_5678_9a00 + uint64(i), RKey: 0x1000 + uint32(i), DMALen: 4096 + uint32(i)},
			AETH:         roce.AETHFields{Syndrome: roce.ACKSyndrome(roce.CreditsInvalid), MSN: 0x123456 + uint32(i)},
			AtomicETH:    roce.AtomicETHFields{VA: 0x1000_0000 + 8*uint64(i), RKey: 0xabcd0000 + uint32(i), SwapAdd: 0x1111_2222_3333_4444, Compare: 0x5555_6666_7777_8888},
			AtomicAckETH: roce.AtomicAckETHFields{Orig: 0x0102_0304_0506_0708 + uint64(i)},
			ImmDt:        roce.ImmDtFields{Imm: 0xdead0000 + uint32(i)},
			IETH:         roce.IETHFields{RKey: 0xbeef0000 + uint32(i)},
			DETH:         roce.DETHFields{QKey: 0x11111111, SrcQP: 0x000200 + uint32(i)},
		}
		if op == roce.CNP {
			f.BTH.BECN, f.BTH.PSN, f.BTH.AckReq, f.BTH.SE, f.BTH.MigReq = true, 0, false, false, false
		}
		var payload []byte
		if op.HasPayload() {
			payload = make([]byte, 13+i)
			for j := range payload {
				payload[j] = byte(j*7 + i)
			}
		}
		out = append(out, sample{name: op.String(), fields: f, payload: payload})
	}
	return out
}

// buildFrame serializes an Ethernet/IP/UDP/RoCEv2 frame with gopacket and
// rbridge's layer, with lengths, checksums and ICRC computed.
func buildFrame(tb testing.TB, s sample, v6 bool) []byte {
	tb.Helper()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}}
	udp := &layers.UDP{SrcPort: layers.UDPPort(roce.SourcePort(0, s.fields.BTH.DestQP, 0x11)), DstPort: roce.Port}
	var ip gopacket.NetworkLayer
	if v6 {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip6 := &layers.IPv6{Version: 6, TrafficClass: 0x02, FlowLabel: 0x12345, NextHeader: layers.IPProtocolUDP, HopLimit: 64,
			SrcIP: net.ParseIP("fd00::1"), DstIP: net.ParseIP("fd00::2")}
		ip = ip6
		if err := udp.SetNetworkLayerForChecksum(ip6); err != nil {
			tb.Fatal(err)
		}
	} else {
		eth.EthernetType = layers.EthernetTypeIPv4
		ip4 := &layers.IPv4{Version: 4, TOS: 0x02, Id: 0x4242, Flags: layers.IPv4DontFragment, TTL: 64, Protocol: layers.IPProtocolUDP,
			SrcIP: net.IPv4(10, 0, 0, 1), DstIP: net.IPv4(10, 0, 0, 2)}
		ip = ip4
		if err := udp.SetNetworkLayerForChecksum(ip4); err != nil {
			tb.Fatal(err)
		}
	}
	r := &roce.RoCEv2{PacketFields: s.fields}
	if err := r.SetNetworkLayerForICRC(ip, udp); err != nil {
		tb.Fatal(err)
	}
	buf := gopacket.NewSerializeBuffer()
	ls := []gopacket.SerializableLayer{eth, ip.(gopacket.SerializableLayer), udp, r}
	if len(s.payload) > 0 {
		ls = append(ls, gopacket.Payload(s.payload))
	}
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		tb.Fatalf("serialize %s: %v", s.name, err)
	}
	return buf.Bytes()
}
