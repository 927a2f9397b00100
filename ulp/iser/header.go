package iser

import (
	"encoding/binary"
	"fmt"
)

// Header is the 28-byte iSER header that starts every iSER message
// (struct iser_ctrl in the Linux kernel's include/scsi/iser.h; RFC 7145,
// 9.2). Fields are big-endian.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|Opcode |W|R|   |                 Reserved                      |  0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                          Write STag                           |  4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                   Write Base Offset (64 bits)                 |  8
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                          Read STag                            | 16
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                   Read Base Offset (64 bits)                  | 20
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The opcode is the high nibble of byte 0: 1 for an iSCSI control-type
// PDU (ISCSI_CTRL, 0x10: an iSCSI PDU follows the header), 2 and 3 for
// the iSER Hello and HelloReply. W (ISER_WSV, 0x08) says the write STag
// and offset are valid: where the target RDMA READs a SCSI write's
// solicited data; R (ISER_RSV, 0x04) the read STag and offset: where it
// RDMA WRITEs a read's data. Only the initiator sets them, on a SCSI
// Command (iser_prepare_write_cmd and iser_prepare_read_cmd in
// drivers/infiniband/ulp/iser/iser_initiator.c); the Linux target reads
// them there (isert_recv_done in drivers/infiniband/ulp/isert/ib_isert.c)
// and sends every PDU of its own with the opcode alone.
//
// The offsets are virtual addresses the initiator's HCA resolves: absolute
// ones, or offsets in the region when the initiator uses zero-based
// virtual addresses (CMHeader's ZBVA bit).
type Header []byte

// HeaderLen is the length of the iSER header.
const HeaderLen = 28

const (
	hdrFlags     = 0
	hdrWriteSTag = 4
	hdrWriteVA   = 8
	hdrReadSTag  = 16
	hdrReadVA    = 20
	flagWSV      = 0x08
	flagRSV      = 0x04
	opcodeShift  = 4
)

// DescriptorLen is a descriptor's length in the header: a STag and its
// base offset.
const DescriptorLen = 12

// Offsets of the two descriptors (STag then base offset) in the header.
const (
	WriteDescriptorOffset = hdrWriteSTag
	ReadDescriptorOffset  = hdrReadSTag
)

// Opcode is an iSER header's opcode, the high nibble of its first byte.
type Opcode uint8

// iSER opcodes (include/scsi/iser.h: ISCSI_CTRL, ISER_HELLO and
// ISER_HELLORPLY, shifted down).
const (
	OpControl    Opcode = 0x1
	OpHello      Opcode = 0x2
	OpHelloReply Opcode = 0x3
)

func (o Opcode) String() string {
	switch o {
	case OpControl:
		return "iSCSI control-type PDU"
	case OpHello:
		return "iSER Hello"
	case OpHelloReply:
		return "iSER HelloReply"
	}
	return fmt.Sprintf("iSER opcode %#x", uint8(o))
}

// HeaderFields holds the fields of an iSER header.
type HeaderFields struct {
	Opcode    Opcode
	WSV, RSV  bool
	WriteSTag uint32
	WriteVA   uint64
	ReadSTag  uint32
	ReadVA    uint64
	LowFlags  uint8 // the reserved low bits of byte 0, as sent
	Reserved  [3]byte
}

// IsValid reports whether h is long enough to hold an iSER header: the
// precondition of every getter and setter.
func (h Header) IsValid() bool { return len(h) >= HeaderLen }

func (h Header) Opcode() Opcode    { return Opcode(h[hdrFlags] >> opcodeShift) }
func (h Header) WSV() bool         { return h[hdrFlags]&flagWSV != 0 }
func (h Header) RSV() bool         { return h[hdrFlags]&flagRSV != 0 }
func (h Header) WriteSTag() uint32 { return binary.BigEndian.Uint32(h[hdrWriteSTag:]) }
func (h Header) WriteVA() uint64   { return binary.BigEndian.Uint64(h[hdrWriteVA:]) }
func (h Header) ReadSTag() uint32  { return binary.BigEndian.Uint32(h[hdrReadSTag:]) }
func (h Header) ReadVA() uint64    { return binary.BigEndian.Uint64(h[hdrReadVA:]) }

// SetWrite and SetRead rewrite a descriptor in place.
func (h Header) SetWrite(stag uint32, va uint64) {
	binary.BigEndian.PutUint32(h[hdrWriteSTag:], stag)
	binary.BigEndian.PutUint64(h[hdrWriteVA:], va)
}

func (h Header) SetRead(stag uint32, va uint64) {
	binary.BigEndian.PutUint32(h[hdrReadSTag:], stag)
	binary.BigEndian.PutUint64(h[hdrReadVA:], va)
}

// Fields reads every field.
func (h Header) Fields() HeaderFields {
	f := HeaderFields{Opcode: h.Opcode(), WSV: h.WSV(), RSV: h.RSV(), WriteSTag: h.WriteSTag(), WriteVA: h.WriteVA(),
		ReadSTag: h.ReadSTag(), ReadVA: h.ReadVA(), LowFlags: h[hdrFlags] & 0x03}
	copy(f.Reserved[:], h[1:4])
	return f
}

// Encode writes f into h (HeaderLen bytes).
func (h Header) Encode(f *HeaderFields) {
	b := byte(f.Opcode)<<opcodeShift | f.LowFlags&0x03
	if f.WSV {
		b |= flagWSV
	}
	if f.RSV {
		b |= flagRSV
	}
	h[hdrFlags] = b
	copy(h[1:4], f.Reserved[:])
	h.SetWrite(f.WriteSTag, f.WriteVA)
	h.SetRead(f.ReadSTag, f.ReadVA)
}

// AppendHeader appends the encoding of f to b.
func AppendHeader(b []byte, f *HeaderFields) []byte {
	n := len(b)
	b = append(b, make([]byte, HeaderLen)...)
	Header(b[n:]).Encode(f)
	return b
}

// ParseHeader checks that b starts with an iSER header of a known opcode
// and returns a view of it and its length.
func ParseHeader(b []byte) (Header, int, error) {
	const op = "parse iSER header"
	if len(b) < HeaderLen {
		return nil, 0, truncated(op, HeaderLen, len(b))
	}
	h := Header(b[:HeaderLen:HeaderLen])
	switch h.Opcode() {
	case OpControl, OpHello, OpHelloReply:
	default:
		return nil, 0, &Error{Op: op, Field: "opcode", Offset: hdrFlags, Err: ErrOpcode, Detail: fmt.Sprintf("flags %#02x", b[0])}
	}
	return h, HeaderLen, nil
}
