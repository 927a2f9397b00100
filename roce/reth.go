package roce

import "encoding/binary"

// RETH is the 16-byte RDMA Extended Transport Header of RDMA WRITE (first and
// only) and RDMA READ requests.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     Virtual Address (64)                      |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                          R_Key                                |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        DMA Length                             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type RETH []byte

const (
	rethVA     = 0
	rethRKey   = 8
	rethDMALen = 12
)

// RETHFields holds the fields of a RETH.
type RETHFields struct {
	VA     uint64
	RKey   uint32
	DMALen uint32
}

// IsValid reports whether b is long enough to hold a RETH.
func (b RETH) IsValid() bool { return len(b) >= RETHLen }

// VA returns the remote virtual address.
func (b RETH) VA() uint64 { return binary.BigEndian.Uint64(b[rethVA:]) }

// RKey returns the remote key.
func (b RETH) RKey() uint32 { return binary.BigEndian.Uint32(b[rethRKey:]) }

// DMALen returns the length of the whole transfer in bytes.
func (b RETH) DMALen() uint32 { return binary.BigEndian.Uint32(b[rethDMALen:]) }

// SetVA sets the remote virtual address.
func (b RETH) SetVA(v uint64) { binary.BigEndian.PutUint64(b[rethVA:], v) }

// SetRKey sets the remote key.
func (b RETH) SetRKey(v uint32) { binary.BigEndian.PutUint32(b[rethRKey:], v) }

// SetDMALen sets the transfer length.
func (b RETH) SetDMALen(v uint32) { binary.BigEndian.PutUint32(b[rethDMALen:], v) }

// Fields returns all fields of b.
func (b RETH) Fields() RETHFields {
	return RETHFields{VA: b.VA(), RKey: b.RKey(), DMALen: b.DMALen()}
}

// Encode writes every byte of the RETH from f.
func (b RETH) Encode(f *RETHFields) {
	b.SetVA(f.VA)
	b.SetRKey(f.RKey)
	b.SetDMALen(f.DMALen)
}

// ParseRETH returns the RETH at the start of b and its length.
func ParseRETH(b []byte) (RETH, int, error) {
	if len(b) < RETHLen {
		return nil, 0, truncated("RETH", RETHLen, len(b))
	}
	return RETH(b[:RETHLen]), RETHLen, nil
}
