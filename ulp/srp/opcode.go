package srp

import (
	"encoding/binary"
	"fmt"
)

// Opcode is an information unit's type, its first byte (the enum in the
// Linux kernel's include/scsi/srp.h). The top two bits say who sends it
// and what it is: 00 an initiator's request, 01 an initiator's response,
// 10 a target's request, 11 a target's response.
type Opcode uint8

// SRP opcodes.
const (
	OpLoginReq Opcode = 0x00 // initiator: log in (CM private data)
	OpTskMgmt  Opcode = 0x01 // initiator: task management function
	OpCmd      Opcode = 0x02 // initiator: SCSI command
	OpILogout  Opcode = 0x03 // initiator: log out
	OpLoginRsp Opcode = 0xc0 // target: login accepted (CM private data)
	OpRsp      Opcode = 0xc1 // target: SCSI or task management response
	OpLoginRej Opcode = 0xc2 // target: login refused (CM private data)
	OpTLogout  Opcode = 0x80 // target: log out
	OpCredReq  Opcode = 0x81 // target: more credit
	OpAerReq   Opcode = 0x82 // target: asynchronous event
	OpCredRsp  Opcode = 0x41 // initiator: answers SRP_CRED_REQ
	OpAerRsp   Opcode = 0x42 // initiator: answers SRP_AER_REQ
)

// Fixed lengths: each message's length without its variable part (an
// SRP_CMD's additional CDB, descriptors and immediate data; an SRP_RSP's
// response and sense data; an SRP_AER_REQ's sense data).
const (
	LoginReqLen     = 64 // struct srp_login_req (IB CM)
	LoginReqRDMALen = 56 // struct srp_login_req_rdma (rdma_cm)
	TskMgmtLen      = 48
	CmdLen          = 48
	ILogoutLen      = 16
	LoginRspLen     = 52
	RspLen          = 36
	LoginRejLen     = 32
	TLogoutLen      = 16
	CredReqLen      = 16
	AerReqLen       = 36
	CredRspLen      = 16
	AerRspLen       = 16
)

// field is one field of a fixed layout, named as the kernel's struct
// names it.
type field struct {
	name string
	off  int
}

// layout is a message's fixed part: its name, length and fields in
// order, so that a parser can say which field the bytes end in.
type layout struct {
	name   string
	len    int
	fields []field
}

// fieldAt returns the field that holds byte off.
func (l *layout) fieldAt(off int) field {
	f := l.fields[0]
	for _, g := range l.fields {
		if g.off > off {
			break
		}
		f = g
	}
	return f
}

var (
	loginReqLayout = layout{"SRP_LOGIN_REQ", LoginReqLen, []field{{"opcode", 0}, {"reserved1", 1}, {"tag", 8},
		{"req_it_iu_len", 16}, {"reserved2", 20}, {"req_buf_fmt", 24}, {"req_flags", 26}, {"reserved3", 27},
		{"imm_data_offset", 28}, {"reserved4", 30}, {"initiator_port_id", 32}, {"target_port_id", 48}}}
	loginReqRDMALayout = layout{"srp_login_req_rdma", LoginReqRDMALen, []field{{"tag", 0}, {"req_buf_fmt", 8},
		{"req_flags", 10}, {"opcode", 11}, {"req_it_iu_len", 12}, {"initiator_port_id", 16}, {"target_port_id", 32},
		{"imm_data_offset", 48}, {"reserved", 50}}}
	tskMgmtLayout = layout{"SRP_TSK_MGMT", TskMgmtLen, []field{{"opcode", 0}, {"sol_not", 1}, {"reserved1", 2},
		{"tag", 8}, {"reserved2", 16}, {"lun", 20}, {"reserved3", 28}, {"tsk_mgmt_func", 30}, {"reserved4", 31},
		{"task_tag", 32}, {"reserved5", 40}}}
	cmdLayout = layout{"SRP_CMD", CmdLen, []field{{"opcode", 0}, {"sol_not", 1}, {"reserved1", 2}, {"buf_fmt", 5},
		{"data_out_desc_cnt", 6}, {"data_in_desc_cnt", 7}, {"tag", 8}, {"reserved2", 16}, {"lun", 20},
		{"reserved3", 28}, {"task_attr", 29}, {"reserved4", 30}, {"add_cdb_len", 31}, {"cdb", 32}}}
	iLogoutLayout  = layout{"SRP_I_LOGOUT", ILogoutLen, []field{{"opcode", 0}, {"reserved", 1}, {"tag", 8}}}
	loginRspLayout = layout{"SRP_LOGIN_RSP", LoginRspLen, []field{{"opcode", 0}, {"reserved1", 1}, {"req_lim_delta", 4},
		{"tag", 8}, {"max_it_iu_len", 16}, {"max_ti_iu_len", 20}, {"buf_fmt", 24}, {"rsp_flags", 26}, {"reserved2", 27}}}
	rspLayout = layout{"SRP_RSP", RspLen, []field{{"opcode", 0}, {"sol_not", 1}, {"reserved1", 2}, {"req_lim_delta", 4},
		{"tag", 8}, {"reserved2", 16}, {"flags", 18}, {"status", 19}, {"data_out_res_cnt", 20}, {"data_in_res_cnt", 24},
		{"sense_data_len", 28}, {"resp_data_len", 32}}}
	loginRejLayout = layout{"SRP_LOGIN_REJ", LoginRejLen, []field{{"opcode", 0}, {"reserved1", 1}, {"reason", 4},
		{"tag", 8}, {"reserved2", 16}, {"buf_fmt", 24}, {"reserved3", 26}}}
	tLogoutLayout = layout{"SRP_T_LOGOUT", TLogoutLen, []field{{"opcode", 0}, {"sol_not", 1}, {"reserved", 2},
		{"reason", 4}, {"tag", 8}}}
	credReqLayout = layout{"SRP_CRED_REQ", CredReqLen, []field{{"opcode", 0}, {"sol_not", 1}, {"reserved", 2},
		{"req_lim_delta", 4}, {"tag", 8}}}
	aerReqLayout = layout{"SRP_AER_REQ", AerReqLen, []field{{"opcode", 0}, {"sol_not", 1}, {"reserved", 2},
		{"req_lim_delta", 4}, {"tag", 8}, {"reserved2", 16}, {"lun", 20}, {"sense_data_len", 28}, {"reserved3", 32}}}
	credRspLayout = layout{"SRP_CRED_RSP", CredRspLen, []field{{"opcode", 0}, {"reserved", 1}, {"tag", 8}}}
	aerRspLayout  = layout{"SRP_AER_RSP", AerRspLen, []field{{"opcode", 0}, {"reserved", 1}, {"tag", 8}}}
)

// layoutOf returns the fixed layout of an opcode's message, nil for an
// opcode SRP does not define.
func layoutOf(o Opcode) *layout {
	switch o {
	case OpLoginReq:
		return &loginReqLayout
	case OpTskMgmt:
		return &tskMgmtLayout
	case OpCmd:
		return &cmdLayout
	case OpILogout:
		return &iLogoutLayout
	case OpLoginRsp:
		return &loginRspLayout
	case OpRsp:
		return &rspLayout
	case OpLoginRej:
		return &loginRejLayout
	case OpTLogout:
		return &tLogoutLayout
	case OpCredReq:
		return &credReqLayout
	case OpAerReq:
		return &aerReqLayout
	case OpCredRsp:
		return &credRspLayout
	case OpAerRsp:
		return &aerRspLayout
	}
	return nil
}

func (o Opcode) String() string {
	if l := layoutOf(o); l != nil {
		return l.name
	}
	return fmt.Sprintf("SRP opcode %#02x", uint8(o))
}

// Known reports whether SRP defines o.
func (o Opcode) Known() bool { return layoutOf(o) != nil }

// FixedLen is the length of o's message without its variable part; 0
// for an unknown opcode.
func (o Opcode) FixedLen() int {
	if l := layoutOf(o); l != nil {
		return l.len
	}
	return 0
}

// FromInitiator reports whether the initiator sends o's messages
// (opcodes below 0x80), and not the target.
func (o Opcode) FromInitiator() bool { return o < 0x80 }

// CheckIU checks that b, one information unit (the bytes of one SEND),
// has an opcode SRP defines and at least that message's fixed length,
// and returns the opcode. The login messages travel in CM private data,
// never in a SEND, and the rdma_cm login request does not start with its
// opcode (LoginReqRDMA); CheckIU takes the IB CM forms.
func CheckIU(b []byte) (Opcode, error) {
	const op = "check IU"
	if len(b) == 0 {
		return 0, truncated(op, "opcode", 0, 1, 0)
	}
	o := Opcode(b[0])
	l := layoutOf(o)
	if l == nil {
		return 0, &Error{Op: op, Field: "opcode", Err: ErrOpcode, Detail: o.String()}
	}
	if len(b) < l.len {
		f := l.fieldAt(len(b))
		return 0, truncated(op+" "+l.name, f.name, f.off, l.len, len(b))
	}
	return o, nil
}

// fixed checks that b starts with a message of layout l and opcode o (at
// byte 0) and returns its fixed part.
func fixed(b []byte, o Opcode, l *layout) ([]byte, error) {
	if len(b) == 0 {
		return nil, truncated("parse "+l.name, "opcode", 0, l.len, 0)
	}
	if got := Opcode(b[0]); got != o {
		return nil, &Error{Op: "parse " + l.name, Field: "opcode", Err: ErrOpcode, Detail: got.String()}
	}
	if len(b) < l.len {
		f := l.fieldAt(len(b))
		return nil, truncated("parse "+l.name, f.name, f.off, l.len, len(b))
	}
	return b[:l.len:l.len], nil
}

// Tags are opaque: the initiator writes its own 8 bytes and the target
// copies them into its response. The Linux initiator writes a native
// u64 (srp_queuecommand: cmd->tag = blk_mq_unique_tag(), the hardware
// queue in bits 16-31 and the request's tag below them); the target
// copies them into its responses and looks commands up by them
// (srpt_handle_cmd, srpt_handle_tsk_mgmt), never reading a value. This
// package reads them as little-endian, so that the values are the ones a
// Linux initiator on x86 or arm64 chose.
func tag(b []byte, off int) uint64 { return binary.LittleEndian.Uint64(b[off:]) }

// Tags the Linux initiator gives meaning to (include ib_srp.h), read as
// this package reads tags.
const (
	// TagTaskMgmt is set in the tag of every SRP_TSK_MGMT the Linux
	// initiator sends (SRP_TAG_TSK_MGMT), and so in the tag of the
	// SRP_RSP that answers it; command tags never have it.
	TagTaskMgmt = 1 << 31
	// TagNoRequest is the task_tag of a task management function that
	// names no command, a LUN reset (SRP_TAG_NO_REQ).
	TagNoRequest = 0xffffffff
)

func be16(b []byte, off int) uint16 { return binary.BigEndian.Uint16(b[off:]) }
func be32(b []byte, off int) uint32 { return binary.BigEndian.Uint32(b[off:]) }
func be64(b []byte, off int) uint64 { return binary.BigEndian.Uint64(b[off:]) }
