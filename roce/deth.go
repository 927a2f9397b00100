package roce

import "encoding/binary"

// DETH is the 8-byte Datagram Extended Transport Header of UD sends.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                            Q_Key                              |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|   Reserved    |                   Source QP                   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type DETH []byte

const (
	dethQKey  = 0
	dethSrcQP = 5
)

// DETHFields holds the fields of a DETH.
type DETHFields struct {
	QKey  uint32
	SrcQP uint32 // 24 bits
}

// IsValid reports whether b is long enough to hold a DETH.
func (b DETH) IsValid() bool { return len(b) >= DETHLen }

// QKey returns the queue key.
func (b DETH) QKey() uint32 { return binary.BigEndian.Uint32(b[dethQKey:]) }

// SrcQP returns the 24-bit source QP number.
func (b DETH) SrcQP() uint32 { return get24(b[dethSrcQP:]) }

// Fields returns all fields of b.
func (b DETH) Fields() DETHFields { return DETHFields{QKey: b.QKey(), SrcQP: b.SrcQP()} }

// Encode writes every byte of the DETH from f; the reserved byte is zero.
func (b DETH) Encode(f *DETHFields) {
	binary.BigEndian.PutUint32(b[dethQKey:], f.QKey)
	b[4] = 0
	put24(b[dethSrcQP:], f.SrcQP)
}

// ParseDETH returns the DETH at the start of b and its length.
func ParseDETH(b []byte) (DETH, int, error) {
	if len(b) < DETHLen {
		return nil, 0, truncated("DETH", DETHLen, len(b))
	}
	return DETH(b[:DETHLen]), DETHLen, nil
}
