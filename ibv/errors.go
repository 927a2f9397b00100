package ibv

import (
	"errors"

	"github.com/rbridge/rbridge/roce"
)

// ErrNotSupported is matched (errors.Is) by every error that means "this build
// or this machine cannot do RDMA": a build without cgo or without libibverbs
// and librdmacm (tag noibverbs), or an operation the device does not offer.
// It is roce.ErrNotSupported, the project's one sentinel.
var ErrNotSupported = roce.ErrNotSupported

// ErrClosed is returned by operations on an object after its Close, or after
// the Close of an object it depends on (a QP after its PD, CQ or cm_id).
var ErrClosed = errors.New("ibv: object closed")

// ErrNoGID is returned when no GID table entry can carry RoCEv2 traffic for
// the requested IP address.
var ErrNoGID = errors.New("no usable RoCEv2 GID")

// ErrAmbiguousGID is returned when an IP address has RoCEv2 GIDs on more
// than one device, port or netdev and nothing says which one to use.
var ErrAmbiguousGID = errors.New("ambiguous RoCEv2 GID")

// ErrNoIPoIBGID is returned when an IP on an IPoIB netdev gives no GID: the
// netdev's RDMA device and port are not known, or the port has no valid
// GID at index 0.
var ErrNoIPoIBGID = errors.New("no GID for an address on IPoIB")

// ErrWrongPort is returned when a query names a device, port or netdev
// other than the one its IP is on.
var ErrWrongPort = errors.New("address on another RDMA port")
