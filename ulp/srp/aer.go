package srp

import (
	"encoding/binary"
	"fmt"
)

// AerReq is an SRP_AER_REQ, an asynchronous event the target reports
// (struct srp_aer_req): a view of its 36-byte fixed part and the sense
// data after it.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  opcode 0x82  |    sol_not    |           reserved            |  0
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  req_lim_delta                                |  4
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  tag (8 bytes)                                |  8
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  reserved                                     | 16
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  LUN (8 bytes)                                | 20
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  sense_data_len                               | 28
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  reserved                                     | 32
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  sense data (sense_data_len)                                  | 36
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The initiator adds the delta to its request limit and answers with an
// SRP_AER_RSP of the same tag (srp_process_aer_req; the Linux initiator
// ignores the event). The Linux target never sends one.
type AerReq []byte

// AerRsp is an SRP_AER_RSP (struct srp_aer_rsp): 16 bytes, the opcode
// and, at 8, the tag of the SRP_AER_REQ it answers.
type AerRsp []byte

const (
	aerSolNot      = 1
	aerReqLimDelta = 4
	aerTag         = 8
	aerLUN         = 20
	aerSenseLen    = 28
)

// ParseAerReq checks that b holds an SRP_AER_REQ whole, with its sense
// data, and returns it and the bytes it takes.
func ParseAerReq(b []byte) (AerReq, int, error) {
	h, err := fixed(b, OpAerReq, &aerReqLayout)
	if err != nil {
		return nil, 0, err
	}
	a := AerReq(h)
	if need := uint64(AerReqLen) + uint64(a.SenseDataLen()); uint64(len(b)) < need {
		return nil, 0, &Error{Op: "parse SRP_AER_REQ", Field: "sense data", Offset: AerReqLen, Err: ErrTruncated,
			Detail: fmt.Sprintf("%d bytes, need %d", len(b), need)}
	}
	n := a.Len()
	return AerReq(b[:n:n]), n, nil
}

// IsValid reports whether a holds the fixed part: the precondition of
// every getter and setter.
func (a AerReq) IsValid() bool        { return len(a) >= AerReqLen }
func (a AerReq) SolNot() uint8        { return a[aerSolNot] }
func (a AerReq) ReqLimDelta() int32   { return int32(be32(a, aerReqLimDelta)) }
func (a AerReq) Tag() uint64          { return tag(a, aerTag) }
func (a AerReq) LUN() uint64          { return be64(a, aerLUN) }
func (a AerReq) SenseDataLen() uint32 { return be32(a, aerSenseLen) }

// SetReqLimDelta rewrites the credit in place.
func (a AerReq) SetReqLimDelta(d int32) {
	binary.BigEndian.PutUint32(a[aerReqLimDelta:], uint32(d))
}

// Len is the request's length with its sense data.
func (a AerReq) Len() int { return AerReqLen + int(a.SenseDataLen()) }

// CheckLen checks that a message of n bytes holds the whole request;
// bytes after it are allowed.
func (a AerReq) CheckLen(n int) error {
	need := uint64(AerReqLen) + uint64(a.SenseDataLen())
	if n >= 0 && uint64(n) >= need {
		return nil
	}
	e := &Error{Op: "check SRP_AER_REQ", Field: "sense data", Offset: AerReqLen, Err: ErrLength, Detail: fmt.Sprintf("%d bytes, the request takes %d", n, need)}
	if n < AerReqLen {
		f := aerReqLayout.fieldAt(max(n, 0))
		e.Field, e.Offset = f.name, f.off
	}
	return e
}

// SenseData is a view of the sense data.
func (a AerReq) SenseData() []byte {
	n := a.Len()
	return a[AerReqLen:n:n]
}

// ParseAerRsp checks that b starts with an SRP_AER_RSP and returns a
// view of it and its length.
func ParseAerRsp(b []byte) (AerRsp, int, error) {
	h, err := fixed(b, OpAerRsp, &aerRspLayout)
	if err != nil {
		return nil, 0, err
	}
	return AerRsp(h), AerRspLen, nil
}

// IsValid reports whether a holds a whole SRP_AER_RSP.
func (a AerRsp) IsValid() bool { return len(a) >= AerRspLen }
func (a AerRsp) Tag() uint64   { return tag(a, aerTag) }
