package roce

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// IPUDPLen returns the length of the IP and UDP headers in front of a
// transport packet sent from an address of this family.
func IPUDPLen(v6 bool) int {
	if v6 {
		return ipv6Hdr + udpHdr
	}
	return ipv4MinHdr + udpHdr
}

// PutIPUDPHeaders writes, at the start of b, the IP and UDP headers of a
// RoCEv2 datagram of n transport bytes (BTH to ICRC) from src to dst, as
// Linux writes them for a don't-fragment datagram: IPv4 with IP ID 0, DF,
// TTL 64 and its header checksum, or IPv6 with hop limit 64; ECN in the
// traffic class; the UDP checksum 0 (the ICRC protects the payload). It
// returns the headers' length (IPUDPLen), or an error, with b untouched,
// when the addresses are not valid, are not of one family (an IPv4-mapped
// IPv6 address counts as IPv4; the error matches ErrAddrFamily), when b is
// shorter than the headers, or when n does not fit the length fields.
func PutIPUDPHeaders(b []byte, src, dst netip.AddrPort, n int, ecn uint8) (int, error) {
	s, d := src.Addr().Unmap(), dst.Addr().Unmap()
	if !s.IsValid() || !d.IsValid() {
		return 0, fmt.Errorf("roce: IP and UDP headers from %v to %v: %w", src, dst, ErrNoAddr)
	}
	if s.Is4() != d.Is4() {
		return 0, fmt.Errorf("roce: IP and UDP headers from %v to %v: %w", src, dst, ErrAddrFamily)
	}
	hl := IPUDPLen(s.Is6())
	if len(b) < hl {
		return 0, truncated("IP and UDP headers", hl, len(b))
	}
	if n < 0 || n > maxIPPayload(s.Is6())-udpHdr {
		return 0, &HeaderError{Header: "UDP length", Err: ErrBadLength, Value: uint64(n)}
	}
	var u []byte
	if s.Is4() {
		h := b[:ipv4MinHdr]
		h[0], h[1] = 0x45, ecn&3
		binary.BigEndian.PutUint16(h[2:], uint16(ipv4MinHdr+udpHdr+n))
		binary.BigEndian.PutUint32(h[4:], 0x00004000) // ID 0, DF
		h[8], h[9] = 64, 17
		h[10], h[11] = 0, 0
		s4, d4 := s.As4(), d.As4()
		copy(h[12:16], s4[:])
		copy(h[16:20], d4[:])
		binary.BigEndian.PutUint16(h[10:], ipv4Checksum(h))
		u = b[ipv4MinHdr:]
	} else {
		h := b[:ipv6Hdr]
		binary.BigEndian.PutUint32(h[0:], 6<<28|uint32(ecn&3)<<20)
		binary.BigEndian.PutUint16(h[4:], uint16(udpHdr+n))
		h[6], h[7] = 17, 64
		s16, d16 := s.As16(), d.As16()
		copy(h[8:24], s16[:])
		copy(h[24:40], d16[:])
		u = b[ipv6Hdr:]
	}
	binary.BigEndian.PutUint16(u[0:], src.Port())
	binary.BigEndian.PutUint16(u[2:], dst.Port())
	binary.BigEndian.PutUint16(u[4:], uint16(udpHdr+n))
	u[6], u[7] = 0, 0
	return hl, nil
}

// SetIPv4ID sets the identification of the IPv4 header that b starts
// with (as PutIPUDPHeaders writes it: 20 bytes) and updates its checksum.
// Linux numbers the datagrams it cuts from one segmentation-offload send
// (UDP_SEGMENT) up from that send's own ID, one apiece: 0, 1, 2, ... for a
// don't-fragment send from an unconnected socket. The ICRC covers the ID,
// so the sender of such a send predicts each datagram's. A b shorter than
// the header, or that holds another version or header length, is an error
// and is left as it was (IPv6 has no ID).
func SetIPv4ID(b []byte, id uint16) error {
	if len(b) < ipv4MinHdr {
		return truncated("IPv4 header", ipv4MinHdr, len(b))
	}
	if b[0] != 0x45 {
		return &HeaderError{Header: "IPv4 version and header length", Err: ErrBadLength, Value: uint64(b[0])}
	}
	h := b[:ipv4MinHdr]
	binary.BigEndian.PutUint16(h[4:], id)
	h[10], h[11] = 0, 0
	binary.BigEndian.PutUint16(h[10:], ipv4Checksum(h))
	return nil
}

// maxIPPayload is the most bytes behind the IP header: IPv4's total length
// counts its header, IPv6's payload length does not.
func maxIPPayload(v6 bool) int {
	if v6 {
		return 0xffff
	}
	return 0xffff - ipv4MinHdr
}

// ipv4Checksum returns the Internet checksum of an IPv4 header whose
// checksum field is zero.
func ipv4Checksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
