package srp

import (
	"errors"
	"fmt"
)

// Sentinel errors; every error this package returns matches one of them
// with errors.Is and is an *Error that says where the fault lies.
var (
	// ErrTruncated means the bytes end inside the structure: its fixed
	// part, the additional CDB, a descriptor, the immediate, response or
	// sense data. Error.Field names the field the bytes end in.
	ErrTruncated = errors.New("truncated")
	// ErrOpcode means an information unit's opcode is not one SRP
	// defines, or not the one the parser reads.
	ErrOpcode = errors.New("unexpected opcode")
	// ErrFormat means an SRP_CMD's buf_fmt names a reserved descriptor
	// format (4-15), or immediate data for the data-in direction (SRP-2
	// defines it for data-out only).
	ErrFormat = errors.New("unsupported data buffer descriptor format")
	// ErrImmediate means an SRP_CMD carries immediate data where the
	// connection has none: its login fixed no immediate data offset, or
	// the offset lies inside the command's own descriptors (srpt refuses
	// both: srpt_get_desc_tbl).
	ErrImmediate = errors.New("immediate data without room for it")
	// ErrLength means a message of the length given does not hold what
	// its fields say it holds (CheckLen).
	ErrLength = errors.New("message shorter than its contents")
)

// Error describes what is wrong with one structure.
type Error struct {
	Op     string // the operation: "parse SRP_CMD", "parse SRP_LOGIN_RSP", ...
	Field  string // the field at fault, "" for the structure as a whole
	Offset int    // the field's byte offset in the bytes given to Op
	Err    error  // one of the sentinels above
	Detail string // the values involved, for people
}

func (e *Error) Error() string {
	s := "srp: " + e.Op
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

// truncated says that b, have bytes long, ends inside field (at off)
// of a structure that needs need bytes.
func truncated(op, field string, off, need, have int) error {
	return &Error{Op: op, Field: field, Offset: off, Err: ErrTruncated, Detail: fmt.Sprintf("%d bytes, need %d", have, need)}
}
