package capture

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/rbridge/rbridge/roce"
)

// maxSnapPad bounds the zero padding Decode adds to packets that the
// capture cut short (snap length): no real frame is longer.
const maxSnapPad = 1 << 18

// Decode dissects p, the packet numbered n (from 1) in its capture.
func Decode(n int, p Packet) *Record {
	var f roce.Frame
	return decode(&f, n, p)
}

func decode(f *roce.Frame, n int, p Packet) *Record {
	rec := &Record{N: n}
	data := p.Data
	// A capture with a snap length keeps only the first bytes of each packet.
	// Pad the rest with zeros so the headers that were captured still decode;
	// only what was captured is reported, and the ICRC is not checked.
	capLen := len(data)
	cut := capLen < p.Length && p.Length <= maxSnapPad
	if cut {
		data = append(data[:capLen:capLen], make([]byte, p.Length-capLen)...)
	}
	var err error
	switch p.LinkType {
	case LinkTypeEthernet:
		err = f.DecodeEthernet(data)
	case LinkTypeRaw, LinkTypeRawBSD, LinkTypeRawAlt, LinkTypeIPv4, LinkTypeIPv6:
		err = f.DecodeIP(data)
	case LinkTypeLinuxSLL:
		err = decodeCooked(f, data, sllHdr, sllProto)
	case LinkTypeLinuxSLL2:
		err = decodeCooked(f, data, sll2Hdr, sll2Proto)
	default:
		rec.Error = fmt.Sprintf("link type %v (%d) is not supported: rbridge reads Ethernet, raw IP and Linux cooked (v1 and v2) captures", p.LinkType, uint32(p.LinkType))
		return rec
	}
	if f.Src.IsValid() {
		rec.Src, rec.Dst = f.Src.String(), f.Dst.String()
	}
	rec.RoCE = f.Dst.Port() == roce.Port && f.Src.IsValid()
	rec.ecnCE = f.ECN == roce.ECNCE
	if err != nil && errors.Is(err, roce.ErrNotRoCEv2) {
		rec.notRoCE = err.Error()
		return rec
	}
	if cut {
		// Where the transport headers end, counted from the start of data
		// (the frame's views share data's array and run to its end).
		hdrEnd := len(data) + 1
		if u := f.UDPPayload(); u != nil && f.Packet.BTH != nil {
			hdrEnd = cap(data) - cap(u) + roce.BTHLen + f.Packet.Opcode().HeaderLen()
		}
		if hdrEnd > capLen {
			if u := f.UDPPayload(); u != nil && f.Packet.BTH != nil && cap(data)-cap(u)+roce.BTHLen <= capLen {
				rec.Headers = headersOf(&roce.Packet{BTH: f.Packet.BTH}) // the BTH alone was captured
			}
			rec.Error = fmt.Sprintf("the capture kept %d of the packet's %d bytes, cutting it inside its headers", capLen, p.Length)
			rec.cut = true
			return rec
		}
	}
	if f.Packet.BTH != nil {
		rec.Headers = headersOf(&f.Packet)
	}
	if err != nil {
		rec.Error = err.Error()
		return rec
	}
	pl := len(f.Packet.Payload)
	rec.PayloadLen = &pl
	if cut {
		rec.Error = fmt.Sprintf("the capture kept %d of the packet's %d bytes: payload and ICRC not checked", capLen, p.Length)
		rec.cut = true
		return rec
	}
	crc, err := roce.ICRC(f.IP)
	if err != nil {
		rec.Error = err.Error()
		return rec
	}
	ok := crc == f.Packet.ICRC
	rec.ICRC = &f.Packet.ICRC
	rec.ICRCOK = &ok
	if !ok {
		rec.Error = fmt.Sprintf("ICRC mismatch: carried %#08x, computed %#08x", f.Packet.ICRC, crc)
	}
	return rec
}

// The Linux cooked headers, which libpcap writes for captures on the "any"
// device (tcpdump -i any) and on devices without a link-layer header.
// Version 1 (LINKTYPE_LINUX_SLL), 16 bytes:
//
//	+---------------+---------------+---------------+---------------+
//	|          Packet type          |          ARPHRD type          |
//	+---------------+---------------+---------------+---------------+
//	|    Link-layer address length  |                               |
//	+---------------+---------------+                               +
//	|                 Link-layer address (8 bytes)                  |
//	+                               +---------------+---------------+
//	|                               |         Protocol type         |
//	+---------------+---------------+---------------+---------------+
//
// Version 2 (LINKTYPE_LINUX_SLL2), 20 bytes:
//
//	+---------------+---------------+---------------+---------------+
//	|         Protocol type         |           Reserved            |
//	+---------------+---------------+---------------+---------------+
//	|                        Interface index                        |
//	+---------------+---------------+---------------+---------------+
//	|          ARPHRD type          |  Packet type  | Address length|
//	+---------------+---------------+---------------+---------------+
//	|                 Link-layer address (8 bytes)                  |
//	+                                                               +
//	|                                                               |
//	+---------------+---------------+---------------+---------------+
//
// The protocol type is the EtherType of what follows.
const (
	sllHdr    = 16
	sllProto  = 14
	sll2Hdr   = 20
	sll2Proto = 0
)

// decodeCooked decodes a Linux cooked capture of hdr bytes whose protocol
// type is at proto.
func decodeCooked(f *roce.Frame, data []byte, hdr, proto int) error {
	if len(data) < hdr {
		return &roce.HeaderError{Header: "Linux cooked header", Err: roce.ErrTruncated, Need: hdr, Have: len(data)}
	}
	if p := binary.BigEndian.Uint16(data[proto:]); p != 0x0800 && p != 0x86dd {
		return &roce.HeaderError{Header: "protocol", Err: roce.ErrNotRoCEv2, Value: uint64(p)}
	}
	return f.DecodeIP(data[hdr:])
}
