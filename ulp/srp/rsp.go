package srp

import (
	"encoding/binary"
	"fmt"
)

// Rsp is an SRP_RSP, the target's answer to an SRP_CMD or an
// SRP_TSK_MGMT (struct srp_rsp): a view of its 36-byte fixed part and the
// response and sense data after it.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  opcode 0xc1  |    sol_not    |           reserved            |  0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  req_lim_delta                                |  4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  tag (the command's)                          |  8
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|           reserved            |     flags     |    status     | 16
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  data_out_res_cnt                             | 20
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  data_in_res_cnt                              | 24
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  sense_data_len                               | 28
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  resp_data_len                                | 32
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  response data (resp_data_len), then sense data               | 36
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The Linux target answers a command with the SCSI status, a residual
// count under DOUNDER/DIUNDER (DOOVER/DIOVER) and the sense data under
// SNSVALID (srpt_build_cmd_rsp), and a task management function with
// RSPVALID and 4 bytes of response data, the last the function's status
// (srpt_build_tskmgmt_rsp). The Linux initiator reads the sense data
// after resp_data_len bytes and a task management status from the 4th
// byte whenever resp_data_len is at least 4, RSPVALID or not
// (srp_process_rsp); this package reads them the same way.
type Rsp []byte

const (
	rspSolNot      = 1
	rspReqLimDelta = 4
	rspTag         = 8
	rspFlags       = 18
	rspStatus      = 19
	rspDataOutRes  = 20
	rspDataInRes   = 24
	rspSenseLen    = 28
	rspRespLen     = 32
)

// SRP_RSP flags (SRP_RSP_FLAG_* in srp.h).
const (
	RspValid = 1 << 0 // response data valid
	SnsValid = 1 << 1 // sense data valid
	DOOver   = 1 << 2 // data-out overflow: data_out_res_cnt valid
	DOUnder  = 1 << 3 // data-out underflow: data_out_res_cnt valid
	DIOver   = 1 << 4 // data-in overflow: data_in_res_cnt valid
	DIUnder  = 1 << 5 // data-in underflow: data_in_res_cnt valid
)

// Task management statuses, the 4th byte of an SRP_RSP's response data
// (SRP_TSK_MGMT_* in drivers/infiniband/ulp/srpt/ib_srpt.h).
const (
	TaskMgmtSuccess      = 0x00
	TaskMgmtNotSupported = 0x04
	TaskMgmtFailed       = 0x05
)

// ParseRsp checks that b holds an SRP_RSP whole (its fixed part, the
// response data and, under SnsValid, the sense data) and returns it and
// the bytes it takes; b may go on after them (the Linux initiator does
// not look at a SEND's length).
func ParseRsp(b []byte) (Rsp, int, error) {
	const op = "parse SRP_RSP"
	h, err := fixed(b, OpRsp, &rspLayout)
	if err != nil {
		return nil, 0, err
	}
	r := Rsp(h)
	resp, sense := uint64(r.RespDataLen()), uint64(r.senseLen())
	if have := uint64(len(b)); have < RspLen+resp+sense {
		field, off := "response data", RspLen
		if have >= RspLen+resp {
			field, off = "sense data", RspLen+int(resp)
		}
		return nil, 0, &Error{Op: op, Field: field, Offset: off, Err: ErrTruncated,
			Detail: fmt.Sprintf("%d bytes, need %d (%d of response data, %d of sense data)", have, RspLen+resp+sense, resp, sense)}
	}
	n := RspLen + int(resp+sense)
	return Rsp(b[:n:n]), n, nil
}

// IsValid reports whether r holds the fixed part: the precondition of
// every getter and setter.
func (r Rsp) IsValid() bool { return len(r) >= RspLen }

func (r Rsp) SolNot() uint8 { return r[rspSolNot] }

// ReqLimDelta is the credit the response returns: how many more
// requests the initiator may send (signed; the Linux initiator adds it
// to its req_lim, srp_process_rsp).
func (r Rsp) ReqLimDelta() int32 { return int32(be32(r, rspReqLimDelta)) }

// SetReqLimDelta rewrites the credit in place.
func (r Rsp) SetReqLimDelta(d int32) { binary.BigEndian.PutUint32(r[rspReqLimDelta:], uint32(d)) }

// Tag is the tag of the command or task management function answered.
func (r Rsp) Tag() uint64 { return tag(r, rspTag) }

func (r Rsp) Flags() uint8 { return r[rspFlags] }

// Status is the SCSI status.
func (r Rsp) Status() uint8           { return r[rspStatus] }
func (r Rsp) DataOutResidual() uint32 { return be32(r, rspDataOutRes) }
func (r Rsp) DataInResidual() uint32  { return be32(r, rspDataInRes) }
func (r Rsp) SenseDataLen() uint32    { return be32(r, rspSenseLen) }
func (r Rsp) RespDataLen() uint32     { return be32(r, rspRespLen) }

// senseLen is the sense data's length: sense_data_len under SnsValid.
func (r Rsp) senseLen() uint32 {
	if r.Flags()&SnsValid == 0 {
		return 0
	}
	return r.SenseDataLen()
}

// Len is the response's length: the fixed part, the response data and
// the sense data.
func (r Rsp) Len() int { return int(r.len()) }

func (r Rsp) len() uint64 { return RspLen + uint64(r.RespDataLen()) + uint64(r.senseLen()) }

// CheckLen checks that a message of n bytes holds the whole response;
// bytes after it are allowed.
func (r Rsp) CheckLen(n int) error {
	if n >= 0 && uint64(n) >= r.len() {
		return nil
	}
	e := &Error{Op: "check SRP_RSP", Err: ErrLength, Detail: fmt.Sprintf("%d bytes, the response takes %d", n, r.len())}
	switch {
	case n < RspLen:
		f := rspLayout.fieldAt(max(n, 0))
		e.Field, e.Offset = f.name, f.off
	case uint64(n) < RspLen+uint64(r.RespDataLen()):
		e.Field, e.Offset = "response data", RspLen
	default:
		e.Field, e.Offset = "sense data", RspLen+int(r.RespDataLen())
	}
	return e
}

// ResponseData and SenseData are views of the data after the fixed
// part: resp_data_len bytes, then, under SnsValid, sense_data_len bytes
// (nil without).
func (r Rsp) ResponseData() []byte {
	n := RspLen + int(r.RespDataLen())
	return r[RspLen:n:n]
}

func (r Rsp) SenseData() []byte {
	if r.Flags()&SnsValid == 0 {
		return nil
	}
	off := RspLen + int(r.RespDataLen())
	n := off + int(r.SenseDataLen())
	return r[off:n:n]
}

// TaskMgmtStatus is a task management response's status (TaskMgmt*),
// the 4th byte of the response data; ok is false with fewer than 4
// bytes of it.
func (r Rsp) TaskMgmtStatus() (status uint8, ok bool) {
	if r.RespDataLen() < 4 {
		return 0, false
	}
	return r[RspLen+3], true
}

// RspFields are an SRP_RSP's fields, for AppendRsp.
type RspFields struct {
	SolNot      uint8
	ReqLimDelta int32
	Tag         uint64
	// Flags are DOOver to DIUnder as needed; AppendRsp sets SnsValid
	// itself, when Sense is not empty.
	Flags, Status                   uint8
	DataOutResidual, DataInResidual uint32
	Sense                           []byte
}

// AppendRsp appends an SRP_RSP of f to b and returns the result: the
// 36-byte fixed part, no response data, and f.Sense under SnsValid, as
// the Linux target answers a command (srpt_build_cmd_rsp). The tag is
// written as Tag reads it, so a command's tag comes back as it was sent.
func AppendRsp(b []byte, f RspFields) []byte {
	at := len(b)
	b = append(b, make([]byte, RspLen)...)
	r := b[at:]
	r[0], r[rspSolNot] = byte(OpRsp), f.SolNot
	binary.BigEndian.PutUint32(r[rspReqLimDelta:], uint32(f.ReqLimDelta))
	binary.LittleEndian.PutUint64(r[rspTag:], f.Tag)
	r[rspFlags], r[rspStatus] = f.Flags&^(SnsValid|RspValid), f.Status
	binary.BigEndian.PutUint32(r[rspDataOutRes:], f.DataOutResidual)
	binary.BigEndian.PutUint32(r[rspDataInRes:], f.DataInResidual)
	if len(f.Sense) > 0 {
		r[rspFlags] |= SnsValid
		binary.BigEndian.PutUint32(r[rspSenseLen:], uint32(len(f.Sense)))
	}
	return append(b, f.Sense...)
}
