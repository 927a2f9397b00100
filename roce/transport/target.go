package transport

import (
	"errors"
	"fmt"

	"github.com/rbridge/rbridge/roce"
)

// A Target executes the requests that arrive on an RC QP, in place of the
// QP's receive queue and memory regions: a gateway's session is one, which
// re-issues each request on another fabric and completes it when the far
// side did. Without a Target (QPInitAttr.Target nil) a QP executes requests
// itself against its PD's memory regions and its receive queue; that is the
// same hook, completed at once.
//
// The responder hands the target every request in PSN order: each packet
// of a SEND or RDMA WRITE as it arrives (so a WRITE longer than the
// requester's window flows), each READ and atomic whole. Responses leave in
// PSN order and only as far as the target completed: an ACK, a READ
// response or an atomic ACK acknowledges every PSN before it, so nothing is
// acknowledged before the target completed it, and a failure reaches the
// requester as the NAK for the first PSN that failed.
//
// Locking: Request and Abandon run with the QP's lock held (Request on the
// device's receive goroutine, Abandon wherever the QP leaves RTR/RTS). They
// must not block and must not call the QP's methods; QP.Complete is called
// later, from any other goroutine.
type Target interface {
	// Request offers the next request. The Request, and its Payload,
	// are valid only during the call: the QP hands the next one in the
	// same memory. The Reply says whether it is done, pending (QP.Complete
	// with the request's Token follows), failed, or refused for lack of
	// credit (the requester gets an RNR NAK once nothing before it is
	// pending, and sends it again).
	Request(r *Request) Reply
	// Abandon says the QP left RTR/RTS (an error, Close, a reset): the
	// tokens of its pending requests are void and QP.Complete refuses them.
	Abandon()
}

// A Flusher is a Target told when a batch of received packets has been
// handed over: Flush runs on the device's receive goroutine with no lock
// held, so it may post what the batch's requests queued (on this or any
// other QP) in one go.
type Flusher interface {
	Flush()
}

// Request is one request handed to a Target.
type Request struct {
	Token Token
	// Op is the operation: OpSend (SEND's first and middle packets, and a
	// last one without immediate or invalidate), OpSendWithImm,
	// OpSendWithInv, OpWrite, OpWriteWithImm (its last packet), OpRead,
	// OpCompareSwap, OpFetchAdd.
	Op  Opcode
	PSN roce.PSN
	// First and Last say where the packet lies in its message: both for a
	// single-packet message, a READ and an atomic.
	First, Last bool
	// Offset is where Payload lies within the message (SEND, WRITE).
	Offset int
	// Payload is the packet's data (SEND, WRITE), valid only during the
	// call to Request: copy what must outlive it.
	Payload []byte
	// VA is where Payload goes (WRITE: the RETH's address plus Offset),
	// or what is read (READ) or operated on (atomics); RKey is the
	// requester's key for it.
	VA   uint64
	RKey uint32
	// Length is the whole message's length (WRITE: the RETH's DMA length)
	// or the bytes to read (READ).
	Length uint32
	// Imm (SEND_WITH_IMM, WRITE_WITH_IMM) and InvRKey (SEND_WITH_INV) come
	// with the last packet.
	Imm     uint32
	InvRKey uint32
	// Compare and SwapAdd are the atomic's operands.
	Compare, SwapAdd uint64
	// Dup marks a READ asked for again after it completed (its response
	// was lost): serve it again, it changes nothing in PSN order.
	Dup bool
	// Lent says Payload lies in a receive frame the device's conn lent
	// (roce.FrameLender: AF_XDP over the caller's pool), named by Frame
	// (its offset in the UMEM): a target that keeps the payload past the
	// call may take a reference on that frame from the pool it belongs
	// to instead of copying. The device hands the frame back after the
	// batch.
	Lent  bool
	Frame uint64
}

// RNR reports whether a refusal of r for lack of credit (NoCredit) is an
// RNR NAK: r is what consumes a receive WQE, a SEND's first packet or a
// WRITE_WITH_IMM's last. The rest is refused with a sequence NAK for its
// PSN.
func (r *Request) RNR() bool {
	switch r.Op {
	case OpSend, OpSendWithImm, OpSendWithInv:
		return r.First
	case OpWriteWithImm:
		return true
	}
	return false
}

// Token names a request the target completes later.
type Token struct {
	psn roce.PSN
	gen uint32
	dup bool
	ext bool
}

// PSN returns the PSN of the request the token names.
func (t Token) PSN() roce.PSN { return t.psn }

// ExternalToken returns a token that names id, for the requests of an
// endpoint that is not a QP of this package (a verbs QP names its
// receives so); QP.Complete refuses it.
func ExternalToken(id uint32) Token { return Token{gen: id, ext: true} }

// ID returns the id of an ExternalToken.
func (t Token) ID() uint32 { return t.gen }

// Result is what a Target did with a request.
type Result uint8

// Results.
const (
	// Done: the request is complete (a READ's Data or an atomic's Orig
	// in the Reply).
	Done Result = iota
	// Pending: QP.Complete with the request's Token follows.
	Pending
	// Failed: the request failed with Reply.Status (StatusRemAccessErr,
	// StatusRemInvReqErr or StatusRemOpErr as the requester will see it);
	// the QP NAKs it and enters the error state.
	Failed
	// NoCredit: the target cannot take the request now; the requester is
	// told to try again (RNR NAK) and nothing of the request is kept.
	NoCredit
	// Hold: the target cannot take the request until it calls
	// QP.Resume (its consumer is not attached yet, or it waits for a
	// buffer); nothing of the request is kept and nothing is sent, to the
	// requester's retransmissions of it either, until QP.Resume asks the
	// requester for it again.
	Hold
)

// Reply is a Target's answer to a Request.
type Reply struct {
	Result Result
	// Join (with Pending, for a SEND or WRITE packet that is not its
	// message's first) adds the packet to the previous packet's pending
	// request: the previous Token completes both.
	Join bool
	// Status is the failure (Failed).
	Status Status
	// Data is a READ's bytes (Done), held until Lease is released.
	Data  []byte
	Lease Lease
	// Orig is an atomic's original value (Done).
	Orig uint64
}

// Completion is the outcome of a pending request.
type Completion struct {
	// Status is StatusSuccess or the failure as the requester will see it
	// (StatusRemAccessErr, StatusRemInvReqErr, StatusRemOpErr).
	Status Status
	// Data is a READ's bytes: exactly the requested length, or, with
	// More, the next part of them. The QP sends them without a copy and
	// releases Lease (if any) once they are gone.
	Data  []byte
	Lease Lease
	// More says Data is a part of a READ's bytes and more parts follow,
	// each with the same token: parts come in order, every one but the
	// last non-empty and a whole number of the QP's path MTU, and the
	// last (More false) ends the READ, its parts' lengths summing to the
	// READ's. The READ's responses start as its first part arrives (once
	// everything before it completed), so a READ of any length flows
	// through memory a part at a time. A failure (Status) ends it; a part
	// that does not fit fails it (ErrBadPart for More on another kind).
	More bool
	// Orig is an atomic's original value.
	Orig uint64
}

// A Lease is memory lent to the QP until Release (a pool buffer).
type Lease interface{ Release() }

// ErrBadPart matches a Completion with More for a request that is not a
// READ, or a failure with More.
var ErrBadPart = errors.New("a part completes only a READ, with success")

// ErrStaleToken matches a completion whose request is no longer pending:
// completed already, or abandoned when the QP left RTR/RTS.
var ErrStaleToken = errors.New("request is not pending")

// Complete completes a pending request. Responses then leave in PSN order
// as far as completions allow. It must not be called from Target.Request
// or Abandon (they run under the QP's lock). A Lease given with a stale
// token is released at once.
func (qp *QP) Complete(tok Token, c Completion) error {
	qp.mu.Lock()
	err := qp.completeLocked(tok, c)
	if err != nil && c.Lease != nil {
		c.Lease.Release()
	}
	qp.flushAckLocked()
	qp.mu.Unlock()
	qp.send()
	return err
}

// NAKCode returns the NAK code a responder sends for a failure the
// requester sees as s: the one table between completion statuses and NAK
// syndromes (IBTA 9.7.5.2.4, and the requester's side in recovery.onNAK).
func NAKCode(s Status) uint8 {
	switch s {
	case StatusRemAccessErr, StatusLocProtErr, StatusLocAccessErr:
		return roce.NAKRemoteAccessError
	case StatusRemInvReqErr, StatusLocLenErr:
		return roce.NAKInvalidRequest
	}
	return roce.NAKRemoteOperationalError
}

// NAKStatus returns the status a requester completes with on a NAK code
// other than a PSN sequence error.
func NAKStatus(code uint8) Status {
	switch code {
	case roce.NAKInvalidRequest:
		return StatusRemInvReqErr
	case roce.NAKRemoteAccessError:
		return StatusRemAccessErr
	}
	return StatusRemOpErr
}

func (r *Request) String() string {
	return fmt.Sprintf("%v psn %d first=%v last=%v off %d len %d", r.Op, uint32(r.PSN), r.First, r.Last, r.Offset, len(r.Payload))
}
