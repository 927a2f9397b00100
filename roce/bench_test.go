package roce_test

import (
	"fmt"
	"hash/crc32"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/rbridge/rbridge/roce"
)

func writeSample(n int) sample {
	return sample{
		name: fmt.Sprintf("write-%d", n),
		fields: roce.PacketFields{
			BTH:  roce.BTHFields{Opcode: roce.RCRDMAWriteOnly, PKey: roce.DefaultPKey, DestQP: 0x11, AckReq: true, PSN: 7},
			RETH: roce.RETHFields{VA: 0x7f0000001000, RKey: 0x1234, DMALen: uint32(n)},
		},
		payload: make([]byte, n),
	}
}

// BenchmarkICRC compares the ICRC, of a packet in one piece and of one
// whose IP and UDP headers are apart from it, with hash/crc32 over the
// same bytes (the floor: the ICRC is a CRC-32 plus masking).
func BenchmarkICRC(b *testing.B) {
	for _, n := range []int{64, 1024, 4096} {
		ip := buildFrame(b, writeSample(n), false)[14:]
		covered := ip[:len(ip)-roce.ICRCLen]
		b.Run(fmt.Sprintf("icrc/%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(covered)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := roce.ICRC(ip); err != nil {
					b.Fatal(err)
				}
			}
		})
		// The headers apart from the packet, as a UDP socket's sends and
		// GRO reads have them.
		hl := 20 + 8
		b.Run(fmt.Sprintf("with-headers/%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(covered)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := roce.ICRCWithHeaders(ip[:hl], ip[hl:]); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("crc32/%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(covered)))
			b.ReportAllocs()
			for b.Loop() {
				crc32.ChecksumIEEE(covered)
			}
		})
	}
}

// BenchmarkDecode decodes a whole Ethernet/IPv4/UDP/RoCEv2 frame (RDMA WRITE
// ONLY, 1 KiB): rbridge's Frame path, gopacket's DecodingLayerParser with
// rbridge's layer, and gopacket.NewPacket for reference.
func BenchmarkDecode(b *testing.B) {
	frame := buildFrame(b, writeSample(1024), false)
	b.Run("frame", func(b *testing.B) {
		var f roce.Frame
		b.ReportAllocs()
		for b.Loop() {
			if err := f.DecodeEthernet(frame); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("frame+icrc", func(b *testing.B) {
		var f roce.Frame
		b.SetBytes(int64(len(frame)))
		b.ReportAllocs()
		for b.Loop() {
			if err := f.DecodeEthernet(frame); err != nil {
				b.Fatal(err)
			}
			if err := f.VerifyICRC(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("gopacket-decodinglayerparser", func(b *testing.B) {
		var (
			eth layers.Ethernet
			ip4 layers.IPv4
			udp layers.UDP
			r   roce.RoCEv2
			pl  gopacket.Payload
		)
		p := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, &eth, &ip4, &udp, &r, &pl)
		decoded := make([]gopacket.LayerType, 0, 8)
		b.ReportAllocs()
		for b.Loop() {
			if err := p.DecodeLayers(frame, &decoded); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("gopacket-newpacket", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.NoCopy)
			if p.Layer(roce.LayerTypeRoCEv2) == nil {
				b.Fatal("no RoCEv2 layer")
			}
		}
	})
}

// BenchmarkAppendPacket builds a 1 KiB RDMA WRITE ONLY transport packet into
// a reused buffer.
func BenchmarkAppendPacket(b *testing.B) {
	s := writeSample(1024)
	buf := make([]byte, 0, 2048)
	b.SetBytes(int64(roce.TransportLen(s.fields.BTH.Opcode, len(s.payload))))
	b.ReportAllocs()
	for b.Loop() {
		buf = roce.AppendPacket(buf[:0], &s.fields, s.payload)
	}
}

// BenchmarkVerifyICRC is the receive path's ICRC check (read-only), next to the
// same crc32 floor as BenchmarkICRC.
func BenchmarkVerifyICRC(b *testing.B) {
	for _, n := range []int{64, 1024, 4096} {
		ip := buildFrame(b, writeSample(n), false)[14:]
		b.Run(fmt.Sprintf("%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(ip) - roce.ICRCLen))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := roce.VerifyICRC(ip); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
