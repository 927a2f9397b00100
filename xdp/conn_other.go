//go:build !linux

package xdp

import (
	"fmt"
	"net/netip"
	"runtime"
	"time"

	"github.com/rbridge/rbridge/roce"
)

// Conn is an AF_XDP socket; AF_XDP exists on Linux only, so NewConn fails
// here with ErrNotSupported.
type Conn struct{}

var (
	_ roce.FrameLender   = (*Conn)(nil)
	_ roce.ReadDeadliner = (*Conn)(nil)
)

// NewConn returns an error matching ErrNotSupported: AF_XDP is Linux only.
func NewConn(opts ConnOptions) (*Conn, error) {
	return nil, fmt.Errorf("%w: AF_XDP on %s", ErrNotSupported, runtime.GOOS)
}

// Mode returns how the socket is bound.
func (c *Conn) Mode() BindMode { return BindCopy }

// Wakeup returns how the socket wakes the kernel.
func (c *Conn) Wakeup() Wakeup { return Wakeup{NoNeedWakeup: "no AF_XDP off Linux"} }

// LocalAddr implements roce.PacketConn.
func (c *Conn) LocalAddr() netip.AddrPort { return netip.AddrPort{} }

// SetReadDeadline implements roce.ReadDeadliner.
func (c *Conn) SetReadDeadline(time.Time) error { return ErrNotSupported }

// ReadBatch implements roce.PacketConn.
func (c *Conn) ReadBatch([]roce.Message) (int, error) { return 0, roce.ErrConnClosed }

// WriteBatch implements roce.PacketConn.
func (c *Conn) WriteBatch([]roce.Message) (int, error) { return 0, roce.ErrConnClosed }

// Stats returns the Conn's counters.
func (c *Conn) Stats() (ConnStats, error) { return ConnStats{}, ErrNotSupported }

// Close implements roce.PacketConn.
func (c *Conn) Close() error { return nil }

// LendsFrames implements roce.FrameLender.
func (c *Conn) LendsFrames() bool { return false }

// ReadBatchLent implements roce.FrameLender.
func (c *Conn) ReadBatchLent([]roce.Message) (int, error) { return 0, roce.ErrConnClosed }

// ReturnFrames implements roce.FrameLender.
func (c *Conn) ReturnFrames([]uint64) {}

// TryReadBatch returns roce.ErrConnClosed: no AF_XDP off Linux.
func (c *Conn) TryReadBatch([]roce.Message) (int, error) { return 0, roce.ErrConnClosed }

// TryReadBatchLent returns roce.ErrConnClosed: no AF_XDP off Linux.
func (c *Conn) TryReadBatchLent([]roce.Message) (int, error) { return 0, roce.ErrConnClosed }

// GroupConn receives a multicast group's datagrams from a Conn.
type GroupConn struct{}

var _ roce.PacketConn = (*GroupConn)(nil)

// JoinGroup returns an error matching ErrNotSupported: AF_XDP is Linux only.
func (c *Conn) JoinGroup(group netip.Addr) (*GroupConn, error) {
	return nil, fmt.Errorf("%w: AF_XDP on %s", ErrNotSupported, runtime.GOOS)
}

// Group returns the group the conn receives.
func (g *GroupConn) Group() netip.Addr { return netip.Addr{} }

// LocalAddr implements roce.PacketConn.
func (g *GroupConn) LocalAddr() netip.AddrPort { return netip.AddrPort{} }

// ReadBatch implements roce.PacketConn.
func (g *GroupConn) ReadBatch([]roce.Message) (int, error) { return 0, roce.ErrConnClosed }

// TryReadBatch returns roce.ErrConnClosed: no AF_XDP off Linux.
func (g *GroupConn) TryReadBatch([]roce.Message) (int, error) { return 0, roce.ErrConnClosed }

// WriteBatch implements roce.PacketConn.
func (g *GroupConn) WriteBatch([]roce.Message) (int, error) { return 0, roce.ErrConnClosed }

// Close implements roce.PacketConn.
func (g *GroupConn) Close() error { return nil }

// MaxQueues is the most receive queues of an interface the classifier
// has AF_XDP sockets for.
const MaxQueues = 256

// RxQueues returns an error matching ErrNotSupported: AF_XDP is Linux
// only.
func RxQueues(ifindex int) (int, string, error) {
	return 0, "", fmt.Errorf("%w: AF_XDP on %s", ErrNotSupported, runtime.GOOS)
}

// OpenQueues returns an error matching ErrNotSupported: AF_XDP is Linux
// only.
func OpenQueues(opts ConnOptions, n int) ([]*Conn, error) {
	return nil, fmt.Errorf("%w: AF_XDP on %s", ErrNotSupported, runtime.GOOS)
}
