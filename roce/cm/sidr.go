package cm

import (
	"encoding/binary"
	"fmt"
)

// SIDRREQ is the body of a CM SIDR_REQ (service ID resolution request,
// IBA 12.11.1, table 119; Linux include/rdma/ibta_vol1_c12.h): a UD client
// asks the CM at an address which QP and Q_Key serve a service ID.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                          Request ID                           |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         Partition Key         |           reserved            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                          Service ID                           |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Private Data (216 bytes) ...                 |
//
// rdma_cm's private data starts with the RDMA IP CM header (IPCMHeader),
// as a REQ's does.
type SIDRREQ []byte

// SIDR_REQ layout.
const (
	SIDRREQLen            = DataLen
	SIDRREQPrivateDataLen = 216

	// SIDRREQIPCMPrivateDataLen is what is left of a SIDR_REQ's private
	// data for the application after the IP CM header.
	SIDRREQIPCMPrivateDataLen = SIDRREQPrivateDataLen - IPCMHeaderLen

	sidrReqRequestID   = 0
	sidrReqPKey        = 4
	sidrReqServiceID   = 8
	sidrReqPrivateData = 16
)

// SIDRREQFields holds the fields of a SIDR_REQ.
type SIDRREQFields struct {
	RequestID   uint32
	PKey        uint16
	ServiceID   uint64
	PrivateData []byte // up to SIDRREQPrivateDataLen bytes
}

// IsValid reports whether r is long enough to hold a SIDR_REQ.
func (r SIDRREQ) IsValid() bool { return len(r) >= SIDRREQLen }

// RequestID returns the requester's ID for this request.
func (r SIDRREQ) RequestID() uint32 { return be32(r[sidrReqRequestID:]) }

// PKey returns the partition key the requester uses.
func (r SIDRREQ) PKey() uint16 { return be16(r[sidrReqPKey:]) }

// ServiceID returns the service ID to resolve.
func (r SIDRREQ) ServiceID() uint64 { return be64(r[sidrReqServiceID:]) }

// PrivateData returns the private data region (SIDRREQPrivateDataLen
// bytes).
func (r SIDRREQ) PrivateData() []byte { return r[sidrReqPrivateData:SIDRREQLen] }

// Fields returns all fields of r. PrivateData is a view into r.
func (r SIDRREQ) Fields() SIDRREQFields {
	return SIDRREQFields{RequestID: r.RequestID(), PKey: r.PKey(), ServiceID: r.ServiceID(), PrivateData: r.PrivateData()}
}

// Encode writes every byte of the SIDR_REQ from f; the reserved field and
// private data beyond f.PrivateData are zero.
func (r SIDRREQ) Encode(f *SIDRREQFields) {
	binary.BigEndian.PutUint32(r[sidrReqRequestID:], f.RequestID)
	binary.BigEndian.PutUint16(r[sidrReqPKey:], f.PKey)
	r[6], r[7] = 0, 0
	binary.BigEndian.PutUint64(r[sidrReqServiceID:], f.ServiceID)
	putPrivate(r.PrivateData(), f.PrivateData)
}

// ParseSIDRREQ returns the SIDR_REQ at the start of b and its length.
func ParseSIDRREQ(b []byte) (SIDRREQ, int, error) {
	if len(b) < SIDRREQLen {
		return nil, 0, truncated("CM SIDR_REQ", SIDRREQLen, len(b))
	}
	return SIDRREQ(b[:SIDRREQLen]), SIDRREQLen, nil
}

// SIDRREP is the body of a CM SIDR_REP (service ID resolution response,
// IBA 12.11.2, table 120; the Vendor ID split as Linux's
// ibta_vol1_c12.h has it for ECE):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                          Request ID                           |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|    Status     | Add. Info Len |    Vendor ID (bits 23-8)      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                      QPN                      | Vendor (7-0)  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                          Service ID                           |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                             Q_Key                             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|           Additional Information (72 bytes) ...               |
//	|                  Private Data (136 bytes) ...                 |
//
// The Request ID echoes the SIDR_REQ's. rdma_cm puts no header in a
// SIDR_REP's private data.
type SIDRREP []byte

// SIDR_REP layout.
const (
	SIDRREPLen            = DataLen
	SIDRREPInfoLen        = 72
	SIDRREPPrivateDataLen = 136

	sidrRepRequestID   = 0
	sidrRepStatus      = 4
	sidrRepInfoLen     = 5
	sidrRepVendorH     = 6
	sidrRepQPN         = 8
	sidrRepVendorL     = 11
	sidrRepServiceID   = 12
	sidrRepQKey        = 20
	sidrRepInfo        = 24
	sidrRepPrivateData = 96
)

// SIDRStatus is a SIDR_REP's status (IBA table 121; Linux enum
// ib_cm_sidr_status).
type SIDRStatus uint8

// SIDR statuses.
const (
	SIDRSuccess            SIDRStatus = 0 // the QPN and Q_Key are valid
	SIDRUnsupported        SIDRStatus = 1 // the service ID is not supported (nothing listens)
	SIDRReject             SIDRStatus = 2 // the service provider rejected the request
	SIDRNoQP               SIDRStatus = 3 // no QP available
	SIDRRedirect           SIDRStatus = 4 // use the ClassPortInfo in the additional information
	SIDRUnsupportedVersion SIDRStatus = 5 // the service does not support the SIDR_REQ's version
)

var sidrStatusNames = [...]string{"success", "service ID not supported", "rejected by the service",
	"no QP available", "redirected", "version not supported"}

func (s SIDRStatus) String() string {
	if int(s) < len(sidrStatusNames) {
		return fmt.Sprintf("%s (%d)", sidrStatusNames[s], uint8(s))
	}
	return fmt.Sprintf("SIDR status %d", uint8(s))
}

// SIDRREPFields holds the fields of a SIDR_REP.
type SIDRREPFields struct {
	RequestID uint32
	Status    SIDRStatus
	InfoLen   uint8  // the bytes of Info that count
	VendorID  uint32 // 24 bits
	QPN       uint32 // 24 bits
	ServiceID uint64
	QKey      uint32
	Info      []byte // up to SIDRREPInfoLen bytes
	// PrivateData is up to SIDRREPPrivateDataLen bytes.
	PrivateData []byte
}

// IsValid reports whether r is long enough to hold a SIDR_REP.
func (r SIDRREP) IsValid() bool { return len(r) >= SIDRREPLen }

// RequestID returns the ID of the SIDR_REQ answered.
func (r SIDRREP) RequestID() uint32 { return be32(r[sidrRepRequestID:]) }

// Status returns the outcome.
func (r SIDRREP) Status() SIDRStatus { return SIDRStatus(r[sidrRepStatus]) }

// QPN returns the QP that serves the service (valid on SIDRSuccess).
func (r SIDRREP) QPN() uint32 { return get24(r[sidrRepQPN:]) }

// QKey returns the Q_Key datagrams to the QP must carry (valid on
// SIDRSuccess).
func (r SIDRREP) QKey() uint32 { return be32(r[sidrRepQKey:]) }

// PrivateData returns the private data region (SIDRREPPrivateDataLen
// bytes).
func (r SIDRREP) PrivateData() []byte { return r[sidrRepPrivateData:SIDRREPLen] }

// Fields returns all fields of r. Info and PrivateData are views into r.
func (r SIDRREP) Fields() SIDRREPFields {
	return SIDRREPFields{
		RequestID: r.RequestID(), Status: r.Status(), InfoLen: r[sidrRepInfoLen],
		VendorID: uint32(be16(r[sidrRepVendorH:]))<<8 | uint32(r[sidrRepVendorL]),
		QPN:      r.QPN(), ServiceID: be64(r[sidrRepServiceID:]), QKey: r.QKey(),
		Info: r[sidrRepInfo:sidrRepPrivateData], PrivateData: r.PrivateData(),
	}
}

// Encode writes every byte of the SIDR_REP from f; Info and private data
// beyond what f holds are zero.
func (r SIDRREP) Encode(f *SIDRREPFields) {
	binary.BigEndian.PutUint32(r[sidrRepRequestID:], f.RequestID)
	r[sidrRepStatus] = byte(f.Status)
	r[sidrRepInfoLen] = f.InfoLen
	binary.BigEndian.PutUint16(r[sidrRepVendorH:], uint16(f.VendorID>>8))
	put24(r[sidrRepQPN:], f.QPN)
	r[sidrRepVendorL] = byte(f.VendorID)
	binary.BigEndian.PutUint64(r[sidrRepServiceID:], f.ServiceID)
	binary.BigEndian.PutUint32(r[sidrRepQKey:], f.QKey)
	putPrivate(r[sidrRepInfo:sidrRepPrivateData], f.Info)
	putPrivate(r.PrivateData(), f.PrivateData)
}

// ParseSIDRREP returns the SIDR_REP at the start of b and its length.
func ParseSIDRREP(b []byte) (SIDRREP, int, error) {
	if len(b) < SIDRREPLen {
		return nil, 0, truncated("CM SIDR_REP", SIDRREPLen, len(b))
	}
	return SIDRREP(b[:SIDRREPLen]), SIDRREPLen, nil
}
