//go:build !linux

package udpconn

import (
	"fmt"
	"net/netip"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/rbridge/rbridge/roce"
)

// ErrNotSupported is matched by Listen's error on platforms without recvmmsg
// and sendmmsg: roce.ErrNotSupported, the project's one sentinel.
var ErrNotSupported = roce.ErrNotSupported

// Options configures a Conn.
type Options struct {
	Addr      netip.AddrPort
	Batch     int
	Interface int
	BusyPoll  bool
}

// MaxBatch is the most messages one system call moves.
const MaxBatch = 1024

// Stats counts what the conn did.
type Stats struct {
	RxPackets, TxPackets, RxBadICRC, RxTruncated atomic.Uint64
}

// StatsSnapshot is Stats read at one moment, as plain values.
type StatsSnapshot struct {
	RxPackets, TxPackets, RxBadICRC, RxTruncated uint64
}

// Snapshot reads every counter.
func (s *Stats) Snapshot() StatsSnapshot {
	return StatsSnapshot{RxPackets: s.RxPackets.Load(), TxPackets: s.TxPackets.Load(), RxBadICRC: s.RxBadICRC.Load(), RxTruncated: s.RxTruncated.Load()}
}

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
