package roce

import "encoding/binary"

// BTH is the 12-byte InfiniBand Base Transport Header.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|    OpCode     |S|M|Pad| TVer  |            P_Key              |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|F|B|   Resv6   |                    DestQP                     |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|A|    Resv7    |                     PSN                       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// S solicited event, M migration request, Pad the count of pad bytes after
// the payload, TVer the transport header version (0), F/B the forward and
// backward explicit congestion notification bits, A the acknowledge request.
type BTH []byte

// BTHLen is the length of the BTH in bytes.
const BTHLen = 12

const (
	bthOpcode = 0
	bthFlags  = 1 // S, M, pad, TVer
	bthPKey   = 2
	bthFB     = 4 // FECN, BECN, reserved: masked in the ICRC
	bthDestQP = 5
	bthAck    = 8
	bthPSN    = 9

	bthSE     = 0x80
	bthMigReq = 0x40
	bthFECN   = 0x80
	bthBECN   = 0x40
	bthAckReq = 0x80
)

// DefaultPKey is the default partition key (full membership of the default
// partition), the one RoCEv2 peers use.
const DefaultPKey = 0xffff

// BTHFields holds the fields of a BTH.
type BTHFields struct {
	Opcode   Opcode
	SE       bool
	MigReq   bool
	PadCount uint8 // 0..3
	TVer     uint8 // 0..15; 0 is the only version defined
	PKey     uint16
	FECN     bool
	BECN     bool
	DestQP   uint32 // 24 bits
	AckReq   bool
	PSN      uint32 // 24 bits
}

// IsValid reports whether b is long enough to hold a BTH. It is the
// precondition of every getter and setter.
func (b BTH) IsValid() bool { return len(b) >= BTHLen }

// Opcode returns the opcode.
func (b BTH) Opcode() Opcode { return Opcode(b[bthOpcode]) }

// SE returns the solicited event bit.
func (b BTH) SE() bool { return b[bthFlags]&bthSE != 0 }

// MigReq returns the migration request bit.
func (b BTH) MigReq() bool { return b[bthFlags]&bthMigReq != 0 }

// PadCount returns the number of pad bytes between the payload and the ICRC.
func (b BTH) PadCount() int { return int(b[bthFlags]>>4) & 3 }

// TVer returns the transport header version.
func (b BTH) TVer() uint8 { return b[bthFlags] & 0xf }

// PKey returns the partition key.
func (b BTH) PKey() uint16 { return binary.BigEndian.Uint16(b[bthPKey:]) }

// FECN returns the forward explicit congestion notification bit.
func (b BTH) FECN() bool { return b[bthFB]&bthFECN != 0 }

// BECN returns the backward explicit congestion notification bit.
func (b BTH) BECN() bool { return b[bthFB]&bthBECN != 0 }

// DestQP returns the 24-bit destination queue pair number.
func (b BTH) DestQP() uint32 { return get24(b[bthDestQP:]) }

// AckReq returns the acknowledge request bit.
func (b BTH) AckReq() bool { return b[bthAck]&bthAckReq != 0 }

// PSN returns the 24-bit packet sequence number.
func (b BTH) PSN() uint32 { return get24(b[bthPSN:]) }

// SetOpcode sets the opcode.
func (b BTH) SetOpcode(o Opcode) { b[bthOpcode] = byte(o) }

// SetPadCount sets the pad count (n modulo 4).
func (b BTH) SetPadCount(n int) { b[bthFlags] = b[bthFlags]&^0x30 | byte(n&3)<<4 }

// SetFECN sets or clears the FECN bit.
func (b BTH) SetFECN(v bool) { setBit(&b[bthFB], bthFECN, v) }

// SetBECN sets or clears the BECN bit.
func (b BTH) SetBECN(v bool) { setBit(&b[bthFB], bthBECN, v) }

// SetDestQP sets the 24-bit destination QP number.
func (b BTH) SetDestQP(qpn uint32) { put24(b[bthDestQP:], qpn) }

// SetAckReq sets or clears the acknowledge request bit.
func (b BTH) SetAckReq(v bool) { setBit(&b[bthAck], bthAckReq, v) }

// SetPSN sets the 24-bit PSN.
func (b BTH) SetPSN(psn uint32) { put24(b[bthPSN:], psn) }

// Fields returns all fields of b.
func (b BTH) Fields() BTHFields {
	return BTHFields{
		Opcode:   b.Opcode(),
		SE:       b.SE(),
		MigReq:   b.MigReq(),
		PadCount: uint8(b.PadCount()),
		TVer:     b.TVer(),
		PKey:     b.PKey(),
		FECN:     b.FECN(),
		BECN:     b.BECN(),
		DestQP:   b.DestQP(),
		AckReq:   b.AckReq(),
		PSN:      b.PSN(),
	}
}

// Encode writes every byte of the BTH from f; reserved bits are zero.
func (b BTH) Encode(f *BTHFields) {
	b[bthOpcode] = byte(f.Opcode)
	flags := (f.PadCount&3)<<4 | f.TVer&0xf
	if f.SE {
		flags |= bthSE
	}
	if f.MigReq {
		flags |= bthMigReq
	}
	b[bthFlags] = flags
	binary.BigEndian.PutUint16(b[bthPKey:], f.PKey)
	var fb byte
	if f.FECN {
		fb |= bthFECN
	}
	if f.BECN {
		fb |= bthBECN
	}
	b[bthFB] = fb
	put24(b[bthDestQP:], f.DestQP)
	b[bthAck] = 0
	if f.AckReq {
		b[bthAck] = bthAckReq
	}
	put24(b[bthPSN:], f.PSN)
}

// ParseBTH returns the BTH at the start of b and its length. It checks the
// length, the transport version (0) and that the opcode is one rbridge
// speaks (Opcode.Valid).
func ParseBTH(b []byte) (BTH, int, error) { return parseBTH(b, Opcode.Valid) }

// parseBTH is ParseBTH with the opcodes it accepts given by accept.
func parseBTH(b []byte, accept func(Opcode) bool) (BTH, int, error) {
	if len(b) < BTHLen {
		return nil, 0, truncated("BTH", BTHLen, len(b))
	}
	h := BTH(b[:BTHLen])
	if v := h.TVer(); v != 0 {
		return nil, 0, &HeaderError{Header: "BTH", Err: ErrBadVersion, Value: uint64(v)}
	}
	if !accept(h.Opcode()) {
		return nil, 0, &HeaderError{Header: "BTH", Err: ErrReservedOpcode, Value: uint64(h.Opcode())}
	}
	return h, BTHLen, nil
}

func get24(b []byte) uint32 {
	_ = b[2]
	return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2])
}

func put24(b []byte, v uint32) {
	_ = b[2]
	b[0], b[1], b[2] = byte(v>>16), byte(v>>8), byte(v)
}

func setBit(p *byte, bit byte, v bool) {
	if v {
		*p |= bit
	} else {
		*p &^= bit
	}
}
