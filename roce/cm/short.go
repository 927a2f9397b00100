package cm

import "encoding/binary"

// The short CM messages: RTU, DREQ, DREP and MRA. Each starts with the
// sender's and the receiver's communication IDs.

// Message lengths and private data sizes.
const (
	RTULen             = DataLen
	RTUPrivateDataLen  = 224
	DREQLen            = DataLen
	DREQPrivateDataLen = 220
	DREPLen            = DataLen
	DREPPrivateDataLen = 224
	MRALen             = DataLen
	MRAPrivateDataLen  = 222

	rtuPrivateData  = 8
	dreqRemoteQPN   = 8
	dreqPrivateData = 12
	mraMessage      = 8
	mraTimeout      = 9
	mraPrivateData  = 10
)

func commIDs(b []byte) (local, remote uint32) { return be32(b), be32(b[4:]) }

func putCommIDs(b []byte, local, remote uint32) {
	binary.BigEndian.PutUint32(b, local)
	binary.BigEndian.PutUint32(b[4:], remote)
}

func putPrivate(dst, src []byte) { clear(dst[copy(dst, src):]) }

// RTU is the body of a CM RTU (ready to use, IBA table 111):
//
//	0 Local Communication ID    4 Remote Communication ID
//	8 Private Data (224 bytes)
type RTU []byte

// RTUFields holds the fields of an RTU.
type RTUFields struct {
	LocalCommID, RemoteCommID uint32
	PrivateData               []byte
}

// IsValid reports whether r is long enough to hold an RTU.
func (r RTU) IsValid() bool { return len(r) >= RTULen }

// Fields returns all fields of r. PrivateData is a view into r.
func (r RTU) Fields() RTUFields {
	l, rm := commIDs(r)
	return RTUFields{LocalCommID: l, RemoteCommID: rm, PrivateData: r[rtuPrivateData:RTULen]}
}

// Encode writes every byte of the RTU from f.
func (r RTU) Encode(f *RTUFields) {
	putCommIDs(r, f.LocalCommID, f.RemoteCommID)
	putPrivate(r[rtuPrivateData:RTULen], f.PrivateData)
}

// ParseRTU returns the RTU at the start of b and its length.
func ParseRTU(b []byte) (RTU, int, error) {
	if len(b) < RTULen {
		return nil, 0, truncated("CM RTU", RTULen, len(b))
	}
	return RTU(b[:RTULen]), RTULen, nil
}

// DREQ is the body of a CM DREQ (request for communication release, IBA
// table 112):
//
//	 0 Local Communication ID    4 Remote Communication ID
//	 8 Remote QPN/EECN (24) | reserved (8)
//	12 Private Data (220 bytes)
type DREQ []byte

// DREQFields holds the fields of a DREQ.
type DREQFields struct {
	LocalCommID, RemoteCommID uint32
	RemoteQPN                 uint32 // 24 bits: the receiver's QP
	PrivateData               []byte
}

// IsValid reports whether r is long enough to hold a DREQ.
func (r DREQ) IsValid() bool { return len(r) >= DREQLen }

// Fields returns all fields of r. PrivateData is a view into r.
func (r DREQ) Fields() DREQFields {
	l, rm := commIDs(r)
	return DREQFields{LocalCommID: l, RemoteCommID: rm, RemoteQPN: get24(r[dreqRemoteQPN:]),
		PrivateData: r[dreqPrivateData:DREQLen]}
}

// Encode writes every byte of the DREQ from f.
func (r DREQ) Encode(f *DREQFields) {
	putCommIDs(r, f.LocalCommID, f.RemoteCommID)
	binary.BigEndian.PutUint32(r[dreqRemoteQPN:], f.RemoteQPN<<8)
	putPrivate(r[dreqPrivateData:DREQLen], f.PrivateData)
}

// ParseDREQ returns the DREQ at the start of b and its length.
func ParseDREQ(b []byte) (DREQ, int, error) {
	if len(b) < DREQLen {
		return nil, 0, truncated("CM DREQ", DREQLen, len(b))
	}
	return DREQ(b[:DREQLen]), DREQLen, nil
}

// DREP is the body of a CM DREP (reply to request for communication
// release, IBA table 113); its layout is the RTU's.
type DREP []byte

// DREPFields holds the fields of a DREP.
type DREPFields struct {
	LocalCommID, RemoteCommID uint32
	PrivateData               []byte
}

// IsValid reports whether r is long enough to hold a DREP.
func (r DREP) IsValid() bool { return len(r) >= DREPLen }

// Fields returns all fields of r. PrivateData is a view into r.
func (r DREP) Fields() DREPFields {
	l, rm := commIDs(r)
	return DREPFields{LocalCommID: l, RemoteCommID: rm, PrivateData: r[rtuPrivateData:DREPLen]}
}

// Encode writes every byte of the DREP from f.
func (r DREP) Encode(f *DREPFields) {
	putCommIDs(r, f.LocalCommID, f.RemoteCommID)
	putPrivate(r[rtuPrivateData:DREPLen], f.PrivateData)
}

// ParseDREP returns the DREP at the start of b and its length.
func ParseDREP(b []byte) (DREP, int, error) {
	if len(b) < DREPLen {
		return nil, 0, truncated("CM DREP", DREPLen, len(b))
	}
	return DREP(b[:DREPLen]), DREPLen, nil
}

// Message is the message an MRA or a REJ refers to.
type Message uint8

// Messages an MRA (REQ, REP, LAP) or a REJ (REQ, REP, other) names.
const (
	MessageREQ   Message = 0
	MessageREP   Message = 1
	MessageOther Message = 2 // LAP for an MRA; no message for a REJ
)

// MRA is the body of a CM MRA (message receipt acknowledgement, IBA table
// 107): the sender needs more time to answer.
//
//	 0 Local Communication ID    4 Remote Communication ID
//	 8 Message MRAed (2), reserved (6) | Service Timeout (5), reserved (3)
//	10 Private Data (222 bytes)
type MRA []byte

// MRAFields holds the fields of an MRA.
type MRAFields struct {
	LocalCommID, RemoteCommID uint32
	MessageMRAed              Message // 2 bits
	ServiceTimeout            uint8   // 5 bits: 4.096 us * 2^t more to wait
	PrivateData               []byte
}

// IsValid reports whether r is long enough to hold an MRA.
func (r MRA) IsValid() bool { return len(r) >= MRALen }

// Fields returns all fields of r. PrivateData is a view into r.
func (r MRA) Fields() MRAFields {
	l, rm := commIDs(r)
	return MRAFields{LocalCommID: l, RemoteCommID: rm, MessageMRAed: Message(r[mraMessage] >> 6),
		ServiceTimeout: r[mraTimeout] >> 3, PrivateData: r[mraPrivateData:MRALen]}
}

// Encode writes every byte of the MRA from f.
func (r MRA) Encode(f *MRAFields) {
	putCommIDs(r, f.LocalCommID, f.RemoteCommID)
	r[mraMessage] = byte(f.MessageMRAed&3) << 6
	r[mraTimeout] = f.ServiceTimeout << 3
	putPrivate(r[mraPrivateData:MRALen], f.PrivateData)
}

// ParseMRA returns the MRA at the start of b and its length.
func ParseMRA(b []byte) (MRA, int, error) {
	if len(b) < MRALen {
		return nil, 0, truncated("CM MRA", MRALen, len(b))
	}
	return MRA(b[:MRALen]), MRALen, nil
}
