package roce

import "encoding/binary"

// ImmDt is the 4-byte Immediate Data Extended Transport Header. The value is
// opaque to the transport; rbridge reads it in network byte order, as the
// verbs API's imm_data (__be32) holds it.
type ImmDt []byte

// ImmDtFields holds the field of an ImmDt.
type ImmDtFields struct {
	Imm uint32
}

// IsValid reports whether b is long enough to hold an ImmDt.
func (b ImmDt) IsValid() bool { return len(b) >= ImmDtLen }

// Imm returns the immediate data.
func (b ImmDt) Imm() uint32 { return binary.BigEndian.Uint32(b) }

// Fields returns the field of b.
func (b ImmDt) Fields() ImmDtFields { return ImmDtFields{Imm: b.Imm()} }

// Encode writes the ImmDt from f.
func (b ImmDt) Encode(f *ImmDtFields) { binary.BigEndian.PutUint32(b, f.Imm) }

// ParseImmDt returns the ImmDt at the start of b and its length.
func ParseImmDt(b []byte) (ImmDt, int, error) {
	if len(b) < ImmDtLen {
		return nil, 0, truncated("ImmDt", ImmDtLen, len(b))
	}
	return ImmDt(b[:ImmDtLen]), ImmDtLen, nil
}

// IETH is the 4-byte Invalidate Extended Transport Header of SEND with
// invalidate: the R_Key the responder invalidates.
type IETH []byte

// IETHFields holds the field of an IETH.
type IETHFields struct {
	RKey uint32
}

// IsValid reports whether b is long enough to hold an IETH.
func (b IETH) IsValid() bool { return len(b) >= IETHLen }

// RKey returns the R_Key to invalidate.
func (b IETH) RKey() uint32 { return binary.BigEndian.Uint32(b) }

// Fields returns the field of b.
func (b IETH) Fields() IETHFields { return IETHFields{RKey: b.RKey()} }

// Encode writes the IETH from f.
func (b IETH) Encode(f *IETHFields) { binary.BigEndian.PutUint32(b, f.RKey) }

// ParseIETH returns the IETH at the start of b and its length.
func ParseIETH(b []byte) (IETH, int, error) {
	if len(b) < IETHLen {
		return nil, 0, truncated("IETH", IETHLen, len(b))
	}
	return IETH(b[:IETHLen]), IETHLen, nil
}
