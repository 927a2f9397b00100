package roce

import (
	"encoding/binary"
	"net/netip"
)

// Frame is a RoCEv2 packet decoded from an Ethernet frame or a raw IP packet:
// the addressing around the transport packet, and the transport packet.
// It is the allocation-free path rbridge uses on received frames.
type Frame struct {
	EthLen  int    // bytes of Ethernet header, VLAN tags included; 0 for raw IP
	VLAN    uint16 // VLAN ID of the outer 802.1Q tag, 0 when untagged
	IP      []byte // the IP packet (header to ICRC), trimmed to the IP length
	IPv6    bool
	ECN     uint8 // the IP ECN field (3 is CE, congestion experienced)
	Src     netip.AddrPort
	Dst     netip.AddrPort
	UDPLen  int
	Packet  Packet
	payload []byte // the UDP payload
}

const (
	ethHdr        = 14
	vlanHdr       = 4
	etherTypeV4   = 0x0800
	etherTypeV6   = 0x86dd
	etherTypeQ    = 0x8100
	etherTypeQinQ = 0x88a8

	// ipv4FragMask selects the IPv4 "more fragments" flag and the fragment
	// offset: a packet with either set is a fragment.
	ipv4FragMask = 0x3fff
)

// ECNCE is the IP ECN codepoint "congestion experienced".
const ECNCE = 3

// DecodeEthernet decodes an Ethernet frame (with up to two VLAN tags) that
// carries a RoCEv2 packet over IPv4 or IPv6. Frames that are not RoCEv2 give
// an error matching ErrNotRoCEv2. It does not allocate.
func (f *Frame) DecodeEthernet(b []byte) error {
	*f = Frame{}
	if len(b) < ethHdr {
		return truncated("Ethernet", ethHdr, len(b))
	}
	n := 12
	et := binary.BigEndian.Uint16(b[n:])
	for tags := 0; (et == etherTypeQ || et == etherTypeQinQ) && tags < 2; tags++ {
		if len(b) < n+vlanHdr+2 {
			return truncated("802.1Q", n+vlanHdr+2, len(b))
		}
		if tags == 0 {
			f.VLAN = binary.BigEndian.Uint16(b[n+2:]) & 0xfff
		}
		n += vlanHdr
		et = binary.BigEndian.Uint16(b[n:])
	}
	n += 2
	if et != etherTypeV4 && et != etherTypeV6 {
		return &HeaderError{Header: "EtherType", Err: ErrNotRoCEv2, Value: uint64(et)}
	}
	f.EthLen = n
	return f.decodeIP(b[n:], et == etherTypeV6)
}

// DecodeIP decodes a raw IPv4 or IPv6 packet that carries RoCEv2. It does not
// allocate.
func (f *Frame) DecodeIP(b []byte) error {
	*f = Frame{}
	if len(b) < 1 {
		return truncated("IP", ipv4MinHdr, 0)
	}
	return f.decodeIP(b, b[0]>>4 == 6)
}

func (f *Frame) decodeIP(b []byte, v6 bool) error {
	if len(b) > 0 && (b[0]>>4 == 6) != v6 {
		return &HeaderError{Header: "IP version", Err: ErrNotRoCEv2, Value: uint64(b[0] >> 4)}
	}
	hdrLen, l4, err := splitIP(b)
	if err != nil {
		return err
	}
	if !v6 && binary.BigEndian.Uint16(b[6:])&ipv4FragMask != 0 {
		// A fragment: RoCEv2 is sent with DF, and the fragments after the
		// first hold no UDP header to read. (An IPv6 fragment header is
		// refused by splitIP as a next header that is not UDP.)
		return &HeaderError{Header: "IPv4 fragment", Err: ErrNotRoCEv2, Value: uint64(binary.BigEndian.Uint16(b[6:]))}
	}
	f.IPv6 = v6
	f.IP = b[:hdrLen+len(l4)]
	if v6 {
		f.ECN = uint8(binary.BigEndian.Uint16(b) >> 4 & 3)
		f.Src = netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])), 0)
		f.Dst = netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[24:40])), 0)
	} else {
		f.ECN = b[1] & 3
		f.Src = netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[12:16])), 0)
		f.Dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[16:20])), 0)
	}
	if len(l4) < udpHdr {
		return truncated("UDP", udpHdr, len(l4))
	}
	sport, dport := binary.BigEndian.Uint16(l4), binary.BigEndian.Uint16(l4[2:])
	f.Src = netip.AddrPortFrom(f.Src.Addr(), sport)
	f.Dst = netip.AddrPortFrom(f.Dst.Addr(), dport)
	if dport != Port {
		return &HeaderError{Header: "UDP port", Err: ErrNotRoCEv2, Value: uint64(dport)}
	}
	ulen := int(binary.BigEndian.Uint16(l4[4:]))
	if ulen > len(l4) {
		return truncated("UDP", ulen, len(l4))
	}
	if ulen != len(l4) {
		return &HeaderError{Header: "UDP length", Err: ErrBadLength, Value: uint64(ulen)}
	}
	f.UDPLen = ulen
	f.payload = l4[udpHdr:ulen]
	return f.Packet.Decode(f.payload)
}

// VerifyICRC checks the ICRC of the decoded packet.
func (f *Frame) VerifyICRC() error {
	_, err := VerifyICRC(f.IP)
	return err
}

// UDPPayload returns the UDP payload: the transport packet, BTH to ICRC.
func (f *Frame) UDPPayload() []byte { return f.payload }
