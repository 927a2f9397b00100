package capture_test

import (
	"encoding/binary"
	"time"
)

// Builders of pcap and pcapng files byte by byte, for link types and
// layouts that gopacket's writers cannot produce.

// pcapRec is one packet of a pcap file.
type pcapRec struct {
	sec, frac uint32 // frac in µs or ns as the file says
	data      []byte
	origLen   uint32 // 0: len(data)
}

// pcapFile builds a pcap file.
func pcapFile(order byteOrder, nanos bool, snapLen, linkType uint32, recs ...pcapRec) []byte {
	magic := uint32(0xa1b2c3d4)
	if nanos {
		magic = 0xa1b23c4d
	}
	b := order.AppendUint32(nil, magic)
	b = order.AppendUint16(b, 2)
	b = order.AppendUint16(b, 4)
	b = order.AppendUint32(b, 0)
	b = order.AppendUint32(b, 0)
	b = order.AppendUint32(b, snapLen)
	b = order.AppendUint32(b, linkType)
	for _, r := range recs {
		orig := r.origLen
		if orig == 0 {
			orig = uint32(len(r.data))
		}
		b = order.AppendUint32(b, r.sec)
		b = order.AppendUint32(b, r.frac)
		b = order.AppendUint32(b, uint32(len(r.data)))
		b = order.AppendUint32(b, orig)
		b = append(b, r.data...)
	}
	return b
}

// ngBlock builds a pcapng block of type typ around body (padded to 4).
func ngBlock(order byteOrder, typ uint32, body []byte) []byte {
	pad := -len(body) & 3
	n := uint32(12 + len(body) + pad)
	b := order.AppendUint32(nil, typ)
	b = order.AppendUint32(b, n)
	b = append(b, body...)
	b = append(b, make([]byte, pad)...)
	return order.AppendUint32(b, n)
}

// ngOpt builds one pcapng option.
func ngOpt(order byteOrder, code uint16, v []byte) []byte {
	b := order.AppendUint16(nil, code)
	b = order.AppendUint16(b, uint16(len(v)))
	b = append(b, v...)
	return append(b, make([]byte, -len(v)&3)...)
}

func ngSHB(order byteOrder) []byte {
	body := order.AppendUint32(nil, 0x1a2b3c4d)
	body = order.AppendUint16(body, 1)
	body = order.AppendUint16(body, 0)
	body = order.AppendUint64(body, ^uint64(0)) // section length unknown
	return ngBlock(order, 0x0a0d0d0a, body)
}

// ngIDB builds an interface description block; opts are ngOpt results.
func ngIDB(order byteOrder, linkType uint16, snapLen uint32, opts ...[]byte) []byte {
	body := order.AppendUint16(nil, linkType)
	body = order.AppendUint16(body, 0)
	body = order.AppendUint32(body, snapLen)
	for _, o := range opts {
		body = append(body, o...)
	}
	if len(opts) > 0 {
		body = append(body, 0, 0, 0, 0) // opt_endofopt
	}
	return ngBlock(order, 1, body)
}

// ngEPB builds an enhanced packet block; ts counts the interface's units.
func ngEPB(order byteOrder, iface uint32, ts uint64, data []byte, origLen uint32) []byte {
	if origLen == 0 {
		origLen = uint32(len(data))
	}
	body := order.AppendUint32(nil, iface)
	body = order.AppendUint32(body, uint32(ts>>32))
	body = order.AppendUint32(body, uint32(ts))
	body = order.AppendUint32(body, uint32(len(data)))
	body = order.AppendUint32(body, origLen)
	body = append(body, data...)
	return ngBlock(order, 6, body)
}

// ngPB builds an obsolete packet block.
func ngPB(order byteOrder, iface uint16, ts uint64, data []byte) []byte {
	body := order.AppendUint16(nil, iface)
	body = order.AppendUint16(body, 0) // drops
	body = order.AppendUint32(body, uint32(ts>>32))
	body = order.AppendUint32(body, uint32(ts))
	body = order.AppendUint32(body, uint32(len(data)))
	body = order.AppendUint32(body, uint32(len(data)))
	body = append(body, data...)
	return ngBlock(order, 2, body)
}

// ngSPB builds a simple packet block.
func ngSPB(order byteOrder, data []byte, origLen uint32) []byte {
	body := order.AppendUint32(nil, origLen)
	return ngBlock(order, 3, append(body, data...))
}

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// byteOrder is what binary.LittleEndian and binary.BigEndian both are.
type byteOrder interface {
	binary.ByteOrder
	binary.AppendByteOrder
}

var (
	le byteOrder = binary.LittleEndian
	be byteOrder = binary.BigEndian
)

func utc(sec, nsec int64) time.Time { return time.Unix(sec, nsec).UTC() }
