package srp

import "encoding/binary"

// CredReq is an SRP_CRED_REQ, the target granting credit outside a
// response (struct srp_cred_req): 16 bytes, the opcode, sol_not at 1,
// req_lim_delta at 4, the tag at 8. The initiator adds the delta to its
// request limit and answers with an SRP_CRED_RSP of the same tag
// (srp_process_cred_req). The Linux target never sends one: it returns
// credit in each SRP_RSP (srpt_build_cmd_rsp).
type CredReq []byte

// CredRsp is an SRP_CRED_RSP (struct srp_cred_rsp): 16 bytes, the opcode
// and, at 8, the tag of the SRP_CRED_REQ it answers.
type CredRsp []byte

const (
	credSolNot      = 1
	credReqLimDelta = 4
	credTag         = 8
)

// ParseCredReq checks that b starts with an SRP_CRED_REQ and returns a
// view of it and its length.
func ParseCredReq(b []byte) (CredReq, int, error) {
	h, err := fixed(b, OpCredReq, &credReqLayout)
	if err != nil {
		return nil, 0, err
	}
	return CredReq(h), CredReqLen, nil
}

// IsValid reports whether c holds a whole SRP_CRED_REQ.
func (c CredReq) IsValid() bool      { return len(c) >= CredReqLen }
func (c CredReq) SolNot() uint8      { return c[credSolNot] }
func (c CredReq) ReqLimDelta() int32 { return int32(be32(c, credReqLimDelta)) }
func (c CredReq) Tag() uint64        { return tag(c, credTag) }

// SetReqLimDelta rewrites the credit in place.
func (c CredReq) SetReqLimDelta(d int32) {
	binary.BigEndian.PutUint32(c[credReqLimDelta:], uint32(d))
}

// ParseCredRsp checks that b starts with an SRP_CRED_RSP and returns a
// view of it and its length.
func ParseCredRsp(b []byte) (CredRsp, int, error) {
	h, err := fixed(b, OpCredRsp, &credRspLayout)
	if err != nil {
		return nil, 0, err
	}
	return CredRsp(h), CredRspLen, nil
}

// IsValid reports whether c holds a whole SRP_CRED_RSP.
func (c CredRsp) IsValid() bool { return len(c) >= CredRspLen }
func (c CredRsp) Tag() uint64   { return tag(c, credTag) }
