//go:build !linux

package udpconn

import (
	"fmt"
	"runtime"
	"time"

	"github.com/rbridge/rbridge/roce"
)

// ErrNotSupported is matched by Listen's error on platforms without recvmmsg
// and sendmmsg: roce.ErrNotSupported, the project's one sentinel.
var ErrNotSupported = roce.ErrNotSupported

// Conn is a RoCEv2 UDP socket; Linux only.
type Conn struct{ roce.PacketConn }

// Listen returns ErrNotSupported outside Linux.
func Listen(o Options) (*Conn, error) {
	return nil, fmt.Errorf("udpconn: listen on %v: recvmmsg and sendmmsg on %s: %w", o.Addr, runtime.GOOS, ErrNotSupported)
}

// TryReadBatch returns ErrNotSupported outside Linux.
func (c *Conn) TryReadBatch([]roce.Message) (int, error) { return 0, ErrNotSupported }

// SocketBusyPoll is false outside Linux.
func (c *Conn) SocketBusyPoll() bool { return false }

// SetReadDeadline returns ErrNotSupported outside Linux.
func (c *Conn) SetReadDeadline(time.Time) error { return ErrNotSupported }

// Offload is all off outside Linux.
func (c *Conn) Offload() Offload {
	why := "UDP_SEGMENT and UDP_GRO are Linux's"
	return Offload{NoGSO: why, NoGRO: why}
}

// Queues is n conns on one address; Linux only.
type Queues struct{ Conns []*Conn }

// ListenQueues returns ErrNotSupported outside Linux.
func ListenQueues(o Options, n int) (*Queues, error) {
	_, err := Listen(o)
	return nil, err
}

// Counters is zero outside Linux.
func (q *Queues) Counters() (SteerCounters, error) { return SteerCounters{}, nil }

// Close returns nil: outside Linux a Queues is never opened.
func (q *Queues) Close() error { return nil }
