package nvme

import (
	"errors"
	"fmt"
)

// Sentinel errors; every error this package returns matches one of them
// with errors.Is and is an *Error that says where the fault lies.
var (
	// ErrTruncated means the bytes are shorter than the structure.
	ErrTruncated = errors.New("truncated")
	// ErrNotSGL means a command's PSDT field does not select SGLs for the
	// data pointer (PRPs, or the reserved value): NVMe over Fabrics uses
	// SGLs only, and the Linux target fails such a command with Invalid
	// Field (drivers/nvme/target/core.c, nvmet_req_init).
	ErrNotSGL = errors.New("data pointer is not an SGL")
	// ErrSGLType means an SGL descriptor's type is one the RDMA binding
	// does not use where it stands (a bit bucket, a chained segment, a
	// transport data block, a reserved or vendor type).
	ErrSGLType = errors.New("unsupported SGL descriptor type")
	// ErrSGLSubtype means a descriptor's subtype does not go with its
	// type (a keyed data block's subtype must be address or invalidate; an
	// in-capsule data block's and a list's must be offset).
	ErrSGLSubtype = errors.New("unsupported SGL descriptor subtype")
	// ErrSGLBounds means an offset descriptor names bytes past the end of
	// the capsule.
	ErrSGLBounds = errors.New("SGL reaches past the capsule")
	// ErrSGLListLength means a last segment's length is zero or not a
	// multiple of the 16-byte descriptor.
	ErrSGLListLength = errors.New("bad SGL list length")
	// ErrSGLNested means a descriptor list holds a segment or last
	// segment descriptor: the RDMA binding's in-capsule list is the last.
	ErrSGLNested = errors.New("segment descriptor inside an SGL list")
	// ErrNotConnect means a command is not a Fabrics Connect.
	ErrNotConnect = errors.New("not a fabrics connect command")
	// ErrRecFmt means rdma_cm private data carries a record format other
	// than 0, the only one defined (NVME_RDMA_CM_FMT_1_0).
	ErrRecFmt = errors.New("unsupported record format")
	// ErrNQNTooLong means an NQN does not fit its 256-byte field with the
	// terminating NUL.
	ErrNQNTooLong = errors.New("NQN too long")
)

// Error describes what is wrong with one structure.
type Error struct {
	Op     string // the operation: "parse command", "parse capsule", ...
	Field  string // the field at fault, "" for the structure as a whole
	Offset int    // the field's byte offset in the bytes given to Op
	Err    error  // one of the sentinels above
	Detail string // the values involved, for people
}

func (e *Error) Error() string {
	s := "nvme: " + e.Op
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
