package igmp

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// IPv6 framing of MLD (RFC 8200, RFC 3810 section 5): the 40-byte IPv6
// header, a Hop-by-Hop Options header holding the Router Alert option
// (RFC 2711, value 0: MLD), then the ICMPv6 message, whose checksum covers
// a pseudo-header of the source, the destination, the upper-layer length
// and next header 58.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|Version| Traffic Class |           Flow Label                  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         Payload Length        |  Next Header  |   Hop Limit   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                Source Address, Destination Address            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	| Next Hdr (58) |  Hdr Ext Len  | RA: 5, 2, 0, 0 | PadN: 1, 0   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
const (
	ipv6Len      = 40
	ipv6PayLen   = 4
	ipv6Next     = 6
	ipv6HopLimit = 7
	ipv6Src      = 8
	ipv6Dst      = 24

	protoHopByHop = 0
	protoICMPv6   = 58
)

// parsePacket6 parses an IPv6 packet that carries an MLD message: the
// header, Hop-by-Hop options if there are (MLD always has them), the
// ICMPv6 checksum.
func parsePacket6(b []byte) (Packet, error) {
	if len(b) < ipv6Len {
		return Packet{}, fmt.Errorf("mld: parse IPv6 header of %d bytes: %w", len(b), ErrTruncated)
	}
	total := ipv6Len + int(binary.BigEndian.Uint16(b[ipv6PayLen:]))
	if len(b) < total {
		return Packet{}, fmt.Errorf("mld: parse IPv6 packet: payload length %d, %d bytes: %w", total-ipv6Len, len(b), ErrTruncated)
	}
	b = b[:total]
	next, off := b[ipv6Next], ipv6Len
	if next == protoHopByHop {
		if len(b) < off+8 {
			return Packet{}, fmt.Errorf("mld: parse Hop-by-Hop options: %w", ErrTruncated)
		}
		n := 8 * (int(b[off+1]) + 1)
		if len(b) < off+n {
			return Packet{}, fmt.Errorf("mld: parse Hop-by-Hop options of %d bytes: %w", n, ErrTruncated)
		}
		next, off = b[off], off+n
	}
	if next != protoICMPv6 {
		return Packet{}, fmt.Errorf("mld: parse IPv6 packet: next header %d, not ICMPv6", next)
	}
	src, dst := netip.AddrFrom16([16]byte(b[ipv6Src:])), netip.AddrFrom16([16]byte(b[ipv6Dst:]))
	msg := b[off:]
	if icmpv6Checksum(src, dst, msg) != 0 {
		return Packet{}, fmt.Errorf("mld: parse ICMPv6 message: %w", ErrChecksum)
	}
	m, _, err := ParseMLD(msg)
	if err != nil {
		return Packet{}, err
	}
	return Packet{Src: src, Dst: dst, TTL: b[ipv6HopLimit], Message: m}, nil
}

// icmpv6Checksum is the Internet checksum of msg under the IPv6
// pseudo-header (RFC 8200 section 8.1): 0 when msg's checksum is right.
func icmpv6Checksum(src, dst netip.Addr, msg []byte) uint16 {
	ph := make([]byte, 0, 40+len(msg))
	s, d := src.As16(), dst.As16()
	ph = append(ph, s[:]...)
	ph = append(ph, d[:]...)
	ph = binary.BigEndian.AppendUint32(ph, uint32(len(msg)))
	ph = append(ph, 0, 0, 0, protoICMPv6)
	return Checksum(append(ph, msg...))
}

// AppendPacket6 appends an IPv6 packet from src to dst carrying the MLD
// message msg, as MLD goes: hop limit 1, the Router Alert option, the
// ICMPv6 checksum set (msg's own checksum field must be 0).
func AppendPacket6(b []byte, src, dst netip.Addr, msg []byte) []byte {
	off := len(b)
	b = append(b, make([]byte, ipv6Len)...)
	h := b[off:]
	h[0] = 6 << 4
	binary.BigEndian.PutUint16(h[ipv6PayLen:], uint16(8+len(msg)))
	h[ipv6Next], h[ipv6HopLimit] = protoHopByHop, 1
	s, d := src.As16(), dst.As16()
	copy(h[ipv6Src:], s[:])
	copy(h[ipv6Dst:], d[:])
	b = append(b, protoICMPv6, 0, 5, 2, 0, 0, 1, 0) // Router Alert (MLD), PadN of 0 bytes
	m := len(b)
	b = append(b, msg...)
	binary.BigEndian.PutUint16(b[m+2:], icmpv6Checksum(src, dst, b[m:]))
	return b
}
