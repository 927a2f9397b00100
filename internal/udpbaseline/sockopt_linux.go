//go:build linux

package udpbaseline

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// sockopt runs f on c's socket; an error of f's is the kernel's refusal.
func sockopt(c *net.UDPConn, f func(fd int) error) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = f(int(fd)) }); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("the kernel refused it: %w", serr)
	}
	return nil
}

// forceBuffer sets c's receive (rx) or send buffer past the kernel's
// net.core.rmem_max or wmem_max (SO_RCVBUFFORCE, SO_SNDBUFFORCE), which
// takes CAP_NET_ADMIN.
func forceBuffer(c *net.UDPConn, rx bool, bytes int) error {
	opt := unix.SO_SNDBUFFORCE
	if rx {
		opt = unix.SO_RCVBUFFORCE
	}
	return sockopt(c, func(fd int) error { return unix.SetsockoptInt(fd, unix.SOL_SOCKET, opt, bytes) })
}
