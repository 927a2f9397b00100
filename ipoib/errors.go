package ipoib

import "errors"

// Sentinel errors; the package's errors match one of them with errors.Is
// where a caller may want to tell them apart.
var (
	// ErrTruncated means bytes are fewer than the layout needs.
	ErrTruncated = errors.New("truncated")
	// ErrBadText means a text form (a hardware address, a P_Key, a mode)
	// does not parse.
	ErrBadText = errors.New("malformed text")
	// ErrNoInterface means no IPoIB interface matches a lookup.
	ErrNoInterface = errors.New("no IPoIB interface")
	// ErrNoPort means an IPoIB interface's RDMA device or port could not
	// be found.
	ErrNoPort = errors.New("RDMA port unknown")
	// ErrNoNeighbor means the neighbour table has no usable entry for an
	// address: none, or one without a 20-byte hardware address yet.
	ErrNoNeighbor = errors.New("no IPoIB neighbour")
)
