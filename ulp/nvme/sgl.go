package nvme

import (
	"encoding/binary"
	"fmt"
	"iter"
)

// SGL is a 16-byte SGL descriptor: the data pointer of a command (bytes
// 24-39 of the SQE) or one entry of an in-capsule descriptor list.
//
// A keyed data block descriptor (type 4, struct nvme_keyed_sgl_desc in the
// Linux kernel's include/linux/nvme.h) names host memory an RDMA peer
// reaches with the key:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     Address (64, little-endian)               |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|            Length (24, little-endian)         |  Key byte 0   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|           Key bytes 1-3 (little-endian)       | Type  |Subtype|
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Every other type (struct nvme_sgl_desc) has a 32-bit length and three
// reserved bytes where the keyed descriptor has its 24-bit length and key:
//
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                Address or Offset (64, little-endian)          |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Length (32, little-endian)                 |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                   Reserved                    | Type  |Subtype|
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The last byte is the SGL identifier: the type in its high nibble, the
// subtype in its low nibble (NVME_SGL_FMT_* in nvme.h; SPDK's
// include/spdk/nvme_spec.h spells the same layout as bit fields).
type SGL []byte

// SGLLen is the length of an SGL descriptor.
const SGLLen = 16

// MaxKeyedLength is the largest length a keyed descriptor carries (24 bits).
const MaxKeyedLength = 1<<24 - 1

const (
	sglAddr   = 0
	sglLength = 8
	sglKey    = 11
	sglID     = 15
)

// SGLType is a descriptor's type, the identifier's high nibble
// (NVME_SGL_FMT_DATA_DESC and friends in nvme.h,
// enum spdk_nvme_sgl_descriptor_type in SPDK).
type SGLType uint8

// Descriptor types.
const (
	SGLDataBlock          SGLType = 0x0 // in NVMe-oF RDMA: in-capsule data, with the offset subtype
	SGLBitBucket          SGLType = 0x1
	SGLSegment            SGLType = 0x2
	SGLLastSegment        SGLType = 0x3 // with the offset subtype: an in-capsule descriptor list (SPDK)
	SGLKeyedDataBlock     SGLType = 0x4 // host memory behind an RDMA key
	SGLTransportDataBlock SGLType = 0x5 // NVMe/TCP's
	SGLVendorSpecific     SGLType = 0xf
)

var sglTypeNames = [...]string{
	SGLDataBlock: "data block", SGLBitBucket: "bit bucket", SGLSegment: "segment",
	SGLLastSegment: "last segment", SGLKeyedDataBlock: "keyed data block",
	SGLTransportDataBlock: "transport data block", SGLVendorSpecific: "vendor specific",
}

func (t SGLType) String() string {
	if int(t) < len(sglTypeNames) && sglTypeNames[t] != "" {
		return sglTypeNames[t]
	}
	return fmt.Sprintf("reserved type 0x%x", uint8(t))
}

// SGLSubtype is a descriptor's subtype, the identifier's low nibble
// (NVME_SGL_FMT_ADDRESS and friends in nvme.h).
type SGLSubtype uint8

// Descriptor subtypes.
const (
	SGLAddress    SGLSubtype = 0x0 // an absolute address
	SGLOffset     SGLSubtype = 0x1 // an offset into the capsule's in-capsule bytes
	SGLTransportA SGLSubtype = 0xa
	// SGLInvalidate is the RDMA binding's keyed subtype asking the target
	// to invalidate the key remotely: the Linux host sets it on every
	// descriptor of a fast-registered MR (drivers/nvme/host/rdma.c,
	// nvme_rdma_map_sg_fr) and the Linux target answers it with
	// SEND_WITH_INV (drivers/nvme/target/rdma.c, nvmet_rdma_map_sgl_keyed).
	SGLInvalidate SGLSubtype = 0xf
)

// SGLFields holds the fields of a descriptor. Key is the keyed data
// block's alone and must be 0 for the other types.
type SGLFields struct {
	Type    SGLType
	Subtype SGLSubtype
	Address uint64
	Length  uint32 // 24 bits for a keyed data block
	Key     uint32
}

// IsValid reports whether s is long enough to hold a descriptor. It is the
// precondition of every getter and setter.
func (s SGL) IsValid() bool { return len(s) >= SGLLen }

// Identifier returns the identifier byte: type and subtype.
func (s SGL) Identifier() uint8 { return s[sglID] }

// Type returns the descriptor type.
func (s SGL) Type() SGLType { return SGLType(s[sglID] >> 4) }

// Subtype returns the descriptor subtype.
func (s SGL) Subtype() SGLSubtype { return SGLSubtype(s[sglID] & 0xf) }

// IsKeyed reports whether s is a keyed data block descriptor.
func (s SGL) IsKeyed() bool { return s.Type() == SGLKeyedDataBlock }

// Invalidate reports whether s is a keyed data block asking for remote
// invalidation of its key.
func (s SGL) Invalidate() bool { return s[sglID] == byte(SGLKeyedDataBlock)<<4|byte(SGLInvalidate) }

// Address returns the address (or, for the offset subtype, the offset).
func (s SGL) Address() uint64 { return binary.LittleEndian.Uint64(s[sglAddr:]) }

// Length returns the length: 24 bits (bytes 8-10) for a keyed data block,
// 32 bits (bytes 8-11) for the other types.
func (s SGL) Length() uint32 {
	if s.IsKeyed() {
		return get24(s[sglLength:])
	}
	return binary.LittleEndian.Uint32(s[sglLength:])
}

// Key returns a keyed data block's key (bytes 11-14); for other types the
// bytes are reserved.
func (s SGL) Key() uint32 { return binary.LittleEndian.Uint32(s[sglKey:]) }

// SetType sets the type, keeping the subtype.
func (s SGL) SetType(t SGLType) { s[sglID] = byte(t)<<4 | s[sglID]&0xf }

// SetSubtype sets the subtype, keeping the type.
func (s SGL) SetSubtype(st SGLSubtype) { s[sglID] = s[sglID]&0xf0 | byte(st)&0xf }

// SetAddress sets the address.
func (s SGL) SetAddress(a uint64) { binary.LittleEndian.PutUint64(s[sglAddr:], a) }

// SetLength sets the length: for a keyed data block its 24 bits (n modulo
// 2^24, so check n against MaxKeyedLength first), for the other types 32.
// Set the type first when it changes.
func (s SGL) SetLength(n uint32) {
	if s.IsKeyed() {
		put24(s[sglLength:], n)
		return
	}
	binary.LittleEndian.PutUint32(s[sglLength:], n)
}

// SetKey sets a keyed data block's key.
func (s SGL) SetKey(k uint32) { binary.LittleEndian.PutUint32(s[sglKey:], k) }

// Fields returns all fields of s; Key is 0 for a type other than the keyed
// data block, whose bytes 12-14 are reserved.
func (s SGL) Fields() SGLFields {
	f := SGLFields{Type: s.Type(), Subtype: s.Subtype(), Address: s.Address(), Length: s.Length()}
	if s.IsKeyed() {
		f.Key = s.Key()
	}
	return f
}

// Encode writes every byte of the descriptor from f; reserved bytes are
// zero.
func (s SGL) Encode(f *SGLFields) {
	_ = s[SGLLen-1]
	binary.LittleEndian.PutUint64(s[sglAddr:], f.Address)
	s[sglID] = byte(f.Type)<<4 | byte(f.Subtype)&0xf
	if f.Type == SGLKeyedDataBlock {
		put24(s[sglLength:], f.Length)
		binary.LittleEndian.PutUint32(s[sglKey:], f.Key)
		return
	}
	binary.LittleEndian.PutUint32(s[sglLength:], f.Length)
	s[12], s[13], s[14] = 0, 0, 0
}

// String describes the descriptor for logs.
func (s SGL) String() string {
	if !s.IsValid() {
		return fmt.Sprintf("SGL(%d bytes)", len(s))
	}
	switch {
	case s.IsKeyed():
		inv := ""
		if s.Subtype() == SGLInvalidate {
			inv = " invalidate"
		}
		return fmt.Sprintf("keyed addr=%#x len=%d key=%#x%s", s.Address(), s.Length(), s.Key(), inv)
	case s.Subtype() == SGLOffset:
		return fmt.Sprintf("%v offset=%d len=%d", s.Type(), s.Address(), s.Length())
	default:
		return fmt.Sprintf("%v subtype=%#x addr=%#x len=%d", s.Type(), uint8(s.Subtype()), s.Address(), s.Length())
	}
}

// ParseSGL returns the descriptor at the start of b and its length. It
// checks the length and that the type is not a reserved one (0x6-0xe); a
// type's use in a capsule is ParseCapsule's to check.
func ParseSGL(b []byte) (SGL, int, error) {
	const op = "parse SGL"
	if len(b) < SGLLen {
		return nil, 0, truncated(op, SGLLen, len(b))
	}
	s := SGL(b[:SGLLen])
	if t := s.Type(); t > SGLTransportDataBlock && t != SGLVendorSpecific {
		return nil, 0, &Error{Op: op, Field: "type", Offset: sglID, Err: ErrSGLType, Detail: t.String()}
	}
	return s, SGLLen, nil
}

// SGLList is a run of consecutive keyed data block descriptors inside a
// capsule, as ParseCapsule returns it: the SQE's own data pointer, or an
// in-capsule last-segment list. Its descriptors are views into the
// capsule; rewriting them rewrites the capsule.
type SGLList []byte

// Len returns the number of descriptors.
func (l SGLList) Len() int { return len(l) / SGLLen }

// At returns descriptor i, 0 <= i < Len().
func (l SGLList) At(i int) SGL { return SGL(l[i*SGLLen : (i+1)*SGLLen : (i+1)*SGLLen]) }

// All yields each descriptor with its index.
func (l SGLList) All() iter.Seq2[int, SGL] {
	return func(yield func(int, SGL) bool) {
		for i := range l.Len() {
			if !yield(i, l.At(i)) {
				return
			}
		}
	}
}

// TotalLength returns the sum of the descriptors' lengths: the bytes the
// command moves through host memory.
func (l SGLList) TotalLength() uint64 {
	var n uint64
	for i := range l.Len() {
		n += uint64(l.At(i).Length())
	}
	return n
}

func get24(b []byte) uint32 {
	_ = b[2]
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16
}

func put24(b []byte, v uint32) {
	_ = b[2]
	b[0], b[1], b[2] = byte(v), byte(v>>8), byte(v>>16)
}
