package nvme

import (
	"encoding/binary"
	"fmt"
)

// The NVMe RDMA binding's rdma_cm private data: the host's connect
// request, the target's accept and reject. Fields are little-endian
// (struct nvme_rdma_cm_req, _rep and _rej in the Linux kernel's
// include/linux/nvme-rdma.h; struct spdk_nvmf_rdma_request_private_data
// and friends in SPDK's include/spdk/nvmf_spec.h).
//
// Request (32 bytes), host to target:
//
//	+-------------------------------+-------------------------------+
//	|   RECFMT (0)                  |   QID                         |  0
//	+-------------------------------+-------------------------------+
//	|   HRQSIZE                     |   HSQSIZE (0's based)         |  4
//	+-------------------------------+-------------------------------+
//	|   CNTLID                      |   Reserved (22 bytes)         |  8
//	+-------------------------------+-------------------------------+
//
// The Linux host sends HRQSIZE 32 and HSQSIZE 31 for the admin queue,
// its queue size and sqsize (queue size - 1) for I/O queues
// (drivers/nvme/host/rdma.c, nvme_rdma_route_resolved), and leaves CNTLID
// zero: the kernel header has 24 reserved bytes after HSQSIZE, where SPDK
// (and the NVMe/RDMA transport specification since) put CNTLID. The
// Linux target takes HSQSIZE+1 as its receive queue size and HRQSIZE as
// its send queue size (nvmet_rdma_parse_cm_connect_req).
//
// Accept (32 bytes), target to host:
//
//	+-------------------------------+-------------------------------+
//	|   RECFMT (0)                  |   CRQSIZE                     |  0
//	+-------------------------------+-------------------------------+
//	|   Reserved (28 bytes)                                         |  4
//	+-------------------------------+-------------------------------+
//
// Reject (4 bytes), target to host:
//
//	+-------------------------------+-------------------------------+
//	|   RECFMT (0)                  |   STS (CMStatus)              |  0
//	+-------------------------------+-------------------------------+
//
// Over InfiniBand and RoCE the CM pads private data to its message's
// size (92 bytes in a REQ, 196 in a REP, 148 in a REJ), so a parser sees
// more bytes than the structure; the extra bytes are ignored.

// CMRequest is the private data of the host's rdma_cm connect request.
type CMRequest []byte

// CMReply is the private data of the target's rdma_cm accept.
type CMReply []byte

// CMReject is the private data of the target's rdma_cm reject.
type CMReject []byte

// Private data lengths.
const (
	CMRequestLen = 32
	CMReplyLen   = 32
	CMRejectLen  = 4
)

// CMRecFmt is the only record format defined (NVME_RDMA_CM_FMT_1_0).
const CMRecFmt = 0

// CMStatus is a reject's status (enum nvme_rdma_cm_status in
// nvme-rdma.h, enum spdk_nvmf_rdma_transport_error in SPDK).
type CMStatus uint16

// Reject statuses.
const (
	CMInvalidLen     CMStatus = 0x01
	CMInvalidRecFmt  CMStatus = 0x02
	CMInvalidQID     CMStatus = 0x03
	CMInvalidHSQSize CMStatus = 0x04
	CMInvalidHRQSize CMStatus = 0x05
	CMNoResources    CMStatus = 0x06
	CMInvalidIRD     CMStatus = 0x07
	CMInvalidORD     CMStatus = 0x08
	CMInvalidCNTLID  CMStatus = 0x09 // SPDK's, with the CNTLID field; not in the kernel header
)

// The kernel's messages (nvme_rdma_cm_msg), SPDK's for 0x09.
var cmStatusNames = [...]string{
	CMInvalidLen: "invalid length", CMInvalidRecFmt: "invalid record format", CMInvalidQID: "invalid queue ID",
	CMInvalidHSQSize: "invalid host SQ size", CMInvalidHRQSize: "invalid host RQ size",
	CMNoResources: "resource not found", CMInvalidIRD: "invalid IRD", CMInvalidORD: "invalid ORD",
	CMInvalidCNTLID: "invalid controller ID",
}

func (s CMStatus) String() string {
	if int(s) < len(cmStatusNames) && cmStatusNames[s] != "" {
		return cmStatusNames[s]
	}
	return fmt.Sprintf("unrecognized reason 0x%x", uint16(s))
}

// CMRequestFields holds the fields of a connect request.
type CMRequestFields struct {
	RecFmt  uint16
	QID     uint16
	HRQSize uint16
	HSQSize uint16 // 0's based
	CNTLID  uint16
}

// CMReplyFields holds the fields of an accept.
type CMReplyFields struct {
	RecFmt  uint16
	CRQSize uint16
}

// CMRejectFields holds the fields of a reject.
type CMRejectFields struct {
	RecFmt uint16
	Status CMStatus
}

const (
	cmRecFmt  = 0
	cmQID     = 2
	cmHRQSize = 4
	cmHSQSize = 6
	cmCNTLID  = 8
	cmCRQSize = 2
	cmSts     = 2
)

func le16(b []byte, off int) uint16 { return binary.LittleEndian.Uint16(b[off:]) }

// IsValid reports whether r is long enough to hold a request. It is the
// precondition of every getter.
func (r CMRequest) IsValid() bool { return len(r) >= CMRequestLen }

// RecFmt returns the record format.
func (r CMRequest) RecFmt() uint16 { return le16(r, cmRecFmt) }

// QID returns the queue the connection carries (0 for the admin queue).
func (r CMRequest) QID() uint16 { return le16(r, cmQID) }

// HRQSize returns the host receive queue size.
func (r CMRequest) HRQSize() uint16 { return le16(r, cmHRQSize) }

// HSQSize returns the host send queue size, 0's based.
func (r CMRequest) HSQSize() uint16 { return le16(r, cmHSQSize) }

// CNTLID returns the controller ID (0 from a Linux host).
func (r CMRequest) CNTLID() uint16 { return le16(r, cmCNTLID) }

// Fields returns all fields of r.
func (r CMRequest) Fields() CMRequestFields {
	return CMRequestFields{RecFmt: r.RecFmt(), QID: r.QID(), HRQSize: r.HRQSize(), HSQSize: r.HSQSize(), CNTLID: r.CNTLID()}
}

// Encode writes every byte of the request from f; reserved bytes are zero.
func (r CMRequest) Encode(f *CMRequestFields) {
	_ = r[CMRequestLen-1]
	clear(r[:CMRequestLen])
	binary.LittleEndian.PutUint16(r[cmRecFmt:], f.RecFmt)
	binary.LittleEndian.PutUint16(r[cmQID:], f.QID)
	binary.LittleEndian.PutUint16(r[cmHRQSize:], f.HRQSize)
	binary.LittleEndian.PutUint16(r[cmHSQSize:], f.HSQSize)
	binary.LittleEndian.PutUint16(r[cmCNTLID:], f.CNTLID)
}

// AppendCMRequest appends the request's 32 bytes to b.
func AppendCMRequest(b []byte, f *CMRequestFields) []byte {
	b = append(b, make([]byte, CMRequestLen)...)
	CMRequest(b[len(b)-CMRequestLen:]).Encode(f)
	return b
}

// ParseCMRequest returns the request at the start of b and its length. It
// checks the length and the record format, as the Linux target does
// before it reads a field.
func ParseCMRequest(b []byte) (CMRequest, int, error) {
	const op = "parse rdma_cm request"
	if len(b) < CMRequestLen {
		return nil, 0, truncated(op, CMRequestLen, len(b))
	}
	r := CMRequest(b[:CMRequestLen:CMRequestLen])
	if err := checkRecFmt(op, r.RecFmt()); err != nil {
		return nil, 0, err
	}
	return r, CMRequestLen, nil
}

// IsValid reports whether r is long enough to hold an accept.
func (r CMReply) IsValid() bool { return len(r) >= CMReplyLen }

// RecFmt returns the record format.
func (r CMReply) RecFmt() uint16 { return le16(r, cmRecFmt) }

// CRQSize returns the controller receive queue size.
func (r CMReply) CRQSize() uint16 { return le16(r, cmCRQSize) }

// Fields returns all fields of r.
func (r CMReply) Fields() CMReplyFields {
	return CMReplyFields{RecFmt: r.RecFmt(), CRQSize: r.CRQSize()}
}

// Encode writes every byte of the accept from f; reserved bytes are zero.
func (r CMReply) Encode(f *CMReplyFields) {
	_ = r[CMReplyLen-1]
	clear(r[:CMReplyLen])
	binary.LittleEndian.PutUint16(r[cmRecFmt:], f.RecFmt)
	binary.LittleEndian.PutUint16(r[cmCRQSize:], f.CRQSize)
}

// AppendCMReply appends the accept's 32 bytes to b.
func AppendCMReply(b []byte, f *CMReplyFields) []byte {
	b = append(b, make([]byte, CMReplyLen)...)
	CMReply(b[len(b)-CMReplyLen:]).Encode(f)
	return b
}

// ParseCMReply returns the accept at the start of b and its length,
// checking the length and the record format.
func ParseCMReply(b []byte) (CMReply, int, error) {
	const op = "parse rdma_cm reply"
	if len(b) < CMReplyLen {
		return nil, 0, truncated(op, CMReplyLen, len(b))
	}
	r := CMReply(b[:CMReplyLen:CMReplyLen])
	if err := checkRecFmt(op, r.RecFmt()); err != nil {
		return nil, 0, err
	}
	return r, CMReplyLen, nil
}

// IsValid reports whether r is long enough to hold a reject.
func (r CMReject) IsValid() bool { return len(r) >= CMRejectLen }

// RecFmt returns the record format.
func (r CMReject) RecFmt() uint16 { return le16(r, cmRecFmt) }

// Status returns the reject's status.
func (r CMReject) Status() CMStatus { return CMStatus(le16(r, cmSts)) }

// Fields returns all fields of r.
func (r CMReject) Fields() CMRejectFields {
	return CMRejectFields{RecFmt: r.RecFmt(), Status: r.Status()}
}

// Encode writes the reject's 4 bytes from f.
func (r CMReject) Encode(f *CMRejectFields) {
	_ = r[CMRejectLen-1]
	binary.LittleEndian.PutUint16(r[cmRecFmt:], f.RecFmt)
	binary.LittleEndian.PutUint16(r[cmSts:], uint16(f.Status))
}

// AppendCMReject appends the reject's 4 bytes to b.
func AppendCMReject(b []byte, f *CMRejectFields) []byte {
	b = append(b, make([]byte, CMRejectLen)...)
	CMReject(b[len(b)-CMRejectLen:]).Encode(f)
	return b
}

// ParseCMReject returns the reject at the start of b and its length,
// checking the length and the record format. (The Linux host reads the
// status from as few as 2 bytes, nvme_rdma_conn_rejected; 4 are needed
// here.)
func ParseCMReject(b []byte) (CMReject, int, error) {
	const op = "parse rdma_cm reject"
	if len(b) < CMRejectLen {
		return nil, 0, truncated(op, CMRejectLen, len(b))
	}
	r := CMReject(b[:CMRejectLen:CMRejectLen])
	if err := checkRecFmt(op, r.RecFmt()); err != nil {
		return nil, 0, err
	}
	return r, CMRejectLen, nil
}

func checkRecFmt(op string, v uint16) error {
	if v != CMRecFmt {
		return &Error{Op: op, Field: "recfmt", Offset: cmRecFmt, Err: ErrRecFmt, Detail: fmt.Sprintf("%d", v)}
	}
	return nil
}
