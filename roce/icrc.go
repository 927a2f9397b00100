package roce

import (
	"encoding/binary"
	"hash/crc32"
)

// The RoCEv2 invariant CRC (IBTA Annex A17.3.3) is the IEEE CRC-32 of
//
//	8 bytes of 0xFF (the masked LRH that RoCEv2 does not carry)
//	| IP header | UDP header | BTH | extension headers | payload | pad
//
// with the fields routers may change masked to all ones: IPv4 TOS, TTL and
// header checksum; IPv6 traffic class, flow label and hop limit; the UDP
// checksum; and BTH byte 4 (FECN, BECN, reserved). The 32-bit result is
// stored little-endian in the last four bytes of the packet, as the kernel's
// rxe does (it stores ~crc in CPU order on little-endian hosts) and as
// hardware puts it on the wire.
//
// Two ways to sum it. ICRC leaves the packet untouched: it copies the masked
// headers to the stack and sums them with a slicing-by-8 table here (a stack
// buffer handed to hash/crc32 would escape to the heap), then hands the rest
// to hash/crc32, which uses carry-less multiplication where the CPU has it.
// PutICRC and VerifyICRC, the transmit and receive paths, own their buffer:
// they set the masked fields to ones in place, sum the whole packet in one
// hash/crc32 pass, and restore the fields, at the cost of plain CRC-32.

// icrcSeed is the CRC state (in hash/crc32's convention) after the eight
// 0xFF bytes; the kernel's raw seed 0xdebb20e3 is its complement.
var icrcSeed = crc32.ChecksumIEEE([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})

var slicing8 = func() (t [8][256]uint32) {
	t[0] = *crc32.IEEETable
	for i := range 256 {
		crc := t[0][i]
		for j := 1; j < 8; j++ {
			crc = t[0][crc&0xff] ^ crc>>8
			t[j][i] = crc
		}
	}
	return t
}()

// crcUpdate continues an IEEE CRC-32 over p, in hash/crc32's convention. It
// does not let p escape, so callers may pass stack buffers.
func crcUpdate(crc uint32, p []byte) uint32 {
	tab := &slicing8
	crc = ^crc
	for len(p) >= 8 {
		crc ^= binary.LittleEndian.Uint32(p)
		crc = tab[0][p[7]] ^ tab[1][p[6]] ^ tab[2][p[5]] ^ tab[3][p[4]] ^
			tab[4][crc>>24] ^ tab[5][(crc>>16)&0xff] ^
			tab[6][(crc>>8)&0xff] ^ tab[7][crc&0xff]
		p = p[8:]
	}
	for _, v := range p {
		crc = tab[0][byte(crc)^v] ^ crc>>8
	}
	return ^crc
}

const (
	ipv4MinHdr = 20
	ipv4MaxHdr = 60
	ipv6Hdr    = 40
	udpHdr     = 8
	// maxMasked is the longest run of masked headers: IPv4 with options,
	// UDP and BTH.
	maxMasked = ipv4MaxHdr + udpHdr + BTHLen
)

// ICRC computes the invariant CRC of a RoCEv2 packet. pkt starts at the IP
// header (IPv4 or IPv6) and ends with the 4-byte ICRC trailer, which is not
// covered. Bytes past the IP packet's own length (Ethernet padding) are
// ignored. ICRC reads pkt only and does not allocate.
func ICRC(pkt []byte) (uint32, error) {
	ipLen, l4, err := splitIP(pkt)
	if err != nil {
		return 0, err
	}
	if len(l4) < udpHdr+BTHLen+ICRCLen {
		return 0, truncated("packet", ipLen+udpHdr+BTHLen+ICRCLen, ipLen+len(l4))
	}
	return icrcSplit(pkt[:ipLen+udpHdr], l4[udpHdr:])
}

// ICRCWithHeaders computes the ICRC of a transport packet (BTH to ICRC
// trailer) that will travel, or travelled, behind the IP and UDP headers in
// hdrs (an IPv4 or IPv6 header followed by the UDP header). It is for
// senders that do not hold the packet contiguously, such as a UDP socket
// whose kernel writes the headers.
func ICRCWithHeaders(hdrs, transport []byte) (uint32, error) {
	if len(hdrs) < 1 {
		return 0, truncated("IP", ipv4MinHdr, 0)
	}
	ipLen := ipv6Hdr
	if hdrs[0]>>4 == 4 {
		ipLen = int(hdrs[0]&0xf) * 4
	}
	if ipLen < ipv4MinHdr || len(hdrs) != ipLen+udpHdr {
		return 0, &HeaderError{Header: "IP and UDP headers", Err: ErrBadLength, Value: uint64(len(hdrs))}
	}
	return icrcSplit(hdrs, transport)
}

// icrcSplit sums the masked IP and UDP headers (hdrs) and the transport
// packet, whose last four bytes are the trailer.
func icrcSplit(hdrs, transport []byte) (uint32, error) {
	if len(transport) < BTHLen+ICRCLen {
		return 0, truncated("packet", len(hdrs)+BTHLen+ICRCLen, len(hdrs)+len(transport))
	}
	ipLen := len(hdrs) - udpHdr
	var buf [maxMasked]byte
	n := copy(buf[:], hdrs)
	n += copy(buf[n:], transport[:BTHLen])
	h := buf[:n]
	if h[0]>>4 == 4 {
		h[1] = 0xff  // TOS
		h[8] = 0xff  // TTL
		h[10] = 0xff // header checksum
		h[11] = 0xff
	} else {
		h[0] |= 0x0f // traffic class (high nibble), flow label
		h[1] = 0xff
		h[2] = 0xff
		h[3] = 0xff
		h[7] = 0xff // hop limit
	}
	u := h[ipLen:]
	u[6] = 0xff // UDP checksum
	u[7] = 0xff
	u[udpHdr+bthFB] = 0xff // FECN, BECN, reserved
	crc := crcUpdate(icrcSeed, h)
	return crc32.Update(crc, crc32.IEEETable, transport[BTHLen:len(transport)-ICRCLen]), nil
}

// PutICRC computes the ICRC of pkt (laid out as for ICRC) and stores it in
// the trailer. It is the transmit path: it masks the variant fields in place
// while it sums the packet in one pass and restores them before it returns,
// so no other goroutine may read pkt meanwhile.
func PutICRC(pkt []byte) error {
	ipLen, l4, err := splitIP(pkt)
	if err != nil {
		return err
	}
	if len(l4) < udpHdr+BTHLen+ICRCLen {
		return truncated("packet", ipLen+udpHdr+BTHLen+ICRCLen, ipLen+len(l4))
	}
	end := ipLen + len(l4) - ICRCLen
	binary.LittleEndian.PutUint32(pkt[end:], icrcInPlace(pkt[:end], ipLen))
	return nil
}

// VerifyICRC checks the ICRC trailer of pkt (laid out as for ICRC) and
// returns the value carried; a wrong one gives an error matching ErrBadICRC.
// It is the receive path: like PutICRC it masks the variant fields in place
// while it runs and restores them, so no other goroutine may read pkt
// meanwhile. ICRC computes the same value without touching pkt.
func VerifyICRC(pkt []byte) (uint32, error) {
	ipLen, l4, err := splitIP(pkt)
	if err != nil {
		return 0, err
	}
	if len(l4) < udpHdr+BTHLen+ICRCLen {
		return 0, truncated("packet", ipLen+udpHdr+BTHLen+ICRCLen, ipLen+len(l4))
	}
	end := ipLen + len(l4) - ICRCLen
	got := binary.LittleEndian.Uint32(pkt[end:])
	if want := icrcInPlace(pkt[:end], ipLen); got != want {
		return got, &HeaderError{Header: "ICRC", Err: ErrBadICRC, Value: uint64(got)}
	}
	return got, nil
}

// icrcInPlace sums covered (IP header to the end of the pad) with the
// variant fields set to ones, in a single hash/crc32 pass, and puts the
// fields back.
func icrcInPlace(covered []byte, ipLen int) uint32 {
	u := covered[ipLen : ipLen+udpHdr+BTHLen]
	u0, u1, fb := u[6], u[7], u[udpHdr+bthFB]
	u[6], u[7], u[udpHdr+bthFB] = 0xff, 0xff, 0xff
	var crc uint32
	if h := covered[:ipLen]; h[0]>>4 == 4 {
		h1, h8, h10, h11 := h[1], h[8], h[10], h[11]
		h[1], h[8], h[10], h[11] = 0xff, 0xff, 0xff, 0xff
		crc = crc32.Update(icrcSeed, crc32.IEEETable, covered)
		h[1], h[8], h[10], h[11] = h1, h8, h10, h11
	} else {
		h0, h1, h2, h3, h7 := h[0], h[1], h[2], h[3], h[7]
		h[0] |= 0x0f
		h[1], h[2], h[3], h[7] = 0xff, 0xff, 0xff, 0xff
		crc = crc32.Update(icrcSeed, crc32.IEEETable, covered)
		h[0], h[1], h[2], h[3], h[7] = h0, h1, h2, h3, h7
	}
	u[6], u[7], u[udpHdr+bthFB] = u0, u1, fb
	return crc
}

// splitIP returns the IP header length of pkt and its layer-4 bytes, trimmed
// to the length the IP header gives. It checks that the packet is UDP.
func splitIP(pkt []byte) (hdrLen int, l4 []byte, err error) {
	if len(pkt) < 1 {
		return 0, nil, truncated("IP", ipv4MinHdr, len(pkt))
	}
	switch pkt[0] >> 4 {
	case 4:
		if len(pkt) < ipv4MinHdr {
			return 0, nil, truncated("IPv4", ipv4MinHdr, len(pkt))
		}
		hdrLen = int(pkt[0]&0xf) * 4
		total := int(binary.BigEndian.Uint16(pkt[2:]))
		switch {
		case hdrLen < ipv4MinHdr:
			return 0, nil, &HeaderError{Header: "IPv4", Err: ErrNotRoCEv2, Value: uint64(hdrLen)}
		case total < hdrLen || total > len(pkt):
			return 0, nil, truncated("IPv4", total, len(pkt))
		case pkt[9] != 17:
			return 0, nil, &HeaderError{Header: "IPv4 protocol", Err: ErrNotRoCEv2, Value: uint64(pkt[9])}
		}
		return hdrLen, pkt[hdrLen:total], nil
	case 6:
		if len(pkt) < ipv6Hdr {
			return 0, nil, truncated("IPv6", ipv6Hdr, len(pkt))
		}
		total := ipv6Hdr + int(binary.BigEndian.Uint16(pkt[4:]))
		switch {
		case total > len(pkt):
			return 0, nil, truncated("IPv6", total, len(pkt))
		case pkt[6] != 17:
			return 0, nil, &HeaderError{Header: "IPv6 next header", Err: ErrNotRoCEv2, Value: uint64(pkt[6])}
		}
		return ipv6Hdr, pkt[ipv6Hdr:total], nil
	}
	return 0, nil, &HeaderError{Header: "IP version", Err: ErrNotRoCEv2, Value: uint64(pkt[0] >> 4)}
}
