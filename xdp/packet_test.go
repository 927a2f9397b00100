package xdp_test

import (
	"encoding/binary"
	"net/netip"

	"github.com/rbridge/rbridge/roce"
)

// frameSpec describes an Ethernet frame for the tests.
type frameSpec struct {
	vlans     int // 802.1Q tags
	src, dst  netip.Addr
	ecn       uint8
	ipOptions int // IPv4 option bytes (a multiple of 4)
	sport     uint16
	dport     uint16 // 0 means 4791
	transport []byte // the UDP payload; a RoCEv2 one gets its ICRC
}

var (
	macA = [6]byte{0x02, 0, 0, 0, 0, 0xa}
	macB = [6]byte{0x02, 0, 0, 0, 0, 0xb}
	ip4A = netip.MustParseAddr("192.0.2.1")
	ip4B = netip.MustParseAddr("192.0.2.2")
	ip6A = netip.MustParseAddr("2001:db8::a")
	ip6B = netip.MustParseAddr("2001:db8::b")
)

// buildFrame returns the Ethernet frame s describes, from macA to macB.
func buildFrame(s frameSpec) []byte {
	if s.dport == 0 {
		s.dport = roce.Port
	}
	b := append([]byte{}, macB[:]...)
	b = append(b, macA[:]...)
	for range s.vlans {
		b = binary.BigEndian.AppendUint16(b, 0x8100)
		b = binary.BigEndian.AppendUint16(b, 42)
	}
	udpLen := 8 + len(s.transport)
	ipStart := len(b) + 2
	if s.src.Is4() {
		b = binary.BigEndian.AppendUint16(b, 0x0800)
		hl := 20 + s.ipOptions
		b = append(b, byte(0x40|hl/4), s.ecn)
		b = binary.BigEndian.AppendUint16(b, uint16(hl+udpLen))
		b = append(b, 0x12, 0x34, 0x40, 0, 64, 17, 0, 0)
		b = append(b, s.src.AsSlice()...)
		b = append(b, s.dst.AsSlice()...)
		for range s.ipOptions {
			b = append(b, 1) // NOP
		}
		h := b[ipStart:]
		binary.BigEndian.PutUint16(h[10:], ipChecksum(h[:hl]))
	} else {
		b = binary.BigEndian.AppendUint16(b, 0x86dd)
		b = binary.BigEndian.AppendUint32(b, 6<<28|uint32(s.ecn)<<20|0x12345)
		b = binary.BigEndian.AppendUint16(b, uint16(udpLen))
		b = append(b, 17, 64)
		b = append(b, s.src.AsSlice()...)
		b = append(b, s.dst.AsSlice()...)
	}
	b = binary.BigEndian.AppendUint16(b, s.sport)
	b = binary.BigEndian.AppendUint16(b, s.dport)
	b = binary.BigEndian.AppendUint16(b, uint16(udpLen))
	b = append(b, 0, 0)
	b = append(b, s.transport...)
	if s.dport == roce.Port && len(s.transport) >= roce.BTHLen+roce.ICRCLen {
		if err := roce.PutICRC(b[ipStart:]); err != nil {
			panic(err)
		}
	}
	return b
}

func ipChecksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// transport returns a RoCEv2 transport packet (zero ICRC) for destQP.
func transport(op roce.Opcode, destQP uint32, payload int) []byte {
	f := roce.PacketFields{BTH: roce.BTHFields{Opcode: op, PKey: roce.DefaultPKey, DestQP: destQP, PSN: 7}}
	f.DETH.SrcQP = 0x777
	f.DETH.QKey = 0x1234
	return roce.AppendPacket(nil, &f, make([]byte, payload))
}
