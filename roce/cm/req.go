package cm

import (
	"encoding/binary"

	"github.com/rbridge/rbridge/roce"
)

// REQ is the body of a CM REQ (request for communication, IBA 12.6.5,
// table 106): DataLen bytes after the MAD header. Byte offsets:
//
//	  0 Local Communication ID          4 reserved
//	  8 Service ID (8 bytes)
//	 16 Local CA GUID (8 bytes)        24 reserved
//	 28 Local Q_Key
//	 32 Local QPN (24) | Responder Resources (8)
//	 36 Local EECN (24) | Initiator Depth (8)
//	 40 Remote EECN (24) | Remote CM Response Timeout (5),
//	    Transport Service Type (2), End-to-End Flow Control (1)
//	 44 Starting PSN (24) | Local CM Response Timeout (5), Retry Count (3)
//	 48 Partition Key (16) | Path MTU (4), RDC Exists (1), RNR Retry Count (3) |
//	    Max CM Retries (4), SRQ (1), Extended Transport Type (3)
//	 52 primary path (44 bytes, see Path)
//	 96 alternate path (44 bytes); its last byte also holds SAP Supported
//	140 Private Data (92 bytes)
type REQ []byte

// REQ layout.
const (
	REQLen            = DataLen
	REQPrivateDataLen = 92

	reqLocalCommID  = 0
	reqServiceID    = 8
	reqLocalCAGUID  = 16
	reqLocalQKey    = 28
	reqLocalQPN     = 32
	reqRespRes      = 35
	reqLocalEECN    = 36
	reqInitDepth    = 39
	reqRemoteEECN   = 40
	reqByte43       = 43
	reqStartingPSN  = 44
	reqByte47       = 47
	reqPKey         = 48
	reqByte50       = 50
	reqByte51       = 51
	reqPrimaryPath  = 52
	reqAltPath      = 96
	reqPrivateData  = 140
	reqSAPSupported = 0x04 // in byte 139, after the alternate ACK timeout
)

// Transport service types of the REQ.
const (
	TransportRC = 0
	TransportUC = 1
	TransportRD = 2
)

// PathLen is the length of a path in a REQ.
const PathLen = 44

// Path is a REQ's primary or alternate path:
//
//	 0 Local Port LID (16) | Remote Port LID (16)
//	 4 Local Port GID (16 bytes)
//	20 Remote Port GID (16 bytes)
//	36 Flow Label (20), reserved (6), Packet Rate (6)
//	40 Traffic Class (8) | Hop Limit (8) | SL (4), Subnet Local (1),
//	   reserved (3) | Local ACK Timeout (5), reserved (3)
//
// "Local" is the sender of the REQ (the active side).
type Path []byte

// PathFields holds the fields of a Path.
type PathFields struct {
	LocalLID, RemoteLID uint16
	LocalGID, RemoteGID GID
	FlowLabel           uint32 // 20 bits
	PacketRate          uint8  // 6 bits
	TrafficClass        uint8
	HopLimit            uint8
	SL                  uint8 // 4 bits
	SubnetLocal         bool
	LocalACKTimeout     uint8 // 5 bits
}

// Fields returns all fields of p.
func (p Path) Fields() PathFields {
	var f PathFields
	f.LocalLID = be16(p[0:])
	f.RemoteLID = be16(p[2:])
	copy(f.LocalGID[:], p[4:20])
	copy(f.RemoteGID[:], p[20:36])
	f.FlowLabel = be32(p[36:]) >> 12
	f.PacketRate = p[39] & 0x3f
	f.TrafficClass = p[40]
	f.HopLimit = p[41]
	f.SL = p[42] >> 4
	f.SubnetLocal = p[42]&0x08 != 0
	f.LocalACKTimeout = p[43] >> 3
	return f
}

// Encode writes every field of the path from f; reserved bits are zero
// (byte 43's low bits too: the REQ's SAP Supported bit lives there).
func (p Path) Encode(f *PathFields) {
	binary.BigEndian.PutUint16(p[0:], f.LocalLID)
	binary.BigEndian.PutUint16(p[2:], f.RemoteLID)
	copy(p[4:20], f.LocalGID[:])
	copy(p[20:36], f.RemoteGID[:])
	binary.BigEndian.PutUint32(p[36:], f.FlowLabel<<12|uint32(f.PacketRate&0x3f))
	p[40] = f.TrafficClass
	p[41] = f.HopLimit
	p[42] = f.SL<<4 | b2u(f.SubnetLocal)<<3
	p[43] = f.LocalACKTimeout << 3
}

// REQFields holds the fields of a REQ.
type REQFields struct {
	LocalCommID             uint32
	ServiceID               uint64
	LocalCAGUID             uint64
	LocalQKey               uint32
	LocalQPN                uint32 // 24 bits
	ResponderResources      uint8
	LocalEECN               uint32 // 24 bits
	InitiatorDepth          uint8
	RemoteEECN              uint32 // 24 bits
	RemoteCMResponseTimeout uint8  // 5 bits: 4.096 us * 2^t
	TransportType           uint8  // 2 bits: TransportRC, ...
	EndToEndFlowControl     bool
	StartingPSN             uint32 // 24 bits
	LocalCMResponseTimeout  uint8  // 5 bits
	RetryCount              uint8  // 3 bits
	PKey                    uint16
	PathMTU                 roce.MTU // 4 bits
	RDCExists               bool
	RNRRetryCount           uint8 // 3 bits
	MaxCMRetries            uint8 // 4 bits
	SRQ                     bool
	ExtendedTransportType   uint8 // 3 bits
	Primary, Alternate      PathFields
	SAPSupported            bool
	PrivateData             []byte // up to REQPrivateDataLen bytes; Encode zero-fills the rest
}

// IsValid reports whether r is long enough to hold a REQ.
func (r REQ) IsValid() bool { return len(r) >= REQLen }

// LocalCommID returns the sender's communication ID.
func (r REQ) LocalCommID() uint32 { return be32(r[reqLocalCommID:]) }

// ServiceID returns the service ID.
func (r REQ) ServiceID() uint64 { return be64(r[reqServiceID:]) }

// LocalQPN returns the sender's QP number.
func (r REQ) LocalQPN() uint32 { return get24(r[reqLocalQPN:]) }

// StartingPSN returns the REQ's Starting PSN: the first PSN the sender
// (the active side) expects to receive, as Linux's CM uses it (cm.c sets
// its rq_psn from it; the passive side sends from it).
func (r REQ) StartingPSN() uint32 { return get24(r[reqStartingPSN:]) }

// PathMTU returns the path MTU code.
func (r REQ) PathMTU() roce.MTU { return roce.MTU(r[reqByte50] >> 4) }

// Primary returns the primary path.
func (r REQ) Primary() Path { return Path(r[reqPrimaryPath : reqPrimaryPath+PathLen]) }

// Alternate returns the alternate path.
func (r REQ) Alternate() Path { return Path(r[reqAltPath : reqAltPath+PathLen]) }

// PrivateData returns the private data region (REQPrivateDataLen bytes).
func (r REQ) PrivateData() []byte { return r[reqPrivateData:REQLen] }

// Fields returns all fields of r. PrivateData is a view into r.
func (r REQ) Fields() REQFields {
	return REQFields{
		LocalCommID:             r.LocalCommID(),
		ServiceID:               r.ServiceID(),
		LocalCAGUID:             be64(r[reqLocalCAGUID:]),
		LocalQKey:               be32(r[reqLocalQKey:]),
		LocalQPN:                r.LocalQPN(),
		ResponderResources:      r[reqRespRes],
		LocalEECN:               get24(r[reqLocalEECN:]),
		InitiatorDepth:          r[reqInitDepth],
		RemoteEECN:              get24(r[reqRemoteEECN:]),
		RemoteCMResponseTimeout: r[reqByte43] >> 3,
		TransportType:           r[reqByte43] >> 1 & 3,
		EndToEndFlowControl:     r[reqByte43]&1 != 0,
		StartingPSN:             r.StartingPSN(),
		LocalCMResponseTimeout:  r[reqByte47] >> 3,
		RetryCount:              r[reqByte47] & 7,
		PKey:                    be16(r[reqPKey:]),
		PathMTU:                 r.PathMTU(),
		RDCExists:               r[reqByte50]&0x08 != 0,
		RNRRetryCount:           r[reqByte50] & 7,
		MaxCMRetries:            r[reqByte51] >> 4,
		SRQ:                     r[reqByte51]&0x08 != 0,
		ExtendedTransportType:   r[reqByte51] & 7,
		Primary:                 r.Primary().Fields(),
		Alternate:               r.Alternate().Fields(),
		SAPSupported:            r[reqAltPath+43]&reqSAPSupported != 0,
		PrivateData:             r.PrivateData(),
	}
}

// Encode writes every byte of the REQ from f; reserved fields are zero and
// private data beyond f.PrivateData is zero. PrivateData longer than
// REQPrivateDataLen is cut (see Manager.Dial for the checked path).
func (r REQ) Encode(f *REQFields) {
	binary.BigEndian.PutUint32(r[reqLocalCommID:], f.LocalCommID)
	clear(r[4:8])
	binary.BigEndian.PutUint64(r[reqServiceID:], f.ServiceID)
	binary.BigEndian.PutUint64(r[reqLocalCAGUID:], f.LocalCAGUID)
	clear(r[24:28])
	binary.BigEndian.PutUint32(r[reqLocalQKey:], f.LocalQKey)
	put24(r[reqLocalQPN:], f.LocalQPN)
	r[reqRespRes] = f.ResponderResources
	put24(r[reqLocalEECN:], f.LocalEECN)
	r[reqInitDepth] = f.InitiatorDepth
	put24(r[reqRemoteEECN:], f.RemoteEECN)
	r[reqByte43] = f.RemoteCMResponseTimeout<<3 | (f.TransportType&3)<<1 | b2u(f.EndToEndFlowControl)
	put24(r[reqStartingPSN:], f.StartingPSN)
	r[reqByte47] = f.LocalCMResponseTimeout<<3 | f.RetryCount&7
	binary.BigEndian.PutUint16(r[reqPKey:], f.PKey)
	r[reqByte50] = byte(f.PathMTU)<<4 | b2u(f.RDCExists)<<3 | f.RNRRetryCount&7
	r[reqByte51] = f.MaxCMRetries<<4 | b2u(f.SRQ)<<3 | f.ExtendedTransportType&7
	r.Primary().Encode(&f.Primary)
	r.Alternate().Encode(&f.Alternate)
	if f.SAPSupported {
		r[reqAltPath+43] |= reqSAPSupported
	}
	pd := r.PrivateData()
	clear(pd[copy(pd, f.PrivateData):])
}

// ParseREQ returns the REQ at the start of b (the data of a CM MAD) and
// its length.
func ParseREQ(b []byte) (REQ, int, error) {
	if len(b) < REQLen {
		return nil, 0, truncated("CM REQ", REQLen, len(b))
	}
	return REQ(b[:REQLen]), REQLen, nil
}
