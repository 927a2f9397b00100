//go:build linux

package udpbaseline

import (
	"encoding/binary"
	"errors"
	"net"
	"unsafe"

	"golang.org/x/sys/unix"
)

// maxSegments and maxGSOBytes bound one GSO send as roce/udpconn bounds
// its own: 64 datagrams (every kernel with GSO takes them) and what one
// IPv4 datagram holds.
const (
	maxSegments = 64
	maxGSOBytes = 0xffff - 28
)

// probeGSO reports whether the kernel takes UDP_SEGMENT on c, or why not.
func probeGSO(c *net.UDPConn) error {
	return sockopt(c, func(fd int) error {
		_, err := unix.GetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_SEGMENT)
		return err
	})
}

// enableGRO asks the kernel to coalesce c's datagrams (UDP_GRO).
func enableGRO(c *net.UDPConn) error {
	return sockopt(c, func(fd int) error { return unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1) })
}

// segmentControl is a UDP_SEGMENT control message: the kernel cuts the
// send into datagrams of size bytes.
func segmentControl(size int) []byte {
	b := make([]byte, unix.CmsgSpace(2))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level, h.Type = unix.IPPROTO_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(b[unix.CmsgLen(0):], uint16(size))
	return b
}

// groSegment returns the datagrams' length from a read's control messages
// (UDP_GRO), or 0 when the kernel coalesced nothing. It does not allocate.
func groSegment(oob []byte) int {
	for len(oob) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < unix.SizeofCmsghdr || l > len(oob) {
			return 0
		}
		if h.Level == unix.IPPROTO_UDP && h.Type == unix.UDP_GRO && l >= unix.CmsgLen(4) {
			return int(binary.NativeEndian.Uint32(oob[unix.CmsgLen(0):]))
		}
		oob = oob[min(unix.CmsgSpace(l-unix.CmsgLen(0)), len(oob)):]
	}
	return 0
}

// isGSORefused reports whether a send failed because the route refuses
// GSO (EIO).
func isGSORefused(err error) bool { return errors.Is(err, unix.EIO) }
