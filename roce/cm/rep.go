package cm

import "encoding/binary"

// REP is the body of a CM REP (reply to request for communication, IBA
// 12.6.8, table 110). Byte offsets:
//
//	 0 Local Communication ID          4 Remote Communication ID
//	 8 Local Q_Key
//	12 Local QPN (24) | reserved (8)
//	16 Local EE Context Number (24) | reserved (8)
//	20 Starting PSN (24) | reserved (8)
//	24 Responder Resources (8) | Initiator Depth (8) |
//	   Target ACK Delay (5), Failover Accepted (2), End-to-End Flow Control (1) |
//	   RNR Retry Count (3), SRQ (1), reserved (4)
//	28 Local CA GUID (8 bytes)
//	36 Private Data (196 bytes)
type REP []byte

// REP layout.
const (
	REPLen            = DataLen
	REPPrivateDataLen = 196

	repLocalCommID  = 0
	repRemoteCommID = 4
	repLocalQKey    = 8
	repLocalQPN     = 12
	repLocalEECN    = 16
	repStartingPSN  = 20
	repRespRes      = 24
	repInitDepth    = 25
	repByte26       = 26
	repByte27       = 27
	repLocalCAGUID  = 28
	repPrivateData  = 36
)

// REPFields holds the fields of a REP.
type REPFields struct {
	LocalCommID         uint32
	RemoteCommID        uint32
	LocalQKey           uint32
	LocalQPN            uint32 // 24 bits
	LocalEECN           uint32 // 24 bits
	StartingPSN         uint32 // 24 bits
	ResponderResources  uint8
	InitiatorDepth      uint8
	TargetACKDelay      uint8 // 5 bits
	FailoverAccepted    uint8 // 2 bits
	EndToEndFlowControl bool
	RNRRetryCount       uint8 // 3 bits
	SRQ                 bool
	LocalCAGUID         uint64
	PrivateData         []byte // up to REPPrivateDataLen bytes
}

// IsValid reports whether r is long enough to hold a REP.
func (r REP) IsValid() bool { return len(r) >= REPLen }

// LocalCommID returns the sender's communication ID.
func (r REP) LocalCommID() uint32 { return be32(r[repLocalCommID:]) }

// RemoteCommID returns the receiver's communication ID (the REQ's local
// one).
func (r REP) RemoteCommID() uint32 { return be32(r[repRemoteCommID:]) }

// LocalQPN returns the sender's QP number.
func (r REP) LocalQPN() uint32 { return get24(r[repLocalQPN:]) }

// StartingPSN returns the REP's Starting PSN: the first PSN the sender
// (the passive side) expects to receive, as Linux's CM uses it.
func (r REP) StartingPSN() uint32 { return get24(r[repStartingPSN:]) }

// PrivateData returns the private data region (REPPrivateDataLen bytes).
func (r REP) PrivateData() []byte { return r[repPrivateData:REPLen] }

// Fields returns all fields of r. PrivateData is a view into r.
func (r REP) Fields() REPFields {
	return REPFields{
		LocalCommID:         r.LocalCommID(),
		RemoteCommID:        r.RemoteCommID(),
		LocalQKey:           be32(r[repLocalQKey:]),
		LocalQPN:            r.LocalQPN(),
		LocalEECN:           get24(r[repLocalEECN:]),
		StartingPSN:         r.StartingPSN(),
		ResponderResources:  r[repRespRes],
		InitiatorDepth:      r[repInitDepth],
		TargetACKDelay:      r[repByte26] >> 3,
		FailoverAccepted:    r[repByte26] >> 1 & 3,
		EndToEndFlowControl: r[repByte26]&1 != 0,
		RNRRetryCount:       r[repByte27] >> 5,
		SRQ:                 r[repByte27]&0x10 != 0,
		LocalCAGUID:         be64(r[repLocalCAGUID:]),
		PrivateData:         r.PrivateData(),
	}
}

// Encode writes every byte of the REP from f; reserved fields and private
// data beyond f.PrivateData are zero.
func (r REP) Encode(f *REPFields) {
	binary.BigEndian.PutUint32(r[repLocalCommID:], f.LocalCommID)
	binary.BigEndian.PutUint32(r[repRemoteCommID:], f.RemoteCommID)
	binary.BigEndian.PutUint32(r[repLocalQKey:], f.LocalQKey)
	binary.BigEndian.PutUint32(r[repLocalQPN:], f.LocalQPN<<8)
	binary.BigEndian.PutUint32(r[repLocalEECN:], f.LocalEECN<<8)
	binary.BigEndian.PutUint32(r[repStartingPSN:], f.StartingPSN<<8)
	r[repRespRes] = f.ResponderResources
	r[repInitDepth] = f.InitiatorDepth
	r[repByte26] = f.TargetACKDelay<<3 | (f.FailoverAccepted&3)<<1 | b2u(f.EndToEndFlowControl)
	r[repByte27] = f.RNRRetryCount<<5 | b2u(f.SRQ)<<4
	binary.BigEndian.PutUint64(r[repLocalCAGUID:], f.LocalCAGUID)
	pd := r.PrivateData()
	clear(pd[copy(pd, f.PrivateData):])
}

// ParseREP returns the REP at the start of b and its length.
func ParseREP(b []byte) (REP, int, error) {
	if len(b) < REPLen {
		return nil, 0, truncated("CM REP", REPLen, len(b))
	}
	return REP(b[:REPLen]), REPLen, nil
}
