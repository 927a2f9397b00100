package iser

import (
	"encoding/binary"
	"fmt"
)

// BHS is the iSCSI Basic Header Segment, the 48 bytes every iSCSI PDU
// starts with (RFC 7143, 11.2.1; struct iscsi_hdr and the per-opcode
// structs in the Linux kernel's include/scsi/iscsi_proto.h). In an iSER
// message it follows the iSER header. Fields are big-endian.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|.|I| Opcode    |F|  Opcode-specific fields                     |  0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|TotalAHSLength | DataSegmentLength                             |  4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	| LUN or Opcode-specific fields                                 |  8
//	+                                                               +
//	|                                                               | 12
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	| Initiator Task Tag                                            | 16
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	/ Opcode-specific fields                                        / 20
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// A SCSI Command (opcode 0x01) has flags F R W and the task attribute in
// byte 1, the Expected Data Transfer Length at 20, CmdSN at 24, ExpStatSN
// at 28 and the CDB at 32-47; a bidirectional one carries the read part's
// expected length in a Bidirectional Read Expected Data Transfer Length
// AHS. A SCSI Response (0x21) has flags o u O U in byte 1 (bidirectional
// read overflow and underflow, overflow, underflow), the iSCSI response
// in byte 2, the SCSI status in byte 3, StatSN at 24, ExpCmdSN at 28,
// MaxCmdSN at 32, ExpDataSN at 36, the bidirectional read residual count
// at 40 and the residual count at 44.
type BHS []byte

// BHSLen is the length of the Basic Header Segment; HeadersLen the
// iSER header and the BHS, the least an iSCSI control-type message holds
// (ISER_HEADERS_LEN in the kernel).
const (
	BHSLen     = 48
	HeadersLen = HeaderLen + BHSLen
)

const (
	bhsOpcode    = 0
	bhsFlags     = 1
	bhsByte2     = 2
	bhsByte3     = 3
	bhsAHSLen    = 4
	bhsDataLen   = 5
	bhsLUN       = 8
	bhsITT       = 16
	bhsWord20    = 20 // EDTL, TTT, Referenced Task Tag
	bhsWord24    = 24 // CmdSN, StatSN
	bhsWord28    = 28 // ExpStatSN, ExpCmdSN
	bhsWord32    = 32 // CDB, MaxCmdSN
	bhsWord36    = 36 // ExpDataSN; Login Response: status class and detail
	bhsWord40    = 40 // bidirectional read residual count
	bhsWord44    = 44 // residual count
	bhsISID      = 8  // Login: ISID (6 bytes), TSIH (2)
	bhsTSIH      = 14
	opcodeMask   = 0x3f
	flagImmed    = 0x40
	flagFinal    = 0x80
	flagRead     = 0x40
	flagWrite    = 0x20
	flagContinue = 0x40 // Login and Text
)

// ISCSIOpcode is an iSCSI PDU's opcode (the low six bits of byte 0).
type ISCSIOpcode uint8

// iSCSI opcodes (RFC 7143, 11.2.1.2; ISCSI_OP_* in iscsi_proto.h).
const (
	OpNOPOut       ISCSIOpcode = 0x00
	OpSCSICommand  ISCSIOpcode = 0x01
	OpTaskMgmt     ISCSIOpcode = 0x02
	OpLogin        ISCSIOpcode = 0x03
	OpText         ISCSIOpcode = 0x04
	OpDataOut      ISCSIOpcode = 0x05
	OpLogout       ISCSIOpcode = 0x06
	OpSNACK        ISCSIOpcode = 0x10
	OpNOPIn        ISCSIOpcode = 0x20
	OpSCSIResponse ISCSIOpcode = 0x21
	OpTaskMgmtResp ISCSIOpcode = 0x22
	OpLoginResp    ISCSIOpcode = 0x23
	OpTextResp     ISCSIOpcode = 0x24
	OpDataIn       ISCSIOpcode = 0x25
	OpLogoutResp   ISCSIOpcode = 0x26
	OpR2T          ISCSIOpcode = 0x31
	OpAsync        ISCSIOpcode = 0x32
	OpReject       ISCSIOpcode = 0x3f
)

var opcodeNames = map[ISCSIOpcode]string{
	OpNOPOut: "NOP-Out", OpSCSICommand: "SCSI Command", OpTaskMgmt: "Task Management Function Request", OpLogin: "Login Request",
	OpText: "Text Request", OpDataOut: "SCSI Data-Out", OpLogout: "Logout Request", OpSNACK: "SNACK Request",
	OpNOPIn: "NOP-In", OpSCSIResponse: "SCSI Response", OpTaskMgmtResp: "Task Management Function Response",
	OpLoginResp: "Login Response", OpTextResp: "Text Response", OpDataIn: "SCSI Data-In", OpLogoutResp: "Logout Response",
	OpR2T: "Ready To Transfer", OpAsync: "Asynchronous Message", OpReject: "Reject",
}

func (o ISCSIOpcode) String() string {
	if s, ok := opcodeNames[o]; ok {
		return s
	}
	return fmt.Sprintf("iSCSI opcode %#02x", uint8(o))
}

// FromInitiator reports whether o is an initiator's opcode (RFC 7143
// 11.2.1.2: 0x00-0x1f; vendor-specific 0x1c-0x1e included).
func (o ISCSIOpcode) FromInitiator() bool { return o < 0x20 }

// Known reports whether o is one RFC 7143 defines (vendor-specific codes
// are not).
func (o ISCSIOpcode) Known() bool { _, ok := opcodeNames[o]; return ok }

// SCSI Response flags (byte 1).
const (
	RespBidiOverflow  = 0x10
	RespBidiUnderflow = 0x08
	RespOverflow      = 0x04
	RespUnderflow     = 0x02
)

// ResponseCompleted is the iSCSI response "Command Completed at Target":
// the SCSI status and the residual counts are valid (RFC 7143, 11.4.3).
const ResponseCompleted = 0x00

// SCSI statuses the gateway names.
const (
	StatusGood           = 0x00
	StatusCheckCondition = 0x02
)

// Task management functions (RFC 7143, 11.5.1).
const (
	TMFAbortTask    = 1
	TMFAbortTaskSet = 2
	TMFClearACA     = 3
	TMFClearTaskSet = 4
	TMFLUNReset     = 5
	TMFTargetWarm   = 6
	TMFTargetCold   = 7
	TMFReassign     = 8
)

// Task management responses: the function completed, or the task does
// not exist (it had completed): either way the task is over.
const (
	TMFRespComplete   = 0
	TMFRespNoSuchTask = 1
)

// ReservedTag is the tag that names no task (0xffffffff).
const ReservedTag = 0xffffffff

// IsValid reports whether b is long enough to hold a BHS.
func (b BHS) IsValid() bool { return len(b) >= BHSLen }

func (b BHS) Opcode() ISCSIOpcode { return ISCSIOpcode(b[bhsOpcode] & opcodeMask) }
func (b BHS) Immediate() bool     { return b[bhsOpcode]&flagImmed != 0 }
func (b BHS) Flags() uint8        { return b[bhsFlags] }
func (b BHS) Final() bool         { return b[bhsFlags]&flagFinal != 0 }

// TotalAHSLength is the AHS's length in bytes (the field counts 4-byte
// words).
func (b BHS) TotalAHSLength() int { return int(b[bhsAHSLen]) * 4 }

// DataSegmentLength is the data segment's length in bytes, without
// padding.
func (b BHS) DataSegmentLength() int {
	return int(b[bhsDataLen])<<16 | int(b[bhsDataLen+1])<<8 | int(b[bhsDataLen+2])
}

func (b BHS) LUN() uint64 { return binary.BigEndian.Uint64(b[bhsLUN:]) }
func (b BHS) ITT() uint32 { return binary.BigEndian.Uint32(b[bhsITT:]) }

// SCSI Command fields.
func (b BHS) Read() bool        { return b[bhsFlags]&flagRead != 0 }
func (b BHS) Write() bool       { return b[bhsFlags]&flagWrite != 0 }
func (b BHS) EDTL() uint32      { return binary.BigEndian.Uint32(b[bhsWord20:]) }
func (b BHS) CmdSN() uint32     { return binary.BigEndian.Uint32(b[bhsWord24:]) }
func (b BHS) ExpStatSN() uint32 { return binary.BigEndian.Uint32(b[bhsWord28:]) }
func (b BHS) CDB() []byte       { return b[bhsWord32:BHSLen:BHSLen] }

// SCSI Response fields.
func (b BHS) Response() uint8      { return b[bhsByte2] }
func (b BHS) Status() uint8        { return b[bhsByte3] }
func (b BHS) StatSN() uint32       { return binary.BigEndian.Uint32(b[bhsWord24:]) }
func (b BHS) ExpCmdSN() uint32     { return binary.BigEndian.Uint32(b[bhsWord28:]) }
func (b BHS) MaxCmdSN() uint32     { return binary.BigEndian.Uint32(b[bhsWord32:]) }
func (b BHS) ExpDataSN() uint32    { return binary.BigEndian.Uint32(b[bhsWord36:]) }
func (b BHS) BidiResidual() uint32 { return binary.BigEndian.Uint32(b[bhsWord40:]) }
func (b BHS) Residual() uint32     { return binary.BigEndian.Uint32(b[bhsWord44:]) }

// Task management fields: the request's function and the task it
// names, the response's response (Response, byte 2).
func (b BHS) Function() uint8           { return b[bhsFlags] & 0x7f }
func (b BHS) ReferencedTaskTag() uint32 { return binary.BigEndian.Uint32(b[bhsWord20:]) }

// Login and Text fields: Continue says the text goes on in the next PDU;
// a Login's Transit and stages; its TSIH (0: a new session; else the
// connection joins, or reinstates, that session).
func (b BHS) Continue() bool { return b[bhsFlags]&flagContinue != 0 }
func (b BHS) Transit() bool  { return b[bhsFlags]&flagFinal != 0 }
func (b BHS) CSG() uint8     { return b[bhsFlags] >> 2 & 3 }
func (b BHS) NSG() uint8     { return b[bhsFlags] & 3 }
func (b BHS) TSIH() uint16   { return binary.BigEndian.Uint16(b[bhsTSIH:]) }

// A Login Response's status (byte 36 class, 37 detail; 0 0 is success).
func (b BHS) StatusClass() uint8  { return b[bhsWord36] }
func (b BHS) StatusDetail() uint8 { return b[bhsWord36+1] }

// FullFeature is a Login stage: the Login Response that transits to it
// with status success ends the login phase.
const FullFeature = 3

// BHSFields holds the fields every BHS has, and the opcode-specific
// bytes as they lie: enough to encode any PDU. The Encode methods of
// SCSICommandFields and SCSIResponseFields fill them by name.
type BHSFields struct {
	Opcode            ISCSIOpcode
	Immediate         bool
	Flags             uint8
	Byte2, Byte3      uint8
	TotalAHSLength    int // bytes, a multiple of 4
	DataSegmentLength int
	LUN               uint64 // bytes 8-15: a LUN, or an ISID and TSIH
	ITT               uint32
	Words             [7]uint32 // bytes 20-47
}

// Encode writes f into b (BHSLen bytes).
func (b BHS) Encode(f *BHSFields) {
	b[bhsOpcode] = byte(f.Opcode) & opcodeMask
	if f.Immediate {
		b[bhsOpcode] |= flagImmed
	}
	b[bhsFlags], b[bhsByte2], b[bhsByte3] = f.Flags, f.Byte2, f.Byte3
	b[bhsAHSLen] = byte(f.TotalAHSLength / 4)
	b[bhsDataLen], b[bhsDataLen+1], b[bhsDataLen+2] = byte(f.DataSegmentLength>>16), byte(f.DataSegmentLength>>8), byte(f.DataSegmentLength)
	binary.BigEndian.PutUint64(b[bhsLUN:], f.LUN)
	binary.BigEndian.PutUint32(b[bhsITT:], f.ITT)
	for i, w := range f.Words {
		binary.BigEndian.PutUint32(b[bhsWord20+4*i:], w)
	}
}

// Fields reads every field.
func (b BHS) Fields() BHSFields {
	f := BHSFields{Opcode: b.Opcode(), Immediate: b.Immediate(), Flags: b[bhsFlags], Byte2: b[bhsByte2], Byte3: b[bhsByte3],
		TotalAHSLength: b.TotalAHSLength(), DataSegmentLength: b.DataSegmentLength(), LUN: b.LUN(), ITT: b.ITT()}
	for i := range f.Words {
		f.Words[i] = binary.BigEndian.Uint32(b[bhsWord20+4*i:])
	}
	return f
}

// SCSICommandFields are a SCSI Command's fields.
type SCSICommandFields struct {
	Immediate, Final, Read, Write bool
	Attr                          uint8 // task attribute, 3 bits
	TotalAHSLength                int
	DataSegmentLength             int // immediate data
	LUN                           uint64
	ITT, EDTL, CmdSN, ExpStatSN   uint32
	CDB                           [16]byte
}

// BHS gives the command's BHS fields.
func (c *SCSICommandFields) BHS() BHSFields {
	f := BHSFields{Opcode: OpSCSICommand, Immediate: c.Immediate, Flags: c.Attr & 7, TotalAHSLength: c.TotalAHSLength,
		DataSegmentLength: c.DataSegmentLength, LUN: c.LUN, ITT: c.ITT}
	if c.Final {
		f.Flags |= flagFinal
	}
	if c.Read {
		f.Flags |= flagRead
	}
	if c.Write {
		f.Flags |= flagWrite
	}
	f.Words[0], f.Words[1], f.Words[2] = c.EDTL, c.CmdSN, c.ExpStatSN
	for i := range 4 {
		f.Words[3+i] = binary.BigEndian.Uint32(c.CDB[4*i:])
	}
	return f
}

// SCSIResponseFields are a SCSI Response's fields.
type SCSIResponseFields struct {
	BidiOverflow, BidiUnderflow, Overflow, Underflow bool
	Response, Status                                 uint8
	DataSegmentLength                                int // sense data
	ITT, StatSN, ExpCmdSN, MaxCmdSN, ExpDataSN       uint32
	BidiResidual, Residual                           uint32
}

// BHS gives the response's BHS fields.
func (r *SCSIResponseFields) BHS() BHSFields {
	f := BHSFields{Opcode: OpSCSIResponse, Flags: flagFinal, Byte2: r.Response, Byte3: r.Status, DataSegmentLength: r.DataSegmentLength, ITT: r.ITT}
	for _, x := range []struct {
		set  bool
		flag uint8
	}{{r.BidiOverflow, RespBidiOverflow}, {r.BidiUnderflow, RespBidiUnderflow}, {r.Overflow, RespOverflow}, {r.Underflow, RespUnderflow}} {
		if x.set {
			f.Flags |= x.flag
		}
	}
	f.Words = [7]uint32{0, r.StatSN, r.ExpCmdSN, r.MaxCmdSN, r.ExpDataSN, r.BidiResidual, r.Residual}
	return f
}

// ParseBHS checks that b starts with a BHS and returns a view of it and
// its length.
func ParseBHS(b []byte) (BHS, int, error) {
	if len(b) < BHSLen {
		return nil, 0, truncated("parse BHS", BHSLen, len(b))
	}
	return BHS(b[:BHSLen:BHSLen]), BHSLen, nil
}
