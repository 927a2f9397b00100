package nvme

import (
	"encoding/binary"
	"fmt"
)

// Completion is a 16-byte completion queue entry, the whole of an NVMe
// over RDMA response capsule (struct nvme_completion in the Linux kernel's
// include/linux/nvme.h, struct spdk_nvme_cpl in SPDK's nvme_spec.h).
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                DW0: command specific result                   |  0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                DW1: command specific result                   |  4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|           SQ Head             |           SQ ID               |  8
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          Command ID           |        Status field           | 12
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Fields are little-endian. The status field (as a 16-bit value) holds
//
//	 15  14  13 12  11  9 8            1  0
//	+---+---+-----+------+--------------+---+
//	|DNR| M | CRD | SCT  |      SC      | P |
//	+---+---+-----+------+--------------+---+
//
// the phase tag P in bit 0 and the status above it: the kernel reads
// le16_to_cpu(cqe->status) >> 1 and its target writes status << 1
// (drivers/nvme/target/rdma.c), so NVME_SC_* values, and Status here,
// are the field shifted right by one.
type Completion []byte

// CompletionLen is the length of a completion queue entry.
const CompletionLen = 16

const (
	cqeDW0    = 0
	cqeDW1    = 4
	cqeSQHead = 8
	cqeSQID   = 10
	cqeCID    = 12
	cqeStatus = 14
)

// CompletionFields holds the fields of a completion queue entry.
type CompletionFields struct {
	DW0       uint32
	DW1       uint32
	SQHead    uint16
	SQID      uint16
	CommandID uint16
	Status    Status
	Phase     bool
}

// IsValid reports whether c is long enough to hold a completion. It is the
// precondition of every getter and setter.
func (c Completion) IsValid() bool { return len(c) >= CompletionLen }

// DW0 returns the first command-specific dword (a Connect's result holds
// the controller ID in its low 16 bits).
func (c Completion) DW0() uint32 { return binary.LittleEndian.Uint32(c[cqeDW0:]) }

// DW1 returns the second command-specific dword.
func (c Completion) DW1() uint32 { return binary.LittleEndian.Uint32(c[cqeDW1:]) }

// Result returns DW0 and DW1 as the kernel's 64-bit result (union
// nvme_result).
func (c Completion) Result() uint64 { return binary.LittleEndian.Uint64(c[cqeDW0:]) }

// SQHead returns the submission queue head pointer.
func (c Completion) SQHead() uint16 { return binary.LittleEndian.Uint16(c[cqeSQHead:]) }

// SQID returns the submission queue identifier.
func (c Completion) SQID() uint16 { return binary.LittleEndian.Uint16(c[cqeSQID:]) }

// CommandID returns the identifier of the command completed.
func (c Completion) CommandID() uint16 { return binary.LittleEndian.Uint16(c[cqeCID:]) }

// StatusField returns the raw status field, phase tag included.
func (c Completion) StatusField() uint16 { return binary.LittleEndian.Uint16(c[cqeStatus:]) }

// Status returns the status, without the phase tag.
func (c Completion) Status() Status { return Status(c.StatusField() >> 1) }

// Phase returns the phase tag.
func (c Completion) Phase() bool { return c[cqeStatus]&1 != 0 }

// SetDW0 sets the first command-specific dword.
func (c Completion) SetDW0(v uint32) { binary.LittleEndian.PutUint32(c[cqeDW0:], v) }

// SetDW1 sets the second command-specific dword.
func (c Completion) SetDW1(v uint32) { binary.LittleEndian.PutUint32(c[cqeDW1:], v) }

// SetSQHead sets the submission queue head pointer.
func (c Completion) SetSQHead(v uint16) { binary.LittleEndian.PutUint16(c[cqeSQHead:], v) }

// SetSQID sets the submission queue identifier.
func (c Completion) SetSQID(v uint16) { binary.LittleEndian.PutUint16(c[cqeSQID:], v) }

// SetCommandID sets the command identifier.
func (c Completion) SetCommandID(v uint16) { binary.LittleEndian.PutUint16(c[cqeCID:], v) }

// SetStatus sets the status, keeping the phase tag. Bit 15 of s is
// dropped: the field has no room for it.
func (c Completion) SetStatus(s Status) {
	binary.LittleEndian.PutUint16(c[cqeStatus:], uint16(s)<<1|c.StatusField()&1)
}

// SetPhase sets or clears the phase tag.
func (c Completion) SetPhase(p bool) {
	if p {
		c[cqeStatus] |= 1
	} else {
		c[cqeStatus] &^= 1
	}
}

// Fields returns all fields of c.
func (c Completion) Fields() CompletionFields {
	return CompletionFields{
		DW0:       c.DW0(),
		DW1:       c.DW1(),
		SQHead:    c.SQHead(),
		SQID:      c.SQID(),
		CommandID: c.CommandID(),
		Status:    c.Status(),
		Phase:     c.Phase(),
	}
}

// Encode writes every byte of the entry from f.
func (c Completion) Encode(f *CompletionFields) {
	_ = c[CompletionLen-1]
	c.SetDW0(f.DW0)
	c.SetDW1(f.DW1)
	c.SetSQHead(f.SQHead)
	c.SetSQID(f.SQID)
	c.SetCommandID(f.CommandID)
	v := uint16(f.Status) << 1
	if f.Phase {
		v |= 1
	}
	binary.LittleEndian.PutUint16(c[cqeStatus:], v)
}

// ParseCompletion returns the completion queue entry at the start of b and
// its length.
func ParseCompletion(b []byte) (Completion, int, error) {
	if len(b) < CompletionLen {
		return nil, 0, truncated("parse completion", CompletionLen, len(b))
	}
	return Completion(b[:CompletionLen:CompletionLen]), CompletionLen, nil
}

// Status is a completion's status without the phase tag: the status code
// (SC) in bits 7:0, the status code type (SCT) in bits 10:8, the command
// retry delay in bits 12:11, More in bit 13 and Do Not Retry in bit 14.
// The values are the Linux kernel's NVME_SC_* and NVME_STATUS_* (nvme.h),
// which include the type: a fabrics Connect's Invalid Parameters is 0x182.
type Status uint16

// Generic command status (SCT 0).
const (
	StatusSuccess          Status = 0x00
	StatusInvalidOpcode    Status = 0x01
	StatusInvalidField     Status = 0x02
	StatusDataXferError    Status = 0x04 // Data Transfer Error
	StatusInternal         Status = 0x06 // Internal Error
	StatusAbortRequested   Status = 0x07
	StatusCommandSeqError  Status = 0x0c
	StatusSGLInvalidSeg    Status = 0x0d // Invalid SGL Segment Descriptor (kernel NVME_SC_SGL_INVALID_LAST)
	StatusSGLInvalidCount  Status = 0x0e // Invalid Number of SGL Descriptors
	StatusSGLInvalidData   Status = 0x0f // Data SGL Length Invalid (kernel NVME_SC_SGL_INVALID_DATA)
	StatusSGLInvalidMeta   Status = 0x10 // Metadata SGL Length Invalid
	StatusSGLInvalidType   Status = 0x11 // SGL Descriptor Type Invalid
	StatusSGLInvalidOffset Status = 0x16 // Invalid SGL Offset
	StatusSGLInvalidGran   Status = 0x1e // SGL Data Block Granularity Invalid
	StatusTransientXport   Status = 0x22 // Transient Transport Error
	// The NVM command set's generic codes (0x80 and up).
	StatusLBAOutOfRange Status = 0x80 // LBA Out of Range
)

// Fabrics command status (SCT 1, the command-specific type).
const (
	StatusConnectFormat       Status = 0x180 // Incompatible Format
	StatusConnectCtrlBusy     Status = 0x181 // Controller Busy
	StatusConnectInvalidParam Status = 0x182 // Connect Invalid Parameters
	StatusConnectRestartDisc  Status = 0x183 // Connect Restart Discovery
	StatusConnectInvalidHost  Status = 0x184 // Connect Invalid Host
)

// Path related status (SCT 3).
const (
	StatusInternalPathError Status = 0x300
	StatusCtrlPathError     Status = 0x360 // Controller Pathing Error
	StatusHostPathError     Status = 0x370 // Host Pathing Error
)

// Status bits above the code and type (NVME_STATUS_* in nvme.h).
const (
	StatusCRDMask Status = 0x1800 // Command Retry Delay
	StatusMore    Status = 0x2000
	StatusDNR     Status = 0x4000 // Do Not Retry
)

// Status code types.
const (
	SCTGeneric         = 0
	SCTCommandSpecific = 1
	SCTMediaError      = 2
	SCTPath            = 3
	SCTVendorSpecific  = 7
)

// Code returns the status code (SC).
func (s Status) Code() uint8 { return uint8(s) }

// Type returns the status code type (SCT).
func (s Status) Type() uint8 { return uint8(s>>8) & 7 }

// CRD returns the command retry delay selector.
func (s Status) CRD() uint8 { return uint8(s>>11) & 3 }

// More reports whether more status information is in the error log.
func (s Status) More() bool { return s&StatusMore != 0 }

// DNR reports whether the command must not be retried.
func (s Status) DNR() bool { return s&StatusDNR != 0 }

// Success reports whether the type and code say the command succeeded.
func (s Status) Success() bool { return s&0x7ff == 0 }

// WithDNR returns s with Do Not Retry set.
func (s Status) WithDNR() Status { return s | StatusDNR }

var statusNames = map[Status]string{
	StatusSuccess: "success", StatusInvalidOpcode: "invalid opcode", StatusInvalidField: "invalid field",
	StatusDataXferError: "data transfer error", StatusInternal: "internal error",
	StatusAbortRequested: "abort requested", StatusCommandSeqError: "command sequence error",
	StatusSGLInvalidSeg: "invalid SGL segment descriptor", StatusSGLInvalidCount: "invalid number of SGL descriptors",
	StatusSGLInvalidData: "data SGL length invalid", StatusSGLInvalidMeta: "metadata SGL length invalid",
	StatusSGLInvalidType: "SGL descriptor type invalid", StatusSGLInvalidOffset: "invalid SGL offset",
	StatusSGLInvalidGran: "SGL data block granularity invalid", StatusTransientXport: "transient transport error",
	StatusLBAOutOfRange:     "LBA out of range",
	StatusInternalPathError: "internal path error", StatusCtrlPathError: "controller pathing error",
	StatusHostPathError: "host pathing error",
}

// connectNames names the command-specific codes a Connect returns; other
// commands give the same codes other meanings (0x180 is an NVM command's
// Conflicting Attributes).
var connectNames = map[Status]string{
	StatusConnectFormat: "incompatible format", StatusConnectCtrlBusy: "controller busy",
	StatusConnectInvalidParam: "invalid parameters", StatusConnectRestartDisc: "restart discovery",
	StatusConnectInvalidHost: "invalid host",
}

// String names the status for logs: "invalid field (0x002) dnr",
// "command specific (0x182, connect: invalid parameters)".
func (s Status) String() string {
	code := s & 0x7ff
	var str string
	if name, ok := statusNames[code]; ok {
		str = fmt.Sprintf("%s (0x%03x)", name, uint16(code))
	} else if name, ok := connectNames[code]; ok {
		str = fmt.Sprintf("command specific (0x%03x, connect: %s)", uint16(code), name)
	} else {
		str = fmt.Sprintf("sct %d sc 0x%02x", s.Type(), s.Code())
	}
	if s.More() {
		str += " more"
	}
	if s.DNR() {
		str += " dnr"
	}
	return str
}
