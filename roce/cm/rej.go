package cm

import (
	"encoding/binary"
	"fmt"
)

// REJ is the body of a CM REJ (reject, IBA 12.6.7, table 108):
//
//	 0 Local Communication ID    4 Remote Communication ID
//	 8 Message REJected (2), reserved (6) | Reject Info Length (7), reserved (1) |
//	   Reason (16)
//	12 Additional Reject Information (72 bytes)
//	84 Private Data (148 bytes)
type REJ []byte

// REJ layout.
const (
	REJLen            = DataLen
	REJARILen         = 72
	REJPrivateDataLen = 148

	rejMessage     = 8
	rejInfoLen     = 9
	rejReason      = 10
	rejARI         = 12
	rejPrivateData = 84
)

// RejectReason is a REJ's reason code (IBA table 109).
type RejectReason uint16

// Reject reasons.
const (
	RejectNoQP                      RejectReason = 1
	RejectNoEEC                     RejectReason = 2
	RejectNoResources               RejectReason = 3
	RejectTimeout                   RejectReason = 4
	RejectUnsupported               RejectReason = 5
	RejectInvalidCommID             RejectReason = 6
	RejectInvalidCommInstance       RejectReason = 7
	RejectInvalidServiceID          RejectReason = 8
	RejectInvalidTransportType      RejectReason = 9
	RejectStaleConn                 RejectReason = 10
	RejectRDCNotExist               RejectReason = 11
	RejectInvalidGID                RejectReason = 12
	RejectInvalidLID                RejectReason = 13
	RejectInvalidSL                 RejectReason = 14
	RejectInvalidTrafficClass       RejectReason = 15
	RejectInvalidHopLimit           RejectReason = 16
	RejectInvalidPacketRate         RejectReason = 17
	RejectInvalidAltGID             RejectReason = 18
	RejectInvalidAltLID             RejectReason = 19
	RejectInvalidAltSL              RejectReason = 20
	RejectInvalidAltTrafficClass    RejectReason = 21
	RejectInvalidAltHopLimit        RejectReason = 22
	RejectInvalidAltPacketRate      RejectReason = 23
	RejectPortCMRedirect            RejectReason = 24
	RejectPortRedirect              RejectReason = 25
	RejectInvalidMTU                RejectReason = 26
	RejectInsufficientRespResources RejectReason = 27
	RejectConsumerDefined           RejectReason = 28
	RejectInvalidRNRRetry           RejectReason = 29
	RejectDuplicateLocalCommID      RejectReason = 30
	RejectInvalidClassVersion       RejectReason = 31
	RejectInvalidFlowLabel          RejectReason = 32
	RejectInvalidAltFlowLabel       RejectReason = 33
)

var reasonNames = map[RejectReason]string{
	RejectNoQP: "no QP", RejectNoEEC: "no EEC", RejectNoResources: "no resources", RejectTimeout: "timeout",
	RejectUnsupported: "unsupported request", RejectInvalidCommID: "invalid communication ID",
	RejectInvalidCommInstance: "invalid communication instance", RejectInvalidServiceID: "invalid service ID",
	RejectInvalidTransportType: "invalid transport type", RejectStaleConn: "stale connection",
	RejectRDCNotExist: "RDC does not exist", RejectInvalidGID: "invalid GID", RejectInvalidLID: "invalid LID",
	RejectInvalidSL: "invalid SL", RejectInvalidTrafficClass: "invalid traffic class",
	RejectInvalidHopLimit: "invalid hop limit", RejectInvalidPacketRate: "invalid packet rate",
	RejectInvalidAltGID: "invalid alternate GID", RejectInvalidAltLID: "invalid alternate LID",
	RejectInvalidAltSL: "invalid alternate SL", RejectInvalidAltTrafficClass: "invalid alternate traffic class",
	RejectInvalidAltHopLimit: "invalid alternate hop limit", RejectInvalidAltPacketRate: "invalid alternate packet rate",
	RejectPortCMRedirect: "port and CM redirection", RejectPortRedirect: "port redirection",
	RejectInvalidMTU: "invalid MTU", RejectInsufficientRespResources: "insufficient responder resources",
	RejectConsumerDefined: "consumer reject", RejectInvalidRNRRetry: "invalid RNR retry count",
	RejectDuplicateLocalCommID: "duplicate local communication ID",
	RejectInvalidClassVersion:  "invalid class version", RejectInvalidFlowLabel: "invalid flow label",
	RejectInvalidAltFlowLabel: "invalid alternate flow label",
}

func (r RejectReason) String() string {
	if s, ok := reasonNames[r]; ok {
		return fmt.Sprintf("%s (%d)", s, uint16(r))
	}
	return fmt.Sprintf("reason %d", uint16(r))
}

// REJFields holds the fields of a REJ.
type REJFields struct {
	LocalCommID, RemoteCommID uint32
	MessageRejected           Message // 2 bits
	RejectInfoLen             uint8   // 7 bits: the bytes of ARI that count
	Reason                    RejectReason
	ARI                       []byte // up to REJARILen bytes
	PrivateData               []byte // up to REJPrivateDataLen bytes
}

// IsValid reports whether r is long enough to hold a REJ.
func (r REJ) IsValid() bool { return len(r) >= REJLen }

// Reason returns the reject reason.
func (r REJ) Reason() RejectReason { return RejectReason(be16(r[rejReason:])) }

// Fields returns all fields of r. ARI and PrivateData are views into r.
func (r REJ) Fields() REJFields {
	l, rm := commIDs(r)
	return REJFields{LocalCommID: l, RemoteCommID: rm, MessageRejected: Message(r[rejMessage] >> 6),
		RejectInfoLen: r[rejInfoLen] >> 1, Reason: r.Reason(),
		ARI: r[rejARI:rejPrivateData], PrivateData: r[rejPrivateData:REJLen]}
}

// Encode writes every byte of the REJ from f.
func (r REJ) Encode(f *REJFields) {
	putCommIDs(r, f.LocalCommID, f.RemoteCommID)
	r[rejMessage] = byte(f.MessageRejected&3) << 6
	r[rejInfoLen] = f.RejectInfoLen << 1
	binary.BigEndian.PutUint16(r[rejReason:], uint16(f.Reason))
	putPrivate(r[rejARI:rejPrivateData], f.ARI)
	putPrivate(r[rejPrivateData:REJLen], f.PrivateData)
}

// ParseREJ returns the REJ at the start of b and its length.
func ParseREJ(b []byte) (REJ, int, error) {
	if len(b) < REJLen {
		return nil, 0, truncated("CM REJ", REJLen, len(b))
	}
	return REJ(b[:REJLen]), REJLen, nil
}
