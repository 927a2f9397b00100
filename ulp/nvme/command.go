package nvme

import (
	"encoding/binary"
	"fmt"
)

// Command is a 64-byte submission queue entry, the first 64 bytes of a
// command capsule (struct nvme_common_command in the Linux kernel's
// include/linux/nvme.h, struct spdk_nvme_cmd in SPDK's nvme_spec.h).
// Bytes are drawn left to right in address order; multi-byte fields are
// little-endian.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|    Opcode     |PSD|  Rsvd |FU |          Command ID           |  0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|      Namespace ID (for a fabrics command: FCType, reserved)   |  4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     CDW2, CDW3                                |  8
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     Metadata pointer                          | 16
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     Data pointer: one SGL descriptor          | 24
//	|                     (16 bytes, see SGL)                       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     CDW10 - CDW15 (command specific)          | 40
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The flags byte (byte 1) holds FUSE in bits 1:0 and PSDT in bits 7:6;
// the kernel's NVME_CMD_SGL_METABUF (0x40) is PSDT 01b, which a Linux host
// sets on every RDMA command (drivers/nvme/host/rdma.c,
// nvme_rdma_map_data) and the Linux target requires, fabrics commands
// included (drivers/nvme/target/core.c, nvmet_req_init). A fabrics
// command (opcode 0x7f, struct nvmf_common_command) has its FCType in
// byte 4, where the others have the low byte of the namespace ID.
type Command []byte

// CommandLen is the length of a submission queue entry.
const CommandLen = 64

// DataPointerOffset is where a submission queue entry's data pointer (an
// SGL descriptor) lies in it.
const DataPointerOffset = cmdDPTR

const (
	cmdOpcode = 0
	cmdFlags  = 1
	cmdCID    = 2
	cmdNSID   = 4
	cmdFCType = 4
	cmdCDW2   = 8
	cmdMPTR   = 16
	cmdDPTR   = 24
	cmdCDW10  = 40
)

// Opcode is a command's opcode. Admin and I/O opcodes overlap (0x02 is
// Get Log Page on the admin queue, Read on an I/O queue): which set
// applies depends on the queue (qid 0 is the admin queue).
type Opcode uint8

// Opcodes the gateway names (enum nvme_opcode, nvme_admin_opcode and
// nvmf_fabrics_opcode in nvme.h).
const (
	OpFlush   Opcode = 0x00 // I/O
	OpWrite   Opcode = 0x01 // I/O
	OpRead    Opcode = 0x02 // I/O
	OpFabrics Opcode = 0x7f // both queues; FCType says which command

	OpIdentify Opcode = 0x06 // admin
)

// FCType is a fabrics command's type (enum nvmf_capsule_command in nvme.h).
type FCType uint8

// Fabrics command types.
const (
	FCPropertySet FCType = 0x00
	FCConnect     FCType = 0x01
	FCPropertyGet FCType = 0x04
	FCAuthSend    FCType = 0x05
	FCAuthReceive FCType = 0x06
)

var fcTypeNames = [...]string{FCPropertySet: "Property Set", FCConnect: "Connect",
	FCPropertyGet: "Property Get", FCAuthSend: "Authentication Send", FCAuthReceive: "Authentication Receive"}

func (t FCType) String() string {
	if int(t) < len(fcTypeNames) && fcTypeNames[t] != "" {
		return fcTypeNames[t]
	}
	return fmt.Sprintf("FCType(0x%02x)", uint8(t))
}

// PSDT is the flags byte's PRP or SGL for Data Transfer field.
type PSDT uint8

// PSDT values (NVME_CMD_SGL_METABUF, NVME_CMD_SGL_METASEG in nvme.h).
const (
	PSDTPRP        PSDT = 0 // PRPs: not used over fabrics
	PSDTSGLBuffer  PSDT = 1 // SGL data pointer, metadata pointer a buffer: what fabrics use
	PSDTSGLSegment PSDT = 2 // SGL data pointer, metadata pointer an SGL segment
	PSDTReserved   PSDT = 3
)

// Flags byte bits.
const (
	FlagFuseFirst  = 0x01
	FlagFuseSecond = 0x02
	FlagSGLBuffer  = 0x40 // PSDT 01b, the kernel's NVME_CMD_SGL_METABUF
	FlagSGLSegment = 0x80 // PSDT 10b, NVME_CMD_SGL_METASEG
)

// Direction is a command's data transfer direction: the low two bits of
// the opcode, or of a fabrics command's FCType (the NVMe base and fabrics
// specifications; the kernel's nvme_is_write tests bit 0 of either, SPDK's
// spdk_nvme_opc_get_data_transfer takes both bits).
type Direction uint8

// Directions.
const (
	DirNone             Direction = 0 // 00b
	DirHostToController Direction = 1 // 01b: a write; the target reads host memory
	DirControllerToHost Direction = 2 // 10b: a read; the target writes host memory
	DirBidirectional    Direction = 3 // 11b: no RDMA host or target supports it
)

var dirNames = [...]string{"none", "host-to-controller", "controller-to-host", "bidirectional"}

func (d Direction) String() string { return dirNames[d&3] }

// CommandFields holds the fields of a submission queue entry common to
// all commands. For a fabrics command, NSID's low byte is the FCType and
// its other bytes are reserved.
type CommandFields struct {
	Opcode    Opcode
	Flags     uint8
	CommandID uint16
	NSID      uint32
	CDW2      uint32
	CDW3      uint32
	Metadata  uint64
	DPTR      SGLFields
	CDW10     [6]uint32 // CDW10 to CDW15
}

// IsValid reports whether c is long enough to hold a submission queue
// entry. It is the precondition of every getter and setter.
func (c Command) IsValid() bool { return len(c) >= CommandLen }

// Opcode returns the opcode.
func (c Command) Opcode() Opcode { return Opcode(c[cmdOpcode]) }

// IsFabrics reports whether c is a fabrics command (opcode 0x7f).
func (c Command) IsFabrics() bool { return c.Opcode() == OpFabrics }

// Flags returns the flags byte (FUSE and PSDT).
func (c Command) Flags() uint8 { return c[cmdFlags] }

// PSDT returns the PSDT field.
func (c Command) PSDT() PSDT { return PSDT(c[cmdFlags] >> 6) }

// CommandID returns the command identifier, which the completion echoes.
// The Linux kernel declares it __u16, an opaque tag copied back as it
// came; it is read here little-endian, as the specification lays it out.
func (c Command) CommandID() uint16 { return binary.LittleEndian.Uint16(c[cmdCID:]) }

// NSID returns the namespace identifier. For a fabrics command use FCType.
func (c Command) NSID() uint32 { return binary.LittleEndian.Uint32(c[cmdNSID:]) }

// FCType returns a fabrics command's type (byte 4). For other commands
// the byte is part of the namespace identifier.
func (c Command) FCType() FCType { return FCType(c[cmdFCType]) }

// Metadata returns the metadata pointer.
func (c Command) Metadata() uint64 { return binary.LittleEndian.Uint64(c[cmdMPTR:]) }

// DataPointer returns the data pointer (bytes 24-39) as a descriptor view.
func (c Command) DataPointer() SGL { return SGL(c[cmdDPTR : cmdDPTR+SGLLen : cmdDPTR+SGLLen]) }

// DWord returns command dword i (0 <= i < 16), little-endian.
func (c Command) DWord(i int) uint32 { return binary.LittleEndian.Uint32(c[4*i:]) }

// Direction returns the data transfer direction the opcode (or, for a
// fabrics command, the FCType) declares. Connect and Authentication Send
// move data host-to-controller, Authentication Receive controller-to-host,
// Property Get and Set none.
func (c Command) Direction() Direction {
	if c.IsFabrics() {
		return Direction(c.FCType() & 3)
	}
	return Direction(c.Opcode() & 3)
}

// SetOpcode sets the opcode.
func (c Command) SetOpcode(o Opcode) { c[cmdOpcode] = byte(o) }

// SetFlags sets the flags byte.
func (c Command) SetFlags(f uint8) { c[cmdFlags] = f }

// SetCommandID sets the command identifier.
func (c Command) SetCommandID(id uint16) { binary.LittleEndian.PutUint16(c[cmdCID:], id) }

// SetNSID sets the namespace identifier.
func (c Command) SetNSID(id uint32) { binary.LittleEndian.PutUint32(c[cmdNSID:], id) }

// SetFCType sets a fabrics command's type.
func (c Command) SetFCType(t FCType) { c[cmdFCType] = byte(t) }

// SetDWord sets command dword i (0 <= i < 16).
func (c Command) SetDWord(i int, v uint32) { binary.LittleEndian.PutUint32(c[4*i:], v) }

// Fields returns all fields of c.
func (c Command) Fields() CommandFields {
	f := CommandFields{
		Opcode:    c.Opcode(),
		Flags:     c.Flags(),
		CommandID: c.CommandID(),
		NSID:      c.NSID(),
		CDW2:      c.DWord(2),
		CDW3:      c.DWord(3),
		Metadata:  c.Metadata(),
		DPTR:      c.DataPointer().Fields(),
	}
	for i := range f.CDW10 {
		f.CDW10[i] = c.DWord(10 + i)
	}
	return f
}

// Encode writes every byte of the entry from f.
func (c Command) Encode(f *CommandFields) {
	_ = c[CommandLen-1]
	c[cmdOpcode] = byte(f.Opcode)
	c[cmdFlags] = f.Flags
	c.SetCommandID(f.CommandID)
	c.SetNSID(f.NSID)
	c.SetDWord(2, f.CDW2)
	c.SetDWord(3, f.CDW3)
	binary.LittleEndian.PutUint64(c[cmdMPTR:], f.Metadata)
	c.DataPointer().Encode(&f.DPTR)
	for i, v := range f.CDW10 {
		c.SetDWord(10+i, v)
	}
}

// ParseCommand returns the submission queue entry at the start of b and
// its length. It checks the length only; ParseCapsule checks the data
// pointer.
func ParseCommand(b []byte) (Command, int, error) {
	if len(b) < CommandLen {
		return nil, 0, truncated("parse command", CommandLen, len(b))
	}
	return Command(b[:CommandLen:CommandLen]), CommandLen, nil
}
