package capture

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"

	"github.com/rbridge/rbridge/roce"
)

// Decode dissects p, the packet numbered n (from 1) in its capture: the link
// layer, VLAN tags, IPv4 or IPv6 (options, extension headers and fragments
// recognised), UDP, and for UDP to port 4791 the transport headers and the
// ICRC. DecodePort does the same for RoCEv2 on another UDP port.
//
// It reports only what the capture holds. A packet the capture's snap
// length cut is decoded up to the cut and marked as cut (Record.Cut); a
// packet shorter on the wire than its headers is malformed. Fragments are
// named as such, not reassembled.
func Decode(n int, p Packet) *Record { return DecodePort(n, p, roce.Port) }

// DecodePort is Decode with RoCEv2 on UDP port port (a test's, a demo's)
// instead of 4791.
func DecodePort(n int, p Packet, port uint16) *Record {
	d := &dissector{data: p.Data, wire: max(p.Length, len(p.Data)), port: port, rec: &Record{N: n, Capture: p.Note}}
	if p.Interfaces > 1 {
		d.rec.Interface = &p.Interface
	}
	if !p.Time.IsZero() {
		d.rec.time = p.Time.UTC()
		d.rec.Time = d.rec.time.Format(time.RFC3339Nano)
	}
	switch p.LinkType {
	case LinkTypeEthernet:
		if d.need(ethHdr, "Ethernet header") {
			d.etherType(binary.BigEndian.Uint16(d.data[12:]), ethHdr)
		}
	case LinkTypeRaw, LinkTypeRawBSD, LinkTypeRawAlt:
		if d.need(1, "IP header") {
			d.ip(0, d.data[0]>>4) // either version
		}
	case LinkTypeIPv4:
		d.ip(0, 4)
	case LinkTypeIPv6:
		d.ip(0, 6)
	case LinkTypeLinuxSLL:
		d.cooked(sllHdr, sllProto, "Linux cooked header")
	case LinkTypeLinuxSLL2:
		d.cooked(sll2Hdr, sll2Proto, "Linux cooked v2 header")
	default:
		d.rec.Error = fmt.Sprintf("link type %v (%d) is not supported: rbridge reads Ethernet, raw IP and Linux cooked (v1 and v2) captures", p.LinkType, uint32(p.LinkType))
	}
	return d.rec
}

// dissector walks one packet's headers, outermost first, filling rec.
type dissector struct {
	data []byte // the bytes captured
	wire int    // the packet's length on the wire
	port uint16 // RoCEv2's UDP port
	rec  *Record

	ipStart, ipEnd int        // the IP packet, header to the end of its payload
	src, dst       netip.Addr // its addresses
	v6ext          bool       // IPv6 with extension headers
}

// need reports whether the capture holds the packet's bytes up to end. When
// it does not, it records why: the capture's snap length cut the packet
// inside what (a cut), or the packet itself ends before it (malformed).
func (d *dissector) need(end int, what string) bool {
	switch {
	case end <= len(d.data):
		return true
	case end <= d.wire:
		d.rec.cut = true
		d.rec.Error = fmt.Sprintf("the capture kept %d of the packet's %d bytes, cutting it inside the %s", len(d.data), d.wire, what)
	default:
		d.rec.Error = fmt.Sprintf("%s truncated: it needs %d bytes, the packet has %d", what, end, d.wire)
	}
	return false
}

func (d *dissector) notRoCE(format string, args ...any) {
	d.rec.NotRoCE = fmt.Sprintf(format, args...)
}

const (
	ethHdr        = 14
	vlanTag       = 4
	maxVLANTags   = 8
	maxExtHeaders = 16

	etherTypeIPv4 = 0x0800
	etherTypeIPv6 = 0x86dd
)

// cooked decodes a Linux cooked capture header of hdr bytes whose protocol
// type, an EtherType, is at proto (see cooked.go).
func (d *dissector) cooked(hdr, proto int, what string) {
	if !d.need(hdr, what) {
		return
	}
	d.rec.Cooked = cookedRecord(d.data[:hdr])
	d.etherType(binary.BigEndian.Uint16(d.data[proto:]), hdr)
}

// etherType reads what the EtherType et introduces, starting at off: VLAN
// tags (each a TCI and the next EtherType), then IPv4 or IPv6.
func (d *dissector) etherType(et uint16, off int) {
	for et == 0x8100 || et == 0x88a8 || et == 0x9100 {
		if len(d.rec.VLAN) == maxVLANTags {
			d.rec.Error = fmt.Sprintf("more than %d VLAN tags", maxVLANTags)
			return
		}
		if !d.need(off+vlanTag, "802.1Q tag") {
			return
		}
		tci := binary.BigEndian.Uint16(d.data[off:])
		d.rec.VLAN = append(d.rec.VLAN, VLANRecord{ID: tci & 0xfff, PCP: uint8(tci >> 13), DEI: tci&0x1000 != 0, TPID: et})
		et = binary.BigEndian.Uint16(d.data[off+2:])
		off += vlanTag
	}
	switch {
	case et == etherTypeIPv4:
		d.ip(off, 4)
	case et == etherTypeIPv6:
		d.ip(off, 6)
	case et <= 1500:
		d.notRoCE("an IEEE 802.3 frame (length %d), no EtherType", et)
	default:
		d.notRoCE("EtherType %#04x%s", et, named(etherTypeNames, et))
	}
}

// ip decodes the IP header at off, of the version the link layer says.
func (d *dissector) ip(off int, version uint8) {
	if !d.need(off+1, "IP header") {
		return
	}
	switch v := d.data[off] >> 4; {
	case v != 4 && v != 6:
		d.notRoCE("IP version %d", v)
	case v != version:
		d.notRoCE("IPv%d where the link layer says IPv%d", v, version)
	case v == 4:
		d.ipv4(off)
	default:
		d.ipv6(off)
	}
}

// The IPv4 header (RFC 791), 20 bytes and options:
//
//	+-------+-------+-----------+---+-------------------------------+
//	|Version|  IHL  |   DSCP    |ECN|          Total Length         |
//	+-------+-------+-----------+---+-----+-------------------------+
//	|         Identification        |Flags|     Fragment Offset     |
//	+---------------+---------------+-----+-------------------------+
//	|      TTL      |   Protocol    |        Header Checksum        |
//	+---------------+---------------+-------------------------------+
//	|                         Source Address                        |
//	+---------------------------------------------------------------+
//	|                      Destination Address                      |
//	+---------------------------------------------------------------+
const (
	ipv4MinHdr = 20
	ipv4DF     = 0x4000
	ipv4MF     = 0x2000
	ipv4Offset = 0x1fff
	protoUDP   = 17
)

func (d *dissector) ipv4(off int) {
	if !d.need(off+ipv4MinHdr, "IPv4 header") {
		return
	}
	b := d.data[off:]
	ihl := int(b[0]&0xf) * 4
	flags := binary.BigEndian.Uint16(b[6:])
	df := flags&ipv4DF != 0
	id := binary.BigEndian.Uint16(b[4:])
	d.src, d.dst = netip.AddrFrom4([4]byte(b[12:16])), netip.AddrFrom4([4]byte(b[16:20]))
	ip := &IPRecord{
		Version: 4, Src: d.src.String(), Dst: d.dst.String(),
		DSCP: b[1] >> 2, ECN: b[1] & 3, TTL: b[8], Proto: b[9], ID: &id, DF: &df,
	}
	d.rec.IP = ip
	if flags&(ipv4MF|ipv4Offset) != 0 {
		ip.Frag = &FragRecord{ID: uint32(id), Offset: int(flags&ipv4Offset) * 8, More: flags&ipv4MF != 0}
	}
	total := int(binary.BigEndian.Uint16(b[2:]))
	switch {
	case ihl < ipv4MinHdr:
		d.rec.Error = fmt.Sprintf("IPv4 header length %d is less than %d bytes", ihl, ipv4MinHdr)
		return
	case !d.need(off+ihl, "IPv4 options"):
		return
	case total < ihl:
		d.rec.Error = fmt.Sprintf("IPv4 total length %d is less than its header's %d bytes", total, ihl)
		return
	case off+total > d.wire:
		d.rec.Error = fmt.Sprintf("IPv4 truncated: its total length is %d bytes, the packet holds %d", total, d.wire-off)
		return
	}
	d.ipStart, d.ipEnd = off, off+total
	if ip.Frag != nil {
		d.fragment(off+ihl, ip)
		return
	}
	if ip.Proto != protoUDP {
		d.notRoCE("IPv4 protocol %d%s", ip.Proto, named(protoNames, ip.Proto))
		return
	}
	d.udp(off + ihl)
}

// The IPv6 header (RFC 8200), 40 bytes, then extension headers:
//
//	+-------+---------------+---------------------------------------+
//	|Version| Traffic Class |              Flow Label               |
//	+-------+---------------+-------+---------------+---------------+
//	|         Payload Length        |  Next Header  |   Hop Limit   |
//	+-------------------------------+---------------+---------------+
//	|                  Source Address (16 bytes)                    |
//	+---------------------------------------------------------------+
//	|                Destination Address (16 bytes)                 |
//	+---------------------------------------------------------------+
//
// Hop-by-hop, routing and destination options headers start with the next
// header and their length in 8-byte units after the first eight; an
// authentication header with its length in 4-byte units after the first
// eight. A fragment header is 8 bytes:
//
//	+---------------+---------------+-------------------------+-+-+-+
//	|  Next Header  |   Reserved    |     Fragment Offset     |Res|M|
//	+---------------+---------------+-------------------------+-+-+-+
//	|                         Identification                        |
//	+---------------------------------------------------------------+
const (
	ipv6Hdr        = 40
	ipv6HopByHop   = 0
	ipv6Routing    = 43
	ipv6Fragment   = 44
	ipv6AH         = 51
	ipv6DestOpts   = 60
	ipv6FragHdr    = 8
	ipv6FragOffset = 0xfff8
)

func (d *dissector) ipv6(off int) {
	if !d.need(off+ipv6Hdr, "IPv6 header") {
		return
	}
	b := d.data[off:]
	w := binary.BigEndian.Uint32(b)
	tc := uint8(w >> 20)
	flow := w & 0xfffff
	d.src, d.dst = netip.AddrFrom16([16]byte(b[8:24])), netip.AddrFrom16([16]byte(b[24:40]))
	ip := &IPRecord{
		Version: 6, Src: d.src.String(), Dst: d.dst.String(),
		DSCP: tc >> 2, ECN: tc & 3, TTL: b[7], Proto: b[6], FlowLabel: &flow,
	}
	d.rec.IP = ip
	end := off + ipv6Hdr + int(binary.BigEndian.Uint16(b[4:]))
	if end > d.wire {
		d.rec.Error = fmt.Sprintf("IPv6 truncated: its payload length is %d bytes, the packet holds %d", end-off-ipv6Hdr, d.wire-off-ipv6Hdr)
		return
	}
	d.ipStart, d.ipEnd = off, end
	h := off + ipv6Hdr
	for {
		nh := ip.Proto
		var l int
		switch nh {
		case ipv6HopByHop, ipv6Routing, ipv6DestOpts, ipv6AH:
			if !d.need(h+2, extName(nh)+" header") {
				return
			}
			l = (int(d.data[h+1]) + 1) * 8
			if nh == ipv6AH {
				l = (int(d.data[h+1]) + 2) * 4
			}
		case ipv6Fragment:
			l = ipv6FragHdr
		default:
			if len(ip.ExtHeaders) > 0 {
				d.v6ext = true
			}
			if nh != protoUDP {
				d.notRoCE("IPv6 next header %d%s", nh, named(protoNames, nh))
				return
			}
			d.udp(h)
			return
		}
		if len(ip.ExtHeaders) == maxExtHeaders {
			d.rec.Error = fmt.Sprintf("more than %d IPv6 extension headers", maxExtHeaders)
			return
		}
		if h+l > end {
			d.rec.Error = fmt.Sprintf("IPv6 %s header of %d bytes runs past the payload", extName(nh), l)
			return
		}
		if !d.need(h+l, extName(nh)+" header") {
			return
		}
		ip.ExtHeaders = append(ip.ExtHeaders, int(nh))
		ip.Proto = d.data[h]
		if nh == ipv6Fragment {
			fo := binary.BigEndian.Uint16(d.data[h+2:])
			if fo&(ipv6FragOffset|1) != 0 {
				ip.Frag = &FragRecord{ID: binary.BigEndian.Uint32(d.data[h+4:]), Offset: int(fo & ipv6FragOffset), More: fo&1 != 0}
				d.fragment(h+l, ip)
				return
			}
			// An atomic fragment (offset 0, no more; RFC 6946) is a
			// whole packet: read on.
		}
		h += l
	}
}

// fragment names a fragment, whose payload starts at off. The first holds
// the UDP header: its ports are shown; later ones hold none to show.
func (d *dissector) fragment(off int, ip *IPRecord) {
	f := ip.Frag
	var more, of string
	if f.More {
		more = ", more follow"
	}
	if ip.Proto == protoUDP && f.Offset == 0 && off+8 <= min(d.ipEnd, len(d.data)) {
		d.setPorts(off)
		of = " of a UDP datagram"
	}
	d.notRoCE("IPv%d fragment (ID %#x, offset %d%s)%s: not reassembled", ip.Version, f.ID, f.Offset, more, of)
}

// setPorts sets the record's UDP endpoints from the header at off.
func (d *dissector) setPorts(off int) {
	d.rec.Src = netip.AddrPortFrom(d.src, binary.BigEndian.Uint16(d.data[off:])).String()
	d.rec.Dst = netip.AddrPortFrom(d.dst, binary.BigEndian.Uint16(d.data[off+2:])).String()
}

// The UDP header: source port, destination port, length, checksum.
const udpHdr = 8

func (d *dissector) udp(off int) {
	payload := d.ipEnd - off
	if payload < udpHdr {
		d.rec.Error = fmt.Sprintf("UDP truncated: the IP payload holds %d bytes, the header needs %d", payload, udpHdr)
		return
	}
	if off+4 <= len(d.data) {
		// The ports, captured even if the rest of the header is not.
		d.setPorts(off)
		d.rec.RoCE = binary.BigEndian.Uint16(d.data[off+2:]) == d.port
	}
	if !d.need(off+udpHdr, "UDP header") {
		return
	}
	if !d.rec.RoCE {
		d.notRoCE("UDP port %d, not %d", binary.BigEndian.Uint16(d.data[off+2:]), d.port)
		return
	}
	switch ulen := int(binary.BigEndian.Uint16(d.data[off+4:])); {
	case ulen > payload:
		d.rec.Error = fmt.Sprintf("UDP truncated: its length is %d bytes, the IP payload holds %d", ulen, payload)
	case ulen != payload:
		d.rec.Error = fmt.Sprintf("UDP length %d differs from the IP payload's %d bytes", ulen, payload)
	default:
		d.transport(off+udpHdr, off+ulen)
	}
}

// transport decodes the transport packet from start to end (BTH to ICRC)
// and checks its ICRC.
func (d *dissector) transport(start, end int) {
	if end-start >= roce.BTHLen && !d.need(start+roce.BTHLen, "BTH") {
		return
	}
	cut := end > len(d.data)
	if cut {
		bth := roce.BTH(d.data[start : start+roce.BTHLen])
		op := bth.Opcode()
		if hdrEnd := start + roce.BTHLen + op.HeaderLen(); hdrEnd > len(d.data) {
			// The BTH alone, or with some of the extension headers.
			d.rec.Headers = headersOf(&roce.Packet{BTH: bth})
			d.need(hdrEnd, cutHeader(op, len(d.data)-start-roce.BTHLen))
			return
		}
	}
	u := d.data[start:min(end, len(d.data))]
	if cut {
		// Pad what was cut with zeros: only the payload, the pad and the
		// ICRC, which are not reported.
		u = append(u[:len(u):len(u)], make([]byte, end-len(d.data))...)
	}
	var p roce.Packet
	err := p.Dissect(u)
	if p.BTH != nil {
		d.rec.Headers = headersOf(&p)
	}
	if err != nil {
		d.rec.Error = err.Error()
		return
	}
	pl := len(p.Payload)
	d.rec.PayloadLen = &pl
	if cut {
		d.rec.cut = true
		d.rec.Error = fmt.Sprintf("the capture kept %d of the packet's %d bytes: payload and ICRC not checked", len(d.data), d.wire)
		return
	}
	d.rec.ICRC = &p.ICRC
	if d.v6ext {
		// The ICRC covers the IP header with some fields masked; which of
		// the extension headers' bytes it covers rbridge does not know.
		d.rec.Note = "ICRC not checked: IPv6 extension headers"
		return
	}
	crc, err := roce.ICRC(d.data[d.ipStart:d.ipEnd])
	if err != nil {
		d.rec.ICRC = nil
		d.rec.Error = err.Error()
		return
	}
	ok := crc == p.ICRC
	d.rec.ICRCOK = &ok
	if !ok {
		d.rec.Error = fmt.Sprintf("ICRC mismatch: carried %#08x, computed %#08x", p.ICRC, crc)
	}
}

// cutHeader names the extension header of op that holds byte n after the
// BTH.
func cutHeader(op roce.Opcode, n int) string {
	for _, h := range []struct {
		h    roce.Header
		name string
		len  int
	}{
		{roce.HdrRDETH, "RDETH", roce.RDETHLen}, {roce.HdrDETH, "DETH", roce.DETHLen},
		{roce.HdrXRCETH, "XRCETH", roce.XRCETHLen}, {roce.HdrRETH, "RETH", roce.RETHLen},
		{roce.HdrAtomicETH, "AtomicETH", roce.AtomicETHLen}, {roce.HdrAETH, "AETH", roce.AETHLen},
		{roce.HdrAtomicAckETH, "AtomicAckETH", roce.AtomicAckETHLen}, {roce.HdrImmDt, "ImmDt", roce.ImmDtLen},
		{roce.HdrIETH, "IETH", roce.IETHLen}, {roce.HdrCNP, "CNP's reserved bytes", roce.CNPReservedLen},
	} {
		if !op.Headers().Has(h.h) {
			continue
		}
		if n < h.len {
			return h.name
		}
		n -= h.len
	}
	return op.String() + " extension headers"
}

// named returns " (name)" for v's name in names, or "".
func named[K comparable](names map[K]string, v K) string {
	if n, ok := names[v]; ok {
		return " (" + n + ")"
	}
	return ""
}

var etherTypeNames = map[uint16]string{
	0x0806: "ARP", 0x8035: "RARP", 0x8808: "MAC control: PAUSE or PFC", 0x8809: "slow protocols: LACP",
	0x8847: "MPLS", 0x8848: "MPLS multicast", 0x888e: "802.1X", 0x88cc: "LLDP", 0x88e5: "MACsec",
	0x88f7: "PTP", 0x8906: "FCoE", 0x8914: "FIP", 0x8915: "RoCE v1",
}

var protoNames = map[uint8]string{
	1: "ICMP", 2: "IGMP", 4: "IPv4 in IP", 6: "TCP", 17: "UDP", 41: "IPv6 in IP", 47: "GRE",
	50: "ESP", 51: "AH", 58: "ICMPv6", 59: "no next header", 132: "SCTP",
}

func extName(nh uint8) string {
	switch nh {
	case ipv6HopByHop:
		return "hop-by-hop options"
	case ipv6Routing:
		return "routing"
	case ipv6Fragment:
		return "fragment"
	case ipv6AH:
		return "authentication"
	case ipv6DestOpts:
		return "destination options"
	}
	return "extension"
}
