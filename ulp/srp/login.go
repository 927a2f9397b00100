package srp

import (
	"encoding/binary"
	"fmt"
)

// The login travels in the CM handshake that opens the connection, never
// in a SEND. The initiator's request is the private data of the CM REQ;
// the target accepts with SRP_LOGIN_RSP in the REP's private data, or
// refuses with SRP_LOGIN_REJ in a REJ's (consumer defined reason). The
// CM pads private data to its message's size (92 bytes in a REQ, 196 in
// a REP, 148 in a REJ): the parsers take a prefix and ignore the rest.
//
// Over the IB CM (ib_srp without RDMA/CM, target given by GID and
// service ID) the request is struct srp_login_req, 64 bytes, the IU as
// SRP defines it:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  opcode 0x00  |                 reserved                      |  0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  reserved                                     |  4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  tag (8 bytes)                                |  8
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  req_it_iu_len                                | 16
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  reserved                                     | 20
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          req_buf_fmt          |   req_flags   |   reserved    | 24
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|        imm_data_offset        |           reserved            | 28
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  initiator_port_id (16 bytes)                 | 32
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  target_port_id (16 bytes)                    | 48
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Over RDMA/CM (ib_srp given an IP address, on InfiniBand or RoCE)
// rdma_cm puts its own 36-byte header first in the REQ's 92 bytes of
// private data, which leaves 56: ib_srp sends struct srp_login_req_rdma,
// the same fields packed into them in another order, the opcode at byte
// 11 (srp_send_req), and the target copies them back into a struct
// srp_login_req before it looks at them (srpt_rdma_cm_req_recv):
//
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  tag (8 bytes)                                |  0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          req_buf_fmt          |   req_flags   |  opcode 0x00  |  8
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  req_it_iu_len                                | 12
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  initiator_port_id (16 bytes)                 | 16
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  target_port_id (16 bytes)                    | 32
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|        imm_data_offset        |   reserved (6 bytes)          | 48
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// This package takes the 56 bytes after the rdma_cm header. The accept
// and the reject carry no rdma_cm header: SRP_LOGIN_RSP and SRP_LOGIN_REJ
// are the same over both CMs.
//
// The Linux initiator asks for direct and indirect descriptors, single
// or multi-channel, and, with use_imm_data (the default), immediate data
// at offset 68 (srp_send_req); it sends tag 0. The Linux target refuses
// a req_it_iu_len under 64 or over its srp_max_req_size, answers with
// max_it_iu_len its srp_max_req_size and max_ti_iu_len the request's
// req_it_iu_len, grants immediate data when it was asked for at an
// offset of at least 48 and it does not use an SRQ, and echoes the tag
// (srpt_cm_req_recv). It never checks the request's opcode.

// LoginReq is the IB CM login request, struct srp_login_req.
type LoginReq []byte

// LoginReqRDMA is the RDMA/CM login request, struct srp_login_req_rdma:
// the 56 bytes after the rdma_cm header.
type LoginReqRDMA []byte

const (
	lreqTag      = 8
	lreqITIULen  = 16
	lreqBufFmt   = 24
	lreqFlags    = 26
	lreqImmOff   = 28
	lreqIPortID  = 32
	lreqTPortID  = 48
	lrdmaTag     = 0
	lrdmaBufFmt  = 8
	lrdmaFlags   = 10
	lrdmaOpcode  = 11
	lrdmaITIULen = 12
	lrdmaIPortID = 16
	lrdmaTPortID = 32
	lrdmaImmOff  = 48
)

// Buffer formats a login request asks for and a response grants
// (req_buf_fmt, buf_fmt; SRP_BUF_FORMAT_* in srp.h).
const (
	BufFmtDirect   = 1 << 1
	BufFmtIndirect = 1 << 2
)

// Login request flags (req_flags).
const (
	// MultiChanMask is the multi-channel action: MultiChanSingle ends
	// the initiator's other channels to the target, MultiChanMulti keeps
	// them (SRP_MULTICHAN_*; SRP_MTCH_ACTION in ib_srpt.h).
	MultiChanMask   = 0x03
	MultiChanSingle = 0x00
	MultiChanMulti  = 0x01
	// ImmedRequested asks for immediate data at imm_data_offset (SRP-2,
	// SRP_IMMED_REQUESTED).
	ImmedRequested = 0x80
)

// Login response flags (rsp_flags).
const (
	// RspMultiChanMask is the multi-channel result: no other channel
	// existed, other channels were ended, or kept
	// (SRP_LOGIN_RSP_MULTICHAN_*).
	RspMultiChanMask       = 0x03
	RspMultiChanNoChannel  = 0x00
	RspMultiChanTerminated = 0x01
	RspMultiChanMaintained = 0x02
	// ImmedSupported grants immediate data at the request's
	// imm_data_offset (SRP_LOGIN_RSP_IMMED_SUPP).
	ImmedSupported = 0x80
)

// LoginReqFields holds a login request's fields, from either form.
type LoginReqFields struct {
	Tag             uint64
	ReqITIULen      uint32 // the largest IU the initiator will send
	ReqBufFmt       uint16 // BufFmt*
	ReqFlags        uint8  // MultiChan*, ImmedRequested
	ImmDataOffset   uint16
	InitiatorPortID [16]byte
	TargetPortID    [16]byte
}

// ParseLoginReq checks that b starts with an IB CM login request and
// returns a view of it and its length.
func ParseLoginReq(b []byte) (LoginReq, int, error) {
	h, err := fixed(b, OpLoginReq, &loginReqLayout)
	if err != nil {
		return nil, 0, err
	}
	return LoginReq(h), LoginReqLen, nil
}

// IsValid reports whether r holds a whole request: the precondition of
// every getter and setter.
func (r LoginReq) IsValid() bool             { return len(r) >= LoginReqLen }
func (r LoginReq) Tag() uint64               { return tag(r, lreqTag) }
func (r LoginReq) ReqITIULen() uint32        { return be32(r, lreqITIULen) }
func (r LoginReq) ReqBufFmt() uint16         { return be16(r, lreqBufFmt) }
func (r LoginReq) ReqFlags() uint8           { return r[lreqFlags] }
func (r LoginReq) ImmDataOffset() uint16     { return be16(r, lreqImmOff) }
func (r LoginReq) InitiatorPortID() [16]byte { return [16]byte(r[lreqIPortID:]) }
func (r LoginReq) TargetPortID() [16]byte    { return [16]byte(r[lreqTPortID:]) }

// SetReqBufFmt and SetReqFlags rewrite the fields in place (a gateway
// that cannot stage immediate data clears ImmedRequested).
func (r LoginReq) SetReqBufFmt(f uint16) { binary.BigEndian.PutUint16(r[lreqBufFmt:], f) }
func (r LoginReq) SetReqFlags(f uint8)   { r[lreqFlags] = f }

// Fields reads every field.
func (r LoginReq) Fields() LoginReqFields {
	return LoginReqFields{Tag: r.Tag(), ReqITIULen: r.ReqITIULen(), ReqBufFmt: r.ReqBufFmt(), ReqFlags: r.ReqFlags(),
		ImmDataOffset: r.ImmDataOffset(), InitiatorPortID: r.InitiatorPortID(), TargetPortID: r.TargetPortID()}
}

// ParseLoginReqRDMA checks that b starts with an RDMA/CM login request
// (the private data after the rdma_cm header) and returns a view of it
// and its length.
func ParseLoginReqRDMA(b []byte) (LoginReqRDMA, int, error) {
	const op = "parse srp_login_req_rdma"
	l := &loginReqRDMALayout
	if len(b) > lrdmaOpcode && Opcode(b[lrdmaOpcode]) != OpLoginReq {
		return nil, 0, &Error{Op: op, Field: "opcode", Offset: lrdmaOpcode, Err: ErrOpcode, Detail: Opcode(b[lrdmaOpcode]).String()}
	}
	if len(b) < l.len {
		f := l.fieldAt(len(b))
		return nil, 0, truncated(op, f.name, f.off, l.len, len(b))
	}
	return LoginReqRDMA(b[:l.len:l.len]), l.len, nil
}

// IsValid reports whether r holds a whole request: the precondition of
// every getter and setter.
func (r LoginReqRDMA) IsValid() bool             { return len(r) >= LoginReqRDMALen }
func (r LoginReqRDMA) Tag() uint64               { return tag(r, lrdmaTag) }
func (r LoginReqRDMA) ReqITIULen() uint32        { return be32(r, lrdmaITIULen) }
func (r LoginReqRDMA) ReqBufFmt() uint16         { return be16(r, lrdmaBufFmt) }
func (r LoginReqRDMA) ReqFlags() uint8           { return r[lrdmaFlags] }
func (r LoginReqRDMA) ImmDataOffset() uint16     { return be16(r, lrdmaImmOff) }
func (r LoginReqRDMA) InitiatorPortID() [16]byte { return [16]byte(r[lrdmaIPortID:]) }
func (r LoginReqRDMA) TargetPortID() [16]byte    { return [16]byte(r[lrdmaTPortID:]) }

// SetReqBufFmt and SetReqFlags rewrite the fields in place.
func (r LoginReqRDMA) SetReqBufFmt(f uint16) { binary.BigEndian.PutUint16(r[lrdmaBufFmt:], f) }
func (r LoginReqRDMA) SetReqFlags(f uint8)   { r[lrdmaFlags] = f }

// Fields reads every field.
func (r LoginReqRDMA) Fields() LoginReqFields {
	return LoginReqFields{Tag: r.Tag(), ReqITIULen: r.ReqITIULen(), ReqBufFmt: r.ReqBufFmt(), ReqFlags: r.ReqFlags(),
		ImmDataOffset: r.ImmDataOffset(), InitiatorPortID: r.InitiatorPortID(), TargetPortID: r.TargetPortID()}
}

// LoginRsp is SRP_LOGIN_RSP (struct srp_login_rsp), 52 bytes: the
// opcode, req_lim_delta at 4 (the initiator's first credit), the
// request's tag at 8, max_it_iu_len at 16 (the largest IU the target
// takes), max_ti_iu_len at 20 (the largest it sends), buf_fmt at 24
// (BufFmt*), rsp_flags at 26 (RspMultiChan*, ImmedSupported), 25
// reserved bytes.
type LoginRsp []byte

const (
	lrspReqLimDelta = 4
	lrspTag         = 8
	lrspMaxITIULen  = 16
	lrspMaxTIIULen  = 20
	lrspBufFmt      = 24
	lrspFlags       = 26
)

// ParseLoginRsp checks that b starts with SRP_LOGIN_RSP and returns a
// view of it and its length. (The Linux initiator, too, checks the
// opcode before it reads a field: srp_cm_rep_handler.)
func ParseLoginRsp(b []byte) (LoginRsp, int, error) {
	h, err := fixed(b, OpLoginRsp, &loginRspLayout)
	if err != nil {
		return nil, 0, err
	}
	return LoginRsp(h), LoginRspLen, nil
}

// IsValid reports whether r holds a whole response: the precondition
// of every getter and setter.
func (r LoginRsp) IsValid() bool          { return len(r) >= LoginRspLen }
func (r LoginRsp) ReqLimDelta() int32     { return int32(be32(r, lrspReqLimDelta)) }
func (r LoginRsp) Tag() uint64            { return tag(r, lrspTag) }
func (r LoginRsp) MaxITIULen() uint32     { return be32(r, lrspMaxITIULen) }
func (r LoginRsp) MaxTIIULen() uint32     { return be32(r, lrspMaxTIIULen) }
func (r LoginRsp) BufFmt() uint16         { return be16(r, lrspBufFmt) }
func (r LoginRsp) RspFlags() uint8        { return r[lrspFlags] }
func (r LoginRsp) SetBufFmt(f uint16)     { binary.BigEndian.PutUint16(r[lrspBufFmt:], f) }
func (r LoginRsp) SetRspFlags(f uint8)    { r[lrspFlags] = f }
func (r LoginRsp) SetReqLimDelta(d int32) { binary.BigEndian.PutUint32(r[lrspReqLimDelta:], uint32(d)) }

// ImmDataOffset is the offset of immediate data in the SRP_CMDs of the
// connection a login opened: the request's imm_data_offset when the
// request asked for immediate data and the response granted it, and the
// offset does not fall inside a command's fixed part; 0 (none)
// otherwise. (The Linux target grants it only at an offset of at least
// 48, srpt_cm_req_recv; the Linux initiator uses it only when granted,
// srp_cm_rep_handler.)
func ImmDataOffset(req LoginReqFields, rsp LoginRsp) int {
	if req.ReqFlags&ImmedRequested == 0 || rsp.RspFlags()&ImmedSupported == 0 || req.ImmDataOffset < CmdLen {
		return 0
	}
	return int(req.ImmDataOffset)
}

// LoginRej is SRP_LOGIN_REJ (struct srp_login_rej), 32 bytes: the
// opcode, the reason at 4, the request's tag at 8, buf_fmt at 24 (the
// formats the target supports).
type LoginRej []byte

const (
	lrejReason = 4
	lrejTag    = 8
	lrejBufFmt = 24
)

// RejReason is why a target refused a login (enum srp_login_rej_reason).
type RejReason uint32

// Reject reasons.
const (
	RejUnableEstablishChannel  RejReason = 0x00010000
	RejInsufficientResources   RejReason = 0x00010001
	RejITIULenTooLarge         RejReason = 0x00010002 // also sent for one too small (srpt)
	RejUnableAssociateChannel  RejReason = 0x00010003
	RejUnsupportedDescFormat   RejReason = 0x00010004
	RejMultiChannelUnsupported RejReason = 0x00010005
	RejChannelLimitReached     RejReason = 0x00010006
)

var rejReasonNames = [...]string{
	"unable to establish RDMA channel", "insufficient resources", "requested max IU length too large",
	"unable to associate RDMA channel", "unsupported descriptor format", "multi-channel unsupported",
	"channel limit reached",
}

func (r RejReason) String() string {
	if i := r - RejUnableEstablishChannel; r >= RejUnableEstablishChannel && int(i) < len(rejReasonNames) {
		return rejReasonNames[i]
	}
	return fmt.Sprintf("reject reason %#08x", uint32(r))
}

// ParseLoginRej checks that b starts with SRP_LOGIN_REJ and returns a
// view of it and its length.
func ParseLoginRej(b []byte) (LoginRej, int, error) {
	h, err := fixed(b, OpLoginRej, &loginRejLayout)
	if err != nil {
		return nil, 0, err
	}
	return LoginRej(h), LoginRejLen, nil
}

// IsValid reports whether r holds a whole reject.
func (r LoginRej) IsValid() bool     { return len(r) >= LoginRejLen }
func (r LoginRej) Reason() RejReason { return RejReason(be32(r, lrejReason)) }
func (r LoginRej) Tag() uint64       { return tag(r, lrejTag) }
func (r LoginRej) BufFmt() uint16    { return be16(r, lrejBufFmt) }
