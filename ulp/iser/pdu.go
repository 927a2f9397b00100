package iser

import (
	"encoding/binary"
	"fmt"
)

// An iSER message that carries an iSCSI PDU (an iSCSI control-type
// message) is, in one SEND:
//
//	+-------------+------------+------------------+----------------------+
//	| iSER header | BHS        | AHS (0-1020 B,   | data segment: immed- |
//	| 28 bytes    | 48 bytes   | TotalAHSLength)  | iate or unsolicited  |
//	|             |            |                  | data, text, sense    |
//	+-------------+------------+------------------+----------------------+
//
// with no digests (iSER forbids them, RFC 7145 5.1) and no padding by the
// Linux ends (iser_send_command, iser_send_control; the target checks
// that the SEND holds at least the data segment, isert_recv_done); a
// peer that pads to 4 bytes, as iSCSI over TCP does, is taken.

// AHS types (RFC 7143, 11.2.2; ISCSI_AHSTYPE_* in iscsi_proto.h).
const (
	AHSExtendedCDB = 1
	AHSReadLength  = 2 // Bidirectional Read Expected Data Transfer Length
)

// PDU is an iSCSI control-type message's headers as views: the iSER
// header, the BHS and the raw AHS. Its data segment follows them in the
// message (DataOffset, DataLen).
type PDU struct {
	Header Header
	BHS    BHS
	AHS    []byte
	// readLen is the Bidirectional Read Expected Data Transfer Length
	// AHS's, when hasReadLen.
	readLen    uint32
	hasReadLen bool
}

// DataOffset is where the data segment starts in the message; DataLen
// its length (without padding); Len the message's length without
// padding.
func (p PDU) DataOffset() int { return HeadersLen + len(p.AHS) }
func (p PDU) DataLen() int    { return p.BHS.DataSegmentLength() }
func (p PDU) Len() int        { return p.DataOffset() + p.DataLen() }

// ReadLength is a bidirectional command's read part's expected length,
// from its AHS; ok is false without one.
func (p PDU) ReadLength() (n uint32, ok bool) { return p.readLen, p.hasReadLen }

// CheckLen checks that a message of n bytes holds exactly the PDU p
// heads: its data segment whole, and at most 3 bytes of padding after it.
func (p PDU) CheckLen(n int) error {
	if want := p.Len(); n < want || n > want+3 {
		return &Error{Op: "parse PDU", Field: "data segment length", Offset: HeaderLen + bhsDataLen, Err: ErrLength,
			Detail: fmt.Sprintf("%s of %d AHS and %d data bytes (%d in all) in a message of %d bytes", p.BHS.Opcode(), len(p.AHS), p.DataLen(), want, n)}
	}
	return nil
}

// ParsePDU checks that b starts with an iSCSI control-type message's
// headers (the iSER header, the BHS and the AHS the BHS announces, each
// AHS within it) and returns them as views, and their length; the data
// segment need not be in b.
func ParsePDU(b []byte) (PDU, int, error) {
	const op = "parse PDU"
	h, _, err := ParseHeader(b)
	if err != nil {
		return PDU{}, 0, err
	}
	if h.Opcode() != OpControl {
		return PDU{}, 0, &Error{Op: op, Field: "opcode", Offset: hdrFlags, Err: ErrNotPDU, Detail: h.Opcode().String()}
	}
	if len(b) < HeadersLen {
		return PDU{}, 0, truncated(op, HeadersLen, len(b))
	}
	p := PDU{Header: h, BHS: BHS(b[HeaderLen:HeadersLen:HeadersLen])}
	n := HeadersLen + p.BHS.TotalAHSLength()
	if len(b) < n {
		return PDU{}, 0, truncated(op, n, len(b))
	}
	p.AHS = b[HeadersLen:n:n]
	for off := 0; off < len(p.AHS); {
		a := p.AHS[off:]
		at := HeadersLen + off
		if len(a) < 4 {
			return PDU{}, 0, &Error{Op: op, Field: "AHS", Offset: at, Err: ErrAHS, Detail: fmt.Sprintf("%d bytes left of the total AHS length %d, an AHS takes at least 4", len(a), len(p.AHS))}
		}
		l, typ := int(binary.BigEndian.Uint16(a)), a[2]
		size := (3 + l + 3) &^ 3
		if size > len(a) {
			return PDU{}, 0, &Error{Op: op, Field: "AHS length", Offset: at, Err: ErrAHS, Detail: fmt.Sprintf("an AHS of type %d and length %d (%d bytes padded) at AHS offset %d, past the total AHS length %d", typ, l, size, off, len(p.AHS))}
		}
		if typ == AHSReadLength {
			if p.hasReadLen || l != 5 {
				return PDU{}, 0, &Error{Op: op, Field: "AHS", Offset: at, Err: ErrAHS, Detail: fmt.Sprintf("a bidirectional read length AHS of length %d (want 5), or a second one", l)}
			}
			p.readLen, p.hasReadLen = binary.BigEndian.Uint32(a[4:]), true
		}
		off += size
	}
	return p, n, nil
}

// AppendReadLengthAHS appends a Bidirectional Read Expected Data
// Transfer Length AHS of n to b (8 bytes, as the Linux initiator writes
// it: iscsi_prep_bidi_ahs in drivers/scsi/libiscsi.c).
func AppendReadLengthAHS(b []byte, n uint32) []byte {
	return binary.BigEndian.AppendUint32(append(b, 0, 5, AHSReadLength, 0), n)
}

// AppendPDU appends an iSCSI control-type message to b: the iSER header
// h, the BHS f (its TotalAHSLength and DataSegmentLength set from ahs and
// data), ahs and data.
func AppendPDU(b []byte, h *HeaderFields, f BHSFields, ahs, data []byte) []byte {
	b = AppendHeader(b, h)
	f.TotalAHSLength, f.DataSegmentLength = len(ahs), len(data)
	n := len(b)
	b = append(b, make([]byte, BHSLen)...)
	BHS(b[n:]).Encode(&f)
	return append(append(b, ahs...), data...)
}
