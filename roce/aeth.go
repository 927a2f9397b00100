package roce

import (
	"encoding/binary"
	"strconv"
)

// AETH is the 4-byte ACK Extended Transport Header of acknowledgements and
// read responses.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|   Syndrome    |                      MSN                      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type AETH []byte

const (
	aethSyndrome = 0
	aethMSN      = 1
)

// AETHFields holds the fields of an AETH.
type AETHFields struct {
	Syndrome Syndrome
	MSN      uint32 // 24 bits
}

// IsValid reports whether b is long enough to hold an AETH.
func (b AETH) IsValid() bool { return len(b) >= AETHLen }

// Syndrome returns the syndrome byte.
func (b AETH) Syndrome() Syndrome { return Syndrome(b[aethSyndrome]) }

// MSN returns the 24-bit message sequence number.
func (b AETH) MSN() uint32 { return get24(b[aethMSN:]) }

// SetSyndrome sets the syndrome byte.
func (b AETH) SetSyndrome(s Syndrome) { b[aethSyndrome] = byte(s) }

// SetMSN sets the 24-bit MSN.
func (b AETH) SetMSN(msn uint32) { put24(b[aethMSN:], msn) }

// Fields returns all fields of b.
func (b AETH) Fields() AETHFields { return AETHFields{Syndrome: b.Syndrome(), MSN: b.MSN()} }

// Encode writes every byte of the AETH from f.
func (b AETH) Encode(f *AETHFields) {
	binary.BigEndian.PutUint32(b, uint32(f.Syndrome)<<24|f.MSN&PSNMask)
}

// ParseAETH returns the AETH at the start of b and its length.
func ParseAETH(b []byte) (AETH, int, error) {
	if len(b) < AETHLen {
		return nil, 0, truncated("AETH", AETHLen, len(b))
	}
	return AETH(b[:AETHLen]), AETHLen, nil
}

// Syndrome is the AETH syndrome: bit 7 reserved, bits 6-5 the type (ACK,
// RNR NAK, reserved, NAK), bits 4-0 a credit count, an RNR timer code or a
// NAK code.
type Syndrome uint8

// AckType is the type encoded in a syndrome's bits 6-5.
type AckType uint8

// Acknowledgement types.
const (
	AckTypeACK      AckType = 0
	AckTypeRNRNAK   AckType = 1
	AckTypeReserved AckType = 2
	AckTypeNAK      AckType = 3
)

// NAK codes (the low five bits of a NAK syndrome).
const (
	NAKPSNSequenceError       uint8 = 0
	NAKInvalidRequest         uint8 = 1
	NAKRemoteAccessError      uint8 = 2
	NAKRemoteOperationalError uint8 = 3
	NAKInvalidRDRequest       uint8 = 4
)

// CreditsInvalid is the credit count of an ACK that carries no end-to-end
// flow control information.
const CreditsInvalid = 0x1f

// ACKSyndrome returns the syndrome of an ACK with the given credit count.
func ACKSyndrome(credits uint8) Syndrome { return Syndrome(credits & 0x1f) }

// RNRSyndrome returns the syndrome of an RNR NAK with the given timer code.
func RNRSyndrome(timer uint8) Syndrome { return Syndrome(1<<5 | timer&0x1f) }

// NAKSyndrome returns the syndrome of a NAK with the given code.
func NAKSyndrome(code uint8) Syndrome { return Syndrome(3<<5 | code&0x1f) }

// Type returns the acknowledgement type.
func (s Syndrome) Type() AckType { return AckType(s>>5) & 3 }

// Value returns the low five bits: credits, RNR timer or NAK code.
func (s Syndrome) Value() uint8 { return uint8(s) & 0x1f }

var nakNames = [...]string{"PSN_SEQUENCE_ERROR", "INVALID_REQUEST", "REMOTE_ACCESS_ERROR",
	"REMOTE_OPERATIONAL_ERROR", "INVALID_RD_REQUEST"}

// String renders the syndrome, e.g. "ACK credits=31", "RNR_NAK timer=14",
// "NAK REMOTE_ACCESS_ERROR".
func (s Syndrome) String() string {
	v := s.Value()
	switch s.Type() {
	case AckTypeACK:
		return "ACK credits=" + strconv.Itoa(int(v))
	case AckTypeRNRNAK:
		return "RNR_NAK timer=" + strconv.Itoa(int(v))
	case AckTypeNAK:
		if int(v) < len(nakNames) {
			return "NAK " + nakNames[v]
		}
		return "NAK code=" + strconv.Itoa(int(v))
	}
	return "RESERVED_0x" + strconv.FormatUint(uint64(s), 16)
}
