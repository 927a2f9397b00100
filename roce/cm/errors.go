package cm

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/rbridge/rbridge/roce"
)

// Sentinel errors. Truncated input matches roce.ErrTruncated (through a
// *roce.HeaderError), as the transport headers' parsers do.
var (
	// ErrBadMAD means the MAD is not one the CM handles: a base version
	// other than 1, another management class, a class version other than
	// 2, a method other than SEND, or an attribute the CM does not define.
	ErrBadMAD = errors.New("not a CM MAD")
	// ErrBadIPCM means private data does not start with a valid RDMA IP CM
	// header (version 0, IP version 4 or 6).
	ErrBadIPCM = errors.New("bad RDMA IP CM header")
	// ErrClosed is returned by operations on a closed Manager, Listener or
	// Conn.
	ErrClosed = errors.New("closed")
	// ErrTimeout means the peer did not answer after every retry.
	ErrTimeout = errors.New("timed out")
)

// RejectError is returned when the peer rejected a connection (REJ).
type RejectError struct {
	Reason      RejectReason
	PrivateData []byte
}

func (e *RejectError) Error() string { return fmt.Sprintf("cm: rejected: %v", e.Reason) }

// Is matches another *RejectError with the same reason, so that
// errors.Is(err, &RejectError{Reason: RejectInvalidServiceID}) works.
func (e *RejectError) Is(target error) bool {
	t, ok := target.(*RejectError)
	return ok && t.Reason == e.Reason
}

// dialError is a Dial's failure: it names the address dialed and wraps
// the cause (a *RejectError, ErrTimeout, ErrClosed).
type dialError struct {
	to  netip.AddrPort
	err error
}

func (e *dialError) Error() string {
	msg := strings.TrimPrefix(e.err.Error(), "cm: ")
	var rej *RejectError
	if errors.As(e.err, &rej) && rej.Reason == RejectInvalidServiceID {
		msg += ": nothing listens on that port"
	}
	return fmt.Sprintf("cm: dial %v: %s", e.to, msg)
}

func (e *dialError) Unwrap() error { return e.err }

func truncated(hdr string, need, have int) error {
	return &roce.HeaderError{Header: hdr, Err: roce.ErrTruncated, Need: need, Have: have}
}

func bad(hdr string, err error, v uint64) error {
	return &roce.HeaderError{Header: hdr, Err: err, Value: v}
}
