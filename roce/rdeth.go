package roce

// The headers of the two transport services rbridge does not speak but
// decodes for tools that show packets (Packet.Dissect): Reliable Datagram
// (RD, opcodes 0x40-0x5f) and Extended Reliable Connection (XRC,
// 0xa0-0xbf, IBTA annex A14).

// RDETH is the 4-byte Reliable Datagram Extended Transport Header that
// every RD packet carries after the BTH: the end-to-end context.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|   Reserved    |                  EE-Context                   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type RDETH []byte

const rdethEEC = 1

// RDETHFields holds the field of an RDETH.
type RDETHFields struct {
	EEC uint32 // 24 bits
}

// IsValid reports whether b is long enough to hold an RDETH.
func (b RDETH) IsValid() bool { return len(b) >= RDETHLen }

// EEC returns the 24-bit end-to-end context.
func (b RDETH) EEC() uint32 { return get24(b[rdethEEC:]) }

// Fields returns the field of b.
func (b RDETH) Fields() RDETHFields { return RDETHFields{EEC: b.EEC()} }

// Encode writes every byte of the RDETH from f; the reserved byte is zero.
func (b RDETH) Encode(f *RDETHFields) {
	b[0] = 0
	put24(b[rdethEEC:], f.EEC)
}

// ParseRDETH returns the RDETH at the start of b and its length.
func ParseRDETH(b []byte) (RDETH, int, error) {
	if len(b) < RDETHLen {
		return nil, 0, truncated("RDETH", RDETHLen, len(b))
	}
	return RDETH(b[:RDETHLen]), RDETHLen, nil
}

// XRCETH is the 4-byte XRC Extended Transport Header that XRC requests
// carry after the BTH: the shared receive queue the message is for.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|   Reserved    |                    XRCSRQ                     |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type XRCETH []byte

const xrcethSRQ = 1

// XRCETHFields holds the field of an XRCETH.
type XRCETHFields struct {
	SRQ uint32 // 24 bits
}

// IsValid reports whether b is long enough to hold an XRCETH.
func (b XRCETH) IsValid() bool { return len(b) >= XRCETHLen }

// SRQ returns the 24-bit XRC shared receive queue number.
func (b XRCETH) SRQ() uint32 { return get24(b[xrcethSRQ:]) }

// Fields returns the field of b.
func (b XRCETH) Fields() XRCETHFields { return XRCETHFields{SRQ: b.SRQ()} }

// Encode writes every byte of the XRCETH from f; the reserved byte is zero.
func (b XRCETH) Encode(f *XRCETHFields) {
	b[0] = 0
	put24(b[xrcethSRQ:], f.SRQ)
}

// ParseXRCETH returns the XRCETH at the start of b and its length.
func ParseXRCETH(b []byte) (XRCETH, int, error) {
	if len(b) < XRCETHLen {
		return nil, 0, truncated("XRCETH", XRCETHLen, len(b))
	}
	return XRCETH(b[:XRCETHLen]), XRCETHLen, nil
}
