package rpcrdma

import (
	"encoding/binary"
	"fmt"
)

// Header is the fixed part of every RPC-over-RDMA version 1 message (RFC
// 8166 section 4.2, struct rpcrdma_common and rdma_msg's first words; the
// Linux client writes them in rpcrdma_marshal_req, the server in
// svc_rdma_sendto and svc_rdma_send_error_msg, all big-endian XDR):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  rdma_xid (the RPC message's XID)             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  rdma_vers (1)                                |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  rdma_credit                                  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                  rdma_proc (Proc)                             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// A requester's credit value asks for that many credits; a responder's
// grants them (the Linux server grants svcrdma_max_requests, 64 by
// default).
type Header []byte

// HeaderLen is the fixed header's length.
const HeaderLen = 16

// Version is the only version this package reads.
const Version = 1

const (
	hdrXID     = 0
	hdrVers    = 4
	hdrCredits = 8
	hdrProc    = 12
)

// IsValid reports whether h holds a whole fixed header.
func (h Header) IsValid() bool { return len(h) >= HeaderLen }

func (h Header) XID() uint32         { return binary.BigEndian.Uint32(h[hdrXID:]) }
func (h Header) Vers() uint32        { return binary.BigEndian.Uint32(h[hdrVers:]) }
func (h Header) Credits() uint32     { return binary.BigEndian.Uint32(h[hdrCredits:]) }
func (h Header) Proc() Proc          { return Proc(binary.BigEndian.Uint32(h[hdrProc:])) }
func (h Header) SetXID(v uint32)     { binary.BigEndian.PutUint32(h[hdrXID:], v) }
func (h Header) SetVers(v uint32)    { binary.BigEndian.PutUint32(h[hdrVers:], v) }
func (h Header) SetCredits(v uint32) { binary.BigEndian.PutUint32(h[hdrCredits:], v) }
func (h Header) SetProc(v Proc)      { binary.BigEndian.PutUint32(h[hdrProc:], uint32(v)) }

// Proc is a message's type (enum rpcrdma_proc in the Linux kernel's
// include/linux/sunrpc/rpc_rdma.h; RFC 8166 section 4.2.1).
type Proc uint32

// Message types.
const (
	// ProcMsg: an RPC call or reply whose RPC message follows the
	// transport header in the same SEND.
	ProcMsg Proc = 0
	// ProcNoMsg: an RPC call or reply whose RPC message travels in a
	// chunk (a position-zero read chunk, a reply chunk): only the
	// transport header is sent.
	ProcNoMsg Proc = 1
	// ProcMsgP: RFC 5666's padded message, rdma_align and rdma_thresh
	// before the chunk lists; RFC 8166 deprecates it, the Linux server
	// refuses it.
	ProcMsgP Proc = 2
	// ProcDone: RFC 5666's signal that the requester finished reading a
	// reply's read chunks (RFC 8166: not used).
	ProcDone Proc = 3
	// ProcError: the responder could not parse a call or form its reply.
	ProcError Proc = 4
)

var procNames = [...]string{"RDMA_MSG", "RDMA_NOMSG", "RDMA_MSGP", "RDMA_DONE", "RDMA_ERROR"}

func (p Proc) String() string {
	if int(p) < len(procNames) {
		return procNames[p]
	}
	return fmt.Sprintf("Proc(%d)", uint32(p))
}

// HasChunks reports whether messages of type p carry chunk lists.
func (p Proc) HasChunks() bool { return p == ProcMsg || p == ProcNoMsg || p == ProcMsgP }

// ErrCode is an RDMA_ERROR's code (enum rpcrdma_errcode).
type ErrCode uint32

// Error codes.
const (
	// ErrVers: the responder does not speak the requester's version;
	// the range it does follows (rdma_vers_low, rdma_vers_high).
	ErrVers ErrCode = 1
	// ErrChunk: the requester's chunk lists could not be processed (or
	// the reply did not fit them).
	ErrChunk ErrCode = 2
)

func (c ErrCode) String() string {
	switch c {
	case ErrVers:
		return "ERR_VERS"
	case ErrChunk:
		return "ERR_CHUNK"
	}
	return fmt.Sprintf("ErrCode(%d)", uint32(c))
}
