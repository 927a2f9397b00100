package roce

import "encoding/binary"

// AtomicETH is the 28-byte Atomic Extended Transport Header of COMPARE_SWAP
// and FETCH_ADD requests.
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
//	|                 Swap (or Add) Data (64)                       |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     Compare Data (64)                         |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type AtomicETH []byte

const (
	atomicVA      = 0
	atomicRKey    = 8
	atomicSwapAdd = 12
	atomicCompare = 20
)

// AtomicETHFields holds the fields of an AtomicETH.
type AtomicETHFields struct {
	VA      uint64
	RKey    uint32
	SwapAdd uint64
	Compare uint64
}

// IsValid reports whether b is long enough to hold an AtomicETH.
func (b AtomicETH) IsValid() bool { return len(b) >= AtomicETHLen }

// VA returns the remote virtual address (8-byte aligned for a valid request).
func (b AtomicETH) VA() uint64 { return binary.BigEndian.Uint64(b[atomicVA:]) }

// RKey returns the remote key.
func (b AtomicETH) RKey() uint32 { return binary.BigEndian.Uint32(b[atomicRKey:]) }

// SwapAdd returns the swap value (COMPARE_SWAP) or the addend (FETCH_ADD).
func (b AtomicETH) SwapAdd() uint64 { return binary.BigEndian.Uint64(b[atomicSwapAdd:]) }

// Compare returns the compare value (COMPARE_SWAP only).
func (b AtomicETH) Compare() uint64 { return binary.BigEndian.Uint64(b[atomicCompare:]) }

// Fields returns all fields of b.
func (b AtomicETH) Fields() AtomicETHFields {
	return AtomicETHFields{VA: b.VA(), RKey: b.RKey(), SwapAdd: b.SwapAdd(), Compare: b.Compare()}
}

// Encode writes every byte of the AtomicETH from f.
func (b AtomicETH) Encode(f *AtomicETHFields) {
	binary.BigEndian.PutUint64(b[atomicVA:], f.VA)
	binary.BigEndian.PutUint32(b[atomicRKey:], f.RKey)
	binary.BigEndian.PutUint64(b[atomicSwapAdd:], f.SwapAdd)
	binary.BigEndian.PutUint64(b[atomicCompare:], f.Compare)
}

// ParseAtomicETH returns the AtomicETH at the start of b and its length.
func ParseAtomicETH(b []byte) (AtomicETH, int, error) {
	if len(b) < AtomicETHLen {
		return nil, 0, truncated("AtomicETH", AtomicETHLen, len(b))
	}
	return AtomicETH(b[:AtomicETHLen]), AtomicETHLen, nil
}

// AtomicAckETH is the 8-byte Atomic Acknowledge Extended Transport Header:
// the value the target held before the atomic operation.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Original Remote Data (64)                    |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type AtomicAckETH []byte

// AtomicAckETHFields holds the fields of an AtomicAckETH.
type AtomicAckETHFields struct {
	Orig uint64
}

// IsValid reports whether b is long enough to hold an AtomicAckETH.
func (b AtomicAckETH) IsValid() bool { return len(b) >= AtomicAckETHLen }

// Orig returns the original remote data.
func (b AtomicAckETH) Orig() uint64 { return binary.BigEndian.Uint64(b) }

// Fields returns all fields of b.
func (b AtomicAckETH) Fields() AtomicAckETHFields { return AtomicAckETHFields{Orig: b.Orig()} }

// Encode writes every byte of the AtomicAckETH from f.
func (b AtomicAckETH) Encode(f *AtomicAckETHFields) { binary.BigEndian.PutUint64(b, f.Orig) }

// ParseAtomicAckETH returns the AtomicAckETH at the start of b and its length.
func ParseAtomicAckETH(b []byte) (AtomicAckETH, int, error) {
	if len(b) < AtomicAckETHLen {
		return nil, 0, truncated("AtomicAckETH", AtomicAckETHLen, len(b))
	}
	return AtomicAckETH(b[:AtomicAckETHLen]), AtomicAckETHLen, nil
}
