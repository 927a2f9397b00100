package tunnel

import (
	"encoding/binary"

	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/transport"
)

// Op's body is one RDMA operation a requester issued, for the far gateway
// to issue on its own leg.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|    Opcode     |               Reserved (zero)                 |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                              ID                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Remote address (64 bits)                   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                             R_Key                             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        Immediate data                         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                       R_Key to invalidate                     |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                            Length                             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  Compare (64 bits; atomics)                   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 Swap or add (64 bits; atomics)                |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Reserved (zero, 64 bits)                   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          Payload: Length bytes (SEND and WRITE family)        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Opcode is the IBTA RC opcode of the operation's only packet
// (RC_SEND_ONLY, RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, RC_RDMA_READ_REQUEST,
// RC_FETCH_ADD, ...): the operation whole, however many packets it took
// on either fabric. Length is the bytes sent or written (the payload's
// length), read (READ: no payload), or 8 (atomics). ID names the Op in
// its Completion; it is the sender's and only has to be unique among its
// Ops in flight.
type Op []byte

const (
	opOpcode  = 0
	opID      = 4
	opRemote  = 8
	opRKey    = 16
	opImm     = 20
	opInvRKey = 24
	opLength  = 28
	opCompare = 32
	opSwapAdd = 40
	opLen     = 56
)

// OpFields are an Op frame's fields.
type OpFields struct {
	Opcode  transport.Opcode
	ID      uint32
	Remote  uint64
	RKey    uint32
	Imm     uint32
	InvRKey uint32
	Length  uint32
	Compare uint64
	SwapAdd uint64
}

// wireOpcodes are the operations an Op carries, as IBTA opcodes.
var wireOpcodes = map[transport.Opcode]roce.Opcode{
	transport.OpSend:         roce.RCSendOnly,
	transport.OpSendWithImm:  roce.RCSendOnlyWithImmediate,
	transport.OpSendWithInv:  roce.RCSendOnlyWithInvalidate,
	transport.OpWrite:        roce.RCRDMAWriteOnly,
	transport.OpWriteWithImm: roce.RCRDMAWriteOnlyWithImmediate,
	transport.OpRead:         roce.RCRDMAReadRequest,
	transport.OpCompareSwap:  roce.RCCompareSwap,
	transport.OpFetchAdd:     roce.RCFetchAdd,
}

var fromWire = func() map[roce.Opcode]transport.Opcode {
	m := make(map[roce.Opcode]transport.Opcode, len(wireOpcodes))
	for t, w := range wireOpcodes {
		m[w] = t
	}
	return m
}()

// HasPayload reports whether an Op of opcode o carries its Length bytes
// (the SEND and WRITE family).
func HasPayload(o transport.Opcode) bool {
	switch o {
	case transport.OpSend, transport.OpSendWithImm, transport.OpSendWithInv, transport.OpWrite, transport.OpWriteWithImm:
		return true
	}
	return false
}

// Fields returns the frame's fields (the opcode is checked by ParseOp).
func (o Op) Fields() OpFields {
	return OpFields{Opcode: fromWire[roce.Opcode(o[opOpcode])], ID: binary.BigEndian.Uint32(o[opID:]),
		Remote: binary.BigEndian.Uint64(o[opRemote:]), RKey: binary.BigEndian.Uint32(o[opRKey:]),
		Imm: binary.BigEndian.Uint32(o[opImm:]), InvRKey: binary.BigEndian.Uint32(o[opInvRKey:]),
		Length: binary.BigEndian.Uint32(o[opLength:]), Compare: binary.BigEndian.Uint64(o[opCompare:]),
		SwapAdd: binary.BigEndian.Uint64(o[opSwapAdd:])}
}

// PayloadLen returns how many payload bytes follow the fixed part.
func (f *OpFields) PayloadLen() int {
	if HasPayload(f.Opcode) {
		return int(f.Length)
	}
	return 0
}

func (f *OpFields) check() error {
	if _, ok := wireOpcodes[f.Opcode]; !ok {
		return malformed("Op frame: opcode %v is not an RC operation", f.Opcode)
	}
	if f.Length > MaxPayload {
		return malformed("Op frame: %v of %d bytes, at most %d", f.Opcode, f.Length, MaxPayload)
	}
	if (f.Opcode == transport.OpCompareSwap || f.Opcode == transport.OpFetchAdd) && f.Length != 8 {
		return malformed("Op frame: %v of %d bytes, want 8", f.Opcode, f.Length)
	}
	return nil
}

// Append appends an Op frame's header and fixed part; the caller writes
// its PayloadLen bytes of payload after them.
func (f *OpFields) Append(b []byte) ([]byte, error) {
	if err := f.check(); err != nil {
		return b, err
	}
	b = appendHeader(b, TypeOp, opLen+f.PayloadLen())
	s := len(b)
	b = append(b, make([]byte, opLen)...)
	o := b[s:]
	o[opOpcode] = byte(wireOpcodes[f.Opcode])
	binary.BigEndian.PutUint32(o[opID:], f.ID)
	binary.BigEndian.PutUint64(o[opRemote:], f.Remote)
	binary.BigEndian.PutUint32(o[opRKey:], f.RKey)
	binary.BigEndian.PutUint32(o[opImm:], f.Imm)
	binary.BigEndian.PutUint32(o[opInvRKey:], f.InvRKey)
	binary.BigEndian.PutUint32(o[opLength:], f.Length)
	binary.BigEndian.PutUint64(o[opCompare:], f.Compare)
	binary.BigEndian.PutUint64(o[opSwapAdd:], f.SwapAdd)
	return b, nil
}

// ParseOp checks an Op frame's fixed part against the body's length
// (bodyLen, from its header): a known opcode, and as many payload bytes as
// the opcode and Length say.
func ParseOp(fixed []byte, bodyLen int) (OpFields, error) {
	if len(fixed) < opLen {
		return OpFields{}, malformed("Op frame: %d bytes, want %d", len(fixed), opLen)
	}
	o := Op(fixed)
	w := roce.Opcode(o[opOpcode])
	if _, ok := fromWire[w]; !ok {
		return OpFields{}, malformed("Op frame: opcode 0x%02x is not an RC operation's only packet", uint8(w))
	}
	f := o.Fields()
	if err := f.check(); err != nil {
		return OpFields{}, err
	}
	if bodyLen != opLen+f.PayloadLen() {
		return OpFields{}, malformed("Op frame: %v of length %d in a body of %d bytes, want %d", f.Opcode, f.Length, bodyLen, opLen+f.PayloadLen())
	}
	return f, nil
}

// Completion's body is an Op's outcome, sent once the far leg completed it.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                              ID                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|    Status     |               Reserved (zero)                 |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|            Original value (64 bits; atomics)                  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         Data: a successful READ's bytes, all of them          |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Status is 0 for success, else the AETH NAK code the requester is to see
// (1 invalid request, 2 remote access error, 3 remote operational error):
// the far completion status mapped through transport's one table.
type Completion []byte

const (
	compID        = 0
	compStatus    = 4
	compOrig      = 8
	completionLen = 16
)

// CompletionFields are a Completion frame's fields.
type CompletionFields struct {
	ID     uint32
	Status transport.Status
	Orig   uint64
	// DataLen is how many bytes of READ data follow the fixed part.
	DataLen int
}

// Append appends a Completion frame's header and fixed part; the caller
// writes its DataLen bytes of data after them. A failed status carries no
// data.
func (f *CompletionFields) Append(b []byte) ([]byte, error) {
	if f.DataLen < 0 || f.DataLen > MaxPayload {
		return b, malformed("Completion frame: %d bytes of data, at most %d", f.DataLen, MaxPayload)
	}
	var code uint8
	if f.Status != transport.StatusSuccess {
		if f.DataLen != 0 {
			return b, malformed("Completion frame: %v with %d bytes of data", f.Status, f.DataLen)
		}
		code = transport.NAKCode(f.Status)
	}
	b = appendHeader(b, TypeCompletion, completionLen+f.DataLen)
	b = append(b, 0, 0, 0, 0, code, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
	c := b[len(b)-completionLen:]
	binary.BigEndian.PutUint32(c[compID:], f.ID)
	binary.BigEndian.PutUint64(c[compOrig:], f.Orig)
	return b, nil
}

// ParseCompletion checks a Completion frame's fixed part against the
// body's length.
func ParseCompletion(fixed []byte, bodyLen int) (CompletionFields, error) {
	if len(fixed) < completionLen {
		return CompletionFields{}, malformed("Completion frame: %d bytes, want %d", len(fixed), completionLen)
	}
	c := Completion(fixed)
	f := CompletionFields{ID: binary.BigEndian.Uint32(c[compID:]), Orig: binary.BigEndian.Uint64(c[compOrig:]),
		DataLen: bodyLen - completionLen}
	switch code := c[compStatus]; code {
	case 0:
	case roce.NAKInvalidRequest, roce.NAKRemoteAccessError, roce.NAKRemoteOperationalError:
		f.Status = transport.NAKStatus(code)
		if f.DataLen != 0 {
			return CompletionFields{}, malformed("Completion frame: %v with %d bytes of data", f.Status, f.DataLen)
		}
	default:
		return CompletionFields{}, malformed("Completion frame: status %d is not success or a NAK code", code)
	}
	if f.DataLen < 0 || f.DataLen > MaxPayload {
		return CompletionFields{}, malformed("Completion frame: body of %d bytes", bodyLen)
	}
	return f, nil
}
