package rpcrdma

import (
	"errors"
	"fmt"
)

// Sentinel errors; every error this package returns matches one of them
// with errors.Is and is an *Error that says where the fault lies.
var (
	// ErrTruncated means the bytes end inside the transport header (its
	// fixed words, a chunk list, a segment).
	ErrTruncated = errors.New("truncated")
	// ErrVersion means rdma_vers is not 1: not RPC-over-RDMA version 1
	// (the Linux server answers ERR_VERS, svc_rdma_xdr_decode_req).
	ErrVersion = errors.New("not RPC-over-RDMA version 1")
	// ErrProc means rdma_proc is none of RDMA_MSG, RDMA_NOMSG,
	// RDMA_MSGP, RDMA_DONE, RDMA_ERROR.
	ErrProc = errors.New("unknown message type")
	// ErrDiscriminator means an optional-data discriminator (a list
	// entry's "present" word, a reply chunk's) is neither 0 nor 1.
	ErrDiscriminator = errors.New("discriminator is neither 0 nor 1")
	// ErrSegmentCount means a write or reply chunk's segment count is 0
	// or more than the rest of the message could hold (the Linux server
	// refuses a count of 0, xdr_check_write_chunk).
	ErrSegmentCount = errors.New("bad segment count")
	// ErrPosition means a read segment's position is not a multiple of 4
	// (an XDR position; svc_rdma_recvfrom.c refuses it).
	ErrPosition = errors.New("read position not XDR-aligned")
	// ErrErrorCode means an RDMA_ERROR's code is neither ERR_VERS nor
	// ERR_CHUNK.
	ErrErrorCode = errors.New("unknown error code")
	// ErrMagic means rdma_cm private data does not start with the RFC
	// 8797 magic 0xf6ab0e18.
	ErrMagic = errors.New("not RFC 8797 private data (magic)")
)

// Error describes what is wrong with one structure.
type Error struct {
	Op     string // the operation: "parse header", "parse connect private data"
	Field  string // the field at fault, "" for the structure as a whole
	Offset int    // the field's byte offset in the bytes given to Op
	Err    error  // one of the sentinels above
	Detail string // the values involved, for people
}

func (e *Error) Error() string {
	s := "rpcrdma: " + e.Op
	if e.Field != "" {
		s += fmt.Sprintf(": %s (byte %d)", e.Field, e.Offset)
	}
	s += ": " + e.Err.Error()
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

func truncated(op, field string, off, need, have int) error {
	return &Error{Op: op, Field: field, Offset: off, Err: ErrTruncated, Detail: fmt.Sprintf("%d bytes, need %d", have, need)}
}
