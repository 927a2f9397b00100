//go:build !linux

package udpbaseline

import (
	"errors"
	"net"
)

// forceBuffer needs Linux's SO_RCVBUFFORCE and SO_SNDBUFFORCE.
func forceBuffer(*net.UDPConn, bool, int) error {
	return errors.New("forcing socket buffers is Linux's")
}
