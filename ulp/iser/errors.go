package iser

import (
	"errors"
	"fmt"
)

// Sentinel errors; every error this package returns matches one of them
// with errors.Is and is an *Error that says where the fault lies.
var (
	// ErrTruncated means the bytes are shorter than the structure.
	ErrTruncated = errors.New("truncated")
	// ErrOpcode means an iSER header's opcode is not one RFC 7145 defines
	// (iSCSI control-type PDU, Hello, HelloReply).
	ErrOpcode = errors.New("unknown iSER opcode")
	// ErrNotPDU means an iSER message carries no iSCSI PDU: an iSER Hello
	// or HelloReply, which neither Linux end sends (the CM private data
	// replaces them on InfiniBand and RoCE), and which a gateway does not
	// relay.
	ErrNotPDU = errors.New("iSER message carries no iSCSI PDU")
	// ErrText means login or text data is not a sequence of
	// key=value pairs, each ended by a NUL.
	ErrText = errors.New("malformed text key")
	// ErrAHS means a PDU's additional header segments do not fill the
	// total AHS length exactly, or one is of a type the PDU may not carry
	// twice.
	ErrAHS = errors.New("bad additional header segment")
	// ErrLength means a message's length does not match what its
	// headers say it holds: the headers, the AHS and the data segment
	// (with at most 3 bytes of padding).
	ErrLength = errors.New("message length does not match its PDU")
)

// Error describes what is wrong with one structure.
type Error struct {
	Op     string // the operation: "parse iSER header", "parse PDU", ...
	Field  string // the field at fault, "" for the structure as a whole
	Offset int    // the field's byte offset in the bytes given to Op
	Err    error  // one of the sentinels above
	Detail string // the values involved, for people
}

func (e *Error) Error() string {
	s := "iser: " + e.Op
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

func truncated(op string, need, have int) error {
	return &Error{Op: op, Err: ErrTruncated, Detail: fmt.Sprintf("%d bytes, need %d", have, need)}
}
