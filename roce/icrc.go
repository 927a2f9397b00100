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
// Every entry point reads the packet only. On amd64 with PCLMULQDQ and
// SSE4.1, icrcFold (icrc_amd64.s) sums the packet in one carry-less-multiply
// folding pass over the caller's bytes, ORing the mask vectors of icrcMasks
// into the first 64 bytes as it loads them, and with AVX-512 VPCLMULQDQ
// where the CPU has it for packets of 256 bytes or more. Elsewhere, for
// IPv4 headers whose options push the masked bytes past the first 64, and
// for ICRCWithHeaders, whose headers are apart from the packet, icrcSplit
// copies the masked headers to the stack and sums them with a slicing-by-8
// table here (a stack buffer handed to hash/crc32 would escape to the heap),
// then sums the rest unmasked (crcPlain: icrcFold where it runs, else
// hash/crc32). PutICRC and VerifyICRC used to mask
// the fields in place, sum in one hash/crc32 pass and restore them; the
// folding kernel is faster than that and leaves the packet alone, so the
// in-place variant is gone and goroutines may read a packet while it is
// being checked.

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
	// icrcMaskLen is how far into the packet icrcFold applies its mask.
	icrcMaskLen = 64
)

// icrcMasks are the bytes ORed into a packet's first 64 bytes for the sum:
// 0xff over every masked field. Entries 0 to 7 are for IPv4 headers of 20
// to 48 bytes (IHL 5 to 12), entry 8 for IPv6; the BTH's masked byte of a
// longer IPv4 header lies past the first 64 bytes.
var icrcMasks = func() (m [9][icrcMaskLen]byte) {
	for i := range 8 {
		h := &m[i]
		ipLen := (i + 5) * 4
		h[1], h[8], h[10], h[11] = 0xff, 0xff, 0xff, 0xff
		h[ipLen+6], h[ipLen+7], h[ipLen+udpHdr+bthFB] = 0xff, 0xff, 0xff
	}
	h := &m[8]
	h[0], h[1], h[2], h[3], h[7] = 0x0f, 0xff, 0xff, 0xff, 0xff
	h[ipv6Hdr+6], h[ipv6Hdr+7], h[ipv6Hdr+udpHdr+bthFB] = 0xff, 0xff, 0xff
	return m
}()

// ICRC computes the invariant CRC of a RoCEv2 packet. pkt starts at the IP
// header (IPv4 or IPv6) and ends with the 4-byte ICRC trailer, which is not
// covered. Bytes past the IP packet's own length (Ethernet padding) are
// ignored. ICRC reads pkt only and does not allocate.
func ICRC(pkt []byte) (uint32, error) {
	covered, ipLen, err := icrcCovered(pkt)
	if err != nil {
		return 0, err
	}
	return icrcSum(covered, ipLen), nil
}

// ICRCWithHeaders computes the ICRC of a transport packet (BTH to ICRC
// trailer) that will travel, or travelled, behind the IP and UDP headers in
// hdrs (an IPv4 or IPv6 header followed by the UDP header). It is for
// senders that do not hold the packet contiguously, such as a UDP socket
// whose kernel writes the headers.
func ICRCWithHeaders(hdrs, transport []byte) (uint32, error) {
	if err := checkIPUDP(hdrs); err != nil {
		return 0, err
	}
	if len(transport) < BTHLen+ICRCLen {
		return 0, truncated("packet", len(hdrs)+BTHLen+ICRCLen, len(hdrs)+len(transport))
	}
	return icrcSplit(hdrs, transport[:len(transport)-ICRCLen]), nil
}

// ICRCWithHeadersGather is ICRCWithHeaders for a transport packet in three
// pieces (a Message with a Payload): head (the BTH and extension headers),
// payload, and tail (pad and the ICRC trailer).
func ICRCWithHeadersGather(hdrs, head, payload, tail []byte) (uint32, error) {
	if err := checkIPUDP(hdrs); err != nil {
		return 0, err
	}
	if len(head) < BTHLen || len(tail) < ICRCLen {
		return 0, truncated("packet", len(hdrs)+BTHLen+ICRCLen, len(hdrs)+len(head)+len(payload)+len(tail))
	}
	crc := icrcSplit(hdrs, head)
	crc = crcPlain(crc, payload)
	return crcPlain(crc, tail[:len(tail)-ICRCLen]), nil
}

// checkIPUDP checks that hdrs is an IPv4 or IPv6 header and a UDP header.
func checkIPUDP(hdrs []byte) error {
	if len(hdrs) < 1 {
		return truncated("IP", ipv4MinHdr, 0)
	}
	ipLen := ipv6Hdr
	if hdrs[0]>>4 == 4 {
		ipLen = int(hdrs[0]&0xf) * 4
	}
	if ipLen < ipv4MinHdr || len(hdrs) != ipLen+udpHdr {
		return &HeaderError{Header: "IP and UDP headers", Err: ErrBadLength, Value: uint64(len(hdrs))}
	}
	return nil
}

// PutICRC computes the ICRC of pkt (laid out as for ICRC) and stores it in
// the trailer, the transmit path. It writes the trailer only.
func PutICRC(pkt []byte) error {
	covered, ipLen, err := icrcCovered(pkt)
	if err != nil {
		return err
	}
	binary.LittleEndian.PutUint32(pkt[len(covered):], icrcSum(covered, ipLen))
	return nil
}

// VerifyICRC checks the ICRC trailer of pkt (laid out as for ICRC) and
// returns the value carried; a wrong one gives an error matching ErrBadICRC.
// It is the receive path; like ICRC it reads pkt only.
func VerifyICRC(pkt []byte) (uint32, error) {
	covered, ipLen, err := icrcCovered(pkt)
	if err != nil {
		return 0, err
	}
	got := binary.LittleEndian.Uint32(pkt[len(covered):])
	if want := icrcSum(covered, ipLen); got != want {
		return got, &HeaderError{Header: "ICRC", Err: ErrBadICRC, Value: uint64(got)}
	}
	return got, nil
}

// icrcCovered checks pkt and returns the bytes the ICRC covers (IP header
// to the end of the pad) and the IP header length. The trailer follows
// covered in pkt.
func icrcCovered(pkt []byte) (covered []byte, ipLen int, err error) {
	ipLen, l4, err := splitIP(pkt)
	if err != nil {
		return nil, 0, err
	}
	if len(l4) < udpHdr+BTHLen+ICRCLen {
		return nil, 0, truncated("packet", ipLen+udpHdr+BTHLen+ICRCLen, ipLen+len(l4))
	}
	return pkt[:ipLen+len(l4)-ICRCLen], ipLen, nil
}

// icrcSum sums covered, which starts with an IP header of ipLen bytes, the
// UDP header and the BTH.
func icrcSum(covered []byte, ipLen int) uint32 {
	if haveCLMUL {
		m := &icrcMasks[8]
		if covered[0]>>4 == 4 {
			if i := ipLen/4 - 5; i < 8 {
				m = &icrcMasks[i]
			} else {
				m = nil
			}
		}
		if m != nil {
			return icrcMasked(icrcSeed, covered, m)
		}
	}
	return icrcSplit(covered[:ipLen+udpHdr], covered[ipLen+udpHdr:])
}

// icrcMasked continues crc over p with p's first 64 bytes ORed with mask,
// reading p only. icrcFold takes the 16-byte blocks; crcUpdate the rest.
func icrcMasked(crc uint32, p []byte, mask *[icrcMaskLen]byte) uint32 {
	n := len(p) &^ 15
	if n > 0 {
		crc = icrcFold(crc, p[:n], mask)
	}
	tail := p[n:]
	if n >= icrcMaskLen || len(tail) == 0 {
		return crcUpdate(crc, tail)
	}
	var buf [16]byte
	m := mask[n:]
	for i, v := range tail {
		buf[i] = v | m[i]
	}
	return crcUpdate(crc, buf[:len(tail)])
}

// noMask is icrcFold's mask for bytes past a packet's first 64: nothing
// is masked.
var noMask [icrcMaskLen]byte

// crcPlain continues crc over p, nothing masked: by icrcFold where it
// runs (a quarter to a third faster than hash/crc32 from 1 KiB, with
// AVX-512), else by hash/crc32.
func crcPlain(crc uint32, p []byte) uint32 {
	if haveCLMUL && len(p) >= icrcMaskLen {
		return icrcMasked(crc, p, &noMask)
	}
	return crc32.Update(crc, crc32.IEEETable, p)
}

// icrcSplit sums the masked IP and UDP headers (hdrs) and the transport
// packet without its trailer (BTH to the end of the pad).
func icrcSplit(hdrs, transport []byte) uint32 {
	return crcPlain(icrcHeaders(hdrs, transport), transport[BTHLen:])
}

// icrcHeaders sums the masked IP and UDP headers (hdrs) and the masked
// BTH (transport's first BTHLen bytes): the CRC before the rest of the
// transport packet.
func icrcHeaders(hdrs, transport []byte) uint32 {
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
	return crcUpdate(icrcSeed, h)
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
