package igmp

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// IPv4 is the IPv4 header of an IGMP message (RFC 791), as much of it as
// Conn reads and writes.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|Version|  IHL  |Type of Service|          Total Length         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         Identification        |Flags|      Fragment Offset    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  Time to Live |    Protocol   |         Header Checksum       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                       Source Address                          |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Destination Address                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Options (Router Alert)                     |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type IPv4 []byte

const (
	ipv4MinLen   = 20
	ipv4TotalLen = 2
	ipv4Frag     = 6
	ipv4TTL      = 8
	ipv4Proto    = 9
	ipv4Csum     = 10
	ipv4Src      = 12
	ipv4Dst      = 16

	// ProtocolIGMP is IGMP's IP protocol number.
	ProtocolIGMP = 2

	// ipv4RALen is the header IGMP messages go with: 20 bytes and the
	// Router Alert option (RFC 2113), which RFC 2236 and 3376 ask for.
	ipv4RALen = 24
)

// Packet is an IGMP message and where it came from.
type Packet struct {
	Src, Dst netip.Addr
	TTL      uint8
	Message  Message
}

// ParsePacket parses an IPv4 packet that carries an IGMP message, or an
// IPv6 one that carries an MLD message (what an AF_PACKET datagram socket
// reads: no link-layer header).
func ParsePacket(b []byte) (Packet, error) {
	if len(b) > 0 && b[0]>>4 == 6 {
		return parsePacket6(b)
	}
	if len(b) < ipv4MinLen {
		return Packet{}, fmt.Errorf("igmp: parse IPv4 header of %d bytes: %w", len(b), ErrTruncated)
	}
	h := IPv4(b)
	ihl := int(h[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(h[ipv4TotalLen:]))
	switch {
	case h[0]>>4 != 4:
		return Packet{}, fmt.Errorf("igmp: parse IPv4 header: version %d", h[0]>>4)
	case ihl < ipv4MinLen || total < ihl || len(b) < total:
		return Packet{}, fmt.Errorf("igmp: parse IPv4 header: header length %d, total length %d, %d bytes: %w", ihl, total, len(b), ErrTruncated)
	case h[ipv4Proto] != ProtocolIGMP:
		return Packet{}, fmt.Errorf("igmp: parse IPv4 packet: protocol %d, not IGMP", h[ipv4Proto])
	case binary.BigEndian.Uint16(h[ipv4Frag:])&0x3fff != 0:
		return Packet{}, fmt.Errorf("igmp: parse IPv4 packet: a fragment")
	case Checksum(h[:ihl]) != 0:
		return Packet{}, fmt.Errorf("igmp: parse IPv4 header: %w", ErrChecksum)
	}
	m, _, err := Parse(b[ihl:total])
	if err != nil {
		return Packet{}, err
	}
	return Packet{Src: netip.AddrFrom4([4]byte(h[ipv4Src:])), Dst: netip.AddrFrom4([4]byte(h[ipv4Dst:])), TTL: h[ipv4TTL], Message: m}, nil
}

// AppendPacket appends an IPv4 packet from src to dst carrying the IGMP
// message msg, as IGMP goes: TTL 1, IP precedence Internetwork Control
// (RFC 3376 section 4), the Router Alert option, no fragmenting.
func AppendPacket(b []byte, src, dst netip.Addr, msg []byte) []byte {
	off := len(b)
	b = append(b, make([]byte, ipv4RALen)...)
	h := IPv4(b[off:])
	h[0] = 4<<4 | ipv4RALen/4
	h[1] = 0xc0
	binary.BigEndian.PutUint16(h[ipv4TotalLen:], uint16(ipv4RALen+len(msg)))
	binary.BigEndian.PutUint16(h[ipv4Frag:], 0x4000) // don't fragment
	h[ipv4TTL], h[ipv4Proto] = 1, ProtocolIGMP
	s, d := src.As4(), dst.As4()
	copy(h[ipv4Src:], s[:])
	copy(h[ipv4Dst:], d[:])
	copy(h[ipv4MinLen:], []byte{0x94, 0x04, 0, 0}) // Router Alert: every router examines it
	binary.BigEndian.PutUint16(h[ipv4Csum:], Checksum(h[:ipv4RALen]))
	return append(b, msg...)
}
