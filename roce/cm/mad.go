package cm

import "encoding/binary"

// MADHeader is the 24-byte common header of every management datagram
// (IBA 13.4.2).
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  BaseVersion  |   MgmtClass   | ClassVersion  |R|   Method    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|            Status             |         ClassSpecific         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        TransactionID                          |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          AttributeID          |           Reserved            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                      AttributeModifier                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The CM's MADs (management class 0x07, class version 2) are always
// MADLen bytes: the header and DataLen bytes of message.
type MADHeader []byte

// Lengths.
const (
	MADLen       = 256 // a whole MAD, the payload of a UD SEND to QP1
	MADHeaderLen = 24
	DataLen      = MADLen - MADHeaderLen // the CM message after the header
)

// GSI constants: CM MADs travel as UD SEND_ONLY to QP 1 with this Q_Key.
const (
	GSIQPN  = 1
	GSIQKey = 0x80010000
)

// MAD header values of the CM.
const (
	BaseVersion     = 1
	MgmtClassCM     = 0x07
	CMClassVersion  = 2
	MethodSend      = 0x03
	madResponseFlag = 0x80
)

const (
	madBaseVersion  = 0
	madMgmtClass    = 1
	madClassVersion = 2
	madMethod       = 3
	madStatus       = 4
	madClassSpec    = 6
	madTID          = 8
	madAttrID       = 16
	madAttrMod      = 20
)

// AttrID is a CM message's attribute ID.
type AttrID uint16

// CM attribute IDs (IBA table 104).
const (
	AttrClassPortInfo AttrID = 0x0001
	AttrREQ           AttrID = 0x0010
	AttrMRA           AttrID = 0x0011
	AttrREJ           AttrID = 0x0012
	AttrREP           AttrID = 0x0013
	AttrRTU           AttrID = 0x0014
	AttrDREQ          AttrID = 0x0015
	AttrDREP          AttrID = 0x0016
	AttrSIDRREQ       AttrID = 0x0017
	AttrSIDRREP       AttrID = 0x0018
	AttrLAP           AttrID = 0x0019
	AttrAPR           AttrID = 0x001a
)

var attrNames = map[AttrID]string{AttrClassPortInfo: "ClassPortInfo", AttrREQ: "REQ", AttrMRA: "MRA",
	AttrREJ: "REJ", AttrREP: "REP", AttrRTU: "RTU", AttrDREQ: "DREQ", AttrDREP: "DREP",
	AttrSIDRREQ: "SIDR_REQ", AttrSIDRREP: "SIDR_REP", AttrLAP: "LAP", AttrAPR: "APR"}

func (a AttrID) String() string {
	if s, ok := attrNames[a]; ok {
		return s
	}
	return "Attr(0x" + hex16(uint16(a)) + ")"
}

func hex16(v uint16) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[v>>12], digits[v>>8&0xf], digits[v>>4&0xf], digits[v&0xf]})
}

// MADHeaderFields holds the fields of a MAD header. Method includes the
// response bit R (0x80).
type MADHeaderFields struct {
	BaseVersion   uint8
	MgmtClass     uint8
	ClassVersion  uint8
	Method        uint8
	Status        uint16
	ClassSpecific uint16
	TID           uint64
	AttrID        AttrID
	AttrMod       uint32
}

// IsValid reports whether h is long enough to hold a MAD header.
func (h MADHeader) IsValid() bool { return len(h) >= MADHeaderLen }

// BaseVersion returns the MAD base version (1).
func (h MADHeader) BaseVersion() uint8 { return h[madBaseVersion] }

// MgmtClass returns the management class.
func (h MADHeader) MgmtClass() uint8 { return h[madMgmtClass] }

// ClassVersion returns the class version.
func (h MADHeader) ClassVersion() uint8 { return h[madClassVersion] }

// Method returns the method byte, response bit included.
func (h MADHeader) Method() uint8 { return h[madMethod] }

// Status returns the status field.
func (h MADHeader) Status() uint16 { return binary.BigEndian.Uint16(h[madStatus:]) }

// ClassSpecific returns the class-specific field.
func (h MADHeader) ClassSpecific() uint16 { return binary.BigEndian.Uint16(h[madClassSpec:]) }

// TID returns the transaction ID.
func (h MADHeader) TID() uint64 { return binary.BigEndian.Uint64(h[madTID:]) }

// AttrID returns the attribute ID.
func (h MADHeader) AttrID() AttrID { return AttrID(binary.BigEndian.Uint16(h[madAttrID:])) }

// AttrMod returns the attribute modifier.
func (h MADHeader) AttrMod() uint32 { return binary.BigEndian.Uint32(h[madAttrMod:]) }

// Fields returns all fields of h.
func (h MADHeader) Fields() MADHeaderFields {
	return MADHeaderFields{
		BaseVersion:   h.BaseVersion(),
		MgmtClass:     h.MgmtClass(),
		ClassVersion:  h.ClassVersion(),
		Method:        h.Method(),
		Status:        h.Status(),
		ClassSpecific: h.ClassSpecific(),
		TID:           h.TID(),
		AttrID:        h.AttrID(),
		AttrMod:       h.AttrMod(),
	}
}

// Encode writes every byte of the header from f; the reserved field is
// zero.
func (h MADHeader) Encode(f *MADHeaderFields) {
	h[madBaseVersion] = f.BaseVersion
	h[madMgmtClass] = f.MgmtClass
	h[madClassVersion] = f.ClassVersion
	h[madMethod] = f.Method
	binary.BigEndian.PutUint16(h[madStatus:], f.Status)
	binary.BigEndian.PutUint16(h[madClassSpec:], f.ClassSpecific)
	binary.BigEndian.PutUint64(h[madTID:], f.TID)
	binary.BigEndian.PutUint16(h[madAttrID:], uint16(f.AttrID))
	h[18], h[19] = 0, 0
	binary.BigEndian.PutUint32(h[madAttrMod:], f.AttrMod)
}

// CMHeader returns the header fields of a CM MAD (base version 1, class
// CM, class version 2, method SEND) for attribute id and transaction tid.
func CMHeader(id AttrID, tid uint64) MADHeaderFields {
	return MADHeaderFields{BaseVersion: BaseVersion, MgmtClass: MgmtClassCM, ClassVersion: CMClassVersion,
		Method: MethodSend, TID: tid, AttrID: id}
}

// ParseMADHeader returns the MAD header at the start of b and its length.
// It checks the base version only: the class is the caller's business.
func ParseMADHeader(b []byte) (MADHeader, int, error) {
	if len(b) < MADHeaderLen {
		return nil, 0, truncated("MAD header", MADHeaderLen, len(b))
	}
	h := MADHeader(b[:MADHeaderLen])
	if h.BaseVersion() != BaseVersion {
		return nil, 0, bad("MAD header base version", ErrBadMAD, uint64(h.BaseVersion()))
	}
	return h, MADHeaderLen, nil
}

// ParseCM parses a whole CM MAD: it checks the length (MADLen), the base
// version, the management class, the class version and the method, and
// returns the header and the message data (DataLen bytes) for the Parse
// function of the header's attribute.
func ParseCM(b []byte) (MADHeader, []byte, error) {
	if len(b) < MADLen {
		return nil, nil, truncated("CM MAD", MADLen, len(b))
	}
	h, n, err := ParseMADHeader(b)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case h.MgmtClass() != MgmtClassCM:
		return nil, nil, bad("MAD management class", ErrBadMAD, uint64(h.MgmtClass()))
	case h.ClassVersion() != CMClassVersion:
		return nil, nil, bad("CM class version", ErrBadMAD, uint64(h.ClassVersion()))
	case h.Method() != MethodSend:
		return nil, nil, bad("CM method", ErrBadMAD, uint64(h.Method()))
	}
	return h, b[n:MADLen], nil
}

// AppendCM appends a CM MAD to b: the header from h, then DataLen bytes of
// message that encode writes (into zeroed memory). It returns the extended
// slice and does not allocate when b has room.
func AppendCM(b []byte, h *MADHeaderFields, encode func(data []byte)) []byte {
	start := len(b)
	if cap(b)-start < MADLen {
		nb := make([]byte, start, start+MADLen)
		copy(nb, b)
		b = nb
	}
	b = b[:start+MADLen]
	m := b[start:]
	MADHeader(m).Encode(h)
	clear(m[MADHeaderLen:])
	if encode != nil {
		encode(m[MADHeaderLen:])
	}
	return b
}
