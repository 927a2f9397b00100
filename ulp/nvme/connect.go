package nvme

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// Connect is a Fabrics Connect command: a submission queue entry with
// opcode 0x7f and FCType 0x01 (struct nvmf_connect_command in the Linux
// kernel's include/linux/nvme.h). It creates the queue the capsule
// arrives on: qid 0 the admin queue (and with it the controller), others
// an I/O queue of the controller the Connect data names.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  Opcode 0x7f  |     Flags     |          Command ID           |  0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	| FCType 0x01   |              Reserved (19 bytes)              |  4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|           Data pointer: SGL for the 1024-byte Connect data    | 24
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|            RECFMT             |              QID              | 40
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|            SQSIZE             |     CATTR     |   Reserved    | 44
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  KATO (milliseconds)                          | 48
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                      Reserved (12 bytes)                      | 52
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// SQSIZE is 0's based. The Linux host (drivers/nvme/host/fabrics.c,
// nvmf_connect_cmd_prep) sends SQSIZE 31 and the keep-alive timeout for
// the admin queue, its sqsize and KATO 0 for I/O queues, and CATTR bit 2
// to disable SQ flow control when asked.
type Connect []byte

const (
	conRecFmt = 40
	conQID    = 42
	conSQSize = 44
	conCAttr  = 46
	conKATO   = 48
)

// CAttrDisableSQFlow is the Connect attribute asking the controller to
// disable SQ flow control (NVME_CONNECT_DISABLE_SQFLOW).
const CAttrDisableSQFlow = 1 << 2

// ConnectFields holds the fields of a Connect command.
type ConnectFields struct {
	Flags     uint8
	CommandID uint16
	DPTR      SGLFields
	RecFmt    uint16
	QID       uint16
	SQSize    uint16 // 0's based
	CAttr     uint8
	KATO      uint32 // milliseconds
}

// IsValid reports whether c is long enough to hold a Connect command. It
// is the precondition of every getter and setter.
func (c Connect) IsValid() bool { return len(c) >= CommandLen }

// Command returns c as a plain submission queue entry.
func (c Connect) Command() Command { return Command(c) }

// RecFmt returns the record format (0).
func (c Connect) RecFmt() uint16 { return binary.LittleEndian.Uint16(c[conRecFmt:]) }

// QID returns the queue the command creates (0 for the admin queue).
func (c Connect) QID() uint16 { return binary.LittleEndian.Uint16(c[conQID:]) }

// SQSize returns the submission queue size, 0's based.
func (c Connect) SQSize() uint16 { return binary.LittleEndian.Uint16(c[conSQSize:]) }

// CAttr returns the connect attributes.
func (c Connect) CAttr() uint8 { return c[conCAttr] }

// KATO returns the keep-alive timeout in milliseconds.
func (c Connect) KATO() uint32 { return binary.LittleEndian.Uint32(c[conKATO:]) }

// SetQID sets the queue identifier.
func (c Connect) SetQID(v uint16) { binary.LittleEndian.PutUint16(c[conQID:], v) }

// SetSQSize sets the 0's based submission queue size.
func (c Connect) SetSQSize(v uint16) { binary.LittleEndian.PutUint16(c[conSQSize:], v) }

// SetCAttr sets the connect attributes.
func (c Connect) SetCAttr(v uint8) { c[conCAttr] = v }

// SetKATO sets the keep-alive timeout in milliseconds.
func (c Connect) SetKATO(ms uint32) { binary.LittleEndian.PutUint32(c[conKATO:], ms) }

// Fields returns all fields of c.
func (c Connect) Fields() ConnectFields {
	cmd := Command(c)
	return ConnectFields{
		Flags:     cmd.Flags(),
		CommandID: cmd.CommandID(),
		DPTR:      cmd.DataPointer().Fields(),
		RecFmt:    c.RecFmt(),
		QID:       c.QID(),
		SQSize:    c.SQSize(),
		CAttr:     c.CAttr(),
		KATO:      c.KATO(),
	}
}

// Encode writes every byte of the command from f: opcode 0x7f, FCType
// Connect, reserved bytes zero.
func (c Connect) Encode(f *ConnectFields) {
	_ = c[CommandLen-1]
	clear(c[:CommandLen])
	cmd := Command(c)
	cmd.SetOpcode(OpFabrics)
	cmd.SetFlags(f.Flags)
	cmd.SetCommandID(f.CommandID)
	cmd.SetFCType(FCConnect)
	cmd.DataPointer().Encode(&f.DPTR)
	binary.LittleEndian.PutUint16(c[conRecFmt:], f.RecFmt)
	c.SetQID(f.QID)
	c.SetSQSize(f.SQSize)
	c.SetCAttr(f.CAttr)
	c.SetKATO(f.KATO)
}

// ParseConnect returns the Connect command at the start of b and its
// length. It checks the length, the opcode and the FCType; the data
// pointer is ParseCapsule's to check.
func ParseConnect(b []byte) (Connect, int, error) {
	const op = "parse connect"
	if len(b) < CommandLen {
		return nil, 0, truncated(op, CommandLen, len(b))
	}
	c := Command(b[:CommandLen:CommandLen])
	if c.Opcode() != OpFabrics {
		return nil, 0, &Error{Op: op, Field: "opcode", Offset: cmdOpcode, Err: ErrNotConnect,
			Detail: fmt.Sprintf("opcode 0x%02x", uint8(c.Opcode()))}
	}
	if c.FCType() != FCConnect {
		return nil, 0, &Error{Op: op, Field: "fctype", Offset: cmdFCType, Err: ErrNotConnect,
			Detail: c.FCType().String()}
	}
	return Connect(c), CommandLen, nil
}

// ConnectData is the 1024 bytes a Connect carries (struct
// nvmf_connect_data in nvme.h):
//
//	+--------+------------------------------------------------+
//	|    0   | Host Identifier (16 bytes, a UUID)             |
//	|   16   | Controller ID (16, little-endian)              |
//	|   18   | Reserved (238 bytes)                           |
//	|  256   | Subsystem NQN (256 bytes, NUL-terminated)      |
//	|  512   | Host NQN (256 bytes, NUL-terminated)           |
//	|  768   | Reserved (256 bytes)                           |
//	+--------+------------------------------------------------+
//
// The Linux host sends controller ID 0xffff (any) for the admin queue and
// the ID the admin Connect returned for I/O queues
// (nvmf_connect_data_prep); it copies the NQNs with strscpy bounded at
// NVMF_NQN_SIZE (223), and the Linux target forces byte 255 of each to NUL
// before reading it.
type ConnectData []byte

// ConnectDataLen is the length of the Connect data.
const ConnectDataLen = 1024

// NQNFieldLen is the size of an NQN field (NVMF_NQN_FIELD_LEN).
const NQNFieldLen = 256

// CNTLIDDynamic is the controller ID a host asks for when any controller
// will do (NVME_CNTLID_DYNAMIC).
const CNTLIDDynamic = 0xffff

const (
	cdHostID  = 0
	cdCNTLID  = 16
	cdSubNQN  = 256
	cdHostNQN = 512
)

// ConnectDataFields holds the fields of the Connect data.
type ConnectDataFields struct {
	HostID  [16]byte
	CNTLID  uint16
	SubNQN  string
	HostNQN string
}

// IsValid reports whether d is long enough to hold the Connect data. It is
// the precondition of every getter and setter.
func (d ConnectData) IsValid() bool { return len(d) >= ConnectDataLen }

// HostID returns the host identifier.
func (d ConnectData) HostID() [16]byte { return [16]byte(d[cdHostID : cdHostID+16]) }

// CNTLID returns the controller ID asked for.
func (d ConnectData) CNTLID() uint16 { return binary.LittleEndian.Uint16(d[cdCNTLID:]) }

// SubNQN returns the subsystem NQN, up to its NUL and at most 255 bytes
// (as the Linux target reads it). It is a view into d.
func (d ConnectData) SubNQN() []byte { return nqn(d[cdSubNQN : cdSubNQN+NQNFieldLen]) }

// HostNQN returns the host NQN like SubNQN.
func (d ConnectData) HostNQN() []byte { return nqn(d[cdHostNQN : cdHostNQN+NQNFieldLen]) }

func nqn(f []byte) []byte {
	f = f[: NQNFieldLen-1 : NQNFieldLen-1]
	if i := bytes.IndexByte(f, 0); i >= 0 {
		return f[:i:i]
	}
	return f
}

// SetCNTLID sets the controller ID.
func (d ConnectData) SetCNTLID(v uint16) { binary.LittleEndian.PutUint16(d[cdCNTLID:], v) }

// Fields returns all fields of d.
func (d ConnectData) Fields() ConnectDataFields {
	return ConnectDataFields{
		HostID:  d.HostID(),
		CNTLID:  d.CNTLID(),
		SubNQN:  string(d.SubNQN()),
		HostNQN: string(d.HostNQN()),
	}
}

// Encode writes every byte of the Connect data from f, the rest of the NQN
// fields and the reserved bytes zero. An NQN that leaves no room for its
// NUL (more than 255 bytes) is an ErrNQNTooLong, and d is left as it was;
// one holding a NUL reads back cut there.
func (d ConnectData) Encode(f *ConnectDataFields) error {
	for _, n := range []struct {
		field string
		off   int
		s     string
	}{{"subnqn", cdSubNQN, f.SubNQN}, {"hostnqn", cdHostNQN, f.HostNQN}} {
		if len(n.s) > NQNFieldLen-1 {
			return &Error{Op: "encode connect data", Field: n.field, Offset: n.off, Err: ErrNQNTooLong,
				Detail: fmt.Sprintf("%d bytes, at most %d", len(n.s), NQNFieldLen-1)}
		}
	}
	_ = d[ConnectDataLen-1]
	clear(d[:ConnectDataLen])
	copy(d[cdHostID:], f.HostID[:])
	d.SetCNTLID(f.CNTLID)
	copy(d[cdSubNQN:], f.SubNQN)
	copy(d[cdHostNQN:], f.HostNQN)
	return nil
}

// ParseConnectData returns the Connect data at the start of b and its
// length. It checks the length only: NQNs are not validated.
func ParseConnectData(b []byte) (ConnectData, int, error) {
	if len(b) < ConnectDataLen {
		return nil, 0, truncated("parse connect data", ConnectDataLen, len(b))
	}
	return ConnectData(b[:ConnectDataLen:ConnectDataLen]), ConnectDataLen, nil
}
