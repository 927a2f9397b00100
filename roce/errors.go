package roce

import (
	"errors"
	"fmt"
)

// Sentinel errors; every parse error matches one of them with errors.Is.
var (
	// ErrTruncated means a header or the packet is shorter than its layout.
	ErrTruncated = errors.New("truncated")
	// ErrBadVersion means the BTH transport version is not 0.
	ErrBadVersion = errors.New("unsupported transport header version")
	// ErrReservedOpcode means the opcode is reserved, or (from ParseBTH and
	// Packet.Decode) of a service rbridge does not speak (RD, XRC).
	ErrReservedOpcode = errors.New("reserved opcode")
	// ErrBadPad means the pad count does not fit the packet: pad bytes on an
	// opcode without payload, or more pad than payload.
	ErrBadPad = errors.New("bad pad count")
	// ErrBadLength means a length field disagrees with the packet (the UDP
	// length with the IP length).
	ErrBadLength = errors.New("bad length")
	// ErrBadICRC means the ICRC does not match the packet.
	ErrBadICRC = errors.New("ICRC mismatch")
	// ErrNotRoCEv2 means the bytes are not a RoCEv2 packet (not IPv4 or IPv6,
	// not UDP, or not to port 4791).
	ErrNotRoCEv2 = errors.New("not a RoCEv2 packet")
)

// Argument errors: what a serializer returns when its caller's values
// cannot make a packet.
var (
	// ErrAddrFamily means a packet's source and destination are not both
	// IPv4 or both IPv6.
	ErrAddrFamily = errors.New("source and destination address families differ")
	// ErrNoAddr means an address is missing (the zero netip.Addr).
	ErrNoAddr = errors.New("no address")
)

// HeaderError describes what is wrong with one header of a packet.
type HeaderError struct {
	Header string // "BTH", "RETH", ..., "packet"
	Err    error  // one of the sentinels above
	Need   int    // bytes needed, for ErrTruncated
	Have   int    // bytes present, for ErrTruncated
	Value  uint64 // the offending value, for other errors
}

func (e *HeaderError) Error() string {
	if errors.Is(e.Err, ErrTruncated) {
		return fmt.Sprintf("roce: %s %v: need %d bytes, have %d", e.Header, e.Err, e.Need, e.Have)
	}
	return fmt.Sprintf("roce: %s: %v 0x%x", e.Header, e.Err, e.Value)
}

func (e *HeaderError) Unwrap() error { return e.Err }

func truncated(hdr string, need, have int) error {
	return &HeaderError{Header: hdr, Err: ErrTruncated, Need: need, Have: have}
}
