//go:build !linux

package udpconn

import (
	"errors"
	"net/netip"
	"sync/atomic"

	"github.com/rbridge/rbridge/roce"
)

// ErrNotSupported is returned on platforms without recvmmsg and sendmmsg.
var ErrNotSupported = errors.New("udpconn: not supported on this platform")

// Options configures a Conn.
type Options struct {
	Addr  netip.AddrPort
	Batch int
}

// MaxBatch is the most messages one system call moves.
const MaxBatch = 1024

// Stats counts what the conn did.
type Stats struct {
	RxPackets, TxPackets, RxBadICRC, RxTruncated atomic.Uint64
}

// Conn is a RoCEv2 UDP socket; Linux only.
type Conn struct{ roce.PacketConn }

// Listen returns ErrNotSupported outside Linux.
func Listen(Options) (*Conn, error) { return nil, ErrNotSupported }
