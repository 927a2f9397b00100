//go:build !linux

package igmp

import (
	"fmt"
	"net/netip"

	"github.com/rbridge/rbridge/roce"
)

// Conn needs Linux's AF_PACKET sockets.
type Conn struct{}

// Listen needs Linux.
func Listen(ifname string, ipv6 bool) (*Conn, error) {
	return nil, fmt.Errorf("igmp: listen on %s: %w", ifname, roce.ErrNotSupported)
}

// Read needs Linux.
func (c *Conn) Read(b []byte) (int, error) {
	return 0, fmt.Errorf("igmp: read: %w", roce.ErrNotSupported)
}

// WriteTo needs Linux.
func (c *Conn) WriteTo(pkt []byte, dst netip.Addr) error {
	return fmt.Errorf("igmp: send to %v: %w", dst, roce.ErrNotSupported)
}

// Close frees nothing: no Conn is ever open here.
func (c *Conn) Close() error { return nil }
