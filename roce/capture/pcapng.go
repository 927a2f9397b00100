package capture

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"time"
)

// The pcapng file format (draft-ietf-opsawg-pcapng): a sequence of blocks,
// each
//
//	+---------------------------------------------------------------+
//	|                          Block Type                           |
//	+---------------------------------------------------------------+
//	|                      Block Total Length                       |
//	+---------------------------------------------------------------+
//	/                          Block Body                           /
//	+---------------------------------------------------------------+
//	|                      Block Total Length                       |
//	+---------------------------------------------------------------+
//
// A section header block starts each section and sets its byte order; the
// interface description blocks that follow give each interface's link type
// and timestamp resolution; enhanced, simple and (obsolete) packet blocks
// hold the packets. Every other block is skipped.
const (
	ngBlockHdr = 8  // type and total length
	ngBlockMin = 12 // with the trailing length

	ngSHB = 0x0a0d0d0a // section header
	ngIDB = 0x00000001 // interface description
	ngPB  = 0x00000002 // packet (obsolete)
	ngSPB = 0x00000003 // simple packet
	ngEPB = 0x00000006 // enhanced packet

	ngByteOrderMagic = 0x1a2b3c4d

	ngOptEnd      = 0
	ngOptTSResol  = 9  // if_tsresol
	ngOptTSOffset = 14 // if_tsoffset
)

// ngInterface is what an interface description block says.
type ngInterface struct {
	linkType LinkType
	snapLen  uint32
	// Timestamps count units of 10^-tsExp seconds, or of 2^-tsExp seconds
	// when tsPow2.
	tsExp    uint8
	tsPow2   bool
	tsOffset int64 // seconds added to every timestamp
}

// readSectionHeader reads a section header block (the magic already seen
// by a peek) and starts a section: its byte order, no interfaces yet.
func (r *Reader) readSectionHeader() error {
	h, got, err := r.readFull(ngBlockMin)
	if err != nil {
		return fmt.Errorf("pcapng: the file ends inside the section header, after %d bytes", got)
	}
	switch uint32(ngByteOrderMagic) {
	case binary.LittleEndian.Uint32(h[8:]):
		r.order = binary.LittleEndian
	case binary.BigEndian.Uint32(h[8:]):
		r.order = binary.BigEndian
	default:
		return fmt.Errorf("pcapng: section header with byte-order magic %x", h[8:12])
	}
	n := r.order.Uint32(h[4:])
	if n < 28 || n%4 != 0 || n > maxCaptured {
		return fmt.Errorf("pcapng: section header with a bad length %d", n)
	}
	body, got, err := r.readFull(int(n) - ngBlockMin)
	if err != nil {
		return fmt.Errorf("pcapng: the file ends inside a block of type %#x: %d of its %d bytes are there", uint32(ngSHB), ngBlockMin+got, n)
	}
	if major := r.order.Uint16(body); major != 1 {
		return fmt.Errorf("pcapng: section version %d.%d is not supported (1.0 is)", major, r.order.Uint16(body[2:]))
	}
	if t := r.order.Uint32(body[len(body)-4:]); t != n {
		return fmt.Errorf("pcapng: section header's trailing length %d differs from its length %d", t, n)
	}
	r.ifaces = r.ifaces[:0]
	return nil
}

// nextPcapng reads blocks up to the next packet.
func (r *Reader) nextPcapng() (Packet, error) {
	for {
		h, err := r.br.Peek(ngBlockHdr)
		switch {
		case len(h) == 0 && errors.Is(err, io.EOF):
			return Packet{}, io.EOF
		case err != nil:
			return Packet{}, fmt.Errorf("pcapng: the file ends inside a block header (%d stray bytes)", len(h))
		}
		if binary.LittleEndian.Uint32(h) == ngSHB {
			if err := r.readSectionHeader(); err != nil {
				return Packet{}, err
			}
			continue
		}
		typ, n := r.order.Uint32(h), r.order.Uint32(h[4:])
		if n < ngBlockMin || n%4 != 0 || n > maxCaptured {
			return Packet{}, fmt.Errorf("pcapng: block of type %#x has a bad length %d", typ, n)
		}
		b, got, err := r.readFull(int(n))
		if err != nil {
			return Packet{}, fmt.Errorf("pcapng: the file ends inside a block of type %#x: %d of its %d bytes are there", typ, got, n)
		}
		if t := r.order.Uint32(b[n-4:]); t != n {
			return Packet{}, fmt.Errorf("pcapng: block of type %#x: its trailing length %d differs from its length %d", typ, t, n)
		}
		body := b[ngBlockHdr : n-4]
		switch typ {
		case ngIDB:
			if err := r.addInterface(body); err != nil {
				return Packet{}, err
			}
		case ngEPB, ngPB:
			return r.packetBlock(typ, body)
		case ngSPB:
			return r.simplePacket(body)
		}
	}
}

func (r *Reader) addInterface(body []byte) error {
	if len(body) < 8 {
		return fmt.Errorf("pcapng: interface description block of %d bytes, need 8", len(body))
	}
	in := ngInterface{
		linkType: LinkType(r.order.Uint16(body)),
		snapLen:  r.order.Uint32(body[4:]),
		tsExp:    6,
	}
	for opts := body[8:]; len(opts) >= 4; {
		code, l := r.order.Uint16(opts), int(r.order.Uint16(opts[2:]))
		if code == ngOptEnd || 4+l > len(opts) {
			break
		}
		v := opts[4 : 4+l]
		switch {
		case code == ngOptTSResol && l == 1:
			in.tsPow2, in.tsExp = v[0]&0x80 != 0, v[0]&0x7f
		case code == ngOptTSOffset && l == 8:
			in.tsOffset = int64(r.order.Uint64(v))
		}
		opts = opts[4+(l+3)&^3:]
	}
	if !in.tsPow2 && in.tsExp > 19 || in.tsPow2 && in.tsExp > 63 {
		return fmt.Errorf("pcapng: interface %d has a timestamp resolution (if_tsresol %#x) finer than this reader counts", len(r.ifaces), in.tsExp)
	}
	r.ifaces = append(r.ifaces, in)
	return nil
}

// packetBlock decodes an enhanced packet block, or an obsolete packet block
// (the same layout but for a 16-bit interface ID and a drop count).
func (r *Reader) packetBlock(typ uint32, body []byte) (Packet, error) {
	const fixed = 20
	if len(body) < fixed {
		return Packet{}, fmt.Errorf("pcapng: packet block of %d bytes, need %d", len(body), fixed)
	}
	id := int(r.order.Uint32(body))
	if typ == ngPB {
		id = int(r.order.Uint16(body))
	}
	if id >= len(r.ifaces) {
		return Packet{}, fmt.Errorf("pcapng: a packet on interface %d, but the section describes %s", id, plural(len(r.ifaces), "interface"))
	}
	in := &r.ifaces[id]
	ts := uint64(r.order.Uint32(body[4:]))<<32 | uint64(r.order.Uint32(body[8:]))
	capLen, origLen := r.order.Uint32(body[12:]), r.order.Uint32(body[16:])
	if uint64(capLen) > uint64(len(body)-fixed) {
		return Packet{}, fmt.Errorf("pcapng: a packet block claims %d captured bytes and holds %d", capLen, len(body)-fixed)
	}
	return Packet{
		Data:       body[fixed : fixed+capLen],
		Length:     int(max(origLen, capLen)),
		Time:       in.time(ts),
		LinkType:   in.linkType,
		Interface:  id,
		Interfaces: len(r.ifaces),
		Note:       lengthNote(capLen, origLen, in.snapLen),
	}, nil
}

// simplePacket decodes a simple packet block: interface 0, no timestamp,
// the packet cut to the interface's snap length.
func (r *Reader) simplePacket(body []byte) (Packet, error) {
	if len(r.ifaces) == 0 {
		return Packet{}, errors.New("pcapng: a simple packet block, but the section describes no interface")
	}
	if len(body) < 4 {
		return Packet{}, fmt.Errorf("pcapng: simple packet block of %d bytes, need 4", len(body))
	}
	in := &r.ifaces[0]
	origLen := r.order.Uint32(body)
	capLen := min(origLen, uint32(len(body)-4))
	if in.snapLen != 0 {
		capLen = min(capLen, in.snapLen)
	}
	return Packet{Data: body[4 : 4+capLen], Length: int(origLen), LinkType: in.linkType, Interfaces: len(r.ifaces)}, nil
}

// time converts a timestamp in the interface's units.
func (in *ngInterface) time(ts uint64) time.Time {
	var sec, nsec uint64
	if in.tsPow2 {
		sec = ts >> in.tsExp
		frac := ts & (1<<in.tsExp - 1)
		hi, lo := bits.Mul64(frac, 1e9)
		nsec = hi<<(64-in.tsExp) | lo>>in.tsExp // (hi:lo) >> tsExp
	} else {
		unit := uint64(math.Pow10(int(in.tsExp)))
		sec, nsec = ts/unit, ts%unit
		switch {
		case in.tsExp < 9:
			nsec *= uint64(math.Pow10(9 - int(in.tsExp)))
		case in.tsExp > 9:
			nsec /= uint64(math.Pow10(int(in.tsExp) - 9))
		}
	}
	return time.Unix(int64(sec)+in.tsOffset, int64(nsec)).UTC()
}
