package srp

import (
	"errors"
	"fmt"
)

// An SRP_CMD (struct srp_cmd in include/scsi/srp.h) is, in one SEND:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  opcode 0x02  |    sol_not    |           reserved            |  0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|   reserved    |DO fmt | DI fmt|data_out_desc_c|data_in_desc_cn|  4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  tag (opaque, 8 bytes)                        |  8
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  reserved                                     | 16
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  LUN (8 bytes, SAM)                           | 20
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|   reserved    |   task_attr   |   reserved    |add_cdb_len |rs| 28
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  CDB (16 bytes)                               | 32
//	/                                                               /
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  additional CDB (add_cdb_len words)                           | 48
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  data-out descriptor (DO fmt), then data-in descriptor (DI fmt)|
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  (immediate data, at the login's immediate data offset)       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// add_cdb_len's top six bits are the additional CDB's length in 4-byte
// words; its low two bits are reserved. The Linux target masks them and
// takes the byte as a byte count (srpt_get_desc_buf: add_data +
// (add_cdb_len & ~3)); the Linux initiator writes the byte count
// rounded up to 4 (srp_queuecommand), and only for CDBs longer than 16
// bytes, which it never sends (its max_cmd_len is 16).
//
// The descriptors follow the additional CDB: the data-out direction's,
// then the data-in direction's, each in its format (Format). The Linux
// initiator sends one direction only (srp_map_data fails
// DMA_BIDIRECTIONAL), and the Linux target reads one descriptor right
// after the additional CDB and takes any data-in format for a read
// (srpt_get_desc_tbl): it does not serve bidirectional commands.
//
// A command carries immediate data when its data-out format is
// FormatImmediate: srp_imm_buf holds the length and the data lies at the
// connection's immediate data offset (ImmDataOffset), 68 from the Linux
// initiator (SRP_IMM_DATA_OFFSET: the 48-byte command, 16 bytes for an
// additional CDB, 4 for srp_imm_buf), whatever the additional CDB's
// length. The Linux initiator uses it, when the target granted it, for
// writes of at most two scatter-gather entries that fit its max
// initiator-to-target IU length (srp_map_data).

const (
	cmdSolNot   = 1
	cmdBufFmt   = 5
	cmdOutCnt   = 6
	cmdInCnt    = 7
	cmdTag      = 8
	cmdLUN      = 20
	cmdTaskAttr = 29
	cmdAddCDB   = 31
	cmdCDB      = 32
)

// Task attributes (task_attr; SRP_CMD_* in drivers/infiniband/ulp/srpt/ib_srpt.h).
// The Linux initiator leaves the field 0, simple.
const (
	TaskAttrSimple      = 0x0
	TaskAttrHeadOfQueue = 0x1
	TaskAttrOrdered     = 0x2
	TaskAttrACA         = 0x4
)

// Cmd is a parsed SRP_CMD: views of its fixed part, its additional CDB,
// its two data buffer descriptors and its immediate data. Rewriting a
// descriptor through DataOut or DataIn rewrites the message.
type Cmd struct {
	b       []byte // the message's contents (ParseCmdHeader's: up to the descriptors' end)
	n       int    // the contents' length, the immediate data's included
	out, in DataBuf
	immOff  int
}

// ParseCmd checks that b holds an SRP_CMD whole (its fixed part, the
// additional CDB, the descriptors its formats and counts name, and its
// immediate data) and returns it and the bytes it takes; b may go on
// after them, as the Linux target allows. immDataOffset is the
// connection's immediate data offset (ImmDataOffset), 0 if its login
// fixed none. ParseCmd does not allocate unless it fails.
func ParseCmd(b []byte, immDataOffset int) (Cmd, int, error) {
	return parseCmd(b, immDataOffset, true)
}

// ParseCmdHeader is ParseCmd for a command whose immediate data need
// not lie in b, as when a message arrives in pieces and only its first
// bytes are at hand: b must hold the fixed part, the additional CDB and
// the descriptors, and ParseCmdHeader returns the command and where its
// descriptors end. Len still counts the immediate data, so CheckLen
// checks the whole message's length; Bytes are the bytes up to the
// descriptors' end, and ImmediateData is nil.
func ParseCmdHeader(b []byte, immDataOffset int) (Cmd, int, error) {
	return parseCmd(b, immDataOffset, false)
}

func parseCmd(b []byte, immDataOffset int, whole bool) (Cmd, int, error) {
	const op = "parse SRP_CMD"
	h, err := fixed(b, OpCmd, &cmdLayout)
	if err != nil {
		return Cmd{}, 0, err
	}
	outFmt, inFmt := Format(h[cmdBufFmt]>>4), Format(h[cmdBufFmt]&0xf)
	if outFmt > FormatImmediate {
		return Cmd{}, 0, &Error{Op: op, Field: "buf_fmt", Offset: cmdBufFmt, Err: ErrFormat, Detail: fmt.Sprintf("%#02x: data-out %v", h[cmdBufFmt], outFmt)}
	}
	if inFmt > FormatIndirect {
		return Cmd{}, 0, &Error{Op: op, Field: "buf_fmt", Offset: cmdBufFmt, Err: ErrFormat, Detail: fmt.Sprintf("%#02x: data-in %v", h[cmdBufFmt], inFmt)}
	}
	off := CmdLen + int(h[cmdAddCDB]&^3)
	if len(b) < off {
		return Cmd{}, 0, truncated(op, "additional CDB", CmdLen, off, len(b))
	}
	c := Cmd{immOff: immDataOffset}
	if c.out, off, err = parseBuf(b, off, outFmt, int(h[cmdOutCnt]), "data-out"); err != nil {
		return Cmd{}, 0, err
	}
	if c.in, off, err = parseBuf(b, off, inFmt, int(h[cmdInCnt]), "data-in"); err != nil {
		return Cmd{}, 0, err
	}
	if outFmt == FormatImmediate {
		switch {
		case immDataOffset <= 0:
			return Cmd{}, 0, &Error{Op: op, Field: "buf_fmt", Offset: cmdBufFmt, Err: ErrImmediate, Detail: "immediate data, but the connection's login fixed no immediate data offset"}
		case immDataOffset < off:
			return Cmd{}, 0, &Error{Op: op, Field: "immediate data", Offset: immDataOffset, Err: ErrImmediate,
				Detail: fmt.Sprintf("the connection's immediate data offset %d lies inside the descriptors, which end at %d", immDataOffset, off)}
		}
		end := uint64(immDataOffset) + uint64(c.out.TotalLength())
		if !whole {
			if end > maxCmdLen {
				return Cmd{}, 0, &Error{Op: op, Field: "immediate data", Offset: immDataOffset, Err: ErrImmediate,
					Detail: fmt.Sprintf("%d bytes at %d: past any SEND", c.out.TotalLength(), immDataOffset)}
			}
			c.b, c.n = b[:off:off], int(end)
			return c, off, nil
		}
		if uint64(len(b)) < end {
			return Cmd{}, 0, &Error{Op: op, Field: "immediate data", Offset: immDataOffset, Err: ErrTruncated,
				Detail: fmt.Sprintf("%d bytes, need %d (%d at %d)", len(b), end, c.out.TotalLength(), immDataOffset)}
		}
		off = int(end)
		c.out.imm = b[immDataOffset:off:off]
	}
	c.b, c.n = b[:off:off], off
	return c, off, nil
}

// maxCmdLen bounds a command's length for ParseCmdHeader, which does not
// see its immediate data: a SEND carries at most 2^31 bytes.
const maxCmdLen = 1 << 31

// Len is the length of the command's contents: what the Linux initiator
// sends (srp_map_data's return), the end of the descriptors or of the
// immediate data.
func (c Cmd) Len() int { return c.n }

// CheckLen checks that a message of n bytes holds the whole command.
// Bytes after it are allowed: the Linux target checks only that a SEND
// holds the immediate data (byte_len >= imm_data_offset + len,
// srpt_get_desc_tbl), and a SEND's length only against its receive
// buffer (the max initiator-to-target IU length the login set).
func (c Cmd) CheckLen(n int) error {
	if n >= c.Len() {
		return nil
	}
	// The first n bytes parse up to the field they end in; past the
	// bytes at hand (ParseCmdHeader's), only the immediate data is cut.
	err := error(&Error{Field: "immediate data", Offset: c.immOff})
	if n < len(c.b) {
		_, _, err = ParseCmd(c.b[:max(n, 0)], c.immOff)
	}
	e := &Error{Op: "check SRP_CMD", Err: ErrLength}
	if errors.As(err, &e) {
		e = &Error{Op: "check SRP_CMD", Field: e.Field, Offset: e.Offset, Err: ErrLength}
	}
	e.Detail = fmt.Sprintf("%d bytes, the command takes %d", n, c.Len())
	return e
}

// Bytes are the command's bytes: Len of them from ParseCmd, up to the
// descriptors' end from ParseCmdHeader.
func (c Cmd) Bytes() []byte { return c.b }

func (c Cmd) SolNot() uint8 { return c.b[cmdSolNot] }

// BufFmt is buf_fmt as sent: the data-out format in the high nibble,
// the data-in format in the low one.
func (c Cmd) BufFmt() uint8 { return c.b[cmdBufFmt] }

// Tag is the command's tag (see TagTaskMgmt for how it reads).
func (c Cmd) Tag() uint64 { return tag(c.b, cmdTag) }

// LUN is the logical unit number's 8 bytes as a big-endian number (SAM
// format, int_to_scsilun).
func (c Cmd) LUN() uint64     { return be64(c.b, cmdLUN) }
func (c Cmd) TaskAttr() uint8 { return c.b[cmdTaskAttr] }

// CDB is the first 16 bytes of the CDB; AddCDB the rest of a longer
// one (AddCDBLen bytes).
func (c Cmd) CDB() []byte { return c.b[cmdCDB:CmdLen:CmdLen] }
func (c Cmd) AddCDB() []byte {
	n := CmdLen + c.AddCDBLen()
	return c.b[CmdLen:n:n]
}

// AddCDBLen is the additional CDB's length in bytes: add_cdb_len's top
// six bits, in 4-byte words.
func (c Cmd) AddCDBLen() int { return int(c.b[cmdAddCDB] &^ 3) }

// DataOut and DataIn are the two directions' data buffer descriptors:
// data-out is what the target RDMA READs from the initiator (a SCSI
// write's data), data-in what it RDMA WRITEs to the initiator (a read's).
func (c Cmd) DataOut() DataBuf { return c.out }
func (c Cmd) DataIn() DataBuf  { return c.in }

// ImmDataOffset is the immediate data offset ParseCmd was given.
func (c Cmd) ImmDataOffset() int { return c.immOff }

// CmdHeaderLen is how many bytes of an SRP_CMD ParseCmdHeader needs:
// the fixed part, the additional CDB and the descriptors its buf_fmt and
// counts name, read from b, the command's first CmdLen bytes (or more).
// A reserved format counts no bytes: ParseCmdHeader refuses it.
func CmdHeaderLen(b []byte) (int, error) {
	h, err := fixed(b, OpCmd, &cmdLayout)
	if err != nil {
		return 0, err
	}
	n := CmdLen + int(h[cmdAddCDB]&^3)
	for _, d := range []struct {
		f   Format
		cnt int
	}{{Format(h[cmdBufFmt] >> 4), int(h[cmdOutCnt])}, {Format(h[cmdBufFmt] & 0xf), int(h[cmdInCnt])}} {
		switch d.f {
		case FormatDirect:
			n += DescLen
		case FormatIndirect:
			n += IndirectHeaderLen + d.cnt*DescLen
		case FormatImmediate:
			n += ImmHeaderLen
		}
	}
	return n, nil
}
